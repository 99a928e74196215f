"""Window functions of opset 17: HannWindow, HammingWindow, BlackmanWindow.

Input: size, an int32 / int64 scalar (or one-element 1-D) tensor whose data shape inference
reads. attrs: [output element type (DType code; -1: one rtsoa does not produce), periodic].
Output: 1-D, `size` long, element n being the window at n / N with N = size (periodic) or
size - 1 (symmetric), computed in float64 by the formulas of the ONNX reference:
Hann sin^2(pi n / N), Hamming 25/46 - 21/46 cos(2 pi n / N), Blackman
0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N). A symmetric window of size 1 divides by
zero (NaN), as the ONNX definition does. float32 / float64 outputs; a negative size fails
with STATUS_OP_BAD_SHAPE.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    F64,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_SHAPE,
    DType,
    dtype_code,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.copying import holds
from rtsoa.ops.cumulative import integer_scalar
from rtsoa.ops.registry import register_op

HANN, HAMMING, BLACKMAN = 0, 1, 2
WINDOWS = {"HannWindow": HANN, "HammingWindow": HAMMING, "BlackmanWindow": BLACKMAN}


@jit_with_nrt
def _size(arena, table):
    """(status, the window length) from input 0."""
    status, size = integer_scalar(arena, table, 0, True)
    if status == 0 and size < 0:
        status = np.int32(STATUS_OP_BAD_SHAPE)
    return status, size


@jit_with_nrt
def window_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 2 or (attrs[0] != F32 and attrs[0] != F64):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if attrs[1] != 0 and attrs[1] != 1:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    status, size = _size(arena, table)
    if status != 0:
        return status
    set_output(table, n_in, attrs[0], 1)
    set_dim(table, n_in, 0, size)
    return OK


@jit_with_nrt
def _fill(out, window, periodic):
    size = out.shape[0]
    span = np.float64(size if periodic else size - 1)
    for n in range(size):
        phase = np.pi * n / span
        if window == HANN:
            value = np.sin(phase) ** 2
        elif window == HAMMING:
            value = 25.0 / 46.0 - np.cos(2.0 * phase) * (21.0 / 46.0)
        else:
            value = 0.42 - 0.5 * np.cos(2.0 * phase) + 0.08 * np.cos(4.0 * phase)
        out[n] = value


@jit_with_nrt.keeping_literals("window")
def window_compute(arena, table, n_in, n_out, attrs, fattrs, window):
    status = window_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    if not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    if attrs[0] == F32:
        _fill(view(arena, table, n_in, np.float32), window, attrs[1] == 1)
    else:
        _fill(view(arena, table, n_in, np.float64), window, attrs[1] == 1)
    return OK


def output_type(attributes):
    """The DType of a window's output_datatype (default FLOAT), or -1 if rtsoa does not
    produce it."""
    from onnx.helper import tensor_dtype_to_np_dtype

    try:
        code = int(dtype_code(tensor_dtype_to_np_dtype(int(attributes.get("output_datatype", 1)))))
    except (KeyError, ValueError, TypeError):
        return -1
    return code if code in (DType.FLOAT32, DType.FLOAT64) else -1


def encode_window(attributes, inputs):
    """Window slots: output DType, periodic (default 1)."""
    return [output_type(attributes), int(attributes.get("periodic", 1))]


for _name, _window in WINDOWS.items():
    register_op(
        _name,
        window_infer,
        window_compute,
        encode=encode_window,
        inputs=(1, 1),
        data_inputs=(0,),
        constants=(_window,),
        dtypes={0: frozenset({DType.INT32, DType.INT64})},
    )
