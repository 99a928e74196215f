"""Helpers for ops' `encode` functions (attribute dicts -> slots)."""

import numpy as np


def onnx_float(value):
    """A FLOAT attribute as ONNX stores it: rounded to float32 (defaults too, so a model that
    leaves `alpha` out computes with the same 0.2f onnxruntime uses)."""
    return float(np.float32(value))


def choice(attributes, name, table, default):
    """A STRING attribute's code in `table` ({value: code}); -1 for a value it does not hold,
    which the op's shape inference refuses as a bad attribute."""
    value = attributes.get(name, default)
    if isinstance(value, bytes):
        value = value.decode()
    return table.get(value, -1)
