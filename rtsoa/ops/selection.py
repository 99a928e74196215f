"""Ops that select or reorder elements by their input's data: NonZero, Compress and
ReverseSequence. They move bytes, so they take every element type.

NonZero (opsets 9-13): the int64 [rank, count] coordinates of the input's nonzero elements in
C order; a float is zero when every bit but its sign is (so -0.0 is zero and NaN is not). Its
output shape depends on the data, which its shape inference reads (known at lowering only
for a constant). A scalar input is refused (STATUS_OP_BAD_SHAPE).
Compress (opsets 9-28): inputs (input, condition: bool [n]), attrs [has axis, axis]; the
slices along `axis` (of the flattened input without one) whose condition is true, in order.
The condition may be shorter than the axis; a true entry beyond it fails the op with
STATUS_OP_BAD_INDEX. The output shape depends on the condition's data.
ReverseSequence (opsets 10-28): inputs (input, sequence_lens: int64 [batch]), attrs
[batch_axis, time_axis] (0 and 1 in either order); each batch's first sequence_lens[b] steps
along the time axis reversed, the rest copied. A length outside [0, time steps] fails the op
with STATUS_OP_BAD_INDEX.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.abi.views import move_elements
from rtsoa.ops.abi import (
    BOOL,
    F16,
    F32,
    F64,
    I64,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_NEEDS_DATA,
    copy_shape,
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
from rtsoa.ops.window import element_count

# -- NonZero --------------------------------------------------------------------------------------


@jit_with_nrt
def _nonzero_flags(arena, table, row):
    """One bool per element of row `row`: is it nonzero (floats: any bit but the sign)?"""
    size = item_size(table, row)
    count = numel(table, row)
    kind = dtype(table, row)
    floating = kind == F32 or kind == F64 or kind == F16
    data = view(arena, table, row, np.uint8)
    flags = np.zeros(count, dtype=np.bool_)
    for i in range(count):
        for b in range(size):
            byte = data[i * size + b]
            if floating and b == size - 1:
                byte &= 0x7F  # little endian: the sign bit is the top bit of the last byte
            if byte != 0:
                flags[i] = True
                break
    return flags


@jit_with_nrt
def non_zero_infer(arena, table, n_in, n_out, attrs, fattrs):
    r = rank(table, 0)
    if item_size(table, 0) == 0:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if r < 1 or element_count(table, 0) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if not has_data(table, 0):
        return np.int32(STATUS_OP_NEEDS_DATA)
    if not holds(table, 0):
        return np.int32(STATUS_OP_BAD_SHAPE)
    found = np.int64(0)
    for flag in _nonzero_flags(arena, table, 0):
        found += flag
    set_output(table, n_in, I64, 2)
    set_dim(table, n_in, 0, r)
    set_dim(table, n_in, 1, found)
    return OK


@jit_with_nrt
def non_zero_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = non_zero_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    if not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    r = rank(table, 0)
    found = dim(table, n_in, 1)
    out = view(arena, table, n_in, np.int64)
    coordinate = np.zeros(r, dtype=np.int64)
    k = 0
    for flag in _nonzero_flags(arena, table, 0):
        if flag:
            for a in range(r):
                out[a * found + k] = coordinate[a]
            k += 1
        for a in range(r - 1, -1, -1):  # the next coordinate, in C order
            coordinate[a] += 1
            if coordinate[a] < dim(table, 0, a):
                break
            coordinate[a] = 0
    return OK


# -- Compress -------------------------------------------------------------------------------------


@jit_with_nrt
def _compress_geometry(table, attrs):
    """(outer, length, inner) of the input around the axis (the flattened input: 1, numel,
    1), or length -1 for a bad axis."""
    r = rank(table, 0)
    if attrs[0] == 0:
        return np.int64(1), numel(table, 0), np.int64(1)
    axis = attrs[1] + r if attrs[1] < 0 else attrs[1]
    if axis < 0 or axis >= r:
        return np.int64(1), np.int64(-1), np.int64(1)
    outer, inner = np.int64(1), np.int64(1)
    for a in range(axis):
        outer *= dim(table, 0, a)
    for a in range(axis + 1, r):
        inner *= dim(table, 0, a)
    return outer, dim(table, 0, axis), inner


@jit_with_nrt
def compress_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 2:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if dtype(table, 1) != BOOL or item_size(table, 0) == 0:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if rank(table, 1) != 1 or element_count(table, 0) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    outer, length, inner = _compress_geometry(table, attrs)
    if length < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if not has_data(table, 1):
        return np.int32(STATUS_OP_NEEDS_DATA)
    if not holds(table, 1):
        return np.int32(STATUS_OP_BAD_SHAPE)
    condition = view(arena, table, 1, np.uint8)
    kept = np.int64(0)
    for i in range(dim(table, 1, 0)):
        if condition[i] != 0:
            if i >= length:
                return np.int32(STATUS_OP_BAD_INDEX)
            kept += 1
    if attrs[0] == 0:
        set_output(table, n_in, dtype(table, 0), 1)
        set_dim(table, n_in, 0, kept)
        return OK
    copy_shape(table, 0, n_in)
    r = rank(table, 0)
    set_dim(table, n_in, attrs[1] + r if attrs[1] < 0 else attrs[1], kept)
    return OK


@jit_with_nrt
def compress_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = compress_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    if not (holds(table, 0) and holds(table, n_in)):
        return np.int32(STATUS_OP_BAD_SHAPE)
    outer, length, inner = _compress_geometry(table, attrs)
    condition = view(arena, table, 1, np.uint8)
    checked = min(length, dim(table, 1, 0))
    size = item_size(table, 0)
    block = inner * size
    src = view(arena, table, 0, np.uint8)
    dst = view(arena, table, n_in, np.uint8)
    o = 0
    for p in range(outer):
        for i in range(checked):
            if condition[i] != 0:
                start = (p * length + i) * block
                move_elements(dst, o, src, start, block)
                o += block
    return OK


# -- ReverseSequence ------------------------------------------------------------------------------


@jit_with_nrt
def reverse_sequence_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 2:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    batch_axis, time_axis = attrs[0], attrs[1]
    if not ((batch_axis == 0 and time_axis == 1) or (batch_axis == 1 and time_axis == 0)):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if dtype(table, 1) != I64 or item_size(table, 0) == 0:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if rank(table, 0) < 2 or element_count(table, 0) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if rank(table, 1) != 1 or dim(table, 1, 0) != dim(table, 0, batch_axis):
        return np.int32(STATUS_OP_BAD_SHAPE)
    copy_shape(table, 0, n_in)
    return OK


@jit_with_nrt
def reverse_sequence_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = reverse_sequence_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    for row in (0, 1, n_in):
        if not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    batch_axis = attrs[0]
    batches, steps = dim(table, 0, batch_axis), dim(table, 0, 1 - batch_axis)
    lengths = view(arena, table, 1, np.int64)
    for b in range(batches):
        if lengths[b] < 0 or lengths[b] > steps:
            return np.int32(STATUS_OP_BAD_INDEX)
    inner = np.int64(1)
    for a in range(2, rank(table, 0)):
        inner *= dim(table, 0, a)
    block = inner * item_size(table, 0)
    src = view(arena, table, 0, np.uint8)
    dst = view(arena, table, n_in, np.uint8)
    for b in range(batches):
        for t in range(steps):
            source = lengths[b] - 1 - t if t < lengths[b] else t
            if batch_axis == 0:
                o, i = (b * steps + t) * block, (b * steps + source) * block
            else:
                o, i = (t * batches + b) * block, (source * batches + b) * block
            move_elements(dst, o, src, i, block)
    return OK


def encode_compress(attributes, inputs):
    """Compress slots: has axis, axis."""
    return [int("axis" in attributes), int(attributes.get("axis", 0))]


def encode_reverse_sequence(attributes, inputs):
    """ReverseSequence slots: batch_axis (default 1), time_axis (default 0)."""
    return [int(attributes.get("batch_axis", 1)), int(attributes.get("time_axis", 0))]


register_op("NonZero", non_zero_infer, non_zero_compute, data_inputs=(0,))
register_op(
    "Compress",
    compress_infer,
    compress_compute,
    encode=encode_compress,
    inputs=(2, 2),
    data_inputs=(1,),
)
register_op(
    "ReverseSequence",
    reverse_sequence_infer,
    reverse_sequence_compute,
    encode=encode_reverse_sequence,
    inputs=(2, 2),
)
