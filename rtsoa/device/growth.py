"""Growing the cache by one segment: reuse of cached free segments first, then the arena.

`new_segment` is called when no free block fits a request. Before carving fresh arena memory
it returns wholly free cached segments to the arena (`release_before_grow`); segments whose
uses the host has not seen complete (an executor run never synchronises) cannot be released,
so they are reused stream-ordered instead (`carve_cached`): adjacent free segments merge
(`_coalesce_free_segments`), the lowest fitting one is cut to the request's segment size, the
top one grows into the arena, and for a large request the allocator may order the stream after
pending uses on other streams (an inserted event wait) rather than grow.
"""

from rtsoa._jit import jit_inline_llvm, jit_out_of_line
from rtsoa.abi.status import STATUS_OUT_OF_MEMORY, STATUS_TOO_MANY_BLOCKS, STATUS_TOO_MANY_SEGMENTS
from rtsoa.device.arena import (
    arena_give_back,
    arena_take,
    arena_take_at,
)
from rtsoa.device.bits import lowest_bit
from rtsoa.device.freelists import bin_push, bin_remove
from rtsoa.device.hazards import history_copy, history_merge, reusable_on
from rtsoa.device.layout import (
    BLK_GROUP,
    BLK_PLACEMENT,
    BLK_SIZE,
    BLK_STREAM,
    BLK_STREAM_MASK,
    CFG_RELEASE_BEFORE_GROW,
    CFG_SMALL_MIN_REMAINDER,
    CNT_ALLOCATOR_WAITS,
    CNT_FREE_SEGMENTS,
    CNT_GROWTH_RELEASES,
    CNT_SEGMENT_HIGH,
    CNT_SEGMENT_TOP,
    EV_ALLOCATOR_WAIT,
    EV_SEGMENT_ALLOC,
    EV_SEGMENT_FREE,
    HIST_USE,
    PCFG_CAP,
    POOL_SMALL,
    SEG_FIRST_BLOCK,
    SEG_OFFSET,
    SEG_POOL,
    SEG_SCAN_NEXT,
    SEG_SIZE,
    STAT_CURRENT,
    STAT_RESERVED_BYTES,
    STAT_SEGMENT_COUNT,
)
from rtsoa.device.segments import (
    can_grow,
    extendable_segment,
    fill_segment,
    free_segment_pool,
    free_whole,
    release_free_segments,
    segment_size,
    trace_segment,
)
from rtsoa.device.tables import (
    pop_block_slot,
    pop_segment_slot,
    push_block_slot,
    push_segment_slot,
    stat_add,
    stat_sub,
)
from rtsoa.device.trace import trace_append

_NOT_LINKED = -2  # SEG_SCAN_NEXT of a row that is not mergeable in this scan


