"""Caching allocator over the arenas, callable from njit code (`device_malloc` / `device_free`).

Design (PyTorch's CUDA caching allocator and the reference's page allocator, on a block table):
  * Requests round up to the placement's alignment (512 B device / 64 B host by default; whole
    64 KiB pages in page mode) after adding the tail padding; zero bytes still get one unit.
  * Rounded requests up to `small_size` (1 MiB) come from the small pool, carved from shared
    `small_segment` (2 MiB) segments; larger ones from the large pool (segment sizes: see
    `config.AllocatorConfig`). Segments are carved from the arena (`arena.py`) within the cap;
    when the preferred segment does not fit, a segment of exactly the rounded size is tried.
  * Before a new segment is carved, wholly free cached segments are returned to the arena
    (`release_before_grow`, on by default), where they merge with free address neighbours: the
    cache never holds idle segments while it grows, so reserved memory tracks what is live.
    Segments whose uses the host has not seen complete (an executor run never synchronises)
    cannot be released; they are reused stream-ordered instead (`growth.carve_cached`): adjacent
    free segments merge, the lowest fitting one is cut to the request's segment size, the top
    one grows into the arena, and for a large request the allocator may order the stream after
    pending uses on other streams (an inserted event wait) rather than grow.
  * Free blocks sit in segregated free lists (`freelists.py`): best fit in the request's size
    class, else the first eligible block one class up. A block is eligible when every recorded
    use of its memory is ordered before the requesting stream (`hazards.py`): a block freed on
    a stream is reused on that stream at once, on another only after an event.
  * The chosen block is split when the remainder is at least the pool's minimum remainder;
    blocks of at least `max_split` bytes are oversize: never split, and they serve only
    oversize requests that waste less than `oversize_slack`. Frees merge with free address
    neighbours of the same segment.
  * Quick lists (`freelists.quick_push` / `quick_pop`) sit in front: a freed block of at most
    16 allocation units is parked unmerged in a LIFO list of its exact size (up to
    `quick_depth` blocks), and a request of that size takes the head when it is usable on the
    requesting stream. `quick_flush` merges and lists them before the allocator grows, and on
    release and out of memory, so they never cost a new segment.
  * Out of memory: wait for pending submissions (none in this single-threaded device; counted)
    -> synchronise the stream -> release cached segments -> retry; then synchronise the device,
    release again, retry; then STATUS_OUT_OF_MEMORY. The device state stays consistent.
Every block is one row of `dev.blocks` (columns `layout.BLK_*`), so the few cache lines of a
block are all a malloc or free touches. Handles are `tag << 48 | generation << 24 | slot`
(`handles.py`), so stale handles (double free, use after free) and other devices' handles are
caught. Negative sizes are refused (STATUS_INVALID_SIZE); a request above 2**48 (more than any
arena) is clamped to 2**48 + 1 for the arithmetic, so rounding never overflows: its one attempt
fails and it is refused as out of memory without a retry. Larger-than-arena requests below that
take the ordinary out-of-memory path.

Files: this one holds malloc / free and the out-of-memory path; `tables.py` the slot stacks and
statistics, `blocks.py` split / merge / quick-list flush, `segments.py` and `growth.py` the
segments (release, stream-ordered reuse, growth), `handles.py` the handle accessors.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_inline_llvm, jit_out_of_line
from rtsoa.abi.status import (
    STATUS_INVALID_BLOCK,
    STATUS_INVALID_PLACEMENT,
    STATUS_INVALID_SIZE,
    STATUS_INVALID_STREAM,
    STATUS_OK,
    STATUS_OUT_OF_MEMORY,
)
from rtsoa.device.arena import resolve_placement
from rtsoa.device.blocks import merge_and_list, quick_flush, split
from rtsoa.device.freelists import bin_remove, find_block, quick_index, quick_pop, quick_push
from rtsoa.device.growth import new_segment
from rtsoa.device.handles import block_slot, make_handle, next_generation
from rtsoa.device.hazards import history_on_free
from rtsoa.device.layout import (
    BLK_GENERATION,
    BLK_OFFSET,
    BLK_PLACEMENT,
    BLK_REQUESTED,
    BLK_SIZE,
    BLK_STATE,
    BLK_STREAM,
    BLOCK_ALLOCATED,
    BLOCK_FREE,
    CFG_MAX_SPLIT,
    CFG_NUM_STREAMS,
    CFG_PAGE_MODE,
    CFG_PAGE_SIZE,
    CFG_SEGMENT_SLACK_SHIFT,
    CFG_SMALL_MIN_REMAINDER,
    CFG_SMALL_SIZE,
    CNT_ALLOC_RETRIES,
    CNT_CACHE_FLUSHES,
    CNT_FREE_SEGMENTS,
    CNT_OOMS,
    CNT_SUBMISSION_WAITS,
    EV_ALLOC,
    EV_FREE,
    EV_OOM,
    MAX_UNIT_BYTES,
    NUM_PLACEMENTS,
    PCFG_ALIGNMENT,
    PCFG_TAIL_PADDING,
    POOL_LARGE,
    POOL_SMALL,
    STAT_ALLOCATED_BYTES,
    STAT_ALLOCATED_COUNT,
    STAT_REQUESTED_BYTES,
)
from rtsoa.device.segments import release_free_segments
from rtsoa.device.streams import device_synchronize, stream_synchronize
from rtsoa.device.tables import assume_layout, stat_add, stat_sub, whole_segment
from rtsoa.device.trace import trace_append


@jit_inline_ir
def round_request(dev, placement, nbytes):
    """Bytes a request occupies: size + tail padding, rounded up to the allocation unit."""
    if dev.config[CFG_PAGE_MODE] != 0:
        unit = dev.config[CFG_PAGE_SIZE]
    else:
        unit = dev.placement_config[placement, PCFG_ALIGNMENT]
    padded = nbytes + dev.placement_config[placement, PCFG_TAIL_PADDING]
    return max(unit, (padded + unit - 1) & -unit)  # units are powers of two


@jit_out_of_line
def release_cached(dev, placement):
    """Return wholly free segments to the arena (all placements when `placement` < 0).

    Quick lists are flushed first. Only segments whose every use the host has seen complete are
    released. Returns bytes freed.
    """
    quick_flush(dev, placement)
    released = release_free_segments(dev, placement)
    dev.counters[CNT_CACHE_FLUSHES] += 1
    return released


# Compile-time layout: Numba-IR inlining (`jit_inline_ir`) re-types the inlined body in every
# caller, and the malloc body is big, so it is typed once here and in `device_free`; callers get
# it through LLVM's inliner (`jit_inline_llvm`: the function is marked alwaysinline), which also
# spares the ~250 scalars of `dev` a real call would copy.
@jit_inline_llvm
def _take_listed(dev, placement, size, stream):
    """A block for a `size`-byte request from the free lists (flushing the quick lists, then
    carving a new segment, when none fits), split to the request; its slot or -status."""
    blocks = dev.blocks
    pool = POOL_SMALL if size <= dev.config[CFG_SMALL_SIZE] else POOL_LARGE
    group = placement * 2 + pool
    slot = find_block(dev, group, size, stream)
    if slot < 0 and quick_flush(dev, placement) > 0:  # parked blocks may merge into a fit
        slot = find_block(dev, group, size, stream)
    whole = False
    if slot >= 0:
        bin_remove(dev, slot)
        whole = whole_segment(dev, slot)
        if whole:
            dev.counters[CNT_FREE_SEGMENTS] -= 1
    else:
        slot = new_segment(dev, placement, pool, size, stream)
        if slot < 0:
            return slot
    block_size = blocks[slot, BLK_SIZE]
    remainder = block_size - size
    # CFG_SMALL_MIN_REMAINDER + 1 is CFG_LARGE_MIN_REMAINDER
    if (
        remainder > 0
        and remainder >= dev.config[CFG_SMALL_MIN_REMAINDER + pool]
        and block_size < dev.config[CFG_MAX_SPLIT]
        and not (whole and pool != POOL_SMALL and dev.config[CFG_SEGMENT_SLACK_SHIFT] < 63)
    ):  # a reused whole large segment (within its slack) is handed out unsplit
        split(dev, slot, size, group)
    return slot


@jit_inline_llvm
def _try_malloc(dev, placement, size, requested, stream):
    """One allocation attempt without the out-of-memory path; handle or -status."""
    blocks = dev.blocks
    slot = -1
    quick = quick_index(dev, placement, size)
    if quick >= 0:
        slot = quick_pop(dev, quick, stream)
    if slot < 0:
        slot = _take_listed(dev, placement, size, stream)
        if slot < 0:
            return slot
    block_size = blocks[slot, BLK_SIZE]
    generation = next_generation(dev, blocks[slot, BLK_GENERATION])
    blocks[slot, BLK_GENERATION] = generation
    blocks[slot, BLK_STATE] = BLOCK_ALLOCATED
    blocks[slot, BLK_REQUESTED] = requested
    blocks[slot, BLK_STREAM] = stream
    stat_add(dev, placement, STAT_ALLOCATED_BYTES, block_size)
    stat_add(dev, placement, STAT_REQUESTED_BYTES, requested)
    stat_add(dev, placement, STAT_ALLOCATED_COUNT, 1)
    handle = make_handle(generation, slot)
    time = dev.stream_clock[stream]
    offset = blocks[slot, BLK_OFFSET]
    trace_append(
        dev, EV_ALLOC, placement, handle, offset, block_size, requested, stream, time, time
    )
    return handle


@jit_out_of_line
def _malloc_after_oom(dev, placement, size, nbytes, stream):
    """The out-of-memory path: sync the stream, release, retry; sync all, release, retry."""
    dev.counters[CNT_ALLOC_RETRIES] += 1
    dev.counters[CNT_SUBMISSION_WAITS] += 1  # no launch submission is ever pending here
    stream_synchronize(dev, stream)
    release_cached(dev, placement)
    handle = _try_malloc(dev, placement, size, nbytes, stream)
    if handle != -STATUS_OUT_OF_MEMORY:
        return handle
    device_synchronize(dev)
    release_cached(dev, placement)
    handle = _try_malloc(dev, placement, size, nbytes, stream)
    if handle != -STATUS_OUT_OF_MEMORY:
        return handle
    dev.counters[CNT_OOMS] += 1
    time = dev.stream_clock[stream]
    trace_append(dev, EV_OOM, placement, -1, -1, size, nbytes, stream, time, time)
    return handle


@jit_out_of_line
def _refuse_size(dev, placement, nbytes, stream):
    """A request above 2**48, larger than any arena, can never be served: out of memory without
    a retry, but the device is left as every out of memory leaves it (streams synchronised,
    cache released, quick lists flushed; counted, traced)."""
    dev.counters[CNT_SUBMISSION_WAITS] += 1
    stream_synchronize(dev, stream)
    device_synchronize(dev)
    release_cached(dev, placement)
    dev.counters[CNT_OOMS] += 1
    time = dev.stream_clock[stream]
    trace_append(dev, EV_OOM, placement, -1, -1, nbytes, nbytes, stream, time, time)
    return -STATUS_OUT_OF_MEMORY


@jit_inline_llvm  # LLVM inlines it into callers: no copy of `dev` per call
def device_malloc(dev, placement, nbytes, stream):
    """Allocate `nbytes` of `placement` for use on `stream`.

    Returns a block handle (>= 0) or the negated status (-STATUS_OUT_OF_MEMORY after the
    wait -> sync -> release -> retry path, or without the retry above 2**48 bytes;
    -STATUS_INVALID_SIZE for a negative size). Callable from any njit code.
    """
    if placement < 0 or placement > NUM_PLACEMENTS:
        return -STATUS_INVALID_PLACEMENT
    if stream < 0 or stream >= dev.config[CFG_NUM_STREAMS]:
        return -STATUS_INVALID_STREAM
    assume_layout(dev)
    placement = resolve_placement(placement)
    if nbytes < 0:
        return -STATUS_INVALID_SIZE
    # a size no arena can hold (above MAX_UNIT_BYTES, 256 TiB: arenas fit the machine) is
    # clamped for the arithmetic: every later sum (padding, rounding, segment sizes, each term
    # at most 2**48) stays far below 2**63, the attempt fails, and `_malloc_slow` refuses it.
    # This shape (one slow call, the size computed before the attempt) gives the shortest
    # malloc + free pair of those tried: an unsigned range check around the attempt with the
    # rounding inside it, or a second out-of-line call site, cost more instructions
    # (asv_bench/callgrind/count.sh; asv MallocFreePair)
    size = round_request(dev, placement, min(nbytes, MAX_UNIT_BYTES + 1))
    handle = _try_malloc(dev, placement, size, nbytes, stream)
    if handle != -STATUS_OUT_OF_MEMORY:
        return handle
    return _malloc_slow(dev, placement, size, nbytes, stream)


@jit_out_of_line
def _malloc_slow(dev, placement, size, nbytes, stream):
    """A request the fast path did not serve: a size no arena can hold, or the out-of-memory
    path."""
    if nbytes > MAX_UNIT_BYTES:
        return _refuse_size(dev, placement, nbytes, stream)
    return _malloc_after_oom(dev, placement, size, nbytes, stream)


@jit_inline_llvm  # see device_malloc
def device_free(dev, handle, stream):
    """Free a block on `stream` (stream-ordered: reusable on `stream` at once). Status code."""
    if stream < 0 or stream >= dev.config[CFG_NUM_STREAMS]:
        return np.int32(STATUS_INVALID_STREAM)
    assume_layout(dev)
    slot = block_slot(dev, handle)
    if slot < 0:
        return np.int32(STATUS_INVALID_BLOCK)
    blocks = dev.blocks
    placement = blocks[slot, BLK_PLACEMENT]
    size = blocks[slot, BLK_SIZE]
    requested = blocks[slot, BLK_REQUESTED]
    stat_sub(dev, placement, STAT_ALLOCATED_BYTES, size)
    stat_sub(dev, placement, STAT_REQUESTED_BYTES, requested)
    stat_sub(dev, placement, STAT_ALLOCATED_COUNT, 1)
    history_on_free(dev, slot, stream)
    blocks[slot, BLK_STREAM] = stream  # BLK_REQUESTED is stale now; readers mask it
    offset = blocks[slot, BLK_OFFSET]
    quick = quick_index(dev, placement, size)
    if quick < 0 or not quick_push(dev, slot, quick):
        blocks[slot, BLK_STATE] = BLOCK_FREE
        merge_and_list(dev, slot)
    # traced last (same content: the freed block's fields were read above), so the compiler
    # need not reload block fields after the ring stores, which it cannot prove disjoint
    time = dev.stream_clock[stream]
    trace_append(dev, EV_FREE, placement, handle, offset, size, requested, stream, time, time)
    return np.int32(STATUS_OK)
