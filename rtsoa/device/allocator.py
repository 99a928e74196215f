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
    cannot be released; they are reused stream-ordered instead (`_carve_cached`): adjacent
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
Every block is one row of `dev.blocks` (columns `status.BLK_*`), so the few cache lines of a
block are all a malloc or free touches. Handles are `generation << 32 | slot`, so stale handles
(double free, use after free) are caught.
"""

import numpy as np

from rtsoa._jit import jit
from rtsoa.device.arena import (
    arena_free_at,
    arena_give_back,
    arena_largest_free,
    arena_of,
    arena_take,
    arena_take_at,
    resolve_placement,
)
from rtsoa.device.bits import assume, lowest_bit
from rtsoa.device.freelists import (
    bin_push,
    bin_remove,
    find_block,
    quick_index,
    quick_pop,
    quick_push,
)
from rtsoa.device.hazards import history_copy, history_merge, history_on_free, reusable_on
from rtsoa.device.status import (
    BLK_FREE_NEXT,
    BLK_GENERATION,
    BLK_GROUP,
    BLK_NEXT,
    BLK_OFFSET,
    BLK_PLACEMENT,
    BLK_PREV,
    BLK_REQUESTED,
    BLK_SEGMENT,
    BLK_SIZE,
    BLK_STATE,
    BLK_STREAM,
    BLK_STREAM_MASK,
    BLOCK_ALLOCATED,
    BLOCK_FREE,
    BLOCK_UNUSED,
    CFG_LARGE_ROUND,
    CFG_LARGE_SEGMENT,
    CFG_LARGE_SEGMENT_LIMIT,
    CFG_MAX_SPLIT,
    CFG_NUM_STREAMS,
    CFG_PAGE_MODE,
    CFG_PAGE_SIZE,
    CFG_RELEASE_BEFORE_GROW,
    CFG_SEGMENT_SLACK_SHIFT,
    CFG_SMALL_MIN_REMAINDER,
    CFG_SMALL_SEGMENT,
    CFG_SMALL_SIZE,
    CNT_ALLOC_RETRIES,
    CNT_ALLOCATOR_WAITS,
    CNT_BLOCK_TOP,
    CNT_CACHE_FLUSHES,
    CNT_FREE_SEGMENTS,
    CNT_GROWTH_RELEASES,
    CNT_OOMS,
    CNT_QUICK_FLUSHES,
    CNT_SEGMENT_HIGH,
    CNT_SEGMENT_TOP,
    CNT_SUBMISSION_WAITS,
    EV_ALLOC,
    EV_ALLOCATOR_WAIT,
    EV_FREE,
    EV_OOM,
    EV_SEGMENT_ALLOC,
    EV_SEGMENT_FREE,
    HANDLE_GEN_SHIFT,
    HANDLE_SLOT_MASK,
    HIST_USE,
    NUM_BLOCK_COLUMNS,
    NUM_EXTRA_COLUMNS,
    NUM_HISTORY_COLUMNS,
    NUM_PLACEMENTS,
    NUM_RING_COLUMNS,
    NUM_STATS,
    PCFG_ALIGNMENT,
    PCFG_CAP,
    PCFG_TAIL_PADDING,
    POOL_LARGE,
    POOL_SMALL,
    QUICK_CLASSES,
    SEG_FIRST_BLOCK,
    SEG_OFFSET,
    SEG_PLACEMENT,
    SEG_POOL,
    SEG_SIZE,
    STAT_ALLOCATED_BYTES,
    STAT_ALLOCATED_COUNT,
    STAT_CURRENT,
    STAT_PEAK,
    STAT_REQUESTED_BYTES,
    STAT_RESERVED_BYTES,
    STAT_SEGMENT_COUNT,
    STAT_TOTAL,
    STATUS_INVALID_BLOCK,
    STATUS_INVALID_PLACEMENT,
    STATUS_INVALID_SIZE,
    STATUS_INVALID_STREAM,
    STATUS_OK,
    STATUS_OUT_OF_MEMORY,
    STATUS_TOO_MANY_BLOCKS,
    STATUS_TOO_MANY_SEGMENTS,
)
from rtsoa.device.streams import device_synchronize, stream_synchronize
from rtsoa.device.trace import trace_append

# ---- small helpers ---------------------------------------------------------------------------


@jit(_nrt=False, inline="always")
def round_request(dev, placement, nbytes):
    """Bytes a request occupies: size + tail padding, rounded up to the allocation unit."""
    if dev.config[CFG_PAGE_MODE] != 0:
        unit = dev.config[CFG_PAGE_SIZE]
    else:
        unit = dev.placement_config[placement, PCFG_ALIGNMENT]
    padded = nbytes + dev.placement_config[placement, PCFG_TAIL_PADDING]
    return max(unit, (padded + unit - 1) & -unit)  # units are powers of two


@jit(_nrt=False, inline="always")
def _assume_layout(dev):
    """The tables have `create_state`'s row widths (it asserts them): told to the optimiser, a
    row index costs a shift instead of a multiply by a run-time width, on every pointer-chasing
    step through the free lists and neighbour links."""
    assume(dev.blocks.shape[1] == NUM_BLOCK_COLUMNS)
    assume(dev.history.shape[2] == NUM_HISTORY_COLUMNS)
    assume(dev.trace.shape[1] == NUM_RING_COLUMNS)
    assume(dev.trace_extra.shape[1] == NUM_EXTRA_COLUMNS)
    assume(dev.stats.shape[1] == NUM_STATS)


@jit(_nrt=False, inline="always")
def _stat_add(dev, placement, group, amount):
    stats = dev.stats
    current = stats[placement, group + STAT_CURRENT] + amount
    stats[placement, group + STAT_CURRENT] = current
    if current > stats[placement, group + STAT_PEAK]:  # rare in steady state: skip the store
        stats[placement, group + STAT_PEAK] = current
    stats[placement, group + STAT_TOTAL] += amount


@jit(_nrt=False, inline="always")
def _stat_sub(dev, placement, group, amount):
    # the freed total is derived (allocated - current): one store per free
    dev.stats[placement, group + STAT_CURRENT] -= amount


@jit(_nrt=False, inline="always")
def _pop_block_slot(dev):
    top = dev.counters[CNT_BLOCK_TOP]
    if top == 0:
        return -1
    dev.counters[CNT_BLOCK_TOP] = top - 1
    return np.int64(dev.block_slots[top - 1])


@jit(_nrt=False, inline="always")
def _push_block_slot(dev, slot):
    dev.blocks[slot, BLK_STATE] = BLOCK_UNUSED  # the other columns of an unused row are stale
    top = dev.counters[CNT_BLOCK_TOP]
    dev.block_slots[top] = slot
    dev.counters[CNT_BLOCK_TOP] = top + 1


@jit(_nrt=False, inline="always")
def _whole_segment(dev, slot):
    """The block spans its whole segment (no address neighbours)."""
    return dev.blocks[slot, BLK_PREV] < 0 and dev.blocks[slot, BLK_NEXT] < 0


# ---- segments --------------------------------------------------------------------------------


@jit(_nrt=False, forceinline=False)
def _host_ordered(dev, slot):
    """Every use of the block is known complete by the host (safe to unmap)."""
    mask = dev.blocks[slot, BLK_STREAM_MASK]
    while mask != 0:
        stream = lowest_bit(mask)
        mask &= mask - 1
        if dev.history[slot, stream, HIST_USE] > dev.host_vc[stream]:
            return False
    return True


@jit(_nrt=False, forceinline=False)
def _release_free_segments(dev, placement):
    """Return wholly free, host-ordered segments to the arena (all placements when < 0)."""
    blocks = dev.blocks
    segments = dev.segments
    released = 0
    time = dev.host_clock[0]
    for segment in range(dev.counters[CNT_SEGMENT_HIGH]):
        if dev.counters[CNT_FREE_SEGMENTS] == 0:
            break
        owner = segments[segment, SEG_PLACEMENT]
        if owner < 0 or (placement >= 0 and owner != placement):
            continue
        slot = segments[segment, SEG_FIRST_BLOCK]
        if blocks[slot, BLK_STATE] != BLOCK_FREE or not _whole_segment(dev, slot):
            continue
        if not _host_ordered(dev, slot):
            continue
        size = segments[segment, SEG_SIZE]
        offset = segments[segment, SEG_OFFSET]
        bin_remove(dev, slot)
        _push_block_slot(dev, slot)
        dev.counters[CNT_FREE_SEGMENTS] -= 1
        arena_give_back(dev, owner, offset, size)
        segments[segment, SEG_PLACEMENT] = -1
        segments[segment, SEG_FIRST_BLOCK] = -1
        top = dev.counters[CNT_SEGMENT_TOP]
        dev.segment_slots[top] = segment
        dev.counters[CNT_SEGMENT_TOP] = top + 1
        _stat_sub(dev, owner, STAT_RESERVED_BYTES, size)
        _stat_sub(dev, owner, STAT_SEGMENT_COUNT, 1)
        trace_append(dev, EV_SEGMENT_FREE, owner, segment, offset, size, 0, -1, time, time)
        released += size
    return released


@jit(_nrt=False, forceinline=False)
def release_cached(dev, placement):
    """Return wholly free segments to the arena (all placements when `placement` < 0).

    Quick lists are flushed first. Only segments whose every use the host has seen complete are
    released. Returns bytes freed.
    """
    quick_flush(dev, placement)
    released = _release_free_segments(dev, placement)
    dev.counters[CNT_CACHE_FLUSHES] += 1
    return released


@jit(_nrt=False, forceinline=False)
def _segment_size(dev, pool, size):
    if pool == POOL_SMALL:
        return max(dev.config[CFG_SMALL_SEGMENT], size)
    if size < dev.config[CFG_LARGE_SEGMENT_LIMIT] and size < dev.config[CFG_MAX_SPLIT]:
        return max(dev.config[CFG_LARGE_SEGMENT], size)
    unit = dev.config[CFG_LARGE_ROUND]
    return (size + unit - 1) // unit * unit


# ---- stream-ordered reuse of cached segments -------------------------------------------------


@jit(_nrt=False, forceinline=False)
def _free_whole(dev, segment, placement):
    """The single free block of a wholly free segment of `placement`, or -1."""
    if dev.segments[segment, SEG_PLACEMENT] != placement:
        return -1
    slot = dev.segments[segment, SEG_FIRST_BLOCK]
    if dev.blocks[slot, BLK_STATE] != BLOCK_FREE or not _whole_segment(dev, slot):
        return -1
    return slot


@jit(_nrt=False, forceinline=False)
def _trace_segment(dev, kind, placement, segment, time):
    offset = dev.segments[segment, SEG_OFFSET]
    size = dev.segments[segment, SEG_SIZE]
    trace_append(dev, kind, placement, segment, offset, size, size, -1, time, time)


@jit(_nrt=False, forceinline=False)
def _free_segment_pool(dev, size):
    """Pool of a wholly free segment made by merging or cutting cached segments: the large pool
    once it exceeds a small segment, so small requests cannot split it (they carve a small
    segment from it instead, `_carve_cached`) and pin a big span for small blocks only."""
    return POOL_SMALL if size <= dev.config[CFG_SMALL_SEGMENT] else POOL_LARGE


@jit(_nrt=False, forceinline=False)
def _coalesce_free_segments(dev, placement, stream, ready_only, time):
    """Merge address-adjacent wholly free cached segments of `placement` into one segment.

    The cache-side counterpart of releasing them to the arena (where they would merge), for
    segments the host has not seen complete: the merged block keeps the union of both access
    histories, so reusing it stays stream-ordered (see `_carve_cached`). Reserved bytes are
    unchanged; the trace shows the two segments freed and the merged one allocated.
    """
    segments = dev.segments
    blocks = dev.blocks
    high = dev.counters[CNT_SEGMENT_HIGH]
    for first in range(high):
        slot = _free_whole(dev, first, placement)
        if slot < 0 or (ready_only and not reusable_on(dev, slot, stream)):
            continue
        end = segments[first, SEG_OFFSET] + segments[first, SEG_SIZE]
        segment = 0
        while segment < high:
            if (
                segment == first
                or segments[segment, SEG_PLACEMENT] != placement
                or segments[segment, SEG_OFFSET] != end
            ):
                segment += 1
                continue
            other = _free_whole(dev, segment, placement)
            if other < 0 or (ready_only and not reusable_on(dev, other, stream)):
                break  # the address successor is in use or not yet ordered before `stream`
            _trace_segment(dev, EV_SEGMENT_FREE, placement, first, time)
            _trace_segment(dev, EV_SEGMENT_FREE, placement, segment, time)
            bin_remove(dev, slot)
            bin_remove(dev, other)
            history_merge(dev, slot, other)
            size = blocks[slot, BLK_SIZE] + blocks[other, BLK_SIZE]
            blocks[slot, BLK_SIZE] = size
            segments[first, SEG_SIZE] = size
            _push_block_slot(dev, other)
            segments[segment, SEG_PLACEMENT] = -1
            segments[segment, SEG_FIRST_BLOCK] = -1
            top = dev.counters[CNT_SEGMENT_TOP]
            dev.segment_slots[top] = segment
            dev.counters[CNT_SEGMENT_TOP] = top + 1
            dev.counters[CNT_FREE_SEGMENTS] -= 1
            _stat_sub(dev, placement, STAT_SEGMENT_COUNT, 1)
            pool = _free_segment_pool(dev, size)
            segments[first, SEG_POOL] = pool
            blocks[slot, BLK_GROUP] = placement * 2 + pool
            bin_push(dev, slot, placement * 2 + pool)
            _trace_segment(dev, EV_SEGMENT_ALLOC, placement, first, time)
            end = segments[first, SEG_OFFSET] + size
            segment = 0


@jit(_nrt=False, forceinline=False)
def _lowest_fit(dev, placement, size, stream, ready_only):
    """The lowest-address wholly free segment of at least `size` bytes (usable on `stream`
    when `ready_only`), or -1. Address order keeps live memory low and leaves the top free,
    where a segment can grow into the arena (`_extendable_segment`)."""
    segments = dev.segments
    best = -1
    for segment in range(dev.counters[CNT_SEGMENT_HIGH]):
        slot = _free_whole(dev, segment, placement)
        if slot < 0 or segments[segment, SEG_SIZE] < size:
            continue
        if best >= 0 and segments[segment, SEG_OFFSET] >= segments[best, SEG_OFFSET]:
            continue
        if ready_only and not reusable_on(dev, slot, stream):
            continue
        best = segment
    return best


@jit(_nrt=False, forceinline=False)
def _order_after_uses(dev, slot, stream):
    """Order `stream` after every recorded use of the free block, as a stream-ordered pool that
    may insert its own dependencies does (CUDA's cudaMemPoolReuseAllowInternalDependencies):
    for each other stream with a use `stream` is not yet ordered after, the allocator records
    an event there and makes `stream` wait for it (clock and vector clock), without the host.
    Each inserted wait is counted (`num_allocator_waits`) and traced (EV_ALLOCATOR_WAIT)."""
    blocks = dev.blocks
    mask = blocks[slot, BLK_STREAM_MASK] & ~(1 << stream)
    placement = blocks[slot, BLK_PLACEMENT]
    while mask != 0:
        other = lowest_bit(mask)
        mask &= mask - 1
        if dev.history[slot, other, HIST_USE] <= dev.stream_vc[stream, other]:
            continue
        before = dev.stream_clock[stream]
        dev.stream_clock[stream] = max(before, dev.stream_clock[other])
        for u in range(dev.stream_vc.shape[1]):
            dev.stream_vc[stream, u] = max(dev.stream_vc[stream, u], dev.stream_vc[other, u])
        dev.counters[CNT_ALLOCATOR_WAITS] += 1
        trace_append(
            dev,
            EV_ALLOCATOR_WAIT,
            placement,
            other,
            0,
            0,
            0,
            stream,
            before,
            dev.stream_clock[stream],
        )


@jit(_nrt=False, forceinline=False)
def _extendable_segment(dev, placement, need):
    """A wholly free segment that reaches `need` bytes by growing into the
    free arena range right after it (within the cap), or -1."""
    segments = dev.segments
    reserved = dev.stats[placement, STAT_RESERVED_BYTES + STAT_CURRENT]
    cap = dev.placement_config[placement, PCFG_CAP]
    for segment in range(dev.counters[CNT_SEGMENT_HIGH]):
        slot = _free_whole(dev, segment, placement)
        if slot < 0:
            continue
        extra = need - segments[segment, SEG_SIZE]
        if extra <= 0 or reserved + extra > cap:
            continue
        end = segments[segment, SEG_OFFSET] + segments[segment, SEG_SIZE]
        if arena_free_at(dev, placement, end) >= extra:
            return segment
    return -1


@jit(_nrt=False, forceinline=False)
def _can_grow(dev, placement, size):
    """A new `size`-byte segment would fit in the cap and in a free arena range."""
    reserved = dev.stats[placement, STAT_RESERVED_BYTES + STAT_CURRENT]
    if reserved + size > dev.placement_config[placement, PCFG_CAP]:
        return False
    return arena_largest_free(dev, placement) >= size


@jit(_nrt=False, forceinline=False)
def _fill_segment(dev, segment, slot, placement, pool, offset, size, group):
    """Write segment row `segment` and its one free block `slot`, which covers all of it."""
    segments = dev.segments
    segments[segment, SEG_OFFSET] = offset
    segments[segment, SEG_SIZE] = size
    segments[segment, SEG_PLACEMENT] = placement
    segments[segment, SEG_POOL] = pool
    segments[segment, SEG_FIRST_BLOCK] = slot
    blocks = dev.blocks
    blocks[slot, BLK_OFFSET] = offset
    blocks[slot, BLK_SIZE] = size
    blocks[slot, BLK_REQUESTED] = 0
    blocks[slot, BLK_SEGMENT] = segment
    blocks[slot, BLK_PREV] = -1
    blocks[slot, BLK_NEXT] = -1
    blocks[slot, BLK_STATE] = BLOCK_FREE
    blocks[slot, BLK_GROUP] = group
    blocks[slot, BLK_PLACEMENT] = placement


@jit(_nrt=False, forceinline=False)
def _carve_cached(dev, placement, pool, size, stream):
    """A new segment for a `size`-byte request carved from wholly free cached segments, or -1.

    Used when growing while free segments are cached that cannot be released (the host has not
    seen their uses complete, as in an executor run that never synchronises): instead of
    carving fresh arena memory next to idle cached memory, adjacent free segments are merged
    and the lowest-address one eligible on `stream` (every recorded use ordered before the
    stream's next operation, as for any cached block) is cut into a segment of the request's
    segment size and a free remainder segment; failing that, for a large request while growth
    is still possible, any fitting (or top, grown into the arena) free segment is taken and
    `stream` is ordered after its pending uses (`_order_after_uses`). Both pieces keep the
    memory's access history, so stream-ordered reuse and the hazard checker see them exactly
    as they saw the cached block.
    """
    time = dev.stream_clock[stream]
    _coalesce_free_segments(dev, placement, stream, True, time)
    segments = dev.segments
    blocks = dev.blocks
    need = _segment_size(dev, pool, size)
    extra = 0
    best = _lowest_fit(dev, placement, size, stream, True)
    if best < 0 and pool != POOL_SMALL and _can_grow(dev, placement, need):
        # wait for pending uses rather than grow a large segment (a fresh small one is cheap;
        # out of memory, the documented sync -> release -> retry path runs instead): merge
        # all free segments and order `stream` after the chosen one's uses
        _coalesce_free_segments(dev, placement, stream, False, time)
        best = _lowest_fit(dev, placement, size, stream, False)
        if best < 0:
            best = _extendable_segment(dev, placement, need)
            if best < 0:
                return -1
            extra = need - segments[best, SEG_SIZE]
        _order_after_uses(dev, segments[best, SEG_FIRST_BLOCK], stream)
    if best < 0:
        return -1
    best_size = segments[best, SEG_SIZE] + extra
    slot = segments[best, SEG_FIRST_BLOCK]
    bin_remove(dev, slot)
    dev.counters[CNT_FREE_SEGMENTS] -= 1
    _trace_segment(dev, EV_SEGMENT_FREE, placement, best, time)
    if extra > 0:  # grown into the free arena range right after it
        arena_take_at(dev, placement, segments[best, SEG_OFFSET] + segments[best, SEG_SIZE], extra)
        segments[best, SEG_SIZE] = need
        blocks[slot, BLK_SIZE] = need
        _stat_add(dev, placement, STAT_RESERVED_BYTES, extra)
    group = placement * 2 + pool
    target = min(need, best_size)
    rest = best_size - target
    top = dev.counters[CNT_SEGMENT_TOP]
    if rest >= dev.config[CFG_SMALL_MIN_REMAINDER + pool] and top > 0:
        spare = _pop_block_slot(dev)
        if spare >= 0:
            dev.counters[CNT_SEGMENT_TOP] = top - 1
            segment = dev.segment_slots[top - 1]
            dev.counters[CNT_SEGMENT_HIGH] = max(dev.counters[CNT_SEGMENT_HIGH], segment + 1)
            offset = segments[best, SEG_OFFSET] + target
            rest_pool = _free_segment_pool(dev, rest)
            _fill_segment(
                dev, segment, spare, placement, rest_pool, offset, rest, placement * 2 + rest_pool
            )
            blocks[spare, BLK_STREAM] = blocks[slot, BLK_STREAM]
            history_copy(dev, spare, slot)
            bin_push(dev, spare, blocks[spare, BLK_GROUP])
            dev.counters[CNT_FREE_SEGMENTS] += 1
            _stat_add(dev, placement, STAT_SEGMENT_COUNT, 1)
            segments[best, SEG_SIZE] = target
            blocks[slot, BLK_SIZE] = target
            _trace_segment(dev, EV_SEGMENT_ALLOC, placement, segment, time)
    segments[best, SEG_POOL] = pool
    blocks[slot, BLK_GROUP] = group
    _trace_segment(dev, EV_SEGMENT_ALLOC, placement, best, time)
    return slot


@jit(_nrt=False, forceinline=False)
def _new_segment(dev, placement, pool, size, stream):
    """Carve a segment for a `size`-byte request; returns its single free block or -status."""
    if dev.config[CFG_RELEASE_BEFORE_GROW] != 0 and dev.counters[CNT_FREE_SEGMENTS] > 0:
        if _release_free_segments(dev, placement) > 0:
            dev.counters[CNT_GROWTH_RELEASES] += 1
        if dev.counters[CNT_FREE_SEGMENTS] > 0:  # cached but not releasable without a sync
            slot = _carve_cached(dev, placement, pool, size, stream)
            if slot >= 0:
                return slot
    reserved = dev.stats[placement, STAT_RESERVED_BYTES + STAT_CURRENT]
    cap = dev.placement_config[placement, PCFG_CAP]
    segment_size = _segment_size(dev, pool, size)
    offset = -1
    if reserved + segment_size <= cap:
        offset = arena_take(dev, placement, segment_size)
    if offset < 0 and segment_size != size:
        segment_size = size
        if reserved + segment_size <= cap:
            offset = arena_take(dev, placement, segment_size)
    if offset < 0:
        return -STATUS_OUT_OF_MEMORY
    top = dev.counters[CNT_SEGMENT_TOP]
    slot = _pop_block_slot(dev)
    if top == 0 or slot < 0:
        if slot >= 0:
            _push_block_slot(dev, slot)
        arena_give_back(dev, placement, offset, segment_size)
        if top == 0:
            return -STATUS_TOO_MANY_SEGMENTS
        return -STATUS_TOO_MANY_BLOCKS
    dev.counters[CNT_SEGMENT_TOP] = top - 1
    segment = dev.segment_slots[top - 1]
    dev.counters[CNT_SEGMENT_HIGH] = max(dev.counters[CNT_SEGMENT_HIGH], segment + 1)
    _fill_segment(dev, segment, slot, placement, pool, offset, segment_size, placement * 2 + pool)
    dev.blocks[slot, BLK_STREAM_MASK] = 0
    _stat_add(dev, placement, STAT_RESERVED_BYTES, segment_size)
    _stat_add(dev, placement, STAT_SEGMENT_COUNT, 1)
    time = dev.stream_clock[stream]
    trace_append(
        dev, EV_SEGMENT_ALLOC, placement, segment, offset, segment_size, size, stream, time, time
    )
    return slot


# ---- malloc / free ---------------------------------------------------------------------------


@jit(_nrt=False, inline="always")
def _split(dev, slot, size, group):
    """Cut `slot` to `size` bytes; the remainder becomes a free block after it (if a slot is
    left: with a full block table the whole block is handed out unsplit)."""
    blocks = dev.blocks
    rest = _pop_block_slot(dev)
    if rest < 0:
        return
    after = blocks[slot, BLK_NEXT]
    blocks[rest, BLK_OFFSET] = blocks[slot, BLK_OFFSET] + size
    blocks[rest, BLK_SIZE] = blocks[slot, BLK_SIZE] - size
    blocks[rest, BLK_SEGMENT] = blocks[slot, BLK_SEGMENT]
    blocks[rest, BLK_PREV] = slot
    blocks[rest, BLK_NEXT] = after
    if after >= 0:
        blocks[after, BLK_PREV] = rest
    blocks[slot, BLK_NEXT] = rest
    blocks[rest, BLK_STATE] = BLOCK_FREE
    blocks[rest, BLK_STREAM] = blocks[slot, BLK_STREAM]
    blocks[rest, BLK_GROUP] = group
    blocks[rest, BLK_PLACEMENT] = blocks[slot, BLK_PLACEMENT]
    history_copy(dev, rest, slot)
    blocks[slot, BLK_SIZE] = size
    bin_push(dev, rest, group)


# Compile-time layout: Numba-IR inlining (`inline="always"`) re-types the inlined body in every
# caller, and the malloc body is big, so it is typed once here and in `device_free`; callers get
# it through LLVM's inliner (`forceinline`: the function is marked alwaysinline), which also
# spares the ~250 scalars of `dev` a real call would copy. Every other jitted function states
# `forceinline` explicitly: Numba otherwise inherits the flag from whichever caller compiles it.
@jit(_nrt=False, forceinline=True)
def _take_listed(dev, placement, size, stream):
    """A block for a `size`-byte request from the free lists (flushing the quick lists, then
    carving a new segment, when none fits), split to the request; its slot or -status."""
    blocks = dev.blocks
    pool = POOL_SMALL if size <= dev.config[CFG_SMALL_SIZE] else 1
    group = placement * 2 + pool
    slot = find_block(dev, group, size, stream)
    if slot < 0 and quick_flush(dev, placement) > 0:  # parked blocks may merge into a fit
        slot = find_block(dev, group, size, stream)
    whole = False
    if slot >= 0:
        bin_remove(dev, slot)
        whole = _whole_segment(dev, slot)
        if whole:
            dev.counters[CNT_FREE_SEGMENTS] -= 1
    else:
        slot = _new_segment(dev, placement, pool, size, stream)
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
        _split(dev, slot, size, group)
    return slot


@jit(_nrt=False, forceinline=True)
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
    generation = blocks[slot, BLK_GENERATION] + 1
    blocks[slot, BLK_GENERATION] = generation
    blocks[slot, BLK_STATE] = BLOCK_ALLOCATED
    blocks[slot, BLK_REQUESTED] = requested
    blocks[slot, BLK_STREAM] = stream
    _stat_add(dev, placement, STAT_ALLOCATED_BYTES, block_size)
    _stat_add(dev, placement, STAT_REQUESTED_BYTES, requested)
    _stat_add(dev, placement, STAT_ALLOCATED_COUNT, 1)
    handle = (generation << HANDLE_GEN_SHIFT) | slot
    time = dev.stream_clock[stream]
    offset = blocks[slot, BLK_OFFSET]
    trace_append(
        dev, EV_ALLOC, placement, handle, offset, block_size, requested, stream, time, time
    )
    return handle


@jit(_nrt=False, forceinline=False)
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


@jit(_nrt=False, forceinline=True)  # LLVM inlines it into callers: no copy of `dev` per call
def device_malloc(dev, placement, nbytes, stream):
    """Allocate `nbytes` of `placement` for use on `stream`.

    Returns a block handle (>= 0) or the negated status (-STATUS_OUT_OF_MEMORY after the
    wait -> sync -> release -> retry path). Callable from any njit code.
    """
    if nbytes < 0:
        return -STATUS_INVALID_SIZE
    if placement < 0 or placement > NUM_PLACEMENTS:
        return -STATUS_INVALID_PLACEMENT
    if stream < 0 or stream >= dev.config[CFG_NUM_STREAMS]:
        return -STATUS_INVALID_STREAM
    _assume_layout(dev)
    placement = resolve_placement(placement)
    size = round_request(dev, placement, nbytes)
    handle = _try_malloc(dev, placement, size, nbytes, stream)
    if handle != -STATUS_OUT_OF_MEMORY:
        return handle
    return _malloc_after_oom(dev, placement, size, nbytes, stream)


@jit(_nrt=False, inline="always")
def block_slot(dev, handle):
    """Slot of a live handle, or -1 when the handle is stale / invalid."""
    slot = handle & HANDLE_SLOT_MASK
    if handle < 0 or slot >= dev.blocks.shape[0]:
        return -1
    if dev.blocks[slot, BLK_STATE] != BLOCK_ALLOCATED:
        return -1
    if dev.blocks[slot, BLK_GENERATION] != (handle >> HANDLE_GEN_SHIFT):
        return -1
    return slot


@jit(_nrt=False, inline="always")
def _merge_next(dev, slot, after):
    """Absorb `after` (the address successor, in no free list) into `slot`."""
    blocks = dev.blocks
    history_merge(dev, slot, after)
    blocks[slot, BLK_SIZE] += blocks[after, BLK_SIZE]
    beyond = blocks[after, BLK_NEXT]
    blocks[slot, BLK_NEXT] = beyond
    if beyond >= 0:
        blocks[beyond, BLK_PREV] = slot
    _push_block_slot(dev, after)


@jit(_nrt=False, inline="always")
def _merge_and_list(dev, slot):
    """Merge a free block (in no list) with its free address neighbours and list the result."""
    blocks = dev.blocks
    before = blocks[slot, BLK_PREV]
    if before >= 0 and blocks[before, BLK_STATE] == BLOCK_FREE:
        bin_remove(dev, before)
        _merge_next(dev, before, slot)
        slot = before
    after = blocks[slot, BLK_NEXT]
    if after >= 0 and blocks[after, BLK_STATE] == BLOCK_FREE:
        bin_remove(dev, after)
        _merge_next(dev, slot, after)
    bin_push(dev, slot, blocks[slot, BLK_GROUP])
    if _whole_segment(dev, slot):
        dev.counters[CNT_FREE_SEGMENTS] += 1


@jit(_nrt=False, forceinline=False)
def quick_flush(dev, placement):
    """Merge and list every block parked in the quick lists of `placement` (all when < 0), as
    their frees would have without quick lists; returns the number of blocks flushed."""
    blocks = dev.blocks
    flushed = 0
    first = 0 if placement < 0 else placement * QUICK_CLASSES
    last = NUM_PLACEMENTS * QUICK_CLASSES if placement < 0 else first + QUICK_CLASSES
    for index in range(first, last):
        slot = dev.quick_head[index]
        while slot >= 0:
            following = blocks[slot, BLK_FREE_NEXT]
            blocks[slot, BLK_STATE] = BLOCK_FREE
            _merge_and_list(dev, slot)  # neighbours still parked merge when they are flushed
            flushed += 1
            slot = following
        dev.quick_head[index] = -1
        dev.quick_count[index] = 0
    if flushed > 0:
        dev.counters[CNT_QUICK_FLUSHES] += 1
    return flushed


@jit(_nrt=False, forceinline=True)  # see device_malloc
def device_free(dev, handle, stream):
    """Free a block on `stream` (stream-ordered: reusable on `stream` at once). Status code."""
    if stream < 0 or stream >= dev.config[CFG_NUM_STREAMS]:
        return np.int32(STATUS_INVALID_STREAM)
    _assume_layout(dev)
    slot = block_slot(dev, handle)
    if slot < 0:
        return np.int32(STATUS_INVALID_BLOCK)
    blocks = dev.blocks
    placement = blocks[slot, BLK_PLACEMENT]
    size = blocks[slot, BLK_SIZE]
    requested = blocks[slot, BLK_REQUESTED]
    _stat_sub(dev, placement, STAT_ALLOCATED_BYTES, size)
    _stat_sub(dev, placement, STAT_REQUESTED_BYTES, requested)
    _stat_sub(dev, placement, STAT_ALLOCATED_COUNT, 1)
    history_on_free(dev, slot, stream)
    blocks[slot, BLK_STREAM] = stream  # BLK_REQUESTED is stale now; readers mask it
    offset = blocks[slot, BLK_OFFSET]
    quick = quick_index(dev, placement, size)
    if quick < 0 or not quick_push(dev, slot, quick):
        blocks[slot, BLK_STATE] = BLOCK_FREE
        _merge_and_list(dev, slot)
    # traced last (same content: the freed block's fields were read above), so the compiler
    # need not reload block fields after the ring stores, which it cannot prove disjoint
    time = dev.stream_clock[stream]
    trace_append(dev, EV_FREE, placement, handle, offset, size, requested, stream, time, time)
    return np.int32(STATUS_OK)


@jit(_nrt=False, forceinline=False)
def block_location(dev, handle):
    """(placement, offset, requested bytes) of a live block; placement -1 if stale."""
    slot = block_slot(dev, handle)
    if slot < 0:
        return -1, np.int64(0), np.int64(0)
    blocks = dev.blocks
    return blocks[slot, BLK_PLACEMENT], blocks[slot, BLK_OFFSET], blocks[slot, BLK_REQUESTED]


@jit(forceinline=False)  # returns an array view: needs the reference-counting runtime
def block_bytes(dev, handle):
    """The arena bytes of a live block (length = requested size); empty if the handle is stale.

    Kernels compute on this view, e.g. `block_bytes(dev, h).view(np.float32)`.
    """
    placement, offset, size = block_location(dev, handle)
    if placement < 0:
        return dev.arena_host[0:0]
    arena = arena_of(dev, placement)
    return arena[offset : offset + size]
