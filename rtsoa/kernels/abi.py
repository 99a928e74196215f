"""The kernel ABI: `Runtime`, the one argument every kernel receives besides its node id.

A kernel is `run(rt, node) -> int32 status`. `rt` is a NamedTuple of four parts, split by who
owns them and who may write them; each part is an array bundle passed by reference (one
pointer, `rtsoa._bundle`), so a kernel call carries four pointers, not ~60 arrays:

- `rt.graph` (`GraphArrays`): the prepared graph's columns. Shared by every run, worker and
  session of one prepared graph, read-only (the arrays are read-only views: a write does not
  compile).
- `rt.values` (`ValueState`): what one run produces: the 8-byte slot of every value (an
  integer, a shape size, a device block handle). Owned by one run (later: one session);
  the workers of a run share it, each value is written by its producer only.
- `rt.worker` (`WorkerState`): what belongs to the thread running the kernel: the checksum
  the kernel folds its work into and a scratch area. Never shared between threads; the
  executor folds the workers' checksums at the end of a run.
- `rt.device` (`rtsoa.device.DeviceState`): the simulated device, written only through the
  device API (`device_malloc`, `device_free`, `launch_begin`, `device_access`, ...).

A kernel returns STATUS_OK (0), a failure code (any other int32 below RESERVED_STATUS_BASE),
`notify(k)` to continue on its k-th successor only (switch kernels), or
STATUS_END_OF_SEQUENCE to end the run without error. It never raises and never allocates
(unless registered with `allocates=True`); tensors are read and written through the typed
views of `rtsoa.kernels.tensors`, which need no reference counting.

Adding a field: add it to the part it belongs to, fill it in `make_runtime` (or the part's
constructor). Fields a kernel does not read cost nothing: the dispatch is inlined into the
executor loop and LLVM drops what is unused (asv `KernelAbi` measures it).
"""

from typing import NamedTuple

import numpy as np

from rtsoa._bundle import bundle_class
from rtsoa._jit import jit_inline_ir
from rtsoa.abi.operands import (  # noqa: F401 - SHAPE_* re-exported for kernels
    OPERAND_ROWS,
    ROW_WIDTH,
    SHAPE_DIMS,
    SHAPE_DTYPE,
    SHAPE_RANK,
    SHAPE_WIDTH,
)

# Columns of ValueState.shapes and the operand tables' size: the layouts of rtsoa.abi.operands.
from rtsoa.abi.views import read_only

# The op entries whose addresses graphs of lowered models carry (`GraphArrays.functions`, by
# ops-table row). The one place the kernel ABI reaches into the op library; it compiles or
# loads each op on first use.
from rtsoa.ops.library import op_addresses

SCRATCH_SIZE = 8  # int64 words of WorkerState.scratch
# Kernels of lowered models: a graph running any of them gets shape rows for every value.
MODEL_KERNELS = ("OpInferShape", "OpLaunch", "ConstTensor", "UploadConstant")


GraphArrays = bundle_class(
    "GraphArrays",
    __name__,
    {  # all read-only, shared by every worker
        "node_dispatch": (np.int32, 1, False),  # registry dispatch id of each node (at prepare)
        "node_stream": (np.int32, 1, False),  # the stream each node issues its device work on
        "succ_offsets": (np.int64, 1, False),  # CSR of successors
        "succ_targets": (np.int32, 1, False),
        "input_offsets": (np.int64, 1, False),  # CSR of input value ids
        "input_values": (np.int32, 1, False),
        "output_offsets": (np.int64, 1, False),  # CSR of output value ids
        "output_values": (np.int32, 1, False),
        "attr_offsets": (np.int64, 1, False),  # CSR of attribute slots
        "attr_pool": (np.int64, 1, False),  # attribute slots
        "attr_float": (np.float64, 1, False),  # float64 view of attr_pool (float attributes)
        "constants": (np.uint8, 1, False),  # constant blob
        "value_kind": (np.int8, 1, False),  # per value: ValueKind
        "value_dtype": (np.int8, 1, False),  # per value: DType
        "value_placement": (np.int8, 1, False),  # per value: Placement (where it is allocated)
        "kernel_control_flow": (np.bool_, 1, False),  # per dispatch id: obey its `notify(k)`?
        "functions": (np.int64, 1, False),  # [ops-table rows]: op entry addresses, 0 if unused
    },
    doc="Columns of the prepared graph kernels read (all read-only, shared by every worker).",
)
ValueState = bundle_class(
    "ValueState",
    __name__,
    {
        "slots": (np.int64, 1, True),  # per value: its 8-byte inline slot
        # [values, SHAPE_WIDTH] for graphs of lowered models (a tensor's run-time rank, dtype
        # and dims, written by its shape kernel); one unused row for other graphs
        "shapes": (np.int64, 2, True),
    },
    doc="What one run produces (shared by the workers of that run, written by producers).",
)
WorkerState = bundle_class(
    "WorkerState",
    __name__,
    {
        "checksum": (np.uint64, 1, True),  # [1]: order-independent fold of the nodes it ran
        "scratch": (np.int64, 1, True),  # [SCRATCH_SIZE]: sink for work kept from the optimiser
        # [OPERAND_ROWS, ROW_WIDTH] each: operand tables of the op kernels (rtsoa.abi.operands)
        "table": (np.int64, 2, True),
        "check_table": (np.int64, 2, True),
    },
    doc="What belongs to the thread running a kernel (never shared between threads).",
)


