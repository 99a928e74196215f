"""Built-in kernels for synthetic graphs: no-op, checksum folds, end of run.

Every kernel has the signature `run(rt, node) -> int32` and never raises. The sixteen
`ChecksumK` kernels differ only in their salt, so a graph using eight of them exercises an
8-way dispatch the way a real graph's mix of kernels does; they are one function,
`checksum(rt, node, salt)`, registered sixteen times with its salt as a constant. Busy work
and fault injection are in `rtsoa.kernels.workload`: the generated dispatch holds whole kernel
modules, and a graph of checksum kernels should not compile them (0.5 s of a cold run).
"""

import numpy as np

from rtsoa.abi.status import STATUS_END_OF_SEQUENCE
from rtsoa.kernels.checksum import FOLD_SALTS, fold
from rtsoa.kernels.registry import kernel


@kernel("Noop")
def noop(rt, node):
    """Does nothing."""
    return np.int32(0)


@kernel("EndOfSequence", ends_sequence=True)
def end_of_sequence(rt, node):
    """End the run without error."""
    return np.int32(STATUS_END_OF_SEQUENCE)


# -- ChecksumK: fold the node id with salt K (order-independent, see checksum.py) --------------
def checksum(rt, node, salt):
    """Fold the node into the checksum with `salt` (a uint64 constant per registered name)."""
    return fold(rt, node, salt)


# One function, sixteen names: the dispatch passes each name's salt, so a wrong branch still
# changes the checksum, and the function is compiled once, not sixteen times (1.2 s of a cold
# run of a checksum graph).
for _k in range(16):
    checksum = kernel(f"Checksum{_k}", constants=(np.uint64(FOLD_SALTS[f"Checksum{_k}"]),))(
        checksum
    )
