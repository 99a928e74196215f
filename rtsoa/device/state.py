"""`DeviceState`: the whole simulated device as a NamedTuple of fixed-capacity numpy arrays.

Nothing inside is a Python object, so the state can be passed into any njit function (and be
one field of the runtime's `rt` tuple). All arrays are sized once by `create_state`; no jitted
path allocates. Column meanings are the constants of `status.py`.
"""

from typing import NamedTuple

import numpy as np

from rtsoa.device.status import (
    BITMAP_WORDS,
    BLK_BIN,
    BLK_FREE_NEXT,
    BLK_FREE_PREV,
    BLK_NEXT,
    BLK_PREV,
    BLK_SEGMENT,
    BLK_STATE,
    BLOCK_UNUSED,
    CNT_BLOCK_TOP,
    CNT_SEGMENT_TOP,
    HIST_TASK,
    NUM_BINS,
    NUM_BLOCK_COLUMNS,
    NUM_CONFIG,
    NUM_COST,
    NUM_COUNTERS,
    NUM_EXTRA_COLUMNS,
    NUM_HAZARD_COLUMNS,
    NUM_HISTORY_COLUMNS,
    NUM_PLACEMENT_CONFIG,
    NUM_PLACEMENTS,
    NUM_RING_COLUMNS,
    NUM_SEGMENT_COLUMNS,
    NUM_STATS,
    QUICK_CLASSES,
    SEG_FIRST_BLOCK,
    SEG_PLACEMENT,
)


class DeviceState(NamedTuple):
    """Simulated device state (arena bytes, allocator tables, streams, events, stats, trace)."""

    # arenas: one byte array per placement; addresses are offsets into them
    arena_hbm: np.ndarray  # uint8
    arena_p2p: np.ndarray  # uint8
    arena_host: np.ndarray  # uint8
    config: np.ndarray  # int64[NUM_CONFIG]
    placement_config: np.ndarray  # int64[NUM_PLACEMENTS, NUM_PLACEMENT_CONFIG]
    cost: np.ndarray  # float64[NUM_COST]
    counters: np.ndarray  # int64[NUM_COUNTERS]
    stats: np.ndarray  # int64[NUM_PLACEMENTS, NUM_STATS]
    # blocks: one row per slot (columns `status.BLK_*`), kept together for cache locality
    blocks: np.ndarray  # int64[max_blocks, NUM_BLOCK_COLUMNS]
    history: np.ndarray  # int64[max_blocks, max_streams, NUM_HISTORY_COLUMNS] (`HIST_*`)
    history_time: np.ndarray  # float64[max_blocks, max_streams]: end time of the last access
    block_slots: np.ndarray  # int32 stack of unused block slots
    # segments: one row per slot (columns `status.SEG_*`)
    segments: np.ndarray  # int64[max_segments, NUM_SEGMENT_COLUMNS]
    segment_slots: np.ndarray  # int32 stack of unused segment slots
    # arena free ranges per placement, sorted by offset (segments are carved from these)
    range_offset: np.ndarray  # int64[NUM_PLACEMENTS, max_segments + 2]
    range_size: np.ndarray  # int64[NUM_PLACEMENTS, max_segments + 2]
    range_count: np.ndarray  # int64[NUM_PLACEMENTS]
    # free lists: head per (placement, pool, size class) and a bitmap of non-empty classes
    bin_head: np.ndarray  # int32[NUM_PLACEMENTS * 2 * NUM_BINS]
    bin_bitmap: np.ndarray  # int64[NUM_PLACEMENTS * 2 * BITMAP_WORDS]
    # quick lists: head and length per (placement, size in units - 1), linked by BLK_FREE_NEXT
    quick_head: np.ndarray  # int64[NUM_PLACEMENTS * QUICK_CLASSES]
    quick_count: np.ndarray  # int64[NUM_PLACEMENTS * QUICK_CLASSES]
    # streams and events
    stream_clock: np.ndarray  # float64[max_streams], ns
    stream_priority: np.ndarray  # int32[max_streams]
    stream_last_task: np.ndarray  # int64[max_streams]
    stream_vc: np.ndarray  # int64[max_streams, max_streams] vector clocks (epochs)
    host_clock: np.ndarray  # float64[1], ns
    host_vc: np.ndarray  # int64[max_streams]
    event_time: np.ndarray  # float64[max_events] (-1: never recorded)
    event_stream: np.ndarray  # int32[max_events]
    event_vc: np.ndarray  # int64[max_events, max_streams]
    # trace ring buffer and hazard table
    trace: np.ndarray  # int64[trace_capacity, NUM_RING_COLUMNS]: one 32-byte row per event
    trace_extra: np.ndarray  # int64[trace_capacity, NUM_EXTRA_COLUMNS]: rows that do not fit
    hazards: np.ndarray  # int64[hazard_capacity, NUM_HAZARD_COLUMNS]
    hazard_time: np.ndarray  # float64[hazard_capacity, 2]


