"""Caching allocator over the arenas, callable from njit code (`device_malloc` / `device_free`).

Design (PyTorch's CUDA caching allocator and the reference's page allocator, column-wise):
  * Requests round up to the placement's alignment (512 B device / 64 B host by default; whole
    64 KiB pages in page mode) after adding the tail padding; zero bytes still get one unit.
  * Rounded requests up to `small_size` (1 MiB) come from the small pool, carved from
    `small_segment` (2 MiB) segments; larger ones from the large pool: `large_segment` (20 MiB)
    segments below `large_segment_limit` (10 MiB), else a segment of the size rounded to
    `large_round` (2 MiB). Segments are carved from the arena (see `arena.py`) within the cap;
    when the preferred segment does not fit, a segment of exactly the rounded size is tried.
  * Free blocks sit in doubly linked free lists per (placement, pool, size class); classes are
    16 per power of two, with a bitmap of non-empty classes. The search is best fit (smallest
    eligible block; first eligible in LIFO order in page mode). A block is eligible when every
    recorded use of its memory is ordered before the requesting stream (see `hazards.py`): a
    block freed on a stream is reused on that stream at once, on another only after an event.
  * The chosen block is split when the remainder is at least the pool's minimum remainder;
    blocks of at least `max_split` bytes are oversize: never split, and they serve only
    oversize requests that waste less than `oversize_slack`. Frees merge with free address
    neighbours of the same segment.
  * Out of memory: wait for pending submissions (none in this single-threaded device; counted)
    -> synchronise the stream -> release cached segments -> retry; then synchronise the device,
    release again, retry; then STATUS_OUT_OF_MEMORY. The device state stays consistent.
Handles are `generation << 32 | slot`, so stale handles (double free, use after free) are caught.
"""

import numpy as np

from rtsoa._jit import jit
from rtsoa.device.arena import arena_give_back, arena_of, arena_take, resolve_placement
from rtsoa.device.bits import floor_log2, lowest_bit
from rtsoa.device.hazards import history_copy, history_merge, history_on_free, reusable_on
from rtsoa.device.status import (
    BITMAP_BITS,
    BLOCK_ALLOCATED,
    BLOCK_FREE,
    BLOCK_UNUSED,
    CFG_LARGE_MIN_REMAINDER,
    CFG_LARGE_ROUND,
    CFG_LARGE_SEGMENT,
    CFG_LARGE_SEGMENT_LIMIT,
    CFG_MAX_SPLIT,
    CFG_NUM_STREAMS,
    CFG_OVERSIZE_SLACK,
    CFG_PAGE_MODE,
    CFG_PAGE_SIZE,
    CFG_SMALL_MIN_REMAINDER,
    CFG_SMALL_SEGMENT,
    CFG_SMALL_SIZE,
    CNT_ALLOC_RETRIES,
    CNT_BLOCK_TOP,
    CNT_CACHE_FLUSHES,
    CNT_OOMS,
    CNT_SEGMENT_TOP,
    CNT_SUBMISSION_WAITS,
    EV_ALLOC,
    EV_FREE,
    EV_OOM,
    EV_SEGMENT_ALLOC,
    EV_SEGMENT_FREE,
    HANDLE_GEN_SHIFT,
    HANDLE_SLOT_MASK,
    NUM_BINS,
    NUM_PLACEMENTS,
    PCFG_ALIGNMENT,
    PCFG_CAP,
    PCFG_TAIL_PADDING,
    POOL_LARGE,
    POOL_SMALL,
    STAT_ALLOCATED_BYTES,
    STAT_ALLOCATED_COUNT,
    STAT_CURRENT,
    STAT_FREED,
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
    SUB_BINS_LOG2,
)
from rtsoa.device.streams import device_synchronize, stream_synchronize
from rtsoa.device.trace import trace_append

# ---- small helpers ---------------------------------------------------------------------------


@jit(_nrt=False, inline="always")
def size_class(size):
    """Free-list class of a size: exact below 16, then 16 classes per power of two."""
    if size < 16:
        return size
    exponent = floor_log2(size)
    sub = (size >> (exponent - SUB_BINS_LOG2)) & ((1 << SUB_BINS_LOG2) - 1)
    return (exponent << SUB_BINS_LOG2) + sub


