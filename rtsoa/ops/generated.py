"""Ops whose output is a pattern placed by their inputs: OneHot and EyeLike. Both write
elements as bytes, so they take every element type.

OneHot (opsets 9-28): inputs (indices, depth, values), attrs [axis]. The output has the
indices' shape with an axis of `depth` inserted at `axis` (-rank - 1 .. rank), and the values'
element type: values[1] where the position on that axis is the index (negative indices
counted from the end), values[0] elsewhere; an index outside [-depth, depth) gives a row of
values[0] (ONNX). Indices and depth may be any integer or float type (floats truncated toward
zero); depth is read by shape inference, so it must be known at lowering or is read at run
time, and below 1 it fails with STATUS_OP_BAD_SHAPE. Values has two elements.
EyeLike (opsets 9-22): attrs [dtype (a DType code, 0: the input's), k]; a 2-D output of the
input's shape, one on diagonal k (column - row = k), zero elsewhere.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.abi.dtypes import DTYPE_OF_ONNX
from rtsoa.ops.abi import (
    BOOL,
    F16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_NEEDS_DATA,
    U8,
    U16,
    U32,
    U64,
    DType,
    dim,
    dtype,
    has_data,
    numel,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.copying import holds, item_size
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import LIMIT, element_count

OUT_OF_RANGE = np.int64(-(1 << 62))  # an index no axis holds (NaN, or beyond int64)


@jit_with_nrt
def integer_at(arena, table, row, k):
    """Element `k` of row `row` as int64, for any integer or float dtype (floats truncated
    toward zero; NaN and floats beyond int64 give OUT_OF_RANGE, as does an unknown dtype)."""
    kind = dtype(table, row)
    if kind == I64:
        return view(arena, table, row, np.int64)[k]
    if kind == I32:
        return np.int64(view(arena, table, row, np.int32)[k])
    if kind == I16:
        return np.int64(view(arena, table, row, np.int16)[k])
    if kind == I8:
        return np.int64(view(arena, table, row, np.int8)[k])
    if kind == U8 or kind == BOOL:
        return np.int64(view(arena, table, row, np.uint8)[k])
    if kind == U16:
        return np.int64(view(arena, table, row, np.uint16)[k])
    if kind == U32:
        return np.int64(view(arena, table, row, np.uint32)[k])
    if kind == U64:
        value = view(arena, table, row, np.uint64)[k]
        return np.int64(value) if value < np.uint64(1 << 62) else OUT_OF_RANGE
    value = np.float64(0)
    if kind == F32:
        value = np.float64(view(arena, table, row, np.float32)[k])
    elif kind == F64:
        value = view(arena, table, row, np.float64)[k]
    else:
        return OUT_OF_RANGE
    if not (abs(value) < 4.0e18):  # NaN too
        return OUT_OF_RANGE
    return np.int64(value)


NUMERIC_CODES = np.array([F32, F64, I8, I16, I32, I64, U8, U16, U32, U64], dtype=np.int64)


@jit_with_nrt
def numeric(table, row):
    """Is row `row`'s dtype one `integer_at` reads?"""
    kind = dtype(table, row)
    for code in NUMERIC_CODES:
        if kind == code:
            return True
    return False


# -- OneHot ---------------------------------------------------------------------------------------


@jit_with_nrt
def one_hot_infer(arena, table, n_in, n_out, attrs, fattrs):
    r = rank(table, 0)
    if attrs.shape[0] < 1:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    axis = attrs[0] + r + 1 if attrs[0] < 0 else attrs[0]
    if axis < 0 or axis > r:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if not (numeric(table, 0) and numeric(table, 1)) or item_size(table, 2) == 0:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if numel(table, 1) != 1 or rank(table, 1) > 1 or rank(table, 2) != 1 or dim(table, 2, 0) != 2:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if not has_data(table, 1):
        return np.int32(STATUS_OP_NEEDS_DATA)
    depth = integer_at(arena, table, 1, 0)
    if depth < 1 or depth > LIMIT or element_count(table, 0) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    set_output(table, n_in, dtype(table, 2), r + 1)
    for a in range(r + 1):
        if a < axis:
            set_dim(table, n_in, a, dim(table, 0, a))
        elif a == axis:
            set_dim(table, n_in, a, depth)
        else:
            set_dim(table, n_in, a, dim(table, 0, a - 1))
    if element_count(table, n_in) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    return OK


