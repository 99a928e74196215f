"""Helpers for ops' `encode` functions (attribute dicts -> slots)."""

import numpy as np


def onnx_float(value):
    """A FLOAT attribute as ONNX stores it: rounded to float32 (defaults too, so a model that
    leaves `alpha` out computes with the same 0.2f onnxruntime uses)."""
    return float(np.float32(value))
