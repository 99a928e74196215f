"""Pad: constant, reflect, edge and wrap modes, negative pads (crops), pads and axes from
attributes (opsets 2-10) or inputs (11+, axes 18+).

Constant mode fills the output with the pad value, then copies the input's kept window into
it; the other modes copy every output element from the source index its mode maps it to
(per-axis tables of the copy engine, `rtsoa.ops.copying`).
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.abi.views import move_elements
from rtsoa.ops.abi import (
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_MISSING_INPUT,
    dim,
    dtype,
    numel,
    present,
    rank,
    view,
)
from rtsoa.ops.copying import (
    copy_into,
    fill_pattern,
    item_size,
    linear_tables,
    row_dims,
    row_strides,
    scalar_bytes,
    set_dims,
)
from rtsoa.ops.lists import (
    encode_list,
    input_list,
    list_of,
    normalize_axes,
)
from rtsoa.ops.registry import register_op

PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP = 0, 1, 2, 3
PAD_MODES = {"constant": PAD_CONSTANT, "reflect": PAD_REFLECT, "edge": PAD_EDGE, "wrap": PAD_WRAP}


@jit_with_nrt
def pad_amounts(arena, table, n_in, attrs):
    """(status, begins, ends) per axis: pads from input 1 or the attribute, over `axes`
    (input 3, opset 18) or every axis."""
    r = rank(table, 0)
    begins = np.zeros(r, dtype=np.int64)
    ends = np.zeros(r, dtype=np.int64)
    status, pads, given, _ = list_of(arena, table, n_in, 1, attrs, 3)
    if status != 0:
        return status, begins, ends
    if not given:
        return np.int32(STATUS_OP_MISSING_INPUT), begins, ends
    status, axes, given_axes = input_list(arena, table, n_in, 3)
    if status != 0:
        return status, begins, ends
    if not given_axes:
        axes = np.arange(r).astype(np.int64)
    status, axes = normalize_axes(axes, r)
    if status != 0:
        return status, begins, ends
    n = axes.shape[0]
    if pads.shape[0] != 2 * n:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), begins, ends
    for k in range(n):
        begins[axes[k]] = pads[k]
        ends[axes[k]] = pads[n + k]
    for k in range(r):
        if dim(table, 0, k) + begins[k] + ends[k] < 0:
            return np.int32(STATUS_OP_BAD_SHAPE), begins, ends
    return OK, begins, ends


@jit_with_nrt
def pad_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 3:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    status, begins, ends = pad_amounts(arena, table, n_in, attrs)
    if status != 0:
        return status
    if attrs[0] < PAD_CONSTANT or attrs[0] > PAD_WRAP:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    dims = row_dims(table, 0)
    out = dims + begins + ends
    if attrs[0] != PAD_CONSTANT:
        for k in range(dims.shape[0]):
            kept = dims[k] + min(begins[k], 0) + min(ends[k], 0)
            if kept <= 0 and out[k] > 0:
                return np.int32(STATUS_OP_BAD_SHAPE)  # nothing to reflect / repeat
    return set_dims(table, n_in, dtype(table, 0), out)


@jit_with_nrt
def pad_fill(arena, table, n_in, attrs, fattrs):
    """Fill output `n_in` with the constant: input 2's first element if present (same
    dtype), else the opset-2 `value` attribute (slot 2; flag slot 1), else zeros."""
    out = view(arena, table, n_in, np.uint8)
    size = item_size(table, n_in)
    pattern = np.zeros(size, dtype=np.uint8)
    if n_in > 2 and present(table, 2):
        if dtype(table, 2) != dtype(table, 0):
            return np.int32(STATUS_OP_BAD_DTYPE)
        value = view(arena, table, 2, np.uint8)
        if numel(table, 2) >= 1 and value.shape[0] >= size:
            move_elements(pattern, 0, value, 0, size)
    elif attrs[1] != 0:
        pattern = scalar_bytes(dtype(table, 0), fattrs[2])
        if pattern.shape[0] != size:
            return np.int32(STATUS_OP_BAD_DTYPE)
    fill_pattern(out, pattern, numel(table, n_in))
    return OK


@jit_with_nrt
def pad_compute(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 3:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    status, begins, ends = pad_amounts(arena, table, n_in, attrs)
    if status != 0:
        return status
    dims = row_dims(table, 0)
    out_dims = dims + begins + ends
    r = dims.shape[0]
    if rank(table, n_in) != r or numel(table, n_in) != np.prod(out_dims):
        return np.int32(STATUS_OP_BAD_SHAPE)
    strides = row_strides(table, 0)
    out_strides = row_strides(table, n_in)
    mode = attrs[0]
    if mode == PAD_CONSTANT:
        status = pad_fill(arena, table, n_in, attrs, fattrs)
        if status != 0:
            return status
        first = np.zeros(r, dtype=np.int64)
        counts = np.zeros(r, dtype=np.int64)
        base = np.int64(0)
        for k in range(r):
            low = max(begins[k], 0)
            high = min(out_dims[k], dims[k] + begins[k])
            counts[k] = max(high - low, 0)
            first[k] = (low - begins[k]) * strides[k]
            base += low * out_strides[k]
        tables, starts = linear_tables(counts, first, strides)
        return copy_into(arena, table, 0, n_in, counts, tables, starts, out_strides, base)
    tables, starts = linear_tables(out_dims, np.zeros(r, dtype=np.int64), strides)
    for k in range(r):  # negative pads crop first, the rest pads the cropped tensor
        low = max(-begins[k], 0)
        d = dims[k] - low - max(-ends[k], 0)
        if d <= 0 and out_dims[k] > 0:
            return np.int32(STATUS_OP_BAD_SHAPE)
        for i in range(out_dims[k]):
            j = i - max(begins[k], 0)
            if mode == PAD_EDGE:
                j = min(max(j, 0), d - 1)
            elif mode == PAD_WRAP:
                j = j % d
            else:
                period = 2 * (d - 1)
                if period == 0:
                    j = 0
                else:
                    j = j % period
                    if j >= d:
                        j = period - j
            tables[starts[k] + i] = (low + j) * strides[k]
    return copy_into(arena, table, 0, n_in, out_dims, tables, starts, out_strides, 0)


def encode_pad(attributes, inputs):
    mode = attributes.get("mode", "constant")
    if isinstance(mode, bytes):
        mode = mode.decode()
    code = PAD_MODES.get(mode, -1)  # unknown: infer refuses it as a bad attribute
    value = attributes.get("value")
    return [
        code,
        0 if value is None else 1,
        float(0.0 if value is None else value),
        *encode_list(attributes.get("pads")),
    ]


register_op("Pad", pad_infer, pad_compute, encode=encode_pad, inputs=(1, 4), data_inputs=(1, 3))
