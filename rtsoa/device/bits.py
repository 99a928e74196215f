"""Bit tricks for jitted code: floor(log2) and lowest set bit, without float conversions."""

from rtsoa._jit import jit


@jit(_nrt=False, inline="always")
def floor_log2(value):
    """Index of the highest set bit of a positive integer."""
    x = value
    result = 0
    if x >= 1 << 32:
        x >>= 32
        result += 32
    if x >= 1 << 16:
        x >>= 16
        result += 16
    if x >= 1 << 8:
        x >>= 8
        result += 8
    if x >= 1 << 4:
        x >>= 4
        result += 4
    if x >= 1 << 2:
        x >>= 2
        result += 2
    if x >= 1 << 1:
        result += 1
    return result


@jit(_nrt=False, inline="always")
def lowest_bit(value):
    """Index of the lowest set bit of a non-zero int64."""
    return floor_log2(value & -value)
