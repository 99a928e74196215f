"""Replay a dumped device trace (alloc / free / launch / event / sync) on a fresh device.

Segment, OOM and memory events are outcomes, not inputs, so they are skipped; launches are
replayed with their bytes and flops but without their block accesses (those are not traced),
so a multi-stream trace replays the same stream ordering, not the same hazard checks.

Rows may come from a file, so `replay_trace` checks them in Python first (shape, integer
dtype, known event kinds) and turns the traced handles into dense indices; the jitted loop
only indexes what was checked, and the device functions refuse out-of-range streams, events,
placements, sizes and costs with a status (`DeviceError` naming the row).
"""

import numpy as np

from rtsoa._jit import jit_out_of_line
from rtsoa.device.layout import (
    EV_ALLOC,
    EV_DEVICE_SYNC,
    EV_EVENT_RECORD,
    EV_EVENT_SYNC,
    EV_FREE,
    EV_LAUNCH,
    EV_STREAM_SYNC,
    EV_STREAM_WAIT,
    EVENT_KIND_NAMES,
    NUM_TRACE_COLUMNS,
    TRACE_HANDLE,
    TRACE_KIND,
    TRACE_PLACEMENT,
    TRACE_REQUESTED,
    TRACE_SIZE,
    TRACE_STREAM,
)
from rtsoa.device.malloc import device_free, device_malloc
from rtsoa.device.streams import (
    device_synchronize,
    event_record,
    event_synchronize,
    launch_begin,
    stream_synchronize,
    stream_wait_event,
)
from rtsoa.errors import DeviceError


@jit_out_of_line
def replay_rows(dev, rows, block_index, handle_map):
    """Re-run `rows` on `dev`; returns (status, failing row or -1).

    `block_index[k]` is, for an alloc or free row, the index of its traced handle among the
    distinct handles of the trace (in 0 .. len(handle_map)); `handle_map` (int64, filled with
    -1) maps those to the new device's handles.
    """
    for k in range(rows.shape[0]):
        kind = rows[k, TRACE_KIND]
        stream = rows[k, TRACE_STREAM]
        status = 0
        if kind == EV_ALLOC:
            handle = device_malloc(dev, rows[k, TRACE_PLACEMENT], rows[k, TRACE_REQUESTED], stream)
            if handle < 0:
                return -handle, k
            handle_map[block_index[k]] = handle
        elif kind == EV_FREE:
            old = block_index[k]
            handle = handle_map[old]
            if handle < 0:
                continue  # allocated before the ring's window: nothing to free
            status = device_free(dev, handle, stream)
            handle_map[old] = -1
        elif kind == EV_LAUNCH:
            task = launch_begin(dev, stream, rows[k, TRACE_SIZE], rows[k, TRACE_REQUESTED])
            if task < 0:
                status = -task
        elif kind == EV_EVENT_RECORD:
            status = event_record(dev, rows[k, TRACE_HANDLE], stream)
        elif kind == EV_STREAM_WAIT:
            status = stream_wait_event(dev, stream, rows[k, TRACE_HANDLE])
        elif kind == EV_STREAM_SYNC:
            status = stream_synchronize(dev, stream)
        elif kind == EV_DEVICE_SYNC:
            status = device_synchronize(dev)
        elif kind == EV_EVENT_SYNC:
            status = event_synchronize(dev, rows[k, TRACE_HANDLE])
        if status != 0:
            return status, k
    return 0, -1


def check_rows(rows):
    """Trace rows as a C-contiguous int64 (n, NUM_TRACE_COLUMNS) array, or ValueError saying
    what is wrong (and at which row)."""
    array = np.asarray(rows)
    if array.ndim != 2 or array.shape[1] != NUM_TRACE_COLUMNS:
        raise ValueError(f"trace rows must have shape (n, {NUM_TRACE_COLUMNS}), got {array.shape}")
    if array.dtype == np.uint64 and array.size and int(array.max()) > np.iinfo(np.int64).max:
        raise ValueError("trace rows hold values above int64")
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"trace rows must be integers, got dtype {array.dtype}")
    array = np.ascontiguousarray(array, dtype=np.int64)
    unknown = ~np.isin(array[:, TRACE_KIND], list(EVENT_KIND_NAMES))
    if unknown.any():
        row = int(np.flatnonzero(unknown)[0])
        raise ValueError(f"trace row {row}: unknown event kind {int(array[row, TRACE_KIND])}")
    return array


def replay_trace(device, rows):
    """Replay trace rows (from `load_trace(path)["rows"]` or `trace_rows`) on `device`.

    Bad rows raise ValueError (shape, dtype, unknown kinds) before anything runs, or
    `DeviceError` naming the first row the device refused (stream, event, placement, size or
    cost out of range); rows before it have been replayed.
    """
    rows = check_rows(rows)
    kinds = rows[:, TRACE_KIND]
    memory = (kinds == EV_ALLOC) | (kinds == EV_FREE)
    block_index = np.full(rows.shape[0], -1, dtype=np.int64)
    handles, dense = np.unique(rows[memory, TRACE_HANDLE], return_inverse=True)
    block_index[memory] = dense.reshape(-1)
    handle_map = np.full(handles.shape[0], -1, dtype=np.int64)
    status, row = replay_rows(device.state, rows, block_index, handle_map)
    if status != 0:
        raise DeviceError(int(status), f"replay failed at trace row {int(row)}")
    return device
