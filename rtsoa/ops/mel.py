"""MelWeightMatrix (opset 17): triangular filters mapping a one-sided spectrum onto mel bands.

Inputs: num_mel_bins, dft_length, sample_rate (int32 / int64 scalars or one-element 1-D; the
first two are `data_inputs` positions: they make the shape), lower_edge_hertz and
upper_edge_hertz (float scalars). attrs: [output element type (DType code, -1: one rtsoa
does not produce)]. Output [dft_length / 2 + 1, num_mel_bins].

Computed as onnx.reference does, step by step in the same element types (so its integer
band edges agree): the edges' mel values 2595 log1p(f / 700) / ln 10 (float32 edges in
float32 up to the division by ln 10, as numpy computes them; float16 / bfloat16 edges in
float64), num_mel_bins + 2 points spaced evenly from the lower one by
(high - low) / (num_mel_bins + 2), back to hertz, then the spectrum bin
floor((dft_length + 1) f / sample_rate) of each (numpy's float floor division). Band i rises
from 0 at bin[i] to 1 at bin[i + 1] and falls back to 0 at bin[i + 2]; a band of no rise is
1 at its centre. A band edge outside the spectrum (onnx.reference raises or wraps a negative
index) fails with STATUS_OP_BAD_INDEX; num_mel_bins below 0, dft_length below 1 or
sample_rate below 1 with STATUS_OP_BAD_SHAPE.
"""

import math

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.abi.dtypes import DTYPE_OF_ONNX
from rtsoa.ops.abi import (
    F32,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
    DType,
    dtype,
    numel,
    set_dim,
    set_output,
)
from rtsoa.ops.bitwise import INTEGERS
from rtsoa.ops.cast import CASTABLE, read_float, write_float
from rtsoa.ops.copying import holds
from rtsoa.ops.cumulative import integer_scalar
from rtsoa.ops.registry import register_op
from rtsoa.ops.spectral import SCALAR_TYPES, SIGNAL_TYPES, signal_type

# ONNX's T3: the floats and integers of every width; rtsoa's Cast does not write uint64.
OUTPUT_TYPES = (SIGNAL_TYPES | INTEGERS) - {DType.UINT64}
assert OUTPUT_TYPES <= CASTABLE


@jit_with_nrt
def _shape(arena, table):
    """(status, num_mel_bins, dft_length)."""
    status, bins = integer_scalar(arena, table, 0, True)
    if status != 0:
        return status, 0, 0
    status, length = integer_scalar(arena, table, 1, True)
    if status != 0:
        return status, 0, 0
    if bins < 0 or length < 1:
        return np.int32(STATUS_OP_BAD_SHAPE), 0, 0
    return OK, bins, length


@jit_with_nrt
def mel_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 1 or attrs[0] < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    status, bins, length = _shape(arena, table)
    if status != 0:
        return status
    set_output(table, n_in, attrs[0], 2)
    set_dim(table, n_in, 0, length // 2 + 1)
    set_dim(table, n_in, 1, bins)
    return OK


@jit_with_nrt
def _mel(hertz, single):
    """2595 log1p(hertz / 700) / ln 10, the log computed in float32 when `single`."""
    if single:
        scaled = np.float32(2595.0) * np.log1p(np.float32(hertz) / np.float32(700.0))
        return np.float64(scaled) / np.log(10.0)
    return 2595.0 * np.log1p(hertz / 700.0) / np.log(10.0)


@jit_with_nrt
def _floor_divide(a, b):
    """numpy's float floor division (npy_divmod)."""
    mod = np.fmod(a, b)
    quotient = (a - mod) / b
    if mod != 0.0 and (b < 0.0) != (mod < 0.0):
        quotient -= 1.0
    if quotient == 0.0:
        return math.copysign(0.0, a / b)
    floored = math.floor(quotient)
    if quotient - floored > 0.5:
        floored += 1.0
    return floored


@jit_with_nrt
def band_edges(bins, length, rate, lower, upper, single):
    """(status, the num_mel_bins + 2 spectrum bins of the band edges); a negative or NaN one
    fails with STATUS_OP_BAD_INDEX (the caller checks the top against the spectrum)."""
    low = _mel(lower, single)
    high = _mel(upper, single)
    step = (high - low) / (bins + 2)
    edges = np.empty(bins + 2, dtype=np.int64)
    for k in range(bins + 2):
        hertz = 700.0 * np.expm1((k * step + low) / 2595.0 * np.log(10.0))
        point = _floor_divide((length + 1) * hertz, np.float64(rate))
        if not (0.0 <= point < 2.0**62):  # NaN too
            return np.int32(STATUS_OP_BAD_INDEX), edges
        edges[k] = np.int64(point)
    return OK, edges


@jit_with_nrt
def _scalar_float(arena, table, row):
    """(status, a float scalar or one-element 1-D input as float64)."""
    if not signal_type(dtype(table, row)):
        return np.int32(STATUS_OP_BAD_DTYPE), 0.0
    if numel(table, row) != 1 or not holds(table, row):
        return np.int32(STATUS_OP_BAD_SHAPE), 0.0
    return OK, read_float(arena, table, row, 1)[0]


@jit_with_nrt
def mel_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = mel_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    _, bins, length = _shape(arena, table)
    status, rate = integer_scalar(arena, table, 2, True)
    if status != 0:
        return status
    status, lower = _scalar_float(arena, table, 3)
    if status != 0:
        return status
    status, upper = _scalar_float(arena, table, 4)
    if status != 0:
        return status
    if rate < 1 or not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    status, edges = band_edges(bins, length, rate, lower, upper, dtype(table, 3) == F32)
    if status != 0:
        return status
    size = numel(table, n_in)
    out = np.zeros(size, dtype=np.float64)
    spectrum = length // 2 + 1
    for i in range(bins):
        left, centre, right = edges[i], edges[i + 1], edges[i + 2]
        # The bins written: the centre, the rise up to it, the fall after it.
        if (centre >= left or right > centre) and centre >= spectrum:
            return np.int32(STATUS_OP_BAD_INDEX)
        if right > centre and right > spectrum:
            return np.int32(STATUS_OP_BAD_INDEX)
        if centre == left:
            out[centre * bins + i] = 1.0
        else:
            for j in range(left, centre + 1):
                out[j * bins + i] = (j - left) / (centre - left)
        for j in range(centre, right):
            out[j * bins + i] = (right - j) / (right - centre)
    return write_float(arena, table, n_in, out, size, False)


def output_type(attributes):
    """The DType of output_datatype (default FLOAT), or -1 if rtsoa does not produce it."""
    code = DTYPE_OF_ONNX.get(int(attributes.get("output_datatype", 1)), -1)
    return int(code) if code in OUTPUT_TYPES else -1


def encode_mel(attributes, inputs):
    """MelWeightMatrix slots: the output DType."""
    return [output_type(attributes)]


register_op(
    "MelWeightMatrix",
    mel_infer,
    mel_compute,
    encode=encode_mel,
    inputs=(5, 5),
    data_inputs=(0, 1),
    dtypes={0: SCALAR_TYPES, 1: SCALAR_TYPES, 2: SCALAR_TYPES, 3: SIGNAL_TYPES, 4: SIGNAL_TYPES},
)
