"""Ring-buffer trace of allocator and stream events: append (njit), dump / load, Chrome trace.

Every alloc / free / segment / OOM / launch / event / sync is one 64-byte row of `dev.trace`
(packed, `status.RING_*`); `trace_rows` decodes it into `status.TRACE_*` columns plus the device
start / end times. The ring keeps the last
`capacity` events; `counters[CNT_TRACE_SEQ]` counts all of them, so a reader knows if it wrapped.
"""

import numpy as np

from rtsoa._jit import jit
from rtsoa.device.bits import float_bits
from rtsoa.device.status import (
    CFG_TRACE,
    CNT_TRACE_SEQ,
    EV_ALLOC,
    EV_DEVICE_SYNC,
    EV_EVENT_RECORD,
    EV_EVENT_SYNC,
    EV_FREE,
    EV_LAUNCH,
    EV_OOM,
    EV_SEGMENT_ALLOC,
    EV_SEGMENT_FREE,
    EV_STREAM_SYNC,
    EV_STREAM_WAIT,
    EVENT_KIND_NAMES,
    NUM_TRACE_COLUMNS,
    PLACEMENT_NAMES,
    RING_ALLOCATED_AFTER,
    RING_HANDLE,
    RING_KIND,
    RING_OFFSET,
    RING_REQUESTED,
    RING_RESERVED_AFTER,
    RING_SIZE,
    RING_START,
    STAT_ALLOCATED_BYTES,
    STAT_CURRENT,
    STAT_RESERVED_BYTES,
    TRACE_ALLOCATED_AFTER,
    TRACE_HANDLE,
    TRACE_KIND,
    TRACE_OFFSET,
    TRACE_PLACEMENT,
    TRACE_REQUESTED,
    TRACE_RESERVED_AFTER,
    TRACE_SIZE,
    TRACE_STREAM,
)

TRACE_FORMAT_VERSION = 1


@jit(_nrt=False, inline="always")
def trace_append(dev, kind, placement, handle, offset, size, requested, stream, start, end):
    """Write one event into the ring (overwrites the oldest once full); no-op if tracing is off.

    One 64-byte row per event (layout `status.RING_*`); `trace_rows` decodes it.
    """
    if dev.config[CFG_TRACE] == 0:
        return
    seq = dev.counters[CNT_TRACE_SEQ]
    dev.counters[CNT_TRACE_SEQ] = seq + 1
    row = seq & (dev.trace.shape[0] - 1)
    trace = dev.trace
    trace[row, RING_KIND] = kind | ((placement + 1) << 8) | ((stream + 1) << 16)
    trace[row, RING_HANDLE] = handle
    trace[row, RING_OFFSET] = offset
    trace[row, RING_SIZE] = size
    trace[row, RING_REQUESTED] = requested
    if placement >= 0:
        stats = dev.stats
        trace[row, RING_ALLOCATED_AFTER] = stats[placement, STAT_ALLOCATED_BYTES + STAT_CURRENT]
        trace[row, RING_RESERVED_AFTER] = stats[placement, STAT_RESERVED_BYTES + STAT_CURRENT]
    else:
        trace[row, RING_ALLOCATED_AFTER] = float_bits(end)
        trace[row, RING_RESERVED_AFTER] = 0
    trace[row, RING_START] = float_bits(start)


def decode_ring(raw):
    """Ring rows (`status.RING_*`) -> (int64 rows in the `status.TRACE_*` layout, times)."""
    count = raw.shape[0]
    rows = np.zeros((count, NUM_TRACE_COLUMNS), dtype=np.int64)
    word = raw[:, RING_KIND]
    placement = ((word >> 8) & 0xFF) - 1
    rows[:, TRACE_KIND] = word & 0xFF
    rows[:, TRACE_PLACEMENT] = placement
    rows[:, TRACE_STREAM] = ((word >> 16) & 0xFFFF) - 1
    rows[:, TRACE_HANDLE] = raw[:, RING_HANDLE]
    rows[:, TRACE_OFFSET] = raw[:, RING_OFFSET]
    rows[:, TRACE_SIZE] = raw[:, RING_SIZE]
    rows[:, TRACE_REQUESTED] = raw[:, RING_REQUESTED]
    memory = placement >= 0
    rows[:, TRACE_ALLOCATED_AFTER] = np.where(memory, raw[:, RING_ALLOCATED_AFTER], 0)
    rows[:, TRACE_RESERVED_AFTER] = raw[:, RING_RESERVED_AFTER]
    times = np.empty((count, 2), dtype=np.float64)
    times[:, 0] = raw[:, RING_START].view(np.float64)
    end_bits = np.where(memory, raw[:, RING_START], raw[:, RING_ALLOCATED_AFTER])
    times[:, 1] = end_bits.view(np.float64)
    return rows, times


def trace_rows(dev):
    """The ring's events in order, oldest first: (int64 rows, float64 times, first sequence)."""
    total = int(dev.counters[CNT_TRACE_SEQ])
    capacity = dev.trace.shape[0]
    if total <= capacity:
        rows, times = decode_ring(dev.trace[:total])
        return rows, times, 0
    start = total % capacity
    order = np.concatenate([np.arange(start, capacity), np.arange(0, start)])
    rows, times = decode_ring(dev.trace[order])
    return rows, times, total - capacity


