"""TopK (opsets 10 to 24; opset 1's attribute k becomes the input at lowering): the k largest
(or smallest) elements along an axis, and their indices.

Inputs: X, and K, an int64 one-element 1-D tensor whose data shape inference reads (a
`data_inputs` position). attrs: [axis, largest, sorted]. Outputs: Values (X's type) and
Indices (int64), X's shape with the axis k long. Equal values keep the lower index first, as
ONNX requires; NaN orders above every number (numpy's sort order). The results are always
sorted: with sorted=0 ONNX leaves the order open, so that is one of the orders it allows.
K below 0 or above the axis length fails with STATUS_OP_BAD_INDEX. float32 / float64, int32 /
int64, uint32 / uint64.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    F64,
    I32,
    I64,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
    U32,
    U64,
    DType,
    dim,
    dtype,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.copying import holds
from rtsoa.ops.cumulative import TYPES, axis_split, integer_scalar
from rtsoa.ops.lists import attr_axis
from rtsoa.ops.registry import register_op


@jit_with_nrt
def topk_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 3 or attrs[1] < 0 or attrs[1] > 1 or attrs[2] < 0 or attrs[2] > 1:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    kind = dtype(table, 0)
    floats = kind == F32 or kind == F64
    if not (floats or kind == I32 or kind == I64 or kind == U32 or kind == U64):
        return np.int32(STATUS_OP_BAD_DTYPE)
    r = rank(table, 0)
    axis = attr_axis(attrs, 0, r, False)
    if axis < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    status, k = integer_scalar(arena, table, 1, False)
    if status != 0:
        return status
    if k < 0 or k > dim(table, 0, axis):
        return np.int32(STATUS_OP_BAD_INDEX)
    for row in range(n_in, n_in + n_out):
        set_output(table, row, kind if row == n_in else I64, r)
        for a in range(r):
            set_dim(table, row, a, k if a == axis else dim(table, 0, a))
    return OK


@jit_with_nrt
def _select(x, values, indices, outer, length, inner, k, largest):
    """For each slice along the axis: its k largest / smallest, ties by the lower index."""
    line = np.empty(length, dtype=x.dtype)
    for o in range(outer):
        for i in range(inner):
            for p in range(length):  # largest: reversed, so a stable sort puts the later
                source = length - 1 - p if largest else p  # of equal values first
                line[p] = x[(o * length + source) * inner + i]
            order = np.argsort(line, kind="mergesort")
            for j in range(k):
                at = order[length - 1 - j] if largest else order[j]
                position = length - 1 - at if largest else at
                out = (o * k + j) * inner + i
                values[out] = line[at]
                indices[out] = position


@jit_inline_ir
def _run_as(arena, table, n_in, n_out, axis, k, largest, kind):
    x = view(arena, table, 0, kind)
    values = view(arena, table, n_in, kind)
    indices = view(arena, table, n_in + 1 if n_out > 1 else n_in, np.int64)
    if n_out < 2:
        indices = np.empty(values.shape[0], dtype=np.int64)
    outer, length, inner = axis_split(table, 0, axis)
    _select(x, values, indices, outer, length, inner, k, largest)


@jit_with_nrt.keeping_literals("kind")
def topk_compute(arena, table, n_in, n_out, attrs, fattrs, kind):
    status = topk_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    for row in range(n_in + n_out):
        if row != 1 and not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    axis = attr_axis(attrs, 0, rank(table, 0), False)
    _, k = integer_scalar(arena, table, 1, False)
    largest = attrs[1] == 1
    if kind == F32:
        _run_as(arena, table, n_in, n_out, axis, k, largest, np.float32)
    elif kind == F64:
        _run_as(arena, table, n_in, n_out, axis, k, largest, np.float64)
    elif kind == I32:
        _run_as(arena, table, n_in, n_out, axis, k, largest, np.int32)
    elif kind == I64:
        _run_as(arena, table, n_in, n_out, axis, k, largest, np.int64)
    elif kind == U32:
        _run_as(arena, table, n_in, n_out, axis, k, largest, np.uint32)
    elif kind == U64:
        _run_as(arena, table, n_in, n_out, axis, k, largest, np.uint64)
    else:
        return np.int32(STATUS_OP_BAD_DTYPE)
    return OK


def encode_topk(attributes, inputs):
    """TopK slots: axis (default -1), largest (1), sorted (1)."""
    return [
        int(attributes.get("axis", -1)),
        int(attributes.get("largest", 1)),
        int(attributes.get("sorted", 1)),
    ]


register_op(
    "TopK",
    topk_infer,
    topk_compute,
    encode=encode_topk,
    inputs=(2, 2),
    outputs=(1, 2),
    data_inputs=(1,),
    dtypes={0: TYPES, 1: frozenset({DType.INT64})},
    variants=True,
)
