"""Statistics and snapshots of the simulated device, read from its arrays in Python.

`device_stats` reports what the jitted code tracks; `snapshot` lists segments and their blocks
(address order); `stats_from_snapshot` recomputes the current statistics from a snapshot alone,
which is how the tests cross-check the tracked counters.
"""

import numpy as np

from rtsoa.device.layout import (
    BLK_GENERATION,
    BLK_NEXT,
    BLK_OFFSET,
    BLK_PLACEMENT,
    BLK_REQUESTED,
    BLK_SEGMENT,
    BLK_SIZE,
    BLK_STATE,
    BLK_STREAM,
    BLOCK_ALLOCATED,
    BLOCK_QUICK,
    BLOCK_UNUSED,
    CNT_ALLOC_RETRIES,
    CNT_ALLOCATOR_WAITS,
    CNT_CACHE_FLUSHES,
    CNT_DEVICE_SYNCS,
    CNT_EVENT_RECORDS,
    CNT_EVENT_SYNCS,
    CNT_GROWTH_RELEASES,
    CNT_HAZARDS,
    CNT_LAUNCHES,
    CNT_LEAKED_BLOCKS,
    CNT_OOMS,
    CNT_QUICK_FLUSHES,
    CNT_STREAM_SYNCS,
    CNT_STREAM_WAITS,
    CNT_SUBMISSION_WAITS,
    CNT_TRACE_SEQ,
    HANDLE_GEN_SHIFT,
    NUM_PLACEMENTS,
    PLACEMENT_NAMES,
    SEG_FIRST_BLOCK,
    SEG_OFFSET,
    SEG_PLACEMENT,
    SEG_POOL,
    SEG_SIZE,
    STAT_CURRENT,
    STAT_GROUPS,
    STAT_PEAK,
    STAT_TOTAL,
)

_COUNTER_NAMES = {
    "num_alloc_retries": CNT_ALLOC_RETRIES,
    "num_ooms": CNT_OOMS,
    "num_submission_waits": CNT_SUBMISSION_WAITS,
    "num_stream_syncs": CNT_STREAM_SYNCS,
    "num_device_syncs": CNT_DEVICE_SYNCS,
    "num_event_syncs": CNT_EVENT_SYNCS,
    "num_cache_flushes": CNT_CACHE_FLUSHES,
    "num_growth_releases": CNT_GROWTH_RELEASES,
    "num_quick_flushes": CNT_QUICK_FLUSHES,
    "num_launches": CNT_LAUNCHES,
    "num_event_records": CNT_EVENT_RECORDS,
    "num_stream_waits": CNT_STREAM_WAITS,
    "num_allocator_waits": CNT_ALLOCATOR_WAITS,
    "num_hazards": CNT_HAZARDS,
    "num_leaked_blocks": CNT_LEAKED_BLOCKS,
    "num_trace_events": CNT_TRACE_SEQ,
}


def placement_stats(dev, placement):
    """Tracked statistics of one arena: `<group>.<current|peak|allocated|freed>` keys.

    Groups: allocated_bytes (rounded block sizes), requested_bytes, allocation (count),
    reserved_bytes (segments), segment (count). Active bytes equal allocated bytes in this
    device: frees are never deferred (stream ordering is enforced when a block is reused).
    """
    row = dev.stats[placement]
    result = {}
    for name, base in STAT_GROUPS.items():
        result[f"{name}.current"] = int(row[base + STAT_CURRENT])
        result[f"{name}.peak"] = int(row[base + STAT_PEAK])
        result[f"{name}.allocated"] = int(row[base + STAT_TOTAL])
        # derived, so a free updates one column: freed = allocated - current
        result[f"{name}.freed"] = int(row[base + STAT_TOTAL] - row[base + STAT_CURRENT])
    for suffix in ("current", "peak", "allocated", "freed"):
        result[f"active_bytes.{suffix}"] = result[f"allocated_bytes.{suffix}"]
    return result


def device_stats(dev):
    """All statistics: per placement (hbm / p2p / host), device-wide counters and clocks."""
    result = {PLACEMENT_NAMES[p]: placement_stats(dev, p) for p in range(NUM_PLACEMENTS)}
    for name, index in _COUNTER_NAMES.items():
        result[name] = int(dev.counters[index])
    result["host_time_ns"] = float(dev.host_clock[0])
    result["device_time_ns"] = float(max(dev.stream_clock.max(), dev.host_clock[0]))
    return result


