"""List and axis attributes of the data-movement and reduction ops.

List attributes that ONNX moved to inputs across opsets (Squeeze / Unsqueeze axes, Split's
split, Slice's starts / ends / axes / steps, Pad's pads, Reduce*'s axes) are accepted in both
forms: the attribute form is encoded as `[count, values...]` (count -1: not given), the input
form is read from the input's data (a `data_inputs` position, so at lowering time shape
inference returns STATUS_OP_NEEDS_DATA when the input is not a constant).
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    I32,
    I64,
    ITEMSIZE,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_NEEDS_DATA,
    dtype,
    has_data,
    int_data,
    numel,
    present,
    rank,
    view,
)


def encode_list(values):
    """Slots of an optional list attribute: [-1] if absent, else [count, values...]."""
    if values is None:
        return [-1]
    values = [int(v) for v in np.asarray(values).reshape(-1)]
    return [len(values), *values]


def encode_axis(default):
    def encode(attributes, inputs):
        return [int(attributes.get("axis", default))]

    return encode


def encode_axes(attributes, inputs):
    return encode_list(attributes.get("axes"))


@jit_with_nrt
def attr_list(attrs, slot):
    """(status, values, given, next slot) of the list encoded at `slot`."""
    empty = np.zeros(0, dtype=np.int64)
    if slot < 0 or slot >= attrs.shape[0]:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), empty, False, slot
    count = attrs[slot]
    if count < 0:
        return OK, empty, False, slot + 1
    if slot + 1 + count > attrs.shape[0]:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), empty, False, slot
    return OK, attrs[slot + 1 : slot + 1 + count].copy(), True, slot + 1 + count


@jit_with_nrt
def input_list(arena, table, n_in, row):
    """(status, values, given) of an int32 / int64 input of rank 0 or 1 (absent: not given)."""
    empty = np.zeros(0, dtype=np.int64)
    if row >= n_in or not present(table, row):
        return OK, empty, False
    if not has_data(table, row):
        return np.int32(STATUS_OP_NEEDS_DATA), empty, False
    kind = dtype(table, row)
    if kind != I64 and kind != I32:
        return np.int32(STATUS_OP_BAD_DTYPE), empty, False
    if rank(table, row) > 1:
        return np.int32(STATUS_OP_BAD_SHAPE), empty, False
    count = numel(table, row)
    available = view(arena, table, row, np.uint8).shape[0] // ITEMSIZE[kind]
    if count > available:
        return np.int32(STATUS_OP_BAD_SHAPE), empty, False
    values = np.empty(count, dtype=np.int64)
    for k in range(count):
        values[k] = int_data(arena, table, row, k)
    return OK, values, True


@jit_with_nrt
def list_of(arena, table, n_in, row, attrs, slot):
    """(status, values, given, next slot): input `row`'s data if present, else the attribute
    list at `slot`."""
    status, values, given, following = attr_list(attrs, slot)
    if status != 0:
        return status, values, given, following
    if row < n_in and present(table, row):
        status, values, given = input_list(arena, table, n_in, row)
    return status, values, given, following


@jit_with_nrt
def normalize_axes(axes, rank_):
    """(status, axes in 0 .. rank - 1); a repeated or out-of-range axis is a bad attribute."""
    result = np.empty(axes.shape[0], dtype=np.int64)
    seen = np.zeros(max(rank_, 0), dtype=np.bool_)
    for k in range(axes.shape[0]):
        axis = axes[k] + rank_ if axes[k] < 0 else axes[k]
        if axis < 0 or axis >= rank_ or seen[axis]:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), result
        seen[axis] = True
        result[k] = axis
    return OK, result


@jit_with_nrt
def attr_axis(attrs, slot, rank_, inclusive):
    """Attribute `slot` as an axis in 0 .. rank - 1 (0 .. rank if `inclusive`), or -1 if it is
    out of range or the slot is missing."""
    if slot >= attrs.shape[0]:
        return np.int64(-1)
    axis = attrs[slot] + rank_ if attrs[slot] < 0 else attrs[slot]
    if axis < 0 or axis > rank_ or (axis == rank_ and not inclusive):
        return np.int64(-1)
    return np.int64(axis)