def dump_trace(dev, path):
    """Write the ring's events to `path` (.npz) for later replay or inspection."""
    rows, times, first = trace_rows(dev)
    np.savez_compressed(
        path,
        version=np.int64(TRACE_FORMAT_VERSION),
        rows=rows,
        times=times,
        first_sequence=np.int64(first),
        config=dev.config,
        placement_config=dev.placement_config,
        cost=dev.cost,
    )


def load_trace(path):
    """Read a trace written by `dump_trace`; returns a dict of arrays."""
    with np.load(path) as data:
        if int(data["version"]) != TRACE_FORMAT_VERSION:
            raise ValueError(f"{path}: trace format version {int(data['version'])} unsupported")
        loaded = {key: data[key] for key in data.files}
    if loaded["rows"].ndim != 2 or loaded["rows"].shape[1] != NUM_TRACE_COLUMNS:
        raise ValueError(f"{path}: trace rows must have shape (n, {NUM_TRACE_COLUMNS})")
    return loaded


def trace_records(rows, times):
    """Events as a list of dicts (for humans and tests)."""
    records = []
    for row, time in zip(rows, times, strict=True):
        kind = int(row[TRACE_KIND])
        placement = int(row[TRACE_PLACEMENT])
        records.append(
            {
                "kind": EVENT_KIND_NAMES.get(kind, str(kind)),
                "placement": PLACEMENT_NAMES[placement] if placement >= 0 else None,
                "handle": int(row[TRACE_HANDLE]),
                "offset": int(row[TRACE_OFFSET]),
                "size": int(row[TRACE_SIZE]),
                "requested": int(row[TRACE_REQUESTED]),
                "stream": int(row[TRACE_STREAM]),
                "allocated_after": int(row[TRACE_ALLOCATED_AFTER]),
                "reserved_after": int(row[TRACE_RESERVED_AFTER]),
                "start_ns": float(time[0]),
                "end_ns": float(time[1]),
            }
        )
    return records


_INSTANT_KINDS = {
    EV_EVENT_RECORD: "record event",
    EV_STREAM_WAIT: "wait event",
    EV_STREAM_SYNC: "stream synchronize",
    EV_DEVICE_SYNC: "device synchronize",
    EV_EVENT_SYNC: "event synchronize",
    EV_OOM: "out of memory",
    EV_SEGMENT_ALLOC: "segment alloc",
    EV_SEGMENT_FREE: "segment free",
}


def chrome_trace_events(dev, pid="device", name_of_task=None):
    """Chrome-trace event dicts for the device timeline, one thread per stream.

    Launches are complete ("X") events on their stream's track; event records / waits / syncs
    and OOMs are instants; allocated / reserved bytes per placement are counter ("C") tracks.
    Times are device nanoseconds converted to the format's microseconds. `name_of_task` may map
    a task id to a kernel name. Merge the list into any other Chrome trace.
    """
    rows, times, _ = trace_rows(dev)
    events = []
    streams_seen = set()
    for row, time in zip(rows, times, strict=True):
        kind = int(row[TRACE_KIND])
        stream = int(row[TRACE_STREAM])
        start_us = float(time[0]) / 1000.0
        if stream >= 0:
            streams_seen.add(stream)
        if kind == EV_LAUNCH:
            task = int(row[TRACE_HANDLE])
            name = name_of_task(task) if name_of_task else f"task {task}"
            events.append(
                {
                    "name": name,
                    "ph": "X",
                    "pid": pid,
                    "tid": f"stream {stream}",
                    "ts": start_us,
                    "dur": (float(time[1]) - float(time[0])) / 1000.0,
                    "args": {
                        "task": task,
                        "bytes": int(row[TRACE_SIZE]),
                        "flops": int(row[TRACE_REQUESTED]),
                    },
                }
            )
        elif kind in (EV_ALLOC, EV_FREE):
            placement = PLACEMENT_NAMES[int(row[TRACE_PLACEMENT])]
            events.append(
                {
                    "name": f"memory {placement}",
                    "ph": "C",
                    "pid": pid,
                    "ts": start_us,
                    "args": {
                        "allocated": int(row[TRACE_ALLOCATED_AFTER]),
                        "reserved": int(row[TRACE_RESERVED_AFTER]),
                    },
                }
            )
        elif kind in _INSTANT_KINDS:
            events.append(
                {
                    "name": _INSTANT_KINDS[kind],
                    "ph": "i",
                    "s": "t",
                    "pid": pid,
                    "tid": f"stream {max(stream, 0)}",
                    "ts": start_us,
                    "args": {"id": int(row[TRACE_HANDLE])},
                }
            )
    for stream in sorted(streams_seen):
        events.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": pid,
                "tid": f"stream {stream}",
                "args": {"name": f"stream {stream}"},
            }
        )
    return events


__all__ = [
    "chrome_trace_events",
    "dump_trace",
    "load_trace",
    "trace_append",
    "trace_records",
    "trace_rows",
]