def snapshot_arrays(dev):
    """Live blocks and segments as numpy columns (vectorised; cheap enough to call per step)."""
    blocks = dev.blocks
    segments = dev.segments
    live = np.flatnonzero(blocks[:, BLK_STATE] != BLOCK_UNUSED)
    used = np.flatnonzero(segments[:, SEG_PLACEMENT] >= 0)
    block_segment = blocks[live, BLK_SEGMENT]
    state = blocks[live, BLK_STATE]
    return {
        "block": live,
        "block_offset": blocks[live, BLK_OFFSET],
        "block_size": blocks[live, BLK_SIZE],
        # the jitted code leaves a free block's BLK_REQUESTED stale (one store less per free)
        "block_requested": np.where(state == BLOCK_ALLOCATED, blocks[live, BLK_REQUESTED], 0),
        "block_state": state,
        "block_segment": block_segment,
        "block_placement": segments[block_segment, SEG_PLACEMENT],
        "segment": used,
        "segment_offset": segments[used, SEG_OFFSET],
        "segment_size": segments[used, SEG_SIZE],
        "segment_placement": segments[used, SEG_PLACEMENT],
        "segment_pool": segments[used, SEG_POOL],
    }


def stats_from_snapshot(arrays, placement):
    """Current statistics of one placement recomputed from `snapshot_arrays` alone."""
    in_placement = arrays["block_placement"] == placement
    allocated = in_placement & (arrays["block_state"] == BLOCK_ALLOCATED)
    segments = arrays["segment_placement"] == placement
    return {
        "allocated_bytes.current": int(arrays["block_size"][allocated].sum()),
        "requested_bytes.current": int(arrays["block_requested"][allocated].sum()),
        "allocation.current": int(allocated.sum()),
        "reserved_bytes.current": int(arrays["segment_size"][segments].sum()),
        "segment.current": int(segments.sum()),
    }


def snapshot(dev):
    """Segments in address order, each with its blocks in address order (like memory_snapshot).

    Walks the neighbour links, so it also proves the links tile each segment.
    """
    blocks = dev.blocks
    segments = dev.segments
    result = []
    for segment in np.argsort(segments[:, SEG_OFFSET], kind="stable"):
        placement = int(segments[segment, SEG_PLACEMENT])
        if placement < 0:
            continue
        found = []
        slot = int(segments[segment, SEG_FIRST_BLOCK])
        while slot >= 0:
            row = blocks[slot]
            allocated = int(row[BLK_STATE]) == BLOCK_ALLOCATED
            quick = int(row[BLK_STATE]) == BLOCK_QUICK
            found.append(
                {
                    "slot": slot,
                    "offset": int(row[BLK_OFFSET]),
                    "size": int(row[BLK_SIZE]),
                    "requested": int(row[BLK_REQUESTED]) if allocated else 0,
                    "state": "allocated" if allocated else "free",
                    "quick": quick,  # free, parked unmerged in a quick list
                    "stream": int(row[BLK_STREAM]),
                    "handle": (int(row[BLK_GENERATION]) << HANDLE_GEN_SHIFT) | slot
                    if allocated
                    else None,
                }
            )
            slot = int(row[BLK_NEXT])
        result.append(
            {
                "segment": int(segment),
                "placement": PLACEMENT_NAMES[placement],
                "pool": "small" if segments[segment, SEG_POOL] == 0 else "large",
                "offset": int(segments[segment, SEG_OFFSET]),
                "size": int(segments[segment, SEG_SIZE]),
                "allocated_size": sum(b["size"] for b in found if b["state"] == "allocated"),
                "blocks": found,
            }
        )
    return result


def free_memory_summary(dev, placement):
    """(largest free block or arena range, total free bytes, fragmentation in [0, 1]).

    Free bytes are cached free blocks plus arena bytes not yet reserved; fragmentation is
    1 - largest / total (0 when all free memory is one piece).
    """
    blocks = dev.blocks
    state = blocks[:, BLK_STATE]
    free = (state != BLOCK_UNUSED) & (state != BLOCK_ALLOCATED)  # listed or parked in quick lists
    free_blocks = free & (blocks[:, BLK_PLACEMENT] == placement)
    sizes = blocks[free_blocks, BLK_SIZE]
    ranges = dev.range_size[placement, : dev.range_count[placement]]
    largest = int(max(sizes.max(initial=0), ranges.max(initial=0)))
    total = int(sizes.sum() + ranges.sum())
    fragmentation = 0.0 if total == 0 else 1.0 - largest / total
    return largest, total, fragmentation
