"""Happens-before hazard checker: vector clocks per stream, access history per block.

Every stream `s` has an epoch `stream_vc[s, s]` (its launch count) and knows, through events
and synchronisations, the epoch of every other stream it is ordered after (`stream_vc[s, u]`).
Every block keeps, per stream (`dev.history`), the epoch of its last access and last write,
inherited through free / split / merge, so a block's history covers its memory, not its handle.
An access by a task on stream `t` is a hazard when:
  * the handle is stale (its block was freed, maybe reused): use after free;
  * a write, and some other stream `u` accessed the memory at an epoch `t` is not ordered after
    (`last_use[u] > stream_vc[t, u]`); or a read, and some `u` wrote it unordered. A free turns
    all previous accesses into writes, so any unordered touch of reused memory is caught.
Hazards are recorded (first `capacity` rows kept, all counted), never raised, like a sanitizer.
"""

from rtsoa._jit import jit_inline_ir, jit_inline_llvm, jit_out_of_line
from rtsoa.abi.status import STATUS_INVALID_BLOCK, STATUS_INVALID_STREAM, STATUS_OK
from rtsoa.device.bits import lowest_bit
from rtsoa.device.handles import foreign_handle
from rtsoa.device.layout import (
    BLK_GENERATION,
    BLK_STATE,
    BLK_STREAM_MASK,
    BLOCK_ALLOCATED,
    CFG_HAZARDS,
    CFG_NUM_STREAMS,
    CNT_HAZARDS,
    HANDLE_GEN_SHIFT,
    HANDLE_SLOT_MASK,
    HAZ_BLOCK,
    HAZ_IS_WRITE,
    HAZ_KIND,
    HAZ_OTHER_STREAM,
    HAZ_OTHER_TASK,
    HAZ_STREAM,
    HAZ_TASK,
    HAZARD_UNORDERED_ACCESS,
    HAZARD_USE_AFTER_FREE,
    HIST_TASK,
    HIST_USE,
    HIST_WRITE,
)


@jit_inline_ir
def claim_stream(dev, slot, stream):
    """Add `stream` to the block's history, clearing entries left from a previous slot use."""
    blocks = dev.blocks
    history = dev.history
    bit = 1 << stream
    if (blocks[slot, BLK_STREAM_MASK] & bit) == 0:
        blocks[slot, BLK_STREAM_MASK] |= bit
        history[slot, stream, HIST_USE] = 0
        history[slot, stream, HIST_WRITE] = 0
        history[slot, stream, HIST_TASK] = -1
        dev.history_time[slot, stream] = 0.0


@jit_out_of_line
def record_hazard(dev, kind, handle, task, stream, other_task, other_stream, is_write, t0, t1):
    """Append a hazard row (kept only while the table has room; always counted)."""
    index = dev.counters[CNT_HAZARDS]
    dev.counters[CNT_HAZARDS] = index + 1
    if index < dev.hazards.shape[0]:
        dev.hazards[index, HAZ_KIND] = kind
        dev.hazards[index, HAZ_BLOCK] = handle
        dev.hazards[index, HAZ_TASK] = task
        dev.hazards[index, HAZ_STREAM] = stream
        dev.hazards[index, HAZ_OTHER_TASK] = other_task
        dev.hazards[index, HAZ_OTHER_STREAM] = other_stream
        dev.hazards[index, HAZ_IS_WRITE] = is_write
        dev.hazard_time[index, 0] = t0
        dev.hazard_time[index, 1] = t1


@jit_inline_llvm  # per launch: a real call would copy `dev` (34 arrays)
def device_access(dev, stream, handle, is_write):
    """Declare that the last task launched on `stream` reads (or writes) block `handle`.

    Updates the block's access history (needed for stream-ordered reuse even with the checker
    off) and, with the checker on, records any hazard. Returns a status code.
    """
    blocks = dev.blocks
    history = dev.history
    if stream < 0 or stream >= dev.config[CFG_NUM_STREAMS]:
        return STATUS_INVALID_STREAM
    slot = handle & HANDLE_SLOT_MASK
    if foreign_handle(dev, handle) or slot >= dev.blocks.shape[0]:
        return STATUS_INVALID_BLOCK  # never this device's: refused (a stale one is a hazard)
    task = dev.stream_last_task[stream]
    checking = dev.config[CFG_HAZARDS] != 0
    if (
        blocks[slot, BLK_GENERATION] != (handle >> HANDLE_GEN_SHIFT)
        or blocks[slot, BLK_STATE] != BLOCK_ALLOCATED
    ):
        if checking:
            start = dev.stream_clock[stream]
            record_hazard(
                dev, HAZARD_USE_AFTER_FREE, handle, task, stream, -1, -1, is_write, start, 0.0
            )
        return STATUS_OK
    epoch = dev.stream_vc[stream, stream]
    if checking:
        others = blocks[slot, BLK_STREAM_MASK] & ~(1 << stream)
        while others != 0:
            other = lowest_bit(others)
            others &= others - 1
            if is_write:
                previous = history[slot, other, HIST_USE]
            else:
                previous = history[slot, other, HIST_WRITE]
            if previous > dev.stream_vc[stream, other]:
                record_hazard(
                    dev,
                    HAZARD_UNORDERED_ACCESS,
                    handle,
                    task,
                    stream,
                    history[slot, other, HIST_TASK],
                    other,
                    is_write,
                    dev.stream_clock[stream],
                    dev.history_time[slot, other],
                )
    claim_stream(dev, slot, stream)
    history[slot, stream, HIST_USE] = epoch
    if is_write:
        history[slot, stream, HIST_WRITE] = epoch
    history[slot, stream, HIST_TASK] = task
    dev.history_time[slot, stream] = dev.stream_clock[stream]
    return STATUS_OK


