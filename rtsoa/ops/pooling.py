"""Pools and LRN: MaxPool (with its optional Indices), AveragePool, GlobalAveragePool,
GlobalMaxPool, LRN; float32 / float64, 1-D to 3-D windows.

Window geometry (kernel, strides, dilations, pads, auto_pad, ceil_mode) is the convolutions'
(`window.window_geometry`), so output sizes follow onnxruntime's rules: ceil_mode drops a last
window that would start in the end padding; SAME_UPPER / SAME_LOWER give ceil(in / stride)
outputs. AveragePool divides by the taps inside the input, or with count_include_pad by the
taps inside the padded input (taps past the end padding, which ceil_mode adds, never count).
MaxPool propagates NaN (a window holding one gives NaN, whatever its position, as numpy's
max and PyTorch's max_pool do; onnxruntime skips NaN and onnx.reference keeps only a first-tap
NaN), and its Indices then name the window's first NaN. MaxPool's Indices are flat indices into
X, row-major (storage_order 0) or, for 2-D and 1-D pools, column-major within each image plane
(storage_order 1), as onnxruntime writes them.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    FLOATS,
    I64,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_SHAPE,
    copy_shape,
    dim,
    dtype,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.attributes import onnx_float
from rtsoa.ops.parts import NOT_SHARED, share_items
from rtsoa.ops.pool_loops import AVERAGE, MAX, pool_planes, pool_run
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import (
    COUNT_INCLUDE_PAD,
    G_C,
    G_IN,
    G_K,
    G_N,
    G_OUT,
    LIMIT,
    POOL,
    STORAGE_ORDER,
    element_count,
    encode_window,
    float_inputs,
    holds,
    window_geometry,
    window_output,
)

POOL_GRAIN = 1 << 16  # output taps (outputs x kernel taps) worth a part of their own


@jit_with_nrt
def _pool_checks(table, n_out, attrs):
    """(status, geometry) of MaxPool / AveragePool."""
    status = float_inputs(table, 1)
    if status != 0:
        return status, np.zeros(1, dtype=np.int64)
    status, geo = window_geometry(table, attrs, POOL)
    if status != 0:
        return status, geo
    include_pad = attrs[COUNT_INCLUDE_PAD]
    order = attrs[STORAGE_ORDER]
    if include_pad < 0 or include_pad > 1 or order < 0 or order > 1:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), geo
    if n_out > 1 and order == 1 and rank(table, 0) > 4:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), geo  # column-major indices of 3-D pools
    return np.int32(0), geo


@jit_with_nrt
def pool_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, geo = _pool_checks(table, n_out, attrs)
    if status != 0:
        return status
    spatial = rank(table, 0) - 2
    window_output(table, 1, dtype(table, 0), geo, spatial)
    if n_out > 1:  # MaxPool's Indices
        window_output(table, 2, I64, geo, spatial)
    return np.int32(0)


@jit_with_nrt.keeping_literals("op", "element")
def _pool_compute(op, arena, table, n_in, n_out, attrs, fattrs, element, mode):
    status, geo = _pool_checks(table, n_out, attrs)
    if status != 0:
        return status
    planes = geo[G_N] * geo[G_C]
    x_count = planes * geo[G_IN] * geo[G_IN + 1] * geo[G_IN + 2]
    y_count = planes * geo[G_OUT] * geo[G_OUT + 1] * geo[G_OUT + 2]
    size = 4 if element == F32 else 8
    if not (holds(table, 0, x_count, size) and holds(table, 1, y_count, size)):
        return np.int32(STATUS_OP_BAD_SHAPE)
    if n_out > 1 and not holds(table, 2, y_count, 8):
        return np.int32(STATUS_OP_BAD_SHAPE)
    indices = view(arena, table, 2, np.int64) if n_out > 1 else np.zeros(0, dtype=np.int64)
    include_pad = attrs[COUNT_INCLUDE_PAD] == 1
    column_major = attrs[STORAGE_ORDER] == 1
    # the planes this call computes; Indices are flat indices into all of X: never split
    work = y_count * geo[G_K] * geo[G_K + 1] * geo[G_K + 2]
    status, first, end = share_items(
        arena, table, attrs, fattrs, n_in, n_out, mode, planes, work, POOL_GRAIN, n_out == 1
    )
    if status != NOT_SHARED:
        return np.int32(status)
    count = end - first
    if element == F32:
        x = view(arena, table, 0, np.float32)
        y = view(arena, table, 1, np.float32)
        if n_out > 1:
            pool_run(op, x, y, indices, geo, include_pad, column_major)
        else:
            pool_planes(op, x, y, geo, include_pad, first, count)
    else:
        x = view(arena, table, 0, np.float64)
        y = view(arena, table, 1, np.float64)
        if n_out > 1:
            pool_run(op, x, y, indices, geo, include_pad, column_major)
        else:
            pool_planes(op, x, y, geo, include_pad, first, count)
    return np.int32(0)


@jit_with_nrt.keeping_literals("element")
def max_pool_compute(arena, table, n_in, n_out, attrs, fattrs, element, mode):
    return _pool_compute(MAX, arena, table, n_in, n_out, attrs, fattrs, element, mode)


@jit_with_nrt.keeping_literals("element")
def average_pool_compute(arena, table, n_in, n_out, attrs, fattrs, element, mode):
    return _pool_compute(AVERAGE, arena, table, n_in, n_out, attrs, fattrs, element, mode)


# -- global pools ---------------------------------------------------------------------------------


@jit_with_nrt
def _planes(table):
    """(status, planes, plane size) of an (N, C, spatial...) input, rank 3 or more."""
    if rank(table, 0) < 3:
        return np.int32(STATUS_OP_BAD_SHAPE), np.int64(0), np.int64(0)
    count = element_count(table, 0)
    if count < 0:
        return np.int32(STATUS_OP_BAD_SHAPE), np.int64(0), np.int64(0)
    planes = dim(table, 0, 0) * dim(table, 0, 1)
    size = np.int64(1)
    for axis in range(2, rank(table, 0)):
        size *= dim(table, 0, axis)
    return np.int32(0), planes, size


@jit_with_nrt
def global_pool_infer(arena, table, n_in, n_out, attrs, fattrs):
    status = float_inputs(table, 1)
    if status != 0:
        return status
    status, planes, size = _planes(table)
    if status != 0:
        return status
    set_output(table, 1, dtype(table, 0), rank(table, 0))
    for axis in range(rank(table, 0)):
        set_dim(table, 1, axis, dim(table, 0, axis) if axis < 2 else 1)
    return np.int32(0)


@jit_with_nrt.keeping_literals("op")
def _global_run(op, x, y, planes, size):
    for p in range(planes):
        values = x[p * size : (p + 1) * size]
        if op == MAX:
            best = -np.inf
            for v in values:
                if v > best or (v != v and best == best):  # NaN propagates, as in MaxPool
                    best = v
            y[p] = best
        else:
            total = 0.0
            for v in values:
                total += v
            y[p] = total / size if size > 0 else np.nan


@jit_with_nrt.keeping_literals("op", "element")
def _global_compute(op, arena, table, element):
    status = float_inputs(table, 1)
    if status != 0:
        return status
    status, planes, size = _planes(table)
    if status != 0:
        return status
    item = 4 if element == F32 else 8
    if not (holds(table, 0, planes * size, item) and holds(table, 1, planes, item)):
        return np.int32(STATUS_OP_BAD_SHAPE)
    if element == F32:
        _global_run(
            op, view(arena, table, 0, np.float32), view(arena, table, 1, np.float32), planes, size
        )
    else:
        _global_run(
            op, view(arena, table, 0, np.float64), view(arena, table, 1, np.float64), planes, size
        )
    return np.int32(0)


@jit_with_nrt.keeping_literals("element")
def global_max_pool_compute(arena, table, n_in, n_out, attrs, fattrs, element):
    return _global_compute(MAX, arena, table, element)


@jit_with_nrt.keeping_literals("element")
def global_average_pool_compute(arena, table, n_in, n_out, attrs, fattrs, element):
    return _global_compute(AVERAGE, arena, table, element)


# -- LRN: y = x / (bias + alpha / size * sum of x^2 over nearby channels) ^ beta -----------------
# attrs: [size, alpha (float), beta (float), bias (float)]


@jit_with_nrt
def _lrn_checks(table, attrs):
    """(status, planes, plane size) of LRN."""
    status = float_inputs(table, 1)
    if status != 0:
        return status, np.int64(0), np.int64(0)
    status, planes, size = _planes(table)
    if status != 0:
        return status, planes, size
    if attrs.shape[0] < 4 or attrs[0] < 1 or attrs[0] >= LIMIT:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), planes, size
    return np.int32(0), planes, size


@jit_with_nrt
def lrn_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, planes, size = _lrn_checks(table, attrs)
    if status != 0:
        return status
    copy_shape(table, 0, 1)
    return np.int32(0)


@jit_with_nrt
def _lrn_run(x, y, images, channels, inner, size, alpha, beta, bias):
    before = (size - 1) // 2
    after = size - 1 - before
    scale = alpha / size
    for n in range(images):
        for c in range(channels):
            low = max(c - before, 0)
            high = min(c + after + 1, channels)
            for j in range(inner):
                total = 0.0
                for c2 in range(low, high):
                    v = x[(n * channels + c2) * inner + j]
                    total += v * v
                at = (n * channels + c) * inner + j
                y[at] = x[at] / (bias + scale * total) ** beta


@jit_with_nrt
def lrn_compute(arena, table, n_in, n_out, attrs, fattrs):
    status, planes, inner = _lrn_checks(table, attrs)
    if status != 0:
        return status
    item = 4 if dtype(table, 0) == F32 else 8
    count = planes * inner
    if not (holds(table, 0, count, item) and holds(table, 1, count, item)):
        return np.int32(STATUS_OP_BAD_SHAPE)
    images = dim(table, 0, 0)
    channels = dim(table, 0, 1)
    if item == 4:
        x = view(arena, table, 0, np.float32)
        y = view(arena, table, 1, np.float32)
        _lrn_run(x, y, images, channels, inner, attrs[0], fattrs[1], fattrs[2], fattrs[3])
    else:
        x = view(arena, table, 0, np.float64)
        y = view(arena, table, 1, np.float64)
        _lrn_run(x, y, images, channels, inner, attrs[0], fattrs[1], fattrs[2], fattrs[3])
    return np.int32(0)


def encode_lrn(attributes, inputs):
    """LRN slots: size (required; 0 when missing, which infer refuses), alpha, beta, bias."""
    return [
        int(attributes.get("size", 0)),
        onnx_float(attributes.get("alpha", 0.0001)),
        onnx_float(attributes.get("beta", 0.75)),
        onnx_float(attributes.get("bias", 1.0)),
    ]


# per-dtype entries (variants): the compute takes input 0's dtype code as `element`
_FLOAT_VARIANTS = {"dtypes": {0: FLOATS}, "variants": True}
register_op(
    "MaxPool",
    pool_infer,
    max_pool_compute,
    encode=encode_window,
    outputs=(1, 2),
    parts=True,
    **_FLOAT_VARIANTS,
)
register_op(
    "AveragePool",
    pool_infer,
    average_pool_compute,
    encode=encode_window,
    parts=True,
    **_FLOAT_VARIANTS,
)
register_op("GlobalMaxPool", global_pool_infer, global_max_pool_compute, **_FLOAT_VARIANTS)
register_op("GlobalAveragePool", global_pool_infer, global_average_pool_compute, **_FLOAT_VARIANTS)
register_op("LRN", lrn_infer, lrn_compute, encode=encode_lrn)
