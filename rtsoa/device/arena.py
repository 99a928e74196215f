"""The arena: one byte array per placement, and the first-level range allocator over it.

Segments (the caching allocator's unit of reservation) are carved from an arena's free ranges
by best fit and given back on release, merging with address neighbours. Segment traffic is rare
(only on cache misses and cache flushes), so a sorted array scanned linearly is enough.
"""

from rtsoa._jit import jit_inline_ir, jit_out_of_line, jit_with_nrt
from rtsoa.device.layout import PLACEMENT_FOLLOWING, PLACEMENT_HOST, PLACEMENT_P2P


@jit_inline_ir
def resolve_placement(placement):
    """Map "following" onto host; other placements are their own arena."""
    if placement == PLACEMENT_FOLLOWING:
        return PLACEMENT_HOST
    return placement


@jit_with_nrt  # returns an array view: needs the reference-counting runtime
def arena_of(dev, placement):
    """The byte array of a (resolved) placement."""
    if placement == PLACEMENT_HOST:
        return dev.arena_host
    if placement == PLACEMENT_P2P:
        return dev.arena_p2p
    return dev.arena_hbm


@jit_out_of_line
def arena_take(dev, placement, size):
    """Carve `size` bytes from the best-fitting free range; returns the offset or -1."""
    count = dev.range_count[placement]
    best = -1
    best_size = 0
    for k in range(count):
        range_size = dev.range_size[placement, k]
        if range_size >= size and (best < 0 or range_size < best_size):
            best = k
            best_size = range_size
            if range_size == size:
                break
    if best < 0:
        return -1
    return _take_front(dev, placement, best, size)


@jit_inline_ir
def _take_front(dev, placement, k, size):
    """Carve `size` bytes from the front of free range `k` (dropping the range when it is used
    up, which keeps the array sorted); returns their offset."""
    count = dev.range_count[placement]
    offset = dev.range_offset[placement, k]
    if dev.range_size[placement, k] == size:
        for j in range(k, count - 1):
            dev.range_offset[placement, j] = dev.range_offset[placement, j + 1]
            dev.range_size[placement, j] = dev.range_size[placement, j + 1]
        dev.range_count[placement] = count - 1
    else:
        dev.range_offset[placement, k] = offset + size
        dev.range_size[placement, k] -= size
    return offset


@jit_out_of_line
def arena_free_at(dev, placement, offset):
    """Size of the free range starting exactly at `offset` (0 if none)."""
    for k in range(dev.range_count[placement]):
        if dev.range_offset[placement, k] == offset:
            return dev.range_size[placement, k]
    return 0


@jit_out_of_line
def arena_take_at(dev, placement, offset, size):
    """Carve `size` bytes from the front of the free range starting at `offset` (the caller
    checked `arena_free_at(...) >= size`)."""
    for k in range(dev.range_count[placement]):
        if dev.range_offset[placement, k] == offset:
            _take_front(dev, placement, k, size)
            return


@jit_out_of_line
def arena_give_back(dev, placement, offset, size):
    """Return a range to the arena, merging with free neighbours (kept sorted by offset)."""
    count = dev.range_count[placement]
    position = 0
    while position < count and dev.range_offset[placement, position] < offset:
        position += 1
    merges_left = position > 0 and (
        dev.range_offset[placement, position - 1] + dev.range_size[placement, position - 1]
        == offset
    )
    merges_right = position < count and dev.range_offset[placement, position] == offset + size
    if merges_left and merges_right:
        dev.range_size[placement, position - 1] += size + dev.range_size[placement, position]
        for k in range(position, count - 1):
            dev.range_offset[placement, k] = dev.range_offset[placement, k + 1]
            dev.range_size[placement, k] = dev.range_size[placement, k + 1]
        dev.range_count[placement] = count - 1
    elif merges_left:
        dev.range_size[placement, position - 1] += size
    elif merges_right:
        dev.range_offset[placement, position] = offset
        dev.range_size[placement, position] += size
    else:
        for k in range(count, position, -1):
            dev.range_offset[placement, k] = dev.range_offset[placement, k - 1]
            dev.range_size[placement, k] = dev.range_size[placement, k - 1]
        dev.range_offset[placement, position] = offset
        dev.range_size[placement, position] = size
        dev.range_count[placement] = count + 1


@jit_out_of_line
def arena_largest_free(dev, placement):
    """Largest free range of the arena (bytes not yet carved into any segment)."""
    largest = 0
    for k in range(dev.range_count[placement]):
        largest = max(largest, dev.range_size[placement, k])
    return largest
