"""Jit options in one place, so every njit function in rtsoa is compiled the same way.

`cache=True` writes compiled code to disk (Numba's cache directory, or NUMBA_CACHE_DIR), so a
fresh process does not pay the compile again. `boundscheck` stays off: inputs are validated in
Python before any jitted loop sees them.
"""

from numba import njit

JIT_OPTIONS = {"cache": True, "nogil": True, "boundscheck": False}


def jit(fn=None, **overrides):
    """`numba.njit` with rtsoa's options; usable as `@jit` or `@jit(fastmath=True)`."""
    options = {**JIT_OPTIONS, **overrides}
    if fn is None:
        return njit(**options)
    return njit(**options)(fn)
