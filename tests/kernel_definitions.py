"""Kernels that break the ABI, each in a registry of its own, for tests/test_kernel_checks.py
(an importable module, as a user's kernels would be)."""

import numpy as np

from rtsoa.kernels import REGISTRY, KernelRegistry, builtin, kernel

ALLOCATING = KernelRegistry()  # an undeclared allocation next to a good kernel of its module
FLOAT = KernelRegistry()
INT64 = KernelRegistry()
UNTYPABLE = KernelRegistry()
DECLARED = KernelRegistry()  # the same allocation, declared: fine
for _registry in (ALLOCATING, FLOAT, INT64, UNTYPABLE, DECLARED):
    _registry.register("Checksum0", builtin.checksum, constants=REGISTRY["Checksum0"].constants)


@kernel("Scratch", registry=ALLOCATING)
def scratch(rt, node):
    """Creates an array but is registered without allocates=True."""
    values = np.zeros(4)
    values[0] = node
    return np.int32(values[0] - node)


@kernel("Fine", registry=ALLOCATING)
def fine(rt, node):
    """A good kernel in the same module as `scratch`."""
    return np.int32(0)


@kernel("Half", registry=FLOAT)
def half(rt, node):
    """Returns a float status."""
    return 0.5


@kernel("Wide", registry=INT64)
def wide(rt, node):
    """Returns an int64 status (4294967296 would read as 0 once truncated to int32)."""
    return node * 0 + 4294967296


@kernel("Broken", registry=UNTYPABLE)
def broken(rt, node):
    """Reads a runtime field that does not exist."""
    return np.int32(rt.no_such_part[0])


@kernel("ScratchDeclared", registry=DECLARED, allocates=True)
def scratch_declared(rt, node):
    """`scratch`, registered with allocates=True."""
    values = np.zeros(4)
    values[0] = node
    return np.int32(values[0] - node)
