"""Happens-before hazard checker: vector clocks per stream, access history per block.

Every stream `s` has an epoch `stream_vc[s, s]` (its launch count) and knows, through events
and synchronisations, the epoch of every other stream it is ordered after (`stream_vc[s, u]`).
Every block keeps, per stream, the epoch of its last access and last write, inherited through
free / split / merge, so a block's history covers its memory, not its handle. An access by a
task on stream `t` is a hazard when:
  * the handle is stale (its block was freed, maybe reused): use after free;
  * a write, and some other stream `u` accessed the memory at an epoch `t` is not ordered after
    (`last_use[u] > stream_vc[t, u]`); or a read, and some `u` wrote it unordered. A free turns
    all previous accesses into writes, so any unordered touch of reused memory is caught.
Hazards are recorded (first `capacity` rows kept, all counted), never raised, like a sanitizer.
"""

from rtsoa._jit import jit
from rtsoa.device.bits import lowest_bit
from rtsoa.device.status import (
    BLOCK_ALLOCATED,
    CFG_HAZARDS,
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
    STATUS_INVALID_BLOCK,
    STATUS_INVALID_STREAM,
    STATUS_OK,
)


@jit(_nrt=False, inline="always")
def claim_stream(dev, slot, stream):
    """Add `stream` to the block's history, clearing entries left from a previous slot use."""
    bit = 1 << stream
    if (dev.block_stream_mask[slot] & bit) == 0:
        dev.block_stream_mask[slot] |= bit
        dev.block_last_use[slot, stream] = 0
        dev.block_last_write[slot, stream] = 0
        dev.block_last_task[slot, stream] = -1
        dev.block_last_time[slot, stream] = 0.0


@jit(_nrt=False)
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


@jit(_nrt=False)
def device_access(dev, stream, handle, is_write):
    """Declare that the last task launched on `stream` reads (or writes) block `handle`.

    Updates the block's access history (needed for stream-ordered reuse even with the checker
    off) and, with the checker on, records any hazard. Returns a status code.
    """
    if stream < 0 or stream >= dev.stream_clock.shape[0]:
        return STATUS_INVALID_STREAM
    slot = handle & HANDLE_SLOT_MASK
    if handle < 0 or slot >= dev.block_state.shape[0]:
        return STATUS_INVALID_BLOCK
    task = dev.stream_last_task[stream]
    checking = dev.config[CFG_HAZARDS] != 0
    if (
        dev.block_generation[slot] != (handle >> HANDLE_GEN_SHIFT)
        or dev.block_state[slot] != BLOCK_ALLOCATED
    ):
        if checking:
            start = dev.stream_clock[stream]
            record_hazard(
                dev, HAZARD_USE_AFTER_FREE, handle, task, stream, -1, -1, is_write, start, 0.0
            )
        return STATUS_OK
    epoch = dev.stream_vc[stream, stream]
    if checking:
        others = dev.block_stream_mask[slot] & ~(1 << stream)
        while others != 0:
            other = lowest_bit(others)
            others &= others - 1
            if is_write:
                previous = dev.block_last_use[slot, other]
            else:
                previous = dev.block_last_write[slot, other]
            if previous > dev.stream_vc[stream, other]:
                record_hazard(
                    dev,
                    HAZARD_UNORDERED_ACCESS,
                    handle,
                    task,
                    stream,
                    dev.block_last_task[slot, other],
                    other,
                    is_write,
                    dev.stream_clock[stream],
                    dev.block_last_time[slot, other],
                )
    claim_stream(dev, slot, stream)
    dev.block_last_use[slot, stream] = epoch
    if is_write:
        dev.block_last_write[slot, stream] = epoch
    dev.block_last_task[slot, stream] = task
    dev.block_last_time[slot, stream] = dev.stream_clock[stream]
    return STATUS_OK


@jit(_nrt=False, inline="always")
def history_merge(dev, into, source):
    """`into` takes the union of both blocks' histories (neighbour merge)."""
    mask = dev.block_stream_mask[source]
    while mask != 0:
        stream = lowest_bit(mask)
        mask &= mask - 1
        if (dev.block_stream_mask[into] & (1 << stream)) == 0:
            dev.block_stream_mask[into] |= 1 << stream
            dev.block_last_use[into, stream] = dev.block_last_use[source, stream]
            dev.block_last_write[into, stream] = dev.block_last_write[source, stream]
            dev.block_last_task[into, stream] = dev.block_last_task[source, stream]
            dev.block_last_time[into, stream] = dev.block_last_time[source, stream]
            continue
        if dev.block_last_use[source, stream] > dev.block_last_use[into, stream]:
            dev.block_last_use[into, stream] = dev.block_last_use[source, stream]
            dev.block_last_task[into, stream] = dev.block_last_task[source, stream]
            dev.block_last_time[into, stream] = dev.block_last_time[source, stream]
        dev.block_last_write[into, stream] = max(
            dev.block_last_write[into, stream], dev.block_last_write[source, stream]
        )


@jit(_nrt=False, inline="always")
def history_copy(dev, into, source):
    """`into` inherits `source`'s history (the remainder of a split)."""
    mask = dev.block_stream_mask[source]
    dev.block_stream_mask[into] = mask
    while mask != 0:
        stream = lowest_bit(mask)
        mask &= mask - 1
        dev.block_last_use[into, stream] = dev.block_last_use[source, stream]
        dev.block_last_write[into, stream] = dev.block_last_write[source, stream]
        dev.block_last_task[into, stream] = dev.block_last_task[source, stream]
        dev.block_last_time[into, stream] = dev.block_last_time[source, stream]


@jit(_nrt=False, inline="always")
def history_on_free(dev, slot, stream):
    """A free on `stream` is its latest use; every earlier access now counts as a write."""
    epoch = dev.stream_vc[stream, stream]
    if (dev.block_stream_mask[slot] & (1 << stream)) == 0:
        claim_stream(dev, slot, stream)
        dev.block_last_time[slot, stream] = dev.stream_clock[stream]
    dev.block_last_use[slot, stream] = max(dev.block_last_use[slot, stream], epoch)
    mask = dev.block_stream_mask[slot]
    while mask != 0:
        other = lowest_bit(mask)
        mask &= mask - 1
        dev.block_last_write[slot, other] = dev.block_last_use[slot, other]


@jit(_nrt=False, inline="always")
def reusable_on(dev, slot, stream):
    """True when every recorded use of the block's memory is ordered before `stream`'s next op."""
    mask = dev.block_stream_mask[slot] & ~(1 << stream)
    while mask != 0:
        other = lowest_bit(mask)
        mask &= mask - 1
        if dev.block_last_use[slot, other] > dev.stream_vc[stream, other]:
            return False
    return True
