"""Ops that keep or permute the element order: Reshape, Flatten, Squeeze, Unsqueeze,
Transpose, Dropout (inference).

Reshape, Flatten, Squeeze, Unsqueeze and Dropout only compute a shape; their data is a byte
copy. Transpose copies through the copy engine (`rtsoa.ops.copying`) with per-axis tables of
the permuted strides.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    BOOL,
    MAX_RANK,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_MISSING_INPUT,
    STATUS_OP_RANK,
    copy_shape,
    dim,
    dtype,
    has_data,
    numel,
    present,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.copying import (
    byte_copy,
    copy_into,
    holds,
    linear_tables,
    row_dims,
    row_strides,
    set_dims,
)
from rtsoa.ops.lists import (
    attr_axis,
    attr_list,
    encode_axes,
    encode_axis,
    encode_list,
    input_list,
    list_of,
    normalize_axes,
)
from rtsoa.ops.registry import register_op


@jit_with_nrt
def reshape_compute(arena, table, n_in, n_out, attrs, fattrs):
    """Reshape, Flatten, Squeeze, Unsqueeze: the data keeps its order; a byte copy."""
    if numel(table, 0) != numel(table, n_in) or dtype(table, 0) != dtype(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    return byte_copy(arena, table, 0, n_in)


@jit_with_nrt
def reshape_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Reshape: 0 copies the input dim (unless allowzero), one -1 is inferred."""
    if attrs.shape[0] < 1:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    status, shape, given = input_list(arena, table, n_in, 1)
    if status != 0:
        return status
    if not given:
        return np.int32(STATUS_OP_MISSING_INPUT)
    allowzero = attrs[0] != 0
    r = rank(table, 0)
    count = numel(table, 0)
    out = shape.copy()
    infer_at = -1
    known = np.int64(1)
    has_zero = False
    for k in range(shape.shape[0]):
        value = shape[k]
        if value == -1:
            if infer_at >= 0:
                return np.int32(STATUS_OP_BAD_ATTRIBUTE)
            infer_at = k
            continue
        if value < -1:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE)
        if value == 0:
            has_zero = True
            if not allowzero:
                if k >= r:
                    return np.int32(STATUS_OP_BAD_SHAPE)
                value = dim(table, 0, k)
        out[k] = value
        known *= value
    if infer_at >= 0:
        if allowzero and has_zero:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE)
        if known == 0 or count % known != 0:
            return np.int32(STATUS_OP_BAD_SHAPE)
        out[infer_at] = count // known
    elif known != count:
        return np.int32(STATUS_OP_BAD_SHAPE)
    return set_dims(table, n_in, dtype(table, 0), out)


@jit_with_nrt
def flatten_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Flatten at `axis` (-rank .. rank) into a 2-D tensor."""
    r = rank(table, 0)
    axis = attr_axis(attrs, 0, r, True)
    if axis < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    outer = np.int64(1)
    inner = np.int64(1)
    for k in range(r):
        if k < axis:
            outer *= dim(table, 0, k)
        else:
            inner *= dim(table, 0, k)
    set_output(table, n_in, dtype(table, 0), 2)
    set_dim(table, n_in, 0, outer)
    set_dim(table, n_in, 1, inner)
    return OK


@jit_with_nrt
def squeeze_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Squeeze `axes` (input 1 or attribute; none or empty: every dim of size 1)."""
    status, axes, given, _ = list_of(arena, table, n_in, 1, attrs, 0)
    if status != 0:
        return status
    r = rank(table, 0)
    status, axes = normalize_axes(axes, r)
    if status != 0:
        return status
    drop = np.zeros(max(r, 0), dtype=np.bool_)
    if given and axes.shape[0] > 0:  # an empty axes input squeezes every 1 (onnxruntime)
        for axis in axes:
            if dim(table, 0, axis) != 1:
                return np.int32(STATUS_OP_BAD_SHAPE)
            drop[axis] = True
    else:
        for axis in range(r):
            drop[axis] = dim(table, 0, axis) == 1
    out = np.empty(r - drop.sum(), dtype=np.int64)
    j = 0
    for axis in range(r):
        if not drop[axis]:
            out[j] = dim(table, 0, axis)
            j += 1
    return set_dims(table, n_in, dtype(table, 0), out)


