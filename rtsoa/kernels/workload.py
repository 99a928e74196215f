"""Busy-work and fault-injection kernels for synthetic graphs: Busy, Fail, FailWhen.

Apart from `rtsoa.kernels.builtin` because the generated dispatch holds whole kernel modules
(`rtsoa.kernels.dispatch.included_kernels`): a graph of checksum kernels compiles none of these.
"""

import numpy as np

from rtsoa.kernels.abi import attribute, input_value
from rtsoa.kernels.checksum import FOLD_SALTS, fold
from rtsoa.kernels.registry import kernel

_BUSY_SALT = np.uint64(FOLD_SALTS["Busy"])
_BUSY_MULTIPLIER = np.uint64(6364136223846793005)
_BUSY_INCREMENT = np.uint64(1442695040888963407)


@kernel("Busy", requires={"attributes": 1})
def busy(rt, node):
    """attrs [iterations]: that many rounds of an LCG, then fold the node into the checksum."""
    x = np.uint64(node)
    for _ in range(attribute(rt, node, 0)):
        x = x * _BUSY_MULTIPLIER + _BUSY_INCREMENT
    rt.worker.scratch[0] ^= np.int64(x & np.uint64(0x7FFFFFFFFFFFFFFF))
    return fold(rt, node, _BUSY_SALT)


@kernel("Fail", requires={"attributes": 1})
def fail(rt, node):
    """attrs [status]: return that status (a failure unless 0)."""
    return np.int32(attribute(rt, node, 0))


@kernel("FailWhen", requires={"inputs": 1})
def fail_when(rt, node):
    """input: an INT value; returns it as the status (run-time fault injection)."""
    return np.int32(rt.values.slots[input_value(rt, node, 0)])
