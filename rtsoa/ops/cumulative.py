"""Running sums and products along an axis: CumSum (opsets 11, 14) and CumProd (opset 26).

Inputs: x, and axis, an int32 / int64 scalar (or one-element 1-D) tensor whose data shape
inference reads (a `data_inputs` position: a constant axis out of [-rank, rank) is refused at
lowering). attrs: [exclusive, reverse], each 0 / 1. The output has x's shape and type; element
k along the axis is the sum (product) of the elements before k (exclusive) or up to k
(inclusive), counted from the end with `reverse`; an exclusive first element is 0 (1).
The running value is kept in x's type and accumulated in axis order, as onnxruntime does
(integers wrap). float32 / float64, int32 / int64, uint32 / uint64.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    F64,
    I32,
    I64,
    NUMBERS,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_NEEDS_DATA,
    U32,
    U64,
    DType,
    copy_shape,
    dim,
    dtype,
    has_data,
    int_data,
    numel,
    rank,
    view,
)
from rtsoa.ops.copying import holds
from rtsoa.ops.registry import register_op

SUM = 0
PRODUCT = 1
TYPES = NUMBERS | {DType.UINT32, DType.UINT64}


@jit_with_nrt
def integer_scalar(arena, table, row, takes_int32):
    """(status, value) of input `row`: an int64 (or, if `takes_int32`, int32) scalar or
    one-element 1-D tensor whose data is available (CumSum's axis, TopK's k, a window's
    size)."""
    kind = dtype(table, row)
    if kind != I64 and (kind != I32 or not takes_int32):
        return np.int32(STATUS_OP_BAD_DTYPE), np.int64(0)
    if rank(table, row) > 1 or numel(table, row) != 1:
        return np.int32(STATUS_OP_BAD_SHAPE), np.int64(0)
    if not has_data(table, row) or not holds(table, row):
        return np.int32(STATUS_OP_NEEDS_DATA), np.int64(0)
    return OK, int_data(arena, table, row, 0)


@jit_with_nrt
def _axis(arena, table):
    """(status, the axis in 0 .. rank - 1) from input 1."""
    status, axis = integer_scalar(arena, table, 1, True)
    r = rank(table, 0)
    if status == 0 and (axis < -r or axis >= r):
        status = np.int32(STATUS_OP_BAD_ATTRIBUTE)
    return status, axis + r if axis < 0 else axis


@jit_with_nrt
def cumulative_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 2:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    for flag in range(2):
        if attrs[flag] != 0 and attrs[flag] != 1:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    kind = dtype(table, 0)
    floats = kind == F32 or kind == F64
    if not (floats or kind == I32 or kind == I64 or kind == U32 or kind == U64):
        return np.int32(STATUS_OP_BAD_DTYPE)
    if rank(table, 0) < 1:  # a scalar has no axis
        return np.int32(STATUS_OP_BAD_SHAPE)
    status, _ = _axis(arena, table)
    if status != 0:
        return status
    copy_shape(table, 0, n_in)
    return OK


@jit_inline_ir
def axis_split(table, row, axis):
    """(outer, length, inner): operand `row` as outer x length x inner elements in C order,
    `length` along `axis`."""
    outer = np.int64(1)
    for a in range(axis):
        outer *= dim(table, row, a)
    inner = np.int64(1)
    for a in range(axis + 1, rank(table, row)):
        inner *= dim(table, row, a)
    return outer, dim(table, row, axis), inner


@jit_with_nrt
def _cumulate(x, out, outer, length, inner, exclusive, reverse, product, start):
    """out along the axis (outer x length x inner in C order): the running sum / product from
    `start` (0 or 1 in x's type)."""
    for o in range(outer):
        for i in range(inner):
            running = start
            for step in range(length):
                k = length - 1 - step if reverse else step
                at = (o * length + k) * inner + i
                value = x[at]
                if exclusive:
                    out[at] = running
                running = running * value if product else running + value
                if not exclusive:
                    out[at] = running


@jit_inline_ir
def _run_as(arena, table, n_in, attrs, axis, product, kind):
    x = view(arena, table, 0, kind)
    out = view(arena, table, n_in, kind)
    outer, length, inner = axis_split(table, 0, axis)
    start = kind(1) if product else kind(0)
    exclusive, reverse = attrs[0] == 1, attrs[1] == 1
    _cumulate(x, out, outer, length, inner, exclusive, reverse, product, start)


@jit_with_nrt.keeping_literals("op", "kind")
def cumulative_compute(arena, table, n_in, n_out, attrs, fattrs, op, kind):
    """CumSum (op SUM) and CumProd (op PRODUCT)."""
    status = cumulative_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    if not holds(table, 0) or not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    _, axis = _axis(arena, table)
    product = op == PRODUCT
    if kind == F32:
        _run_as(arena, table, n_in, attrs, axis, product, np.float32)
    elif kind == F64:
        _run_as(arena, table, n_in, attrs, axis, product, np.float64)
    elif kind == I32:
        _run_as(arena, table, n_in, attrs, axis, product, np.int32)
    elif kind == I64:
        _run_as(arena, table, n_in, attrs, axis, product, np.int64)
    elif kind == U32:
        _run_as(arena, table, n_in, attrs, axis, product, np.uint32)
    elif kind == U64:
        _run_as(arena, table, n_in, attrs, axis, product, np.uint64)
    else:
        return np.int32(STATUS_OP_BAD_DTYPE)
    return OK


def encode_cumulative(attributes, inputs):
    """CumSum / CumProd slots: exclusive, reverse (default 0)."""
    return [int(attributes.get("exclusive", 0)), int(attributes.get("reverse", 0))]


for _name, _op in (("CumSum", SUM), ("CumProd", PRODUCT)):
    register_op(
        _name,
        cumulative_infer,
        cumulative_compute,
        encode=encode_cumulative,
        inputs=(2, 2),
        data_inputs=(1,),
        constants=(_op,),
        dtypes={0: TYPES, 1: frozenset({DType.INT32, DType.INT64})},
        variants=True,
    )