@jit_inline_llvm  # typed once, not at each call site (Numba-IR inlining)
def history_merge(dev, into, source):
    """`into` takes the union of both blocks' histories (neighbour merge)."""
    blocks = dev.blocks
    history = dev.history
    mask = blocks[source, BLK_STREAM_MASK]
    while mask != 0:
        stream = lowest_bit(mask)
        mask &= mask - 1
        if (blocks[into, BLK_STREAM_MASK] & (1 << stream)) == 0:
            blocks[into, BLK_STREAM_MASK] |= 1 << stream
            history[into, stream, HIST_USE] = history[source, stream, HIST_USE]
            history[into, stream, HIST_WRITE] = history[source, stream, HIST_WRITE]
            history[into, stream, HIST_TASK] = history[source, stream, HIST_TASK]
            dev.history_time[into, stream] = dev.history_time[source, stream]
            continue
        if history[source, stream, HIST_USE] > history[into, stream, HIST_USE]:
            history[into, stream, HIST_USE] = history[source, stream, HIST_USE]
            history[into, stream, HIST_TASK] = history[source, stream, HIST_TASK]
            dev.history_time[into, stream] = dev.history_time[source, stream]
        history[into, stream, HIST_WRITE] = max(
            history[into, stream, HIST_WRITE], history[source, stream, HIST_WRITE]
        )


@jit_inline_ir
def history_copy(dev, into, source):
    """`into` inherits `source`'s history (the remainder of a split)."""
    blocks = dev.blocks
    history = dev.history
    mask = blocks[source, BLK_STREAM_MASK]
    blocks[into, BLK_STREAM_MASK] = mask
    while mask != 0:
        stream = lowest_bit(mask)
        mask &= mask - 1
        history[into, stream, HIST_USE] = history[source, stream, HIST_USE]
        history[into, stream, HIST_WRITE] = history[source, stream, HIST_WRITE]
        history[into, stream, HIST_TASK] = history[source, stream, HIST_TASK]
        dev.history_time[into, stream] = dev.history_time[source, stream]


@jit_inline_ir
def history_on_free(dev, slot, stream):
    """A free on `stream` is its latest use; every earlier access now counts as a write."""
    blocks = dev.blocks
    history = dev.history
    epoch = dev.stream_vc[stream, stream]
    bit = 1 << stream
    if (blocks[slot, BLK_STREAM_MASK] & bit) == 0:
        claim_stream(dev, slot, stream)
        dev.history_time[slot, stream] = dev.stream_clock[stream]
    # the freeing stream's entry from registers; the loop only visits the other streams
    # (usually none), so the common free costs one load and two stores here
    use = max(history[slot, stream, HIST_USE], epoch)
    history[slot, stream, HIST_USE] = use
    history[slot, stream, HIST_WRITE] = use
    others = blocks[slot, BLK_STREAM_MASK] & ~bit
    while others != 0:
        other = lowest_bit(others)
        others &= others - 1
        history[slot, other, HIST_WRITE] = history[slot, other, HIST_USE]


@jit_inline_llvm  # typed once, not at each call site (Numba-IR inlining)
def reusable_on(dev, slot, stream):
    """True when every recorded use of the block's memory is ordered before `stream`'s next op."""
    blocks = dev.blocks
    history = dev.history
    mask = blocks[slot, BLK_STREAM_MASK] & ~(1 << stream)
    while mask != 0:
        other = lowest_bit(mask)
        mask &= mask - 1
        if history[slot, other, HIST_USE] > dev.stream_vc[stream, other]:
            return False
    return True