class Runtime(NamedTuple):
    """The argument of every kernel: see the module docstring for who owns each part."""

    graph: GraphArrays
    values: ValueState
    worker: WorkerState
    device: object  # rtsoa.device.DeviceState


def graph_arrays(graph, node_dispatch, kernel_control_flow):
    """The read-only `GraphArrays` of `graph`, `node_dispatch` the dispatch id of every node,
    `kernel_control_flow` the registry's control-flow flag per dispatch id.

    Built graphs and memory-mapped ones both become read-only views, so they share one
    compiled type (one compile).
    """
    attr_pool = read_only(np.ascontiguousarray(graph.attr_pool))
    functions = np.zeros(1, dtype=np.int64)
    if is_model(graph):
        functions = op_addresses(graph)  # compiles / loads the ops the graph runs
    return GraphArrays(
        node_dispatch=read_only(np.ascontiguousarray(node_dispatch, dtype=np.int32)),
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
        value_kind=read_only(graph.value_kind),
        value_dtype=read_only(graph.value_dtype),
        value_placement=read_only(graph.value_placement),
        kernel_control_flow=read_only(np.ascontiguousarray(kernel_control_flow, dtype=np.bool_)),
        functions=read_only(functions),
    )


def is_model(graph):
    """Does `graph` run kernels of lowered models (so its values need shape rows)?"""
    return any(name in MODEL_KERNELS for name in graph.kernel_names)


def new_values(num_values, shapes=False):
    """Fresh value slots for one run (zeros); with `shapes`, a shape row per value (rank -1)."""
    rows = max(int(num_values), 1) if shapes else 1
    shape_rows = np.zeros((rows, SHAPE_WIDTH), dtype=np.int64)
    shape_rows[:, SHAPE_RANK] = -1
    return ValueState(slots=np.zeros(max(int(num_values), 1), dtype=np.int64), shapes=shape_rows)


CACHE_LINE = 64  # bytes


def line_zeros(shape, dtype):
    """np.zeros(shape, dtype) starting on a cache line and padded to whole lines, so no other
    array shares a line with it: state one thread writes at every node (a worker's checksum,
    its scratch) must not sit next to another thread's, or each write moves the line between
    the cores (false sharing)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = -(-max(count * dtype.itemsize, 1) // CACHE_LINE) * CACHE_LINE
    raw = np.zeros(nbytes + CACHE_LINE, dtype=np.uint8)
    start = -raw.ctypes.data % CACHE_LINE
    return raw[start : start + count * dtype.itemsize].view(dtype).reshape(shape)


def new_worker():
    """Fresh per-thread state, each array on cache lines of its own (`line_zeros`)."""
    return WorkerState(
        checksum=line_zeros(1, np.uint64),
        scratch=line_zeros(SCRATCH_SIZE, np.int64),
        table=line_zeros((OPERAND_ROWS, ROW_WIDTH), np.int64),
        check_table=line_zeros((OPERAND_ROWS, ROW_WIDTH), np.int64),
    )


def make_runtime(graph, node_dispatch, kernel_control_flow, device_state, values=None, worker=None):
    """The Runtime of `graph` on `device_state` (`Device.state`); new value slots and worker
    state unless given (a session passes its own values, a worker thread its own worker)."""
    return Runtime(
        graph=graph_arrays(graph, node_dispatch, kernel_control_flow),
        values=values if values is not None else new_values(graph.num_values, is_model(graph)),
        worker=worker if worker is not None else new_worker(),
        device=device_state,
    )


def reset_worker(worker):
    """Per-run reset of a worker's state (no allocation)."""
    worker.checksum[0] = 0
    worker.scratch[:] = 0


# -- accessors kernels use (inlined; they assume the node's requirements were checked) --------


@jit_inline_ir
def attribute(rt, node, k):
    """Integer attribute `k` of `node`."""
    return rt.graph.attr_pool[rt.graph.attr_offsets[node] + k]


@jit_inline_ir
def float_attribute(rt, node, k):
    """Float attribute `k` of `node` (the same slot viewed as float64)."""
    return rt.graph.attr_float[rt.graph.attr_offsets[node] + k]


@jit_inline_ir
def input_value(rt, node, k):
    """Value id of input `k` of `node`."""
    return rt.graph.input_values[rt.graph.input_offsets[node] + k]


@jit_inline_ir
def output_value(rt, node, k):
    """Value id of output `k` of `node`."""
    return rt.graph.output_values[rt.graph.output_offsets[node] + k]


@jit_inline_ir
def input_count(rt, node):
    """How many inputs `node` has."""
    return rt.graph.input_offsets[node + 1] - rt.graph.input_offsets[node]


@jit_inline_ir
def successor_count(rt, node):
    """How many successors `node` has (the range of `notify`)."""
    return rt.graph.succ_offsets[node + 1] - rt.graph.succ_offsets[node]