@jit_with_nrt
def unsqueeze_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Unsqueeze: insert size-1 dims at `axes` (of the output's rank)."""
    status, axes, given, _ = list_of(arena, table, n_in, 1, attrs, 0)
    if status != 0:
        return status
    if not given:
        return np.int32(STATUS_OP_MISSING_INPUT)
    r = rank(table, 0)
    out_rank = r + axes.shape[0]
    if out_rank > MAX_RANK:
        return np.int32(STATUS_OP_RANK)
    status, axes = normalize_axes(axes, out_rank)
    if status != 0:
        return status
    inserted = np.zeros(out_rank, dtype=np.bool_)
    for axis in axes:
        inserted[axis] = True
    out = np.empty(out_rank, dtype=np.int64)
    j = 0
    for axis in range(out_rank):
        if inserted[axis]:
            out[axis] = 1
        else:
            out[axis] = dim(table, 0, j)
            j += 1
    return set_dims(table, n_in, dtype(table, 0), out)


@jit_with_nrt
def transpose_perm(table, attrs):
    """(status, perm): the attribute (count 0: reversed axes), validated."""
    r = rank(table, 0)
    status, perm, given, _ = attr_list(attrs, 0)
    if status != 0:
        return status, perm
    if not given or perm.shape[0] == 0:
        perm = np.arange(r - 1, -1, -1).astype(np.int64)
    if perm.shape[0] != r:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), perm
    return normalize_axes(perm, r)


@jit_with_nrt
def transpose_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, perm = transpose_perm(table, attrs)
    if status != 0:
        return status
    set_output(table, n_in, dtype(table, 0), perm.shape[0])
    for k in range(perm.shape[0]):
        set_dim(table, n_in, k, dim(table, 0, perm[k]))
    return OK


@jit_with_nrt
def transpose_compute(arena, table, n_in, n_out, attrs, fattrs):
    status, perm = transpose_perm(table, attrs)
    if status != 0:
        return status
    strides = row_strides(table, 0)
    dims = row_dims(table, n_in)
    steps = np.empty(perm.shape[0], dtype=np.int64)
    for k in range(perm.shape[0]):
        steps[k] = strides[perm[k]]
    tables, starts = linear_tables(dims, np.zeros(dims.shape[0], dtype=np.int64), steps)
    return copy_into(arena, table, 0, n_in, dims, tables, starts, row_strides(table, n_in), 0)


@jit_with_nrt
def dropout_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Dropout in inference: output 0 is the input, the optional mask all True."""
    copy_shape(table, 0, n_in)
    if n_out > 1:
        copy_shape(table, 0, n_in + 1)
        table[n_in + 1, 2] = BOOL
    return OK


@jit_with_nrt
def dropout_compute(arena, table, n_in, n_out, attrs, fattrs):
    if n_in > 2 and present(table, 2) and has_data(table, 2):
        if dtype(table, 2) != BOOL or numel(table, 2) < 1 or not holds(table, 2):
            return np.int32(STATUS_OP_BAD_DTYPE)
        if view(arena, table, 2, np.uint8)[0] != 0:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE)  # training mode is not supported
    status = reshape_compute(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0 or n_out < 2:
        return status
    mask = view(arena, table, n_in + 1, np.uint8)
    mask[: min(mask.shape[0], numel(table, n_in + 1))] = 1
    return OK


def encode_transpose(attributes, inputs):
    return encode_list(attributes.get("perm"))


register_op(
    "Reshape",
    reshape_infer,
    reshape_compute,
    encode=lambda attributes, inputs: [int(attributes.get("allowzero", 0))],
    inputs=(2, 2),
    data_inputs=(1,),
)
register_op("Flatten", flatten_infer, reshape_compute, encode=encode_axis(1))
register_op(
    "Squeeze", squeeze_infer, reshape_compute, encode=encode_axes, inputs=(1, 2), data_inputs=(1,)
)
register_op(
    "Unsqueeze",
    unsqueeze_infer,
    reshape_compute,
    encode=encode_axes,
    inputs=(1, 2),
    data_inputs=(1,),
)
register_op("Transpose", transpose_infer, transpose_compute, encode=encode_transpose)
register_op("Dropout", dropout_infer, dropout_compute, inputs=(1, 3), outputs=(1, 2))