@jit_out_of_line
def _coalesce_free_segments(dev, placement, stream, ready_only, time):
    """Merge address-adjacent wholly free cached segments of `placement` into one segment.

    The cache-side counterpart of releasing them to the arena (where they would merge), for
    segments the host has not seen complete: the merged block keeps the union of both access
    histories, so reusing it stays stream-ordered (see `carve_cached`). Reserved bytes are
    unchanged; the trace shows the two segments freed and the merged one allocated.

    One scan links the mergeable segments (wholly free, and usable on `stream` when
    `ready_only`) in address order through `SEG_SCAN_NEXT`; each is then merged with its
    successors in segment-row order, the successor being the next link when it starts where the
    segment ends (segments never overlap, so a segment between them would be in use or not
    usable, which stops the merge). Rows are visited in the same order as a scan for each
    successor would, with the same merges and trace, in O(segments + mergeable**2).
    """
    segments = dev.segments
    blocks = dev.blocks
    high = dev.counters[CNT_SEGMENT_HIGH]
    head = -1
    for segment in range(high):
        slot = free_whole(dev, segment, placement)
        if slot < 0 or (ready_only and not reusable_on(dev, slot, stream)):
            segments[segment, SEG_SCAN_NEXT] = _NOT_LINKED
            continue
        offset = segments[segment, SEG_OFFSET]
        before = -1
        after = head
        while after >= 0 and segments[after, SEG_OFFSET] < offset:
            before = after
            after = segments[after, SEG_SCAN_NEXT]
        segments[segment, SEG_SCAN_NEXT] = after
        if before < 0:
            head = segment
        else:
            segments[before, SEG_SCAN_NEXT] = segment
    for first in range(high):
        if segments[first, SEG_SCAN_NEXT] == _NOT_LINKED:
            continue
        slot = segments[first, SEG_FIRST_BLOCK]
        segment = segments[first, SEG_SCAN_NEXT]
        while (
            segment >= 0
            and segments[segment, SEG_OFFSET]
            == segments[first, SEG_OFFSET] + segments[first, SEG_SIZE]
        ):
            other = segments[segment, SEG_FIRST_BLOCK]
            trace_segment(dev, EV_SEGMENT_FREE, placement, first, time)
            trace_segment(dev, EV_SEGMENT_FREE, placement, segment, time)
            bin_remove(dev, slot)
            bin_remove(dev, other)
            history_merge(dev, slot, other)
            size = blocks[slot, BLK_SIZE] + blocks[other, BLK_SIZE]
            blocks[slot, BLK_SIZE] = size
            segments[first, SEG_SIZE] = size
            push_block_slot(dev, other)
            push_segment_slot(dev, segment)
            dev.counters[CNT_FREE_SEGMENTS] -= 1
            stat_sub(dev, placement, STAT_SEGMENT_COUNT, 1)
            pool = free_segment_pool(dev, size)
            segments[first, SEG_POOL] = pool
            blocks[slot, BLK_GROUP] = placement * 2 + pool
            bin_push(dev, slot, placement * 2 + pool)
            trace_segment(dev, EV_SEGMENT_ALLOC, placement, first, time)
            following = segments[segment, SEG_SCAN_NEXT]
            segments[segment, SEG_SCAN_NEXT] = _NOT_LINKED  # merged away: no longer a row
            segments[first, SEG_SCAN_NEXT] = following
            segment = following


@jit_inline_llvm  # one scan: a real call would copy the device state
def _lowest_fit(dev, placement, size, stream, ready_only):
    """The lowest-address wholly free segment of at least `size` bytes (usable on `stream`
    when `ready_only`), or -1. Address order keeps live memory low and leaves the top free,
    where a segment can grow into the arena (`extendable_segment`)."""
    segments = dev.segments
    best = -1
    for segment in range(dev.counters[CNT_SEGMENT_HIGH]):
        slot = free_whole(dev, segment, placement)
        if slot < 0 or segments[segment, SEG_SIZE] < size:
            continue
        if best >= 0 and segments[segment, SEG_OFFSET] >= segments[best, SEG_OFFSET]:
            continue
        if ready_only and not reusable_on(dev, slot, stream):
            continue
        best = segment
    return best


@jit_out_of_line
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
        after = dev.stream_clock[stream]
        trace_append(dev, EV_ALLOCATOR_WAIT, placement, other, 0, 0, 0, stream, before, after)


