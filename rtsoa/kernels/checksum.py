"""The order-independent checksum that work kernels fold node ids into.

`fold(rt, node, salt)` adds `mix(node, salt)` to the worker's `rt.worker.checksum[0]` with
wrapping uint64 arithmetic (the executor adds the workers' sums), so the result does not
depend on execution order and a vectorized numpy expression (`expected_checksum`) reproduces
it for any graph where every node runs once.
"""

import numpy as np

from rtsoa._jit import jit_internal
from rtsoa.graph.schema import GraphKind

_MULTIPLIER = np.uint64(0xBF58476D1CE4E5B9)
_GOLDEN = 0x9E3779B97F4A7C15
_SHIFT = np.uint64(31)
_MASK64 = (1 << 64) - 1


def salt_of(index):
    """Salt number `index` (a distinct odd-looking 64-bit constant per kernel)."""
    return ((index + 1) * _GOLDEN) & _MASK64


# Kernel name -> salt, for every built-in kernel that folds into the checksum.
FOLD_SALTS = {f"Checksum{k}": salt_of(k) for k in range(16)}
FOLD_SALTS.update(
    {
        "Busy": salt_of(100),
        "InferShape": salt_of(101),
        "AllocMemory": salt_of(102),
        "LaunchKernel": salt_of(103),
        "FreeMemory": salt_of(104),
        "OpInferShape": salt_of(105),
        "OpLaunch": salt_of(106),
        "ConstTensor": salt_of(107),
        "UploadConstant": salt_of(108),
    }
)


# Kernels that stand in for another and fold as it does (rtsoa/runtime/kept.py), so a run
# checksums the same whichever of the two ran.
FOLDS_AS = {"OpInferShapeKept": "OpInferShape"}


@jit_internal  # only jitted code calls these (Python uses mix_numpy)
def mix(node, salt):
    """A 64-bit mix of a node id (uint64 wrapping arithmetic)."""
    x = (np.uint64(node) + np.uint64(salt)) * _MULTIPLIER
    return x ^ (x >> _SHIFT)


@jit_internal
def fold(rt, node, salt):
    """Fold `node` into the running worker's checksum; returns status 0."""
    rt.worker.checksum[0] += mix(node, salt)
    return np.int32(0)


def mix_numpy(nodes, salts):
    """`mix` over arrays (uint64, wrapping)."""
    x = (np.asarray(nodes).astype(np.uint64) + np.asarray(salts, dtype=np.uint64)) * _MULTIPLIER
    return x ^ (x >> _SHIFT)


def expected_checksum(graph, nodes=None, counts=None):
    """The checksum of a run that executes `nodes` (default: all Main nodes) `counts` times each.

    Independent of the executors: a vectorized numpy expression over the graph's kernel names.
    """
    if nodes is None:
        nodes = graph.nodes_of(GraphKind.MAIN)
    nodes = np.asarray(nodes, dtype=np.int64)
    names = [FOLDS_AS.get(name, name) for name in graph.kernel_names]
    salt_table = np.array([FOLD_SALTS.get(name, 0) for name in names], np.uint64)
    folds = np.array([name in FOLD_SALTS for name in names], dtype=bool)
    kernels = graph.node_kernel[nodes]
    keep = folds[kernels]
    values = mix_numpy(nodes[keep], salt_table[kernels[keep]])
    if counts is not None:
        values = values * np.asarray(counts, dtype=np.uint64)[keep]
    return int(np.sum(values, dtype=np.uint64))
