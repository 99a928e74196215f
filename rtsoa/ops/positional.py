"""Ops that pick elements by their position, for any element type (they copy bytes): Trilu
(keep the upper or lower triangle of the last two axes) and GatherElements (one index per
output element along an axis).

Trilu (opset 14): attrs [upper] (default 1); the optional input k (an int64 scalar) shifts the
diagonal: upper keeps j - i >= k, lower keeps j - i <= k, the rest is zero bytes.
GatherElements (opset 13): attrs [axis]; the output has the indices' shape, and output element
(..., i_axis, ...) is data[..., indices[..., i_axis, ...], ...]. Indices (int32 / int64) may be
negative (counted from the end); one outside [-size, size) fails the op with
STATUS_OP_BAD_INDEX. On the other axes the indices' dims may not exceed the data's.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    I32,
    I64,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
    DType,
    copy_shape,
    dim,
    dtype,
    int_data,
    numel,
    present,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.copying import holds, item_size, row_strides
from rtsoa.ops.lists import attr_axis, encode_axis
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import element_count

# -- Trilu ----------------------------------------------------------------------------------------


@jit_with_nrt
def trilu_infer(arena, table, n_in, n_out, attrs, fattrs):
    if rank(table, 0) < 2 or element_count(table, 0) < 0 or item_size(table, 0) == 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if attrs.shape[0] < 1 or (attrs[0] != 0 and attrs[0] != 1):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if n_in > 1 and present(table, 1):
        if dtype(table, 1) != I64:
            return np.int32(STATUS_OP_BAD_DTYPE)
        if numel(table, 1) != 1:
            return np.int32(STATUS_OP_BAD_SHAPE)
    copy_shape(table, 0, n_in)
    return OK


@jit_with_nrt
def _trilu_run(src, dst, size, matrices, rows, columns, upper, k):
    """Keep columns j of row i with j - i >= k (upper) or <= k (lower); zero the others."""
    width = rows + columns  # |k| beyond this keeps or drops everything: clamp (no overflow)
    k = min(max(k, -width), width)
    for m in range(matrices):
        for i in range(rows):
            base = ((m * rows + i) * columns) * size
            first = max(min(i + k, columns), 0) if upper else 0
            stop = columns if upper else max(min(i + k + 1, columns), 0)
            for b in range(base, base + columns * size):
                dst[b] = 0
            for b in range(base + first * size, base + stop * size):
                dst[b] = src[b]


@jit_with_nrt
def trilu_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = trilu_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    has_k = n_in > 1 and present(table, 1)
    if not holds(table, 0) or not holds(table, n_in) or (has_k and not holds(table, 1)):
        return np.int32(STATUS_OP_BAD_SHAPE)
    r = rank(table, 0)
    rows, columns = dim(table, 0, r - 2), dim(table, 0, r - 1)
    count = numel(table, 0)
    matrices = count // (rows * columns) if rows * columns > 0 else np.int64(0)
    k = int_data(arena, table, 1, 0) if has_k else np.int64(0)
    src = view(arena, table, 0, np.uint8)
    dst = view(arena, table, n_in, np.uint8)
    _trilu_run(src, dst, item_size(table, 0), matrices, rows, columns, attrs[0] == 1, k)
    return OK


def encode_trilu(attributes, inputs):
    """Trilu slots: upper (default 1)."""
    return [int(attributes.get("upper", 1))]


# -- GatherElements ------------------------------------------------------------------------------


@jit_with_nrt
def gather_elements_infer(arena, table, n_in, n_out, attrs, fattrs):
    r = rank(table, 0)
    axis = attr_axis(attrs, 0, r, False)
    if axis < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    kind = dtype(table, 1)
    if (kind != I64 and kind != I32) or item_size(table, 0) == 0:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if rank(table, 1) != r or element_count(table, 0) < 0 or element_count(table, 1) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    for a in range(r):
        if a != axis and dim(table, 1, a) > dim(table, 0, a):
            return np.int32(STATUS_OP_BAD_SHAPE)
    set_output(table, n_in, dtype(table, 0), r)
    for a in range(r):
        set_dim(table, n_in, a, dim(table, 1, a))
    return OK


@jit_with_nrt
def gather_elements_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = gather_elements_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    if not (holds(table, 0) and holds(table, 1) and holds(table, n_in)):
        return np.int32(STATUS_OP_BAD_SHAPE)
    r = rank(table, 0)
    axis = attr_axis(attrs, 0, r, False)
    size = item_size(table, 0)
    strides = row_strides(table, 0)
    length = dim(table, 0, axis)
    src = view(arena, table, 0, np.uint8)
    dst = view(arena, table, n_in, np.uint8)
    coordinate = np.zeros(r, dtype=np.int64)
    base = np.int64(0)  # the source offset of the coordinate, less its axis term
    for o in range(numel(table, 1)):
        index = int_data(arena, table, 1, o)
        if index < 0:
            index += length
        if index < 0 or index >= length:
            return np.int32(STATUS_OP_BAD_INDEX)
        source = (base + index * strides[axis]) * size
        for b in range(size):
            dst[o * size + b] = src[source + b]
        for a in range(r - 1, -1, -1):  # the next coordinate, in C order
            coordinate[a] += 1
            if a != axis:
                base += strides[a]
            if coordinate[a] < dim(table, 1, a):
                break
            if a != axis:
                base -= strides[a] * coordinate[a]
            coordinate[a] = 0
    return OK


register_op(
    "Trilu",
    trilu_infer,
    trilu_compute,
    encode=encode_trilu,
    inputs=(1, 2),
    dtypes={1: frozenset({DType.INT64})},
)
register_op(
    "GatherElements",
    gather_elements_infer,
    gather_elements_compute,
    encode=encode_axis(0),
    inputs=(2, 2),
)