@jit_out_of_line
def carve_cached(dev, placement, pool, size, stream):
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
    need = segment_size(dev, pool, size)
    extra = 0
    best = _lowest_fit(dev, placement, size, stream, True)
    if best < 0 and pool != POOL_SMALL and can_grow(dev, placement, need):
        # wait for pending uses rather than grow a large segment (a fresh small one is cheap;
        # out of memory, the documented sync -> release -> retry path runs instead): merge
        # all free segments and order `stream` after the chosen one's uses
        _coalesce_free_segments(dev, placement, stream, False, time)
        best = _lowest_fit(dev, placement, size, stream, False)
        if best < 0:
            best = extendable_segment(dev, placement, need)
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
    trace_segment(dev, EV_SEGMENT_FREE, placement, best, time)
    if extra > 0:  # grown into the free arena range right after it
        arena_take_at(dev, placement, segments[best, SEG_OFFSET] + segments[best, SEG_SIZE], extra)
        segments[best, SEG_SIZE] = need
        blocks[slot, BLK_SIZE] = need
        stat_add(dev, placement, STAT_RESERVED_BYTES, extra)
    group = placement * 2 + pool
    target = min(need, best_size)
    rest = best_size - target
    if rest >= dev.config[CFG_SMALL_MIN_REMAINDER + pool] and dev.counters[CNT_SEGMENT_TOP] > 0:
        spare = pop_block_slot(dev)
        if spare >= 0:
            segment = pop_segment_slot(dev)  # the stack is not empty (checked above)
            offset = segments[best, SEG_OFFSET] + target
            rest_pool = free_segment_pool(dev, rest)
            fill_segment(
                dev, segment, spare, placement, rest_pool, offset, rest, placement * 2 + rest_pool
            )
            blocks[spare, BLK_STREAM] = blocks[slot, BLK_STREAM]
            history_copy(dev, spare, slot)
            bin_push(dev, spare, blocks[spare, BLK_GROUP])
            dev.counters[CNT_FREE_SEGMENTS] += 1
            stat_add(dev, placement, STAT_SEGMENT_COUNT, 1)
            segments[best, SEG_SIZE] = target
            blocks[slot, BLK_SIZE] = target
            trace_segment(dev, EV_SEGMENT_ALLOC, placement, segment, time)
    segments[best, SEG_POOL] = pool
    blocks[slot, BLK_GROUP] = group
    trace_segment(dev, EV_SEGMENT_ALLOC, placement, best, time)
    return slot


@jit_out_of_line
def new_segment(dev, placement, pool, size, stream):
    """Carve a segment for a `size`-byte request; returns its single free block or -status."""
    if dev.config[CFG_RELEASE_BEFORE_GROW] != 0 and dev.counters[CNT_FREE_SEGMENTS] > 0:
        if release_free_segments(dev, placement) > 0:
            dev.counters[CNT_GROWTH_RELEASES] += 1
        if dev.counters[CNT_FREE_SEGMENTS] > 0:  # cached but not releasable without a sync
            slot = carve_cached(dev, placement, pool, size, stream)
            if slot >= 0:
                return slot
    reserved = dev.stats[placement, STAT_RESERVED_BYTES + STAT_CURRENT]
    cap = dev.placement_config[placement, PCFG_CAP]
    carved = segment_size(dev, pool, size)
    offset = -1
    if reserved + carved <= cap:
        offset = arena_take(dev, placement, carved)
    if offset < 0 and carved != size:
        carved = size
        if reserved + carved <= cap:
            offset = arena_take(dev, placement, carved)
    if offset < 0:
        return -STATUS_OUT_OF_MEMORY
    segment = pop_segment_slot(dev)
    slot = pop_block_slot(dev)
    if segment < 0 or slot < 0:
        if slot >= 0:
            push_block_slot(dev, slot)
        if segment >= 0:
            push_segment_slot(dev, segment)
        arena_give_back(dev, placement, offset, carved)
        if segment < 0:
            return -STATUS_TOO_MANY_SEGMENTS
        return -STATUS_TOO_MANY_BLOCKS
    fill_segment(dev, segment, slot, placement, pool, offset, carved, placement * 2 + pool)
    dev.blocks[slot, BLK_STREAM_MASK] = 0
    stat_add(dev, placement, STAT_RESERVED_BYTES, carved)
    stat_add(dev, placement, STAT_SEGMENT_COUNT, 1)
    time = dev.stream_clock[stream]
    trace_append(
        dev, EV_SEGMENT_ALLOC, placement, segment, offset, carved, size, stream, time, time
    )
    return slot
