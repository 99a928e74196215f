"""Replay a dumped device trace (alloc / free / launch / event / sync) on a fresh device.

Segment, OOM and memory events are outcomes, not inputs, so they are skipped; launches are
replayed with their bytes and flops but without their block accesses (those are not traced),
so a multi-stream trace replays the same stream ordering, not the same hazard checks.
"""

import numpy as np

from rtsoa._jit import jit_out_of_line
from rtsoa.device.allocator import device_free, device_malloc
from rtsoa.device.layout import (
    EV_ALLOC,
    EV_DEVICE_SYNC,
    EV_EVENT_RECORD,
    EV_EVENT_SYNC,
    EV_FREE,
    EV_LAUNCH,
    EV_STREAM_SYNC,
    EV_STREAM_WAIT,
    HANDLE_SLOT_MASK,
    TRACE_HANDLE,
    TRACE_KIND,
    TRACE_PLACEMENT,
    TRACE_REQUESTED,
    TRACE_SIZE,
    TRACE_STREAM,
)
from rtsoa.device.streams import (
    device_synchronize,
    event_record,
    event_synchronize,
    launch_begin,
    stream_synchronize,
    stream_wait_event,
)


@jit_out_of_line
def replay_rows(dev, rows, slot_map):
    """Re-run `rows` on `dev`; returns (status, failing row or -1).

    `slot_map` (int64, filled with -1, longer than any block slot in `rows`) maps the trace's
    block slots to the new device's handles.
    """
    for k in range(rows.shape[0]):
        kind = rows[k, TRACE_KIND]
        stream = rows[k, TRACE_STREAM]
        status = 0
        if kind == EV_ALLOC:
            handle = device_malloc(dev, rows[k, TRACE_PLACEMENT], rows[k, TRACE_REQUESTED], stream)
            if handle < 0:
                return -handle, k
            slot_map[rows[k, TRACE_HANDLE] & HANDLE_SLOT_MASK] = handle
        elif kind == EV_FREE:
            old = rows[k, TRACE_HANDLE] & HANDLE_SLOT_MASK
            handle = slot_map[old]
            if handle < 0:
                continue  # allocated before the ring's window: nothing to free
            status = device_free(dev, handle, stream)
            slot_map[old] = -1
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


def replay_trace(device, rows):
    """Replay trace rows (from `load_trace(path)["rows"]` or `trace_rows`) on `device`."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    slots = rows[:, TRACE_HANDLE] & HANDLE_SLOT_MASK
    memory = (rows[:, TRACE_KIND] == EV_ALLOC) | (rows[:, TRACE_KIND] == EV_FREE)
    size = int(slots[memory].max(initial=0)) + 1
    slot_map = np.full(size, -1, dtype=np.int64)
    status, row = replay_rows(device.state, rows, slot_map)
    if status != 0:
        from rtsoa.device.errors import DeviceError

        raise DeviceError(int(status), f"replay failed at trace row {int(row)}")
    return device