def aligned_zeros(shape, dtype, alignment=64):
    """Zeroed array whose data starts on a cache-line boundary (numpy only promises 16 bytes),
    so a 128-byte table row spans two cache lines, not three."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    raw = np.zeros(count * dtype.itemsize + alignment, dtype=np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start : start + count * dtype.itemsize].view(dtype).reshape(shape)


def create_state(
    arena_sizes,
    config,
    placement_config,
    cost,
    max_blocks,
    max_segments,
    max_streams,
    max_events,
    trace_capacity,
    hazard_capacity,
):
    """Allocate a fresh `DeviceState`; arrays are zeroed lazily by the OS until touched."""
    if trace_capacity & (trace_capacity - 1) or trace_capacity < 1:
        raise ValueError("trace_capacity must be a power of two")
    arenas = [np.zeros(int(size), dtype=np.uint8) for size in arena_sizes]
    range_capacity = max_segments + 2
    range_offset = np.zeros((NUM_PLACEMENTS, range_capacity), dtype=np.int64)
    range_size = np.zeros((NUM_PLACEMENTS, range_capacity), dtype=np.int64)
    range_count = np.zeros(NUM_PLACEMENTS, dtype=np.int64)
    for placement, size in enumerate(arena_sizes):
        if size > 0:
            range_size[placement, 0] = size
            range_count[placement] = 1
    blocks = aligned_zeros((max_blocks, NUM_BLOCK_COLUMNS), np.int64)
    blocks[:, [BLK_SEGMENT, BLK_PREV, BLK_NEXT, BLK_BIN, BLK_FREE_PREV, BLK_FREE_NEXT]] = -1
    blocks[:, BLK_STATE] = BLOCK_UNUSED
    history = aligned_zeros((max_blocks, max_streams, NUM_HISTORY_COLUMNS), np.int64)
    history[:, :, HIST_TASK] = -1
    segments = aligned_zeros((max_segments, NUM_SEGMENT_COLUMNS), np.int64)
    segments[:, [SEG_PLACEMENT, SEG_FIRST_BLOCK]] = -1
    counters = np.zeros(NUM_COUNTERS, dtype=np.int64)
    counters[CNT_BLOCK_TOP] = max_blocks
    counters[CNT_SEGMENT_TOP] = max_segments
    assert config.shape == (NUM_CONFIG,) and cost.shape == (NUM_COST,)
    assert placement_config.shape == (NUM_PLACEMENTS, NUM_PLACEMENT_CONFIG)
    return DeviceState(
        arena_hbm=arenas[0],
        arena_p2p=arenas[1],
        arena_host=arenas[2],
        config=config.astype(np.int64),
        placement_config=placement_config.astype(np.int64),
        cost=cost.astype(np.float64),
        counters=counters,
        stats=np.zeros((NUM_PLACEMENTS, NUM_STATS), dtype=np.int64),
        blocks=blocks,
        history=history,
        history_time=np.zeros((max_blocks, max_streams), dtype=np.float64),
        # popped from the top: slot 0 is handed out first
        block_slots=np.arange(max_blocks - 1, -1, -1, dtype=np.int32),
        segments=segments,
        segment_slots=np.arange(max_segments - 1, -1, -1, dtype=np.int32),
        range_offset=range_offset,
        range_size=range_size,
        range_count=range_count,
        bin_head=np.full(NUM_PLACEMENTS * 2 * NUM_BINS, -1, dtype=np.int32),
        bin_bitmap=np.zeros(NUM_PLACEMENTS * 2 * BITMAP_WORDS, dtype=np.int64),
        quick_head=np.full(NUM_PLACEMENTS * QUICK_CLASSES, -1, dtype=np.int64),
        quick_count=np.zeros(NUM_PLACEMENTS * QUICK_CLASSES, dtype=np.int64),
        stream_clock=np.zeros(max_streams, dtype=np.float64),
        stream_priority=np.zeros(max_streams, dtype=np.int32),
        stream_last_task=np.full(max_streams, -1, dtype=np.int64),
        stream_vc=np.zeros((max_streams, max_streams), dtype=np.int64),
        host_clock=np.zeros(1, dtype=np.float64),
        host_vc=np.zeros(max_streams, dtype=np.int64),
        event_time=np.full(max_events, -1.0, dtype=np.float64),
        event_stream=np.full(max_events, -1, dtype=np.int32),
        event_vc=np.zeros((max_events, max_streams), dtype=np.int64),
        trace=aligned_zeros((trace_capacity, NUM_RING_COLUMNS), np.int64),
        trace_extra=aligned_zeros((trace_capacity, NUM_EXTRA_COLUMNS), np.int64),
        hazards=np.zeros((hazard_capacity, NUM_HAZARD_COLUMNS), dtype=np.int64),
        hazard_time=np.zeros((hazard_capacity, 2), dtype=np.float64),
    )