@jit_with_nrt
def one_hot_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = one_hot_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    for row in range(n_in + 1):
        if not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    r = rank(table, 0)
    axis = attrs[0] + r + 1 if attrs[0] < 0 else attrs[0]
    depth = dim(table, n_in, axis)
    inner = np.int64(1)  # index elements after the axis
    for a in range(axis, r):
        inner *= dim(table, 0, a)
    size = item_size(table, 2)
    values = view(arena, table, 2, np.uint8)
    out = view(arena, table, n_in, np.uint8)
    count = numel(table, n_in)
    for o in range(count):  # every element off
        for b in range(size):
            out[o * size + b] = values[b]
    for i in range(numel(table, 0)):
        index = integer_at(arena, table, 0, i)
        if index < 0:
            index += depth
        if index < 0 or index >= depth:
            continue
        outer, within = (i // inner, i % inner) if inner > 0 else (np.int64(0), np.int64(0))
        o = (outer * depth + index) * inner + within
        for b in range(size):
            out[o * size + b] = values[size + b]
    return OK


# -- EyeLike --------------------------------------------------------------------------------------


@jit_with_nrt
def _eye_kind(table, attrs):
    return attrs[0] if attrs[0] != 0 else dtype(table, 0)


@jit_with_nrt
def eye_like_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 2:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    kind = _eye_kind(table, attrs)
    if kind <= 0 or kind > U64 or kind == F16:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if rank(table, 0) != 2 or element_count(table, 0) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    set_output(table, n_in, kind, 2)
    set_dim(table, n_in, 0, dim(table, 0, 0))
    set_dim(table, n_in, 1, dim(table, 0, 1))
    return OK


@jit_with_nrt
def one_bytes(kind):
    """The bytes of 1 in dtype `kind` (bool, the integers, float16, float32, float64)."""
    if kind == F32:
        return np.ones(1, dtype=np.float32).view(np.uint8)
    if kind == F64:
        return np.ones(1, dtype=np.float64).view(np.uint8)
    if kind == F16:
        return np.full(1, 0x3C00, dtype=np.uint16).view(np.uint8)
    if kind == I16 or kind == U16:
        return np.ones(1, dtype=np.int16).view(np.uint8)
    if kind == I32 or kind == U32:
        return np.ones(1, dtype=np.int32).view(np.uint8)
    if kind == I64 or kind == U64:
        return np.ones(1, dtype=np.int64).view(np.uint8)
    return np.ones(1, dtype=np.uint8)  # int8, uint8, bool


@jit_with_nrt
def eye_like_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = eye_like_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    if not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    rows, columns = dim(table, n_in, 0), dim(table, n_in, 1)
    one = one_bytes(dtype(table, n_in))
    size = one.shape[0]
    out = view(arena, table, n_in, np.uint8)
    out[: rows * columns * size] = 0
    k = min(max(attrs[1], -rows), columns)  # beyond either edge no diagonal (no overflow)
    for i in range(rows):
        if 0 <= i + k < columns:
            o = (i * columns + i + k) * size
            for b in range(size):
                out[o + b] = one[b]
    return OK


def encode_one_hot(attributes, inputs):
    """OneHot slots: axis (default -1)."""
    return [int(attributes.get("axis", -1))]


def encode_eye_like(attributes, inputs):
    """EyeLike slots: the dtype attribute as a DType code (0: the input's; -1 for a type rtsoa
    does not have, which the op refuses), k."""
    onnx_type = int(attributes.get("dtype", 0))
    kind = int(DTYPE_OF_ONNX.get(onnx_type, -1)) if onnx_type else 0
    return [kind, int(attributes.get("k", 0))]


register_op(
    "OneHot",
    one_hot_infer,
    one_hot_compute,
    encode=encode_one_hot,
    inputs=(3, 3),
    data_inputs=(1,),
)
register_op(
    "EyeLike",
    eye_like_infer,
    eye_like_compute,
    encode=encode_eye_like,
    # not float16, nor the narrow types (bfloat16 and below: stored and cast, not compared)
    dtypes={
        0: frozenset(DType(code) for code in range(DType.FLOAT32, DType.BFLOAT16)) - {DType.FLOAT16}
    },
)
