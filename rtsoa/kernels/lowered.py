"""Stand-ins for the kernels of lowered graphs: InferShape -> AllocMemory -> LaunchKernel -> Free.

They write the value slots a real implementation would (shape -> size, block -> handle) and fold
the node into the checksum; the simulated device (`rtsoa.device`) will replace their bodies.
"""

import numpy as np

from rtsoa.kernels.checksum import FOLD_SALTS, fold
from rtsoa.kernels.registry import kernel

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
    """attrs [nbytes]; output: the MEMORY_BLOCK value, set to a handle (node + 1)."""
    rt.value_slots[rt.output_values[rt.output_offsets[node]]] = node + 1
    return fold(rt, node, _ALLOC_SALT)


@kernel("LaunchKernel", worker="launch", critical_section="launch", requires={"attributes": 2})
def launch_kernel(rt, node):
    """attrs [bytes_moved, flops]; inputs: its own block, then the producers' blocks."""
    return fold(rt, node, _LAUNCH_SALT)


@kernel("FreeMemory", worker="memory", critical_section="memory", requires={"inputs": 1})
def free_memory(rt, node):
    """input: the block; its slot is cleared."""
    rt.value_slots[rt.input_values[rt.input_offsets[node]]] = 0
    return fold(rt, node, _FREE_SALT)
