"""`Runtime`: the one argument every kernel receives, a NamedTuple of the runtime's arrays.

Kernels read it by field name (`rt.attr_pool`, `rt.value_slots`...), so adding a field (for
example `device`, the simulated device's `DeviceState`) means: add it here with its comment, fill
it in `make_runtime`, and nothing else. The field set is part of the compiled type, and this
file's text is part of the dispatch cache key, so a change recompiles the dispatch once.

Graph columns are passed as read-only views: a graph loaded from disk is read-only anyway, and
making built graphs read-only too keeps one numba type (one compile) for both.
"""

from typing import NamedTuple

import numpy as np

# Slots of `Runtime.state` (int64): small per-run scalars shared by kernels and executors.
STATE_SELECT = 0  # successor index chosen by a switch kernel (with STATUS_NOTIFY_ONE)
STATE_SCRATCH = 1  # sink for busy-work results, so the work is not optimized away
STATE_STEP_LIMIT = 2  # queue executors stop with STATUS_STEP_LIMIT after this many steps (-1: none)
STATE_SIZE = 8


class Runtime(NamedTuple):
    """Arrays a kernel may use. Graph columns are read-only; the rest is per-executor state."""

    node_kernel: np.ndarray  # int32: registry dispatch id of each node (bound at prepare)
    node_stream: np.ndarray  # int32: the stream each node issues its device work on (read-only)
    succ_offsets: np.ndarray  # int64 CSR of successors (read-only)
    succ_targets: np.ndarray  # int32
    input_offsets: np.ndarray  # int64 CSR of input value ids (read-only)
    input_values: np.ndarray  # int32
    output_offsets: np.ndarray  # int64 CSR of output value ids (read-only)
    output_values: np.ndarray  # int32
    attr_offsets: np.ndarray  # int64 CSR of attribute slots (read-only)
    attr_pool: np.ndarray  # int64 attribute slots
    attr_float: np.ndarray  # float64 view of attr_pool (float attributes)
    constants: np.ndarray  # uint8 constant blob (read-only)
    value_placement: np.ndarray  # int8 per value: Placement (where its memory is allocated)
    value_slots: np.ndarray  # int64 per value: the 8-byte inline slot of each value (writable)
    state: np.ndarray  # int64[STATE_SIZE], see STATE_* (writable)
    checksum: np.ndarray  # uint64[1]: order-independent fold of the executed nodes (writable)
    device: object  # rtsoa.device.DeviceState: arenas, allocator, streams, hazard checker


def read_only(array):
    """A read-only view of `array` (no copy)."""
    view = array.view()
    view.flags.writeable = False
    return view


def make_runtime(graph, node_kernel, device_state):
    """The Runtime for `graph`, with `node_kernel` the dispatch id of every node and
    `device_state` the simulated device's `DeviceState` (`Device.state`)."""
    attr_pool = read_only(np.ascontiguousarray(graph.attr_pool))
    return Runtime(
        node_kernel=read_only(np.ascontiguousarray(node_kernel, dtype=np.int32)),
        node_stream=read_only(graph.node_stream),
        succ_offsets=read_only(graph.succ_offsets),
        succ_targets=read_only(graph.succ_targets),
        input_offsets=read_only(graph.input_offsets),
        input_values=read_only(graph.input_values),
        output_offsets=read_only(graph.output_offsets),
        output_values=read_only(graph.output_values),
        attr_offsets=read_only(graph.attr_offsets),
        attr_pool=attr_pool,
        attr_float=attr_pool.view(np.float64),
        constants=read_only(graph.constants),
        value_placement=read_only(graph.value_placement),
        value_slots=np.zeros(max(graph.num_values, 1), dtype=np.int64),
        state=np.zeros(STATE_SIZE, dtype=np.int64),
        checksum=np.zeros(1, dtype=np.uint64),
        device=device_state,
    )


def reset_runtime(rt):
    """Per-run reset of the scalar state (no allocation; value slots are written by producers)."""
    rt.state[:] = 0
    rt.checksum[0] = 0
