"""DeformConv (opsets 19, 22), 2-D: a convolution whose kernel taps are moved by learned offsets.

Inputs: X [N, C, H, W]; W [oC, C / group, kH, kW]; offset [N, offset_group kH kW 2, oH, oW]
(per tap a (dy, dx) pair); B (optional, [oC]); mask (optional, [N, offset_group kH kW, oH,
oW], default ones). attrs: [group, offset_group, then `list_slots` of kernel_shape, pads,
strides, dilations]. Output [N, oC, oH, oW] with oH = (H + pad_top + pad_bottom - (kH - 1)
dilation - 1) / stride + 1 (the same across); offset and mask must have it.

Tap (a, b) of output (i, j) reads X at y = i stride_h - pad_top + a dilation_h + dy,
x = j stride_w - pad_left + b dilation_w + dx by bilinear interpolation between its 4 integer
neighbours, a neighbour outside the image counting 0 (onnx.reference's GridSample with
align_corners and zero padding), times the tap's mask; the output is B plus the weighted sum
over the group's input channels and the taps, in float64, stored in X's type. Input channel c
takes the offsets and mask of offset group c / (C / offset_group). Shapes that do not fit fail
with STATUS_OP_BAD_SHAPE. float32 / float64.
"""

import math

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    F64,
    FLOATS,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    dim,
    dtype,
    numel,
    present,
    rank,
    set_dim,
    set_output,
)
from rtsoa.ops.cast import write_float
from rtsoa.ops.col2im import list_slots
from rtsoa.ops.copying import holds
from rtsoa.ops.registry import register_op
from rtsoa.ops.shape import as_float64

LISTS = ("kernel_shape", "pads", "strides", "dilations")
# geometry slots
KH, KW, TOP, LEFT, BOTTOM, RIGHT, SH, SW, DH, DW, OH, OW = range(12)


@jit_with_nrt
def _geometry(table, n_in, attrs):
    """(status, int64[12] geometry by the slot names above)."""
    g = np.zeros(12, dtype=np.int64)
    kind = dtype(table, 0)
    if (kind != F32 and kind != F64) or dtype(table, 1) != kind or dtype(table, 2) != kind:
        return np.int32(STATUS_OP_BAD_DTYPE), g
    for row in (0, 1, 2):
        if rank(table, row) != 4:
            return np.int32(STATUS_OP_BAD_SHAPE), g
    if attrs.shape[0] < 6:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), g
    group, offset_group = attrs[0], attrs[1]
    n_kernel, n_pads, n_strides, n_dilations = attrs[2], attrs[3], attrs[4], attrs[5]
    if (
        group < 1
        or offset_group < 1
        or attrs.shape[0] < 6 + n_kernel + n_pads + n_strides + n_dilations
    ):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), g
    if (n_kernel != 0 and n_kernel != 2) or (n_pads != 0 and n_pads != 4):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), g
    if (n_strides != 0 and n_strides != 2) or (n_dilations != 0 and n_dilations != 2):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), g
    g[KH], g[KW] = dim(table, 1, 2), dim(table, 1, 3)
    at = 6
    if n_kernel == 2 and (attrs[at] != g[KH] or attrs[at + 1] != g[KW]):
        return np.int32(STATUS_OP_BAD_SHAPE), g
    at += n_kernel
    if n_pads == 4:
        g[TOP], g[LEFT], g[BOTTOM], g[RIGHT] = (
            attrs[at],
            attrs[at + 1],
            attrs[at + 2],
            attrs[at + 3],
        )
    at += n_pads
    g[SH], g[SW] = (attrs[at], attrs[at + 1]) if n_strides == 2 else (1, 1)
    at += n_strides
    g[DH], g[DW] = (attrs[at], attrs[at + 1]) if n_dilations == 2 else (1, 1)
    if g[SH] < 1 or g[SW] < 1 or g[DH] < 1 or g[DW] < 1:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), g
    if g[TOP] < 0 or g[LEFT] < 0 or g[BOTTOM] < 0 or g[RIGHT] < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), g
    span_h = dim(table, 0, 2) + g[TOP] + g[BOTTOM] - (g[KH] - 1) * g[DH] - 1
    span_w = dim(table, 0, 3) + g[LEFT] + g[RIGHT] - (g[KW] - 1) * g[DW] - 1
    if g[KH] < 1 or g[KW] < 1 or span_h < 0 or span_w < 0:
        return np.int32(STATUS_OP_BAD_SHAPE), g
    g[OH], g[OW] = span_h // g[SH] + 1, span_w // g[SW] + 1
    channels, outputs = dim(table, 0, 1), dim(table, 1, 0)
    taps = g[KH] * g[KW]
    if dim(table, 1, 1) * group != channels or outputs % group != 0:
        return np.int32(STATUS_OP_BAD_SHAPE), g
    if channels % offset_group != 0 or dim(table, 2, 1) != offset_group * taps * 2:
        return np.int32(STATUS_OP_BAD_SHAPE), g
    for row in (2, 4):
        if row < n_in and present(table, row):
            if row == 4 and (dtype(table, 4) != kind or rank(table, 4) != 4):
                return np.int32(STATUS_OP_BAD_SHAPE), g
            if row == 4 and dim(table, 4, 1) != offset_group * taps:
                return np.int32(STATUS_OP_BAD_SHAPE), g
            if dim(table, row, 0) != dim(table, 0, 0):
                return np.int32(STATUS_OP_BAD_SHAPE), g
            if dim(table, row, 2) != g[OH] or dim(table, row, 3) != g[OW]:
                return np.int32(STATUS_OP_BAD_SHAPE), g
    if n_in > 3 and present(table, 3):
        if dtype(table, 3) != kind or rank(table, 3) != 1 or dim(table, 3, 0) != outputs:
            return np.int32(STATUS_OP_BAD_SHAPE), g
    return OK, g


