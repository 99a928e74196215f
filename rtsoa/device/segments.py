"""Segments: the caching allocator's unit of reservation, carved from an arena.

A segment is one row of `dev.segments` (columns `layout.SEG_*`) covering a run of blocks that
are address neighbours. Requests of the small pool share `small_segment` (2 MiB) segments;
large requests get segments sized by `segment_size`. A wholly free segment (one free block) is
either released to the arena (`release_free_segments`: only once the host has seen every use
of its memory complete, as `cudaFree` needs a sync) or reused stream-ordered (`growth.py`).
"""

from rtsoa._jit import jit_inline_llvm, jit_out_of_line
from rtsoa.device.arena import arena_free_at, arena_give_back, arena_largest_free
from rtsoa.device.bits import lowest_bit
from rtsoa.device.freelists import bin_remove
from rtsoa.device.layout import (
    BLK_GROUP,
    BLK_NEXT,
    BLK_OFFSET,
    BLK_PLACEMENT,
    BLK_PREV,
    BLK_REQUESTED,
    BLK_SEGMENT,
    BLK_SIZE,
    BLK_STATE,
    BLK_STREAM_MASK,
    BLOCK_FREE,
    CFG_LARGE_ROUND,
    CFG_LARGE_SEGMENT,
    CFG_LARGE_SEGMENT_LIMIT,
    CFG_MAX_SPLIT,
    CFG_SMALL_SEGMENT,
    CNT_FREE_SEGMENTS,
    CNT_SEGMENT_HIGH,
    EV_SEGMENT_FREE,
    HIST_USE,
    PCFG_CAP,
    POOL_LARGE,
    POOL_SMALL,
    SEG_FIRST_BLOCK,
    SEG_OFFSET,
    SEG_PLACEMENT,
    SEG_POOL,
    SEG_SIZE,
    STAT_CURRENT,
    STAT_RESERVED_BYTES,
    STAT_SEGMENT_COUNT,
)
from rtsoa.device.tables import push_block_slot, push_segment_slot, stat_sub, whole_segment
from rtsoa.device.trace import trace_append


@jit_inline_llvm  # a few loads and stores: a real call would copy the device state
def segment_size(dev, pool, size):
    """Bytes of the segment carved for a `size`-byte request of `pool`."""
    if pool == POOL_SMALL:
        return max(dev.config[CFG_SMALL_SEGMENT], size)
    if size < dev.config[CFG_LARGE_SEGMENT_LIMIT] and size < dev.config[CFG_MAX_SPLIT]:
        return max(dev.config[CFG_LARGE_SEGMENT], size)
    unit = dev.config[CFG_LARGE_ROUND]
    return (size + unit - 1) // unit * unit


@jit_inline_llvm  # a few loads and stores: a real call would copy the device state
def fill_segment(dev, segment, slot, placement, pool, offset, size, group):
    """Write segment row `segment` (just popped from its stack) and its one free block `slot`,
    which covers all of it."""
    dev.counters[CNT_SEGMENT_HIGH] = max(dev.counters[CNT_SEGMENT_HIGH], segment + 1)
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


@jit_inline_llvm  # called per segment in the growth path's scans
def free_whole(dev, segment, placement):
    """The single free block of a wholly free segment of `placement`, or -1."""
    if dev.segments[segment, SEG_PLACEMENT] != placement:
        return -1
    slot = dev.segments[segment, SEG_FIRST_BLOCK]
    if dev.blocks[slot, BLK_STATE] != BLOCK_FREE or not whole_segment(dev, slot):
        return -1
    return slot


@jit_inline_llvm  # a few loads and stores: a real call would copy the device state
def free_segment_pool(dev, size):
    """Pool of a wholly free segment made by merging or cutting cached segments: the large pool
    once it exceeds a small segment, so small requests cannot split it (they carve a small
    segment from it instead, `growth.carve_cached`) and pin a big span for small blocks only."""
    return POOL_SMALL if size <= dev.config[CFG_SMALL_SEGMENT] else POOL_LARGE


@jit_inline_llvm  # a few loads and stores: a real call would copy the device state
def trace_segment(dev, kind, placement, segment, time):
    """Trace a segment event (EV_SEGMENT_ALLOC / EV_SEGMENT_FREE) of segment row `segment`."""
    offset = dev.segments[segment, SEG_OFFSET]
    size = dev.segments[segment, SEG_SIZE]
    trace_append(dev, kind, placement, segment, offset, size, size, -1, time, time)


@jit_inline_llvm
def _host_ordered(dev, slot):
    """Every use of the block is known complete by the host (safe to unmap)."""
    mask = dev.blocks[slot, BLK_STREAM_MASK]
    while mask != 0:
        stream = lowest_bit(mask)
        mask &= mask - 1
        if dev.history[slot, stream, HIST_USE] > dev.host_vc[stream]:
            return False
    return True


@jit_out_of_line
def release_free_segments(dev, placement):
    """Return wholly free, host-ordered segments to the arena (all placements when < 0);
    returns the bytes released."""
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
        if blocks[slot, BLK_STATE] != BLOCK_FREE or not whole_segment(dev, slot):
            continue
        if not _host_ordered(dev, slot):
            continue
        size = segments[segment, SEG_SIZE]
        offset = segments[segment, SEG_OFFSET]
        bin_remove(dev, slot)
        push_block_slot(dev, slot)
        dev.counters[CNT_FREE_SEGMENTS] -= 1
        arena_give_back(dev, owner, offset, size)
        push_segment_slot(dev, segment)
        stat_sub(dev, owner, STAT_RESERVED_BYTES, size)
        stat_sub(dev, owner, STAT_SEGMENT_COUNT, 1)
        trace_append(dev, EV_SEGMENT_FREE, owner, segment, offset, size, 0, -1, time, time)
        released += size
    return released


@jit_out_of_line
def extendable_segment(dev, placement, need):
    """A wholly free segment that reaches `need` bytes by growing into the
    free arena range right after it (within the cap), or -1."""
    segments = dev.segments
    reserved = dev.stats[placement, STAT_RESERVED_BYTES + STAT_CURRENT]
    cap = dev.placement_config[placement, PCFG_CAP]
    for segment in range(dev.counters[CNT_SEGMENT_HIGH]):
        slot = free_whole(dev, segment, placement)
        if slot < 0:
            continue
        extra = need - segments[segment, SEG_SIZE]
        if extra <= 0 or reserved + extra > cap:
            continue
        end = segments[segment, SEG_OFFSET] + segments[segment, SEG_SIZE]
        if arena_free_at(dev, placement, end) >= extra:
            return segment
    return -1


@jit_inline_llvm  # a few loads and stores: a real call would copy the device state
def can_grow(dev, placement, size):
    """A new `size`-byte segment would fit in the cap and in a free arena range."""
    reserved = dev.stats[placement, STAT_RESERVED_BYTES + STAT_CURRENT]
    if reserved + size > dev.placement_config[placement, PCFG_CAP]:
        return False
    return arena_largest_free(dev, placement) >= size
