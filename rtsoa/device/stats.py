"""Statistics and snapshots of the simulated device, read from its arrays in Python.

`device_stats` reports what the jitted code tracks; `snapshot` lists segments and their blocks
(address order); `stats_from_snapshot` recomputes the current statistics from a snapshot alone,
which is how the tests cross-check the tracked counters.
"""

import numpy as np

from rtsoa.device.status import (
    BLOCK_ALLOCATED,
    BLOCK_FREE,
    CNT_ALLOC_RETRIES,
    CNT_CACHE_FLUSHES,
    CNT_DEVICE_SYNCS,
    CNT_EVENT_RECORDS,
    CNT_EVENT_SYNCS,
    CNT_HAZARDS,
    CNT_LAUNCHES,
    CNT_OOMS,
    CNT_STREAM_SYNCS,
    CNT_STREAM_WAITS,
    CNT_SUBMISSION_WAITS,
    CNT_TRACE_SEQ,
    NUM_PLACEMENTS,
    PLACEMENT_NAMES,
    STAT_CURRENT,
    STAT_FREED,
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
    "num_launches": CNT_LAUNCHES,
    "num_event_records": CNT_EVENT_RECORDS,
    "num_stream_waits": CNT_STREAM_WAITS,
    "num_hazards": CNT_HAZARDS,
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
        result[f"{name}.freed"] = int(row[base + STAT_FREED])
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
    live = np.flatnonzero(dev.block_state != 0)
    segments = np.flatnonzero(dev.segment_placement >= 0)
    block_segment = dev.block_segment[live]
    return {
        "block": live,
        "block_offset": dev.block_offset[live],
        "block_size": dev.block_size[live],
        "block_requested": dev.block_requested[live],
        "block_state": dev.block_state[live],
        "block_segment": block_segment,
        "block_placement": dev.segment_placement[block_segment],
        "segment": segments,
        "segment_offset": dev.segment_offset[segments],
        "segment_size": dev.segment_size[segments],
        "segment_placement": dev.segment_placement[segments],
        "segment_pool": dev.segment_pool[segments],
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
    result = []
    order = np.argsort(dev.segment_offset, kind="stable")
    for segment in order:
        placement = int(dev.segment_placement[segment])
        if placement < 0:
            continue
        blocks = []
        slot = int(dev.segment_first_block[segment])
        while slot >= 0:
            state = int(dev.block_state[slot])
            blocks.append(
                {
                    "slot": slot,
                    "offset": int(dev.block_offset[slot]),
                    "size": int(dev.block_size[slot]),
                    "requested": int(dev.block_requested[slot]),
                    "state": "allocated" if state == BLOCK_ALLOCATED else "free",
                    "stream": int(dev.block_stream[slot]),
                    "handle": (int(dev.block_generation[slot]) << 32) | slot
                    if state == BLOCK_ALLOCATED
                    else None,
                }
            )
            slot = int(dev.block_next[slot])
        result.append(
            {
                "segment": int(segment),
                "placement": PLACEMENT_NAMES[placement],
                "pool": "small" if dev.segment_pool[segment] == 0 else "large",
                "offset": int(dev.segment_offset[segment]),
                "size": int(dev.segment_size[segment]),
                "allocated_size": sum(b["size"] for b in blocks if b["state"] == "allocated"),
                "blocks": blocks,
            }
        )
    return result


def free_memory_summary(dev, placement):
    """(largest free block or arena range, total free bytes, fragmentation in [0, 1]).

    Free bytes are cached free blocks plus arena bytes not yet reserved; fragmentation is
    1 - largest / total (0 when all free memory is one piece).
    """
    free_blocks = (dev.block_state == BLOCK_FREE) & (
        dev.segment_placement[np.maximum(dev.block_segment, 0)] == placement
    )
    sizes = dev.block_size[free_blocks]
    ranges = dev.range_size[placement, : dev.range_count[placement]]
    largest = int(max(sizes.max(initial=0), ranges.max(initial=0)))
    total = int(sizes.sum() + ranges.sum())
    fragmentation = 0.0 if total == 0 else 1.0 - largest / total
    return largest, total, fragmentation
