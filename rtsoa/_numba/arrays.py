"""Numba's array-building and bit-count internals that rtsoa's `@intrinsic` code generation and
bit helpers use (`numba.np.arrayobj`, `numba.cpython.unsafe.numbers`)."""

from rtsoa._numba import compat

compat.register(
    "array-codegen",
    "rtsoa",
    [
        "numba.np.arrayobj.make_array",
        "numba.np.arrayobj.populate_array",
        "numba.cpython.unsafe.numbers.leading_zeros",
        "numba.cpython.unsafe.numbers.trailing_zeros",
    ],
    "array structs built in intrinsic code generation; count-leading/trailing-zero intrinsics",
    patch=False,
)

from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros  # noqa: E402
from numba.np.arrayobj import make_array, populate_array  # noqa: E402

__all__ = ["leading_zeros", "make_array", "populate_array", "trailing_zeros"]