@jit(_nrt=False, inline="always")
def round_request(dev, placement, nbytes):
    """Bytes a request occupies: size + tail padding, rounded up to the allocation unit."""
    if dev.config[CFG_PAGE_MODE] != 0:
        unit = dev.config[CFG_PAGE_SIZE]
    else:
        unit = dev.placement_config[placement, PCFG_ALIGNMENT]
    padded = nbytes + dev.placement_config[placement, PCFG_TAIL_PADDING]
    return max(unit, (padded + unit - 1) // unit * unit)


@jit(_nrt=False, inline="always")
def _stat_add(dev, placement, group, amount):
    current = dev.stats[placement, group + STAT_CURRENT] + amount
    dev.stats[placement, group + STAT_CURRENT] = current
    dev.stats[placement, group + STAT_PEAK] = max(dev.stats[placement, group + STAT_PEAK], current)
    dev.stats[placement, group + STAT_TOTAL] += amount


@jit(_nrt=False, inline="always")
def _stat_sub(dev, placement, group, amount):
    dev.stats[placement, group + STAT_CURRENT] -= amount
    dev.stats[placement, group + STAT_FREED] += amount


@jit(_nrt=False, inline="always")
def _pop_block_slot(dev):
    top = dev.counters[CNT_BLOCK_TOP]
    if top == 0:
        return -1
    dev.counters[CNT_BLOCK_TOP] = top - 1
    return dev.block_slots[top - 1]


@jit(_nrt=False, inline="always")
def _push_block_slot(dev, slot):
    dev.block_state[slot] = BLOCK_UNUSED
    dev.block_segment[slot] = -1
    top = dev.counters[CNT_BLOCK_TOP]
    dev.block_slots[top] = slot
    dev.counters[CNT_BLOCK_TOP] = top + 1


# ---- free lists ------------------------------------------------------------------------------


@jit(_nrt=False, inline="always")
def _bin_push(dev, slot, group):
    """Put a free block at the head of its class list (LIFO)."""
    index = group * NUM_BINS + size_class(dev.block_size[slot])
    head = dev.bin_head[index]
    dev.block_free_prev[slot] = -1
    dev.block_free_next[slot] = head
    if head >= 0:
        dev.block_free_prev[head] = slot
    dev.bin_head[index] = slot
    dev.block_bin[slot] = index
    dev.bin_bitmap[index // BITMAP_BITS] |= 1 << (index % BITMAP_BITS)


@jit(_nrt=False, inline="always")
def _bin_remove(dev, slot):
    index = dev.block_bin[slot]
    before = dev.block_free_prev[slot]
    after = dev.block_free_next[slot]
    if before >= 0:
        dev.block_free_next[before] = after
    else:
        dev.bin_head[index] = after
        if after < 0:
            dev.bin_bitmap[index // BITMAP_BITS] &= ~(1 << (index % BITMAP_BITS))
    if after >= 0:
        dev.block_free_prev[after] = before
    dev.block_bin[slot] = -1


@jit(_nrt=False, inline="always")
def _eligible(dev, slot, size, stream, max_split):
    block_size = dev.block_size[slot]
    if block_size >= max_split:
        if size < max_split or block_size - size >= dev.config[CFG_OVERSIZE_SLACK]:
            return False
    if dev.block_stream_mask[slot] == 0:
        return True
    return reusable_on(dev, slot, stream)


@jit(_nrt=False, inline="always")
def _find_block(dev, group, size, stream):
    """Best-fit eligible free block of the group, or -1 (classes are ordered size ranges)."""
    first_fit = dev.config[CFG_PAGE_MODE] != 0
    max_split = dev.config[CFG_MAX_SPLIT]
    index = group * NUM_BINS + size_class(size)
    limit = (group + 1) * NUM_BINS
    while index < limit:
        word = index // BITMAP_BITS
        bits = dev.bin_bitmap[word] & ~((1 << (index % BITMAP_BITS)) - 1)
        while bits == 0:
            word += 1
            if word * BITMAP_BITS >= limit:
                return -1
            bits = dev.bin_bitmap[word]
        index = word * BITMAP_BITS + lowest_bit(bits)
        best = -1
        best_size = np.int64(0)
        slot = dev.bin_head[index]
        while slot >= 0:
            block_size = dev.block_size[slot]
            if (
                block_size >= size
                and (best < 0 or block_size < best_size)
                and _eligible(dev, slot, size, stream, max_split)
            ):
                best = slot
                best_size = block_size
                if block_size == size or first_fit:
                    break
            slot = dev.block_free_next[slot]
        if best >= 0:
            return best
        index += 1
    return -1


# ---- segments --------------------------------------------------------------------------------


@jit(_nrt=False)
def _segment_size(dev, pool, size):
    if pool == POOL_SMALL:
        return max(dev.config[CFG_SMALL_SEGMENT], size)
    if size < dev.config[CFG_LARGE_SEGMENT_LIMIT] and size < dev.config[CFG_MAX_SPLIT]:
        return max(dev.config[CFG_LARGE_SEGMENT], size)
    unit = dev.config[CFG_LARGE_ROUND]
    return (size + unit - 1) // unit * unit


@jit(_nrt=False)
def _new_segment(dev, placement, pool, size, stream):
    """Carve a segment for a `size`-byte request; returns its single free block or -status."""
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
    dev.segment_offset[segment] = offset
    dev.segment_size[segment] = segment_size
    dev.segment_placement[segment] = placement
    dev.segment_pool[segment] = pool
    dev.segment_first_block[segment] = slot
    dev.block_offset[slot] = offset
    dev.block_size[slot] = segment_size
    dev.block_requested[slot] = 0
    dev.block_segment[slot] = segment
    dev.block_prev[slot] = -1
    dev.block_next[slot] = -1
    dev.block_state[slot] = BLOCK_FREE
    dev.block_stream_mask[slot] = 0
    _stat_add(dev, placement, STAT_RESERVED_BYTES, segment_size)
    _stat_add(dev, placement, STAT_SEGMENT_COUNT, 1)
    time = dev.stream_clock[stream]
    trace_append(
        dev, EV_SEGMENT_ALLOC, placement, segment, offset, segment_size, size, stream, time, time
    )
    return slot


@jit(_nrt=False)
def _host_ordered(dev, slot):
    """Every use of the block is known complete by the host (safe to unmap)."""
    mask = dev.block_stream_mask[slot]
    while mask != 0:
        stream = lowest_bit(mask)
        mask &= mask - 1
        if dev.block_last_use[slot, stream] > dev.host_vc[stream]:
            return False
    return True


@jit(_nrt=False)
def release_cached(dev, placement):
    """Return wholly free segments to the arena (all placements when `placement` < 0).

    Only segments whose every use the host has seen complete are released. Returns bytes freed.
    """
    released = 0
    time = dev.host_clock[0]
    for segment in range(dev.segment_placement.shape[0]):
        owner = dev.segment_placement[segment]
        if owner < 0 or (placement >= 0 and owner != placement):
            continue
        slot = dev.segment_first_block[segment]
        size = dev.segment_size[segment]
        if dev.block_state[slot] != BLOCK_FREE or dev.block_size[slot] != size:
            continue
        if not _host_ordered(dev, slot):
            continue
        _bin_remove(dev, slot)
        _push_block_slot(dev, slot)
        offset = dev.segment_offset[segment]
        arena_give_back(dev, owner, offset, size)
        dev.segment_placement[segment] = -1
        dev.segment_first_block[segment] = -1
        top = dev.counters[CNT_SEGMENT_TOP]
        dev.segment_slots[top] = segment
        dev.counters[CNT_SEGMENT_TOP] = top + 1
        _stat_sub(dev, owner, STAT_RESERVED_BYTES, size)
        _stat_sub(dev, owner, STAT_SEGMENT_COUNT, 1)
        trace_append(dev, EV_SEGMENT_FREE, owner, segment, offset, size, 0, -1, time, time)
        released += size
    dev.counters[CNT_CACHE_FLUSHES] += 1
    return released


# ---- malloc / free ---------------------------------------------------------------------------


@jit(_nrt=False, inline="always")
def _try_malloc(dev, placement, size, requested, stream):
    """One allocation attempt without the out-of-memory path; handle or -status."""
    pool = POOL_SMALL if size <= dev.config[CFG_SMALL_SIZE] else POOL_LARGE
    group = placement * 2 + pool
    slot = _find_block(dev, group, size, stream)
    if slot >= 0:
        _bin_remove(dev, slot)
    else:
        slot = _new_segment(dev, placement, pool, size, stream)
        if slot < 0:
            return slot
    remainder = dev.block_size[slot] - size
    if pool == POOL_SMALL:
        min_remainder = dev.config[CFG_SMALL_MIN_REMAINDER]
    else:
        min_remainder = dev.config[CFG_LARGE_MIN_REMAINDER]
    if (
        remainder > 0
        and remainder >= min_remainder
        and dev.block_size[slot] < dev.config[CFG_MAX_SPLIT]
    ):
        rest = _pop_block_slot(dev)
        if rest >= 0:  # with a full block table the whole block is handed out unsplit
            after = dev.block_next[slot]
            dev.block_offset[rest] = dev.block_offset[slot] + size
            dev.block_size[rest] = remainder
            dev.block_requested[rest] = 0
            dev.block_segment[rest] = dev.block_segment[slot]
            dev.block_prev[rest] = slot
            dev.block_next[rest] = after
            if after >= 0:
                dev.block_prev[after] = rest
            dev.block_next[slot] = rest
            dev.block_state[rest] = BLOCK_FREE
            dev.block_stream[rest] = dev.block_stream[slot]
            history_copy(dev, rest, slot)
            dev.block_size[slot] = size
            _bin_push(dev, rest, group)
    generation = dev.block_generation[slot] + 1
    dev.block_generation[slot] = generation
    dev.block_state[slot] = BLOCK_ALLOCATED
    dev.block_requested[slot] = requested
    dev.block_stream[slot] = stream
    block_size = dev.block_size[slot]
    _stat_add(dev, placement, STAT_ALLOCATED_BYTES, block_size)
    _stat_add(dev, placement, STAT_REQUESTED_BYTES, requested)
    _stat_add(dev, placement, STAT_ALLOCATED_COUNT, 1)
    handle = (generation << HANDLE_GEN_SHIFT) | slot
    time = dev.stream_clock[stream]
    trace_append(
        dev,
        EV_ALLOC,
        placement,
        handle,
        dev.block_offset[slot],
        block_size,
        requested,
        stream,
        time,
        time,
    )
    return handle


@jit(_nrt=False)
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
    placement = resolve_placement(placement)
    size = round_request(dev, placement, nbytes)
    handle = _try_malloc(dev, placement, size, nbytes, stream)
    if handle != -STATUS_OUT_OF_MEMORY:
        return handle
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


@jit(_nrt=False, inline="always")
def block_slot(dev, handle):
    """Slot of a live handle, or -1 when the handle is stale / invalid."""
    slot = handle & HANDLE_SLOT_MASK
    if handle < 0 or slot >= dev.block_state.shape[0]:
        return -1
    if dev.block_state[slot] != BLOCK_ALLOCATED:
        return -1
    if dev.block_generation[slot] != (handle >> HANDLE_GEN_SHIFT):
        return -1
    return slot


@jit(_nrt=False)
def device_free(dev, handle, stream):
    """Free a block on `stream` (stream-ordered: reusable on `stream` at once). Status code."""
    if stream < 0 or stream >= dev.config[CFG_NUM_STREAMS]:
        return np.int32(STATUS_INVALID_STREAM)
    slot = block_slot(dev, handle)
    if slot < 0:
        return np.int32(STATUS_INVALID_BLOCK)
    segment = dev.block_segment[slot]
    placement = dev.segment_placement[segment]
    group = placement * 2 + dev.segment_pool[segment]
    size = dev.block_size[slot]
    requested = dev.block_requested[slot]
    _stat_sub(dev, placement, STAT_ALLOCATED_BYTES, size)
    _stat_sub(dev, placement, STAT_REQUESTED_BYTES, requested)
    _stat_sub(dev, placement, STAT_ALLOCATED_COUNT, 1)
    history_on_free(dev, slot, stream)
    dev.block_state[slot] = BLOCK_FREE
    dev.block_requested[slot] = 0
    dev.block_stream[slot] = stream
    time = dev.stream_clock[stream]
    trace_append(
        dev, EV_FREE, placement, handle, dev.block_offset[slot], size, requested, stream, time, time
    )
    before = dev.block_prev[slot]
    if before >= 0 and dev.block_state[before] == BLOCK_FREE:
        _bin_remove(dev, before)
        history_merge(dev, before, slot)
        dev.block_size[before] += dev.block_size[slot]
        after = dev.block_next[slot]
        dev.block_next[before] = after
        if after >= 0:
            dev.block_prev[after] = before
        _push_block_slot(dev, slot)
        slot = before
    after = dev.block_next[slot]
    if after >= 0 and dev.block_state[after] == BLOCK_FREE:
        _bin_remove(dev, after)
        history_merge(dev, slot, after)
        dev.block_size[slot] += dev.block_size[after]
        beyond = dev.block_next[after]
        dev.block_next[slot] = beyond
        if beyond >= 0:
            dev.block_prev[beyond] = slot
        _push_block_slot(dev, after)
    _bin_push(dev, slot, group)
    return np.int32(STATUS_OK)


@jit(_nrt=False)
def block_location(dev, handle):
    """(placement, offset, requested bytes) of a live block; placement -1 if stale."""
    slot = block_slot(dev, handle)
    if slot < 0:
        return -1, np.int64(0), np.int64(0)
    placement = dev.segment_placement[dev.block_segment[slot]]
    return placement, dev.block_offset[slot], dev.block_requested[slot]


@jit  # returns an array view: needs the reference-counting runtime
def block_bytes(dev, handle):
    """The arena bytes of a live block (length = requested size); empty if the handle is stale.

    Kernels compute on this view, e.g. `block_bytes(dev, h).view(np.float32)`.
    """
    placement, offset, size = block_location(dev, handle)
    if placement < 0:
        return dev.arena_host[0:0]
    arena = arena_of(dev, placement)
    return arena[offset : offset + size]
