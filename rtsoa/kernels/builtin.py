"""Built-in kernels for synthetic graphs: no-op, checksum folds, end of run.

Every kernel has the one signature `run(rt, node) -> int32` and never raises. The sixteen
`ChecksumK` kernels differ only in their salt, so a graph using eight of them exercises an
8-way dispatch the way a real graph's mix of kernels does. Busy work and fault injection are
in `rtsoa.kernels.workload`: the generated dispatch holds whole kernel modules, and a graph of
checksum kernels should not compile them (0.5 s of a cold run).
"""

import numpy as np

from rtsoa.kernels.checksum import FOLD_SALTS, fold
from rtsoa.kernels.registry import kernel
from rtsoa.kernels.status import STATUS_END_OF_SEQUENCE


@kernel("Noop")
def noop(rt, node):
    """Does nothing."""
    return np.int32(0)


@kernel("EndOfSequence", ends_sequence=True)
def end_of_sequence(rt, node):
    """End the run without error."""
    return np.int32(STATUS_END_OF_SEQUENCE)


# -- ChecksumK: fold the node id with salt K (order-independent, see checksum.py) --------------
_SALT0 = np.uint64(FOLD_SALTS["Checksum0"])
_SALT1 = np.uint64(FOLD_SALTS["Checksum1"])
_SALT2 = np.uint64(FOLD_SALTS["Checksum2"])
_SALT3 = np.uint64(FOLD_SALTS["Checksum3"])
_SALT4 = np.uint64(FOLD_SALTS["Checksum4"])
_SALT5 = np.uint64(FOLD_SALTS["Checksum5"])
_SALT6 = np.uint64(FOLD_SALTS["Checksum6"])
_SALT7 = np.uint64(FOLD_SALTS["Checksum7"])
_SALT8 = np.uint64(FOLD_SALTS["Checksum8"])
_SALT9 = np.uint64(FOLD_SALTS["Checksum9"])
_SALT10 = np.uint64(FOLD_SALTS["Checksum10"])
_SALT11 = np.uint64(FOLD_SALTS["Checksum11"])
_SALT12 = np.uint64(FOLD_SALTS["Checksum12"])
_SALT13 = np.uint64(FOLD_SALTS["Checksum13"])
_SALT14 = np.uint64(FOLD_SALTS["Checksum14"])
_SALT15 = np.uint64(FOLD_SALTS["Checksum15"])


@kernel("Checksum0")
def checksum0(rt, node):
    return fold(rt, node, _SALT0)


@kernel("Checksum1")
def checksum1(rt, node):
    return fold(rt, node, _SALT1)


@kernel("Checksum2")
def checksum2(rt, node):
    return fold(rt, node, _SALT2)


@kernel("Checksum3")
def checksum3(rt, node):
    return fold(rt, node, _SALT3)


@kernel("Checksum4")
def checksum4(rt, node):
    return fold(rt, node, _SALT4)


@kernel("Checksum5")
def checksum5(rt, node):
    return fold(rt, node, _SALT5)


@kernel("Checksum6")
def checksum6(rt, node):
    return fold(rt, node, _SALT6)


@kernel("Checksum7")
def checksum7(rt, node):
    return fold(rt, node, _SALT7)


@kernel("Checksum8")
def checksum8(rt, node):
    return fold(rt, node, _SALT8)


@kernel("Checksum9")
def checksum9(rt, node):
    return fold(rt, node, _SALT9)


@kernel("Checksum10")
def checksum10(rt, node):
    return fold(rt, node, _SALT10)


@kernel("Checksum11")
def checksum11(rt, node):
    return fold(rt, node, _SALT11)


@kernel("Checksum12")
def checksum12(rt, node):
    return fold(rt, node, _SALT12)


@kernel("Checksum13")
def checksum13(rt, node):
    return fold(rt, node, _SALT13)


@kernel("Checksum14")
def checksum14(rt, node):
    return fold(rt, node, _SALT14)


@kernel("Checksum15")
def checksum15(rt, node):
    return fold(rt, node, _SALT15)
