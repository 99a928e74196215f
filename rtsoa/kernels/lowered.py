"""Kernels of lowered graphs: InferShape -> AllocMemory -> LaunchKernel -> FreeMemory.

They run against the simulated device in `rt.device`: AllocMemory takes a block from the caching
allocator on the node's stream, LaunchKernel issues a task on the stream clock (cost from the
device's cost model) and declares its block accesses to the hazard checker (its own block
written, its producers' blocks read), FreeMemory returns the block stream-ordered. A device
status (out of memory, stale handle, ...) stops the run like any kernel failure.
"""

import importlib
import pkgutil

import numpy as np

import rtsoa.device
from rtsoa.device import (
    device_access,
    device_free,
    device_malloc,
    event_record,
    launch_begin,
    stream_wait_event,
)
from rtsoa.device.lock import device_enter, device_exit
from rtsoa.graph.schema import DType, Placement, ValueKind
from rtsoa.kernels.abi import attribute, input_count, input_value, output_value
from rtsoa.kernels.checksum import FOLD_SALTS, fold
from rtsoa.kernels.registry import REGISTRY, kernel

# The device functions are compiled into the dispatch module: hash every device source too.
for _module in pkgutil.iter_modules(rtsoa.device.__path__, "rtsoa.device."):
    importlib.import_module(_module.name)
    REGISTRY.depends_on(_module.name)

NO_BLOCK = -1  # value slot of a MEMORY_BLOCK value that holds no block
_INFER_SALT = np.uint64(FOLD_SALTS["InferShape"])
_ALLOC_SALT = np.uint64(FOLD_SALTS["AllocMemory"])
_LAUNCH_SALT = np.uint64(FOLD_SALTS["LaunchKernel"])
_FREE_SALT = np.uint64(FOLD_SALTS["FreeMemory"])


def shape_output(builder, node):
    """Outputs creator of InferShape: its SHAPE value."""
    shape = builder.add_value(
        kind=ValueKind.SHAPE, dtype=DType.INT64, placement=Placement.HOST, producer=node
    )
    return [shape]


def block_output(builder, node, placement=Placement.DEVICE_HBM, dtype=DType.UINT8):
    """Outputs creator of AllocMemory: its MEMORY_BLOCK value on `placement` (`dtype`: the
    element type of the tensor it will hold, for models; bytes otherwise)."""
    value = builder.add_value(
        kind=ValueKind.MEMORY_BLOCK, dtype=dtype, placement=placement, producer=node
    )
    return [value]


@kernel("InferShape", requires={"attributes": 1, "outputs": 1}, outputs=shape_output)
def infer_shape(rt, node):
    """attrs [nbytes]; output: the SHAPE value, set to the byte size."""
    rt.values.slots[output_value(rt, node, 0)] = attribute(rt, node, 0)
    return fold(rt, node, _INFER_SALT)


@kernel(
    "AllocMemory",
    worker="memory",
    critical_section="memory",
    requires={"attributes": 1, "outputs": 1},
    outputs=block_output,
)
def alloc_memory(rt, node):
    """attrs [nbytes]; input (optional): a SHAPE value whose run-time size wins over the
    attribute; output: the MEMORY_BLOCK value, set to the device block handle."""
    nbytes = attribute(rt, node, 0)
    if input_count(rt, node) > 0:
        nbytes = rt.values.slots[input_value(rt, node, 0)]
    block = output_value(rt, node, 0)
    placement = np.int64(rt.graph.value_placement[block])
    handle = device_malloc(rt.device, placement, nbytes, np.int64(rt.graph.node_stream[node]))
    if handle < 0:
        return np.int32(-handle)
    rt.values.slots[block] = handle
    return fold(rt, node, _ALLOC_SALT)


@kernel(
    "LaunchKernel",
    worker="launch",
    critical_section="launch",
    requires={"attributes": 2},
    locks_device=True,
)
def launch_kernel(rt, node):
    """attrs [bytes_moved, flops]; inputs: its own block (written), then producers' (read).
    Holds the device lock itself (`rtsoa.device.lock`): a kernel that wraps it with work of
    its own runs that work outside the lock when the launches are shared."""
    stream = np.int64(rt.graph.node_stream[node])
    device_enter(rt.device)
    task = launch_begin(rt.device, stream, attribute(rt, node, 0), attribute(rt, node, 1))
    status = np.int32(0) if task >= 0 else np.int32(-task)
    for k in range(input_count(rt, node)):
        if status != 0:
            break
        handle = rt.values.slots[input_value(rt, node, k)]
        status = np.int32(device_access(rt.device, stream, handle, k == 0))
    device_exit(rt.device)
    if status != 0:
        return status
    return fold(rt, node, _LAUNCH_SALT)


@kernel("FreeMemory", worker="memory", critical_section="memory", requires={"inputs": 1})
def free_memory(rt, node):
    """input: the block; freed on the node's stream, and its slot set to NO_BLOCK."""
    block = input_value(rt, node, 0)
    status = device_free(rt.device, rt.values.slots[block], np.int64(rt.graph.node_stream[node]))
    if status != 0:
        return np.int32(status)
    rt.values.slots[block] = NO_BLOCK
    return fold(rt, node, _FREE_SALT)


@kernel("RecordEvent", worker="launch", critical_section="launch", requires={"attributes": 1})
def record_event(rt, node):
    """attrs [event]; records the event on the node's stream (cross-stream producer side)."""
    stream = np.int64(rt.graph.node_stream[node])
    return np.int32(event_record(rt.device, attribute(rt, node, 0), stream))


@kernel("StreamWaitEvent", worker="launch", critical_section="launch", requires={"attributes": 1})
def stream_wait(rt, node):
    """attrs [event]; the node's stream waits for the event (cross-stream consumer side)."""
    stream = np.int64(rt.graph.node_stream[node])
    return np.int32(stream_wait_event(rt.device, stream, attribute(rt, node, 0)))