@jit_with_nrt
def deform_conv_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, g = _geometry(table, n_in, attrs)
    if status != 0:
        return status
    set_output(table, n_in, dtype(table, 0), 4)
    set_dim(table, n_in, 0, dim(table, 0, 0))
    set_dim(table, n_in, 1, dim(table, 1, 0))
    set_dim(table, n_in, 2, g[OH])
    set_dim(table, n_in, 3, g[OW])
    return OK


@jit_with_nrt
def _bilinear(image, base, height, width, y, x):
    """image[base + ...] ([height, width]) at (y, x); neighbours outside count 0."""
    if not (y > -1.0 and y < height and x > -1.0 and x < width):
        return 0.0
    y0, x0 = math.floor(y), math.floor(x)
    fy, fx = y - y0, x - x0
    top, left = np.int64(y0), np.int64(x0)
    total = 0.0
    for dy in range(2):
        row = top + dy
        if row < 0 or row >= height:
            continue
        wy = fy if dy == 1 else 1.0 - fy
        for dx in range(2):
            column = left + dx
            if column < 0 or column >= width:
                continue
            wx = fx if dx == 1 else 1.0 - fx
            total += wy * wx * image[base + row * width + column]
    return total


@jit_with_nrt
def _columns(x, offset, mask, masked, n, channels, height, width, g, offset_group):
    """The sampled taps of batch `n`: [channels * taps, oH * oW], masks applied."""
    taps = g[KH] * g[KW]
    points = g[OH] * g[OW]
    per_group = channels // offset_group
    cols = np.empty((channels * taps, points), dtype=np.float64)
    for c in range(channels):
        og = c // per_group
        base = (n * channels + c) * height * width
        for a in range(g[KH]):
            for b in range(g[KW]):
                tap = a * g[KW] + b
                pair = ((n * offset_group + og) * taps + tap) * 2 * points
                weight = ((n * offset_group + og) * taps + tap) * points
                for i in range(g[OH]):
                    for j in range(g[OW]):
                        p = i * g[OW] + j
                        y = i * g[SH] - g[TOP] + a * g[DH] + offset[pair + p]
                        xx = j * g[SW] - g[LEFT] + b * g[DW] + offset[pair + points + p]
                        value = _bilinear(x, base, height, width, y, xx)
                        if masked:
                            value *= mask[weight + p]
                        cols[c * taps + tap, p] = value
    return cols


@jit_with_nrt
def deform_conv_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = deform_conv_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    for row in range(n_in + 1):
        if (row == n_in or present(table, row)) and not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    _, g = _geometry(table, n_in, attrs)
    group, offset_group = attrs[0], attrs[1]
    batch, channels, height, width = (
        dim(table, 0, 0),
        dim(table, 0, 1),
        dim(table, 0, 2),
        dim(table, 0, 3),
    )
    outputs = dim(table, 1, 0)
    x = as_float64(arena, table, 0, numel(table, 0))
    weights = as_float64(arena, table, 1, numel(table, 1))
    offset = as_float64(arena, table, 2, numel(table, 2))
    biased = n_in > 3 and present(table, 3)
    bias = as_float64(arena, table, 3, outputs) if biased else np.zeros(outputs)
    masked = n_in > 4 and present(table, 4)
    mask = as_float64(arena, table, 4, numel(table, 4)) if masked else np.zeros(0)
    taps = g[KH] * g[KW]
    points = g[OH] * g[OW]
    group_in, group_out = channels // group, outputs // group
    out = np.empty(batch * outputs * points, dtype=np.float64)
    for n in range(batch):
        cols = _columns(x, offset, mask, masked, n, channels, height, width, g, offset_group)
        for o in range(outputs):
            first = (o // group_out) * group_in * taps
            row = out[(n * outputs + o) * points : (n * outputs + o + 1) * points]
            row[:] = bias[o]
            for k in range(group_in * taps):
                w = weights[o * group_in * taps + k]
                for p in range(points):
                    row[p] += w * cols[first + k, p]
    return write_float(arena, table, n_in, out, out.shape[0], False)


def encode_deform_conv(attributes, inputs):
    """DeformConv slots: group, offset_group, then `list_slots` of LISTS."""
    return [
        int(attributes.get("group", 1)),
        int(attributes.get("offset_group", 1)),
        *list_slots(attributes, LISTS),
    ]


register_op(
    "DeformConv",
    deform_conv_infer,
    deform_conv_compute,
    encode=encode_deform_conv,
    inputs=(3, 5),
    dtypes={0: FLOATS, 1: FLOATS, 2: FLOATS, 3: FLOATS, 4: FLOATS},
)
