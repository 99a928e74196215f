"""Ring-buffer trace of allocator and stream events: append (njit), dump / load, Chrome trace.

Every alloc / free / segment / OOM / launch / event / sync is one 32-byte row of `dev.trace`
(packed, `layout.RING_*`; values that do not fit go exactly into the same row of
`dev.trace_extra`); `trace_rows` decodes the ring into `layout.TRACE_*` columns plus the device
start / end times. The ring keeps the last `capacity` events; `counters[CNT_TRACE_SEQ]` counts
all of them, so a reader knows if it wrapped.

Allocated / reserved bytes after each event are not written by the hot path: they change only
at traced events (alloc / free, segment alloc / free), so `trace_rows` derives them exactly,
walking back from the current statistics. That needs the trace switch (`CFG_TRACE`) fixed for
the device's life, as `Device(trace=...)` sets it.
"""

import numpy as np

from rtsoa._jit import jit_inline_llvm
from rtsoa.device.bits import float_bits
from rtsoa.device.layout import (
    CFG_TRACE,
    CNT_TRACE_SEQ,
    EV_ALLOC,
    EV_ALLOCATOR_WAIT,
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
    EXTRA_END,
    EXTRA_OFFSET,
    EXTRA_REQUESTED,
    EXTRA_SIZE,
    NUM_PLACEMENTS,
    NUM_TRACE_COLUMNS,
    PLACEMENT_NAMES,
    RING_EXTENDED,
    RING_HANDLE,
    RING_HEADER,
    RING_OFFSET_LIMIT_BITS,
    RING_OFFSET_SHIFT,
    RING_SIZE_LIMIT_BITS,
    RING_SIZES,
    RING_STREAM_SHIFT,
    RING_TIME,
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

TRACE_FORMAT_VERSION = 1  # of the decoded rows `dump_trace` writes (unchanged by the ring)


@jit_inline_llvm  # typed once, not at each call site (Numba-IR inlining)
def trace_append(dev, kind, placement, handle, offset, size, requested, stream, start, end):
    """Write one event into the ring (overwrites the oldest once full); no-op if tracing is off.

    One 32-byte row per event (layout `layout.RING_*`); an event whose values do not fit the
    packed row (see `layout.RING_OFFSET_LIMIT_BITS`) also writes its row of `dev.trace_extra`.
    """
    if dev.config[CFG_TRACE] == 0:
        return
    seq = dev.counters[CNT_TRACE_SEQ]
    dev.counters[CNT_TRACE_SEQ] = seq + 1
    # capacity is a power of two; an unsigned row needs no negative-index wraparound code
    row = np.uint64(seq) & np.uint64(dev.trace.shape[0] - 1)
    trace = dev.trace
    start_bits = float_bits(start)
    end_bits = float_bits(end)
    header = kind | ((placement + 1) << 8) | ((stream + 1) << RING_STREAM_SHIFT)
    trace[row, RING_TIME] = start_bits
    trace[row, RING_HANDLE] = handle
    # negative values fail the check too (arithmetic shifts keep the sign)
    fits = ((offset >> RING_OFFSET_LIMIT_BITS) | ((size | requested) >> RING_SIZE_LIMIT_BITS)) == 0
    if fits and start_bits == end_bits:
        trace[row, RING_HEADER] = header | (offset << RING_OFFSET_SHIFT)
        trace[row, RING_SIZES] = size | (requested << RING_SIZE_LIMIT_BITS)
    else:
        trace[row, RING_HEADER] = header | RING_EXTENDED
        trace[row, RING_SIZES] = 0
        extra = dev.trace_extra
        extra[row, EXTRA_OFFSET] = offset
        extra[row, EXTRA_SIZE] = size
        extra[row, EXTRA_REQUESTED] = requested
        extra[row, EXTRA_END] = end_bits


_SIZE_MASK = (1 << RING_SIZE_LIMIT_BITS) - 1


def decode_ring(raw, extra, allocated_now, reserved_now):
    """Ring rows (`layout.RING_*`) and their `trace_extra` rows, oldest first, -> (int64 rows in
    the `layout.TRACE_*` layout, float64 (start, end) times).

    `allocated_now` / `reserved_now` (per placement) are the statistics after the newest row;
    the bytes after each older event are derived backwards from them.
    """
    count = raw.shape[0]
    rows = np.zeros((count, NUM_TRACE_COLUMNS), dtype=np.int64)
    header = raw[:, RING_HEADER]
    kind = header & 0xFF
    placement = ((header >> 8) & 0xF) - 1
    rows[:, TRACE_KIND] = kind
    rows[:, TRACE_PLACEMENT] = placement
    rows[:, TRACE_STREAM] = ((header >> RING_STREAM_SHIFT) & 0xFF) - 1
    rows[:, TRACE_HANDLE] = raw[:, RING_HANDLE]
    extended = (header & RING_EXTENDED) != 0
    packed_offset = (header.view(np.uint64) >> np.uint64(RING_OFFSET_SHIFT)).astype(np.int64)
    sizes = raw[:, RING_SIZES]
    rows[:, TRACE_OFFSET] = np.where(extended, extra[:, EXTRA_OFFSET], packed_offset)
    rows[:, TRACE_SIZE] = np.where(extended, extra[:, EXTRA_SIZE], sizes & _SIZE_MASK)
    requested = (sizes >> RING_SIZE_LIMIT_BITS) & _SIZE_MASK
    rows[:, TRACE_REQUESTED] = np.where(extended, extra[:, EXTRA_REQUESTED], requested)
    times = np.empty((count, 2), dtype=np.float64)
    times[:, 0] = raw[:, RING_TIME].view(np.float64)
    end_bits = np.where(extended, extra[:, EXTRA_END], raw[:, RING_TIME])
    times[:, 1] = end_bits.view(np.float64)
    size = rows[:, TRACE_SIZE]
    allocated_delta = np.where(kind == EV_ALLOC, size, np.where(kind == EV_FREE, -size, 0))
    reserved_delta = np.where(
        kind == EV_SEGMENT_ALLOC, size, np.where(kind == EV_SEGMENT_FREE, -size, 0)
    )
    for index in range(NUM_PLACEMENTS):
        mine = placement == index
        for column, delta, now in (
            (TRACE_ALLOCATED_AFTER, allocated_delta, allocated_now[index]),
            (TRACE_RESERVED_AFTER, reserved_delta, reserved_now[index]),
        ):
            delta = np.where(mine, delta, 0)
            later = delta.sum() - np.cumsum(delta)  # change made by the events after each row
            rows[mine, column] = (now - later)[mine]
    return rows, times


def trace_rows(dev):
    """The ring's events in order, oldest first: (int64 rows, float64 times, first sequence)."""
    total = int(dev.counters[CNT_TRACE_SEQ])
    capacity = dev.trace.shape[0]
    allocated_now = dev.stats[:, STAT_ALLOCATED_BYTES + STAT_CURRENT]
    reserved_now = dev.stats[:, STAT_RESERVED_BYTES + STAT_CURRENT]
    if total <= capacity:
        order = np.arange(total)
        first = 0
    else:
        start = total % capacity
        order = np.concatenate([np.arange(start, capacity), np.arange(0, start)])
        first = total - capacity
    rows, times = decode_ring(dev.trace[order], dev.trace_extra[order], allocated_now, reserved_now)
    return rows, times, first


def dump_trace(dev, path, settings=None):
    """Write the ring's events to `path` (.npz) for later replay or inspection. `settings` (a
    JSON string, see `Device.dump_trace`) lets `Device.from_trace` rebuild the same device."""
    rows, times, first = trace_rows(dev)
    extra = {} if settings is None else {"settings": np.array(settings)}
    np.savez_compressed(
        path,
        version=np.int64(TRACE_FORMAT_VERSION),
        rows=rows,
        times=times,
        first_sequence=np.int64(first),
        config=dev.config,
        placement_config=dev.placement_config,
        cost=dev.cost,
        **extra,
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
        elif kind == EV_ALLOCATOR_WAIT:  # the stall the allocator's inserted wait caused
            other = int(row[TRACE_HANDLE])
            events.append(
                {
                    "name": f"allocator wait for stream {other}",
                    "ph": "X",
                    "pid": pid,
                    "tid": f"stream {stream}",
                    "ts": start_us,
                    "dur": (float(time[1]) - float(time[0])) / 1000.0,
                    "args": {"stream": other, "placement": int(row[TRACE_PLACEMENT])},
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
