"""Streams and events on a simulated device clock (nanoseconds), with vector clocks.

Timing rules (all in device ns; the host issues work at zero cost, so the host clock only moves
at synchronisations):
  * a launch on stream s starts at max(stream clock of s, host clock) and ends at start + cost
    (see `cost.py`); waited events have already been folded into the stream clock;
  * `event_record(e, s)` stamps e with s's clock (plus the record cost, 0 by default) and s's
    vector clock;
  * `stream_wait_event(s, e)` moves s's clock to at least e's time and joins e's vector clock
    (waiting on a never-recorded event is a no-op, as on real devices);
  * `stream_synchronize(s)` / `event_synchronize(e)` / `device_synchronize()` move the host clock
    to the stream's / event's / latest stream's time; work issued afterwards on any stream is
    ordered after it (its vector clock joins the host's);
  * `event_query(e)` is STATUS_OK when e's time <= host clock, else STATUS_NOT_READY.
Stream 0 is the default stream. Priorities are stored and reported; streams are modelled as
fully concurrent (no contention for compute), so a priority does not change simulated times.
The data effect of a kernel happens when it is issued; only timing is simulated.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_inline_llvm, jit_out_of_line
from rtsoa.abi.status import (
    STATUS_INVALID_COST,
    STATUS_INVALID_EVENT,
    STATUS_INVALID_STREAM,
    STATUS_NOT_READY,
    STATUS_OK,
)
from rtsoa.device.hazards import device_access
from rtsoa.device.layout import (
    CFG_NUM_EVENTS,
    CFG_NUM_STREAMS,
    CNT_DEVICE_SYNCS,
    CNT_EVENT_RECORDS,
    CNT_EVENT_SYNCS,
    CNT_LAUNCHES,
    CNT_STREAM_SYNCS,
    CNT_STREAM_WAITS,
    CNT_TASKS,
    COST_BYTES_PER_NS,
    COST_EVENT_RECORD_NS,
    COST_FLOPS_PER_NS,
    COST_LAUNCH_LATENCY_NS,
    EV_DEVICE_SYNC,
    EV_EVENT_RECORD,
    EV_EVENT_SYNC,
    EV_LAUNCH,
    EV_STREAM_SYNC,
    EV_STREAM_WAIT,
)
from rtsoa.device.trace import trace_append

DEFAULT_STREAM = 0


@jit_inline_ir
def _valid_stream(dev, stream):
    return 0 <= stream < dev.config[CFG_NUM_STREAMS]


@jit_inline_ir
def _valid_event(dev, event):
    return 0 <= event < dev.config[CFG_NUM_EVENTS]


@jit_inline_ir
def launch_cost_ns(dev, bytes_moved, flops):
    """Duration of a launch: latency + bytes / bandwidth + flops / peak."""
    return (
        dev.cost[COST_LAUNCH_LATENCY_NS]
        + bytes_moved / dev.cost[COST_BYTES_PER_NS]
        + flops / dev.cost[COST_FLOPS_PER_NS]
    )


@jit_inline_llvm  # per launch: a real call would copy `dev` (34 arrays)
def launch_begin(dev, stream, bytes_moved, flops):
    """Issue a task on `stream`; returns its task id (or the negated status).

    Negative bytes or flops (which would move the clock backwards), or a cost whose end time
    is not finite, are refused with STATUS_INVALID_COST and change nothing."""
    if not _valid_stream(dev, stream):
        return -STATUS_INVALID_STREAM
    if bytes_moved < 0 or flops < 0:
        return -STATUS_INVALID_COST
    start = max(dev.stream_clock[stream], dev.host_clock[0])
    end = start + launch_cost_ns(dev, bytes_moved, flops)
    if not end < np.inf:
        return -STATUS_INVALID_COST
    dev.stream_clock[stream] = end
    dev.stream_vc[stream, stream] += 1
    task = dev.counters[CNT_TASKS]
    dev.counters[CNT_TASKS] = task + 1
    dev.counters[CNT_LAUNCHES] += 1
    dev.stream_last_task[stream] = task
    trace_append(dev, EV_LAUNCH, -1, task, 0, bytes_moved, flops, stream, start, end)
    return task


@jit_out_of_line
def device_launch(dev, stream, bytes_moved, flops, read_blocks, write_blocks):
    """Launch a kernel on `stream` that reads / writes the given block handles.

    Advances the stream clock by the cost model and runs the hazard checker on every declared
    block. `bytes_moved` and `flops` are int64; the block arrays are int64 handles (may be
    empty). Returns a status code.
    """
    task = launch_begin(dev, stream, bytes_moved, flops)
    if task < 0:
        return np.int32(-task)
    for k in range(read_blocks.shape[0]):
        status = device_access(dev, stream, read_blocks[k], False)
        if status != STATUS_OK:
            return np.int32(status)
    for k in range(write_blocks.shape[0]):
        status = device_access(dev, stream, write_blocks[k], True)
        if status != STATUS_OK:
            return np.int32(status)
    return np.int32(STATUS_OK)


@jit_inline_llvm  # per launch: a real call would copy `dev` (34 arrays)
def event_record(dev, event, stream):
    """Record `event` at the current position of `stream`."""
    if not _valid_stream(dev, stream):
        return np.int32(STATUS_INVALID_STREAM)
    if not _valid_event(dev, event):
        return np.int32(STATUS_INVALID_EVENT)
    time = max(dev.stream_clock[stream], dev.host_clock[0]) + dev.cost[COST_EVENT_RECORD_NS]
    if not time < np.inf:
        return np.int32(STATUS_INVALID_COST)
    dev.stream_clock[stream] = time
    dev.event_time[event] = time
    dev.event_stream[event] = stream
    for other in range(dev.config[CFG_NUM_STREAMS]):
        dev.event_vc[event, other] = dev.stream_vc[stream, other]
    dev.counters[CNT_EVENT_RECORDS] += 1
    trace_append(dev, EV_EVENT_RECORD, -1, event, 0, 0, 0, stream, time, time)
    return np.int32(STATUS_OK)


@jit_inline_llvm  # per launch: a real call would copy `dev` (34 arrays)
def stream_wait_event(dev, stream, event):
    """Make later work on `stream` wait for `event` (device side, the host does not block)."""
    if not _valid_stream(dev, stream):
        return np.int32(STATUS_INVALID_STREAM)
    if not _valid_event(dev, event):
        return np.int32(STATUS_INVALID_EVENT)
    if dev.event_time[event] < 0.0:
        return np.int32(STATUS_OK)
    time = max(dev.stream_clock[stream], dev.event_time[event])
    dev.stream_clock[stream] = time
    for other in range(dev.config[CFG_NUM_STREAMS]):
        dev.stream_vc[stream, other] = max(dev.stream_vc[stream, other], dev.event_vc[event, other])
    dev.counters[CNT_STREAM_WAITS] += 1
    trace_append(dev, EV_STREAM_WAIT, -1, event, 0, 0, 0, stream, time, time)
    return np.int32(STATUS_OK)


@jit_out_of_line
def _host_learns(dev):
    """Work issued after a host synchronisation is ordered after what the host has seen."""
    streams = dev.config[CFG_NUM_STREAMS]
    for stream in range(streams):
        for other in range(streams):
            dev.stream_vc[stream, other] = max(dev.stream_vc[stream, other], dev.host_vc[other])


@jit_out_of_line
def stream_synchronize(dev, stream):
    """Block the host until `stream` has finished: host clock >= stream clock."""
    if not _valid_stream(dev, stream):
        return np.int32(STATUS_INVALID_STREAM)
    dev.host_clock[0] = max(dev.host_clock[0], dev.stream_clock[stream])
    for other in range(dev.config[CFG_NUM_STREAMS]):
        dev.host_vc[other] = max(dev.host_vc[other], dev.stream_vc[stream, other])
    _host_learns(dev)
    dev.counters[CNT_STREAM_SYNCS] += 1
    time = dev.host_clock[0]
    trace_append(dev, EV_STREAM_SYNC, -1, stream, 0, 0, 0, stream, time, time)
    return np.int32(STATUS_OK)


@jit_out_of_line
def device_synchronize(dev):
    """Block the host until every stream has finished."""
    streams = dev.config[CFG_NUM_STREAMS]
    for stream in range(streams):
        dev.host_clock[0] = max(dev.host_clock[0], dev.stream_clock[stream])
        for other in range(streams):
            dev.host_vc[other] = max(dev.host_vc[other], dev.stream_vc[stream, other])
    _host_learns(dev)
    dev.counters[CNT_DEVICE_SYNCS] += 1
    time = dev.host_clock[0]
    trace_append(dev, EV_DEVICE_SYNC, -1, -1, 0, 0, 0, -1, time, time)
    return np.int32(STATUS_OK)


@jit_out_of_line
def event_synchronize(dev, event):
    """Block the host until `event` has completed."""
    if not _valid_event(dev, event):
        return np.int32(STATUS_INVALID_EVENT)
    if dev.event_time[event] < 0.0:
        return np.int32(STATUS_OK)
    dev.host_clock[0] = max(dev.host_clock[0], dev.event_time[event])
    for other in range(dev.config[CFG_NUM_STREAMS]):
        dev.host_vc[other] = max(dev.host_vc[other], dev.event_vc[event, other])
    _host_learns(dev)
    dev.counters[CNT_EVENT_SYNCS] += 1
    time = dev.host_clock[0]
    stream = dev.event_stream[event]
    trace_append(dev, EV_EVENT_SYNC, -1, event, 0, 0, 0, stream, time, time)
    return np.int32(STATUS_OK)


@jit_out_of_line
def event_query(dev, event):
    """STATUS_OK if `event` has completed at the current host time, else STATUS_NOT_READY."""
    if not _valid_event(dev, event):
        return np.int32(STATUS_INVALID_EVENT)
    if dev.event_time[event] <= dev.host_clock[0]:
        return np.int32(STATUS_OK)
    return np.int32(STATUS_NOT_READY)


@jit_out_of_line
def set_stream_priority(dev, stream, priority):
    """Store a stream's priority (lower runs first on real devices; reported, not simulated)."""
    if not _valid_stream(dev, stream):
        return np.int32(STATUS_INVALID_STREAM)
    dev.stream_priority[stream] = priority
    return np.int32(STATUS_OK)
