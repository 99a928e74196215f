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
from rtsoa.device.allocator import device_free, device_malloc
from rtsoa.device.hazards import device_access
from rtsoa.device.streams import event_record, launch_begin, stream_wait_event
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


@kernel("InferShape", requires={"attributes": 1, "outputs": 1})
def infer_shape(rt, node):
    """attrs [nbytes]; output: the SHAPE value, set to the byte size."""
    rt.value_slots[rt.output_values[rt.output_offsets[node]]] = rt.attr_pool[rt.attr_offsets[node]]
    return fold(rt, node, _INFER_SALT)


@kernel(
    "AllocMemory",
    worker="memory",
    critical_section="memory",
    requires={"attributes": 1, "outputs": 1},
)
def alloc_memory(rt, node):
    """attrs [nbytes]; input (optional): a SHAPE value whose run-time size wins over the
    attribute; output: the MEMORY_BLOCK value, set to the device block handle."""
    nbytes = rt.attr_pool[rt.attr_offsets[node]]
    first_input = rt.input_offsets[node]
    if rt.input_offsets[node + 1] > first_input:
        nbytes = rt.value_slots[rt.input_values[first_input]]
    block = rt.output_values[rt.output_offsets[node]]
    handle = device_malloc(
        rt.device, np.int64(rt.value_placement[block]), nbytes, np.int64(rt.node_stream[node])
    )
    if handle < 0:
        return np.int32(-handle)
    rt.value_slots[block] = handle
    return fold(rt, node, _ALLOC_SALT)


@kernel("LaunchKernel", worker="launch", critical_section="launch", requires={"attributes": 2})
def launch_kernel(rt, node):
    """attrs [bytes_moved, flops]; inputs: its own block (written), then producers' (read)."""
    stream = np.int64(rt.node_stream[node])
    attributes = rt.attr_offsets[node]
    task = launch_begin(rt.device, stream, rt.attr_pool[attributes], rt.attr_pool[attributes + 1])
    if task < 0:
        return np.int32(-task)
    first = rt.input_offsets[node]
    for i in range(first, rt.input_offsets[node + 1]):
        status = device_access(rt.device, stream, rt.value_slots[rt.input_values[i]], i == first)
        if status != 0:
            return np.int32(status)
    return fold(rt, node, _LAUNCH_SALT)


@kernel("FreeMemory", worker="memory", critical_section="memory", requires={"inputs": 1})
def free_memory(rt, node):
    """input: the block; freed on the node's stream, and its slot set to NO_BLOCK."""
    block = rt.input_values[rt.input_offsets[node]]
    status = device_free(rt.device, rt.value_slots[block], np.int64(rt.node_stream[node]))
    if status != 0:
        return np.int32(status)
    rt.value_slots[block] = NO_BLOCK
    return fold(rt, node, _FREE_SALT)


@kernel("RecordEvent", worker="launch", critical_section="launch", requires={"attributes": 1})
def record_event(rt, node):
    """attrs [event]; records the event on the node's stream (cross-stream producer side)."""
    return np.int32(
        event_record(rt.device, rt.attr_pool[rt.attr_offsets[node]], np.int64(rt.node_stream[node]))
    )


@kernel("StreamWaitEvent", worker="launch", critical_section="launch", requires={"attributes": 1})
def stream_wait(rt, node):
    """attrs [event]; the node's stream waits for the event (cross-stream consumer side)."""
    return np.int32(
        stream_wait_event(
            rt.device, np.int64(rt.node_stream[node]), rt.attr_pool[rt.attr_offsets[node]]
        )
    )
