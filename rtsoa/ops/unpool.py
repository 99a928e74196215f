"""MaxUnpool (opsets 9, 11, 22): MaxPool's values put back where its indices say.

Inputs: X [N, C, spatial...], I (int64, X's shape: flat indices into the unpooled tensor, as
MaxPool's Indices output gives them), output_shape (optional int64 1-D, X's rank long, whose
data shape inference reads). attrs: [d_kernel, d_pads, d_strides, kernel_shape...,
pads..., strides...] (kernel_shape required; pads and strides may be absent, length 0).
The unpooled shape is N, C and (X_i - 1) stride_i - pad_begin_i - pad_end_i + kernel_i per
spatial axis; Y is zeros with X[k] at flat index I[k] of it (a later k wins a shared index), then,
given output_shape, laid into the top-left corner of zeros of that shape, as onnx.reference
does. An index outside the unpooled tensor fails with STATUS_OP_BAD_INDEX; an output_shape
smaller than the unpooled shape (or of other N, C) with STATUS_OP_BAD_SHAPE. float32 /
float64.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    F64,
    FLOATS,
    I64,
    MAX_RANK,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_NEEDS_DATA,
    DType,
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
from rtsoa.ops.col2im import list_slots
from rtsoa.ops.copying import holds
from rtsoa.ops.registry import register_op

LISTS = ("kernel_shape", "pads", "strides")


@jit_with_nrt
def _unpooled(table, attrs):
    """(status, the unpooled shape [MAX_RANK])."""
    shape = np.zeros(MAX_RANK, dtype=np.int64)
    r = rank(table, 0)
    d = r - 2
    if d < 1 or rank(table, 1) != r:
        return np.int32(STATUS_OP_BAD_SHAPE), shape
    for axis in range(r):
        if dim(table, 1, axis) != dim(table, 0, axis):
            return np.int32(STATUS_OP_BAD_SHAPE), shape
    if attrs.shape[0] < 3 or attrs[0] != d:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), shape
    n_pads, n_strides = attrs[1], attrs[2]
    if (n_pads != 0 and n_pads != 2 * d) or (n_strides != 0 and n_strides != d):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), shape
    if attrs.shape[0] < 3 + d + n_pads + n_strides:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), shape
    shape[0], shape[1] = dim(table, 0, 0), dim(table, 0, 1)
    for i in range(d):
        kernel = attrs[3 + i]
        begin = attrs[3 + d + i] if n_pads > 0 else 0
        end = attrs[3 + 2 * d + i] if n_pads > 0 else 0
        stride = attrs[3 + d + n_pads + i] if n_strides > 0 else 1
        if kernel < 1 or stride < 1 or begin < 0 or end < 0:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), shape
        size = (dim(table, 0, 2 + i) - 1) * stride - begin - end + kernel
        if size < 0:
            return np.int32(STATUS_OP_BAD_SHAPE), shape
        shape[2 + i] = size
    return OK, shape


@jit_with_nrt
def unpool_infer(arena, table, n_in, n_out, attrs, fattrs):
    kind = dtype(table, 0)
    if (kind != F32 and kind != F64) or dtype(table, 1) != I64:
        return np.int32(STATUS_OP_BAD_DTYPE)
    status, shape = _unpooled(table, attrs)
    if status != 0:
        return status
    r = rank(table, 0)
    set_output(table, n_in, kind, r)
    given = n_in > 2 and present(table, 2)
    if given:
        if rank(table, 2) != 1 or dim(table, 2, 0) != r:
            return np.int32(STATUS_OP_BAD_SHAPE)
        if not holds(table, 2):
            return np.int32(STATUS_OP_NEEDS_DATA)
    for axis in range(r):
        size = int_data(arena, table, 2, axis) if given else shape[axis]
        if size < shape[axis] or (axis < 2 and size != shape[axis]):
            return np.int32(STATUS_OP_BAD_SHAPE)
        set_dim(table, n_in, axis, size)
    return OK


@jit_with_nrt
def _scatter(x, indices, out, unpooled, outer, r):
    """out (zeros, `outer` its dims) gets x[k] at unpooled flat index indices[k]; a status."""
    total = np.int64(1)
    for axis in range(r):
        total *= unpooled[axis]
    for k in range(x.shape[0]):
        index = indices[k]
        if index < 0 or index >= total:
            return np.int32(STATUS_OP_BAD_INDEX)
        target = np.int64(0)
        rest = index
        scale = np.int64(1)
        for axis in range(r - 1, -1, -1):
            target += (rest % unpooled[axis]) * scale
            rest //= unpooled[axis]
            scale *= outer[axis]
        out[target] = x[k]
    return OK


@jit_with_nrt
def unpool_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = unpool_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    if not holds(table, 0) or not holds(table, 1) or not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    _, unpooled = _unpooled(table, attrs)
    r = rank(table, 0)
    outer = np.zeros(MAX_RANK, dtype=np.int64)
    for axis in range(r):
        outer[axis] = dim(table, n_in, axis)
    indices = view(arena, table, 1, np.int64)[: numel(table, 1)]
    if dtype(table, 0) == F32:
        out32 = view(arena, table, n_in, np.float32)
        out32[:] = 0
        x32 = view(arena, table, 0, np.float32)[: numel(table, 0)]
        return _scatter(x32, indices, out32, unpooled, outer, r)
    out64 = view(arena, table, n_in, np.float64)
    out64[:] = 0
    x64 = view(arena, table, 0, np.float64)[: numel(table, 0)]
    return _scatter(x64, indices, out64, unpooled, outer, r)


def encode_unpool(attributes, inputs):
    """MaxUnpool slots: the lengths of kernel_shape, pads and strides, then their values."""
    return list_slots(attributes, LISTS)


register_op(
    "MaxUnpool",
    unpool_infer,
    unpool_compute,
    encode=encode_unpool,
    inputs=(2, 3),
    data_inputs=(2,),
    dtypes={0: FLOATS, 1: frozenset({DType.INT64}), 2: frozenset({DType.INT64})},
)
