"""Symbols added to the JIT's global table (llvmlite's binding layer)."""

from rtsoa._numba import compat

compat.register(
    "jit-symbols",
    "process",
    ["llvmlite.binding.add_symbol"],
    "C functions (sched_yield) that compiled code calls by name",
    patch=False,
)


def add_symbol(name, address):
    """Make the C function at `address` callable from compiled code as `name`."""
    import llvmlite.binding

    llvmlite.binding.add_symbol(name, address)
