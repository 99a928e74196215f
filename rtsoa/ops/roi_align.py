"""RoiAlign (opsets 10, 16, 22): each region of interest pooled to a fixed grid by bilinear
samples.

Inputs: X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2 in X's type), batch_indices [R] (int64).
attrs: [half_pixel (1: coordinate_transformation_mode half_pixel, 0: output_half_pixel, opset
10's only mode), mode (0 avg, 1 max), output_height, output_width, sampling_ratio,
spatial_scale (float bits)]. Output [R, C, output_height, output_width].

Computed as onnx.reference (and onnxruntime) do, in float64: a roi scaled by spatial_scale
(and shifted by -0.5 in half_pixel mode; else at least 1 x 1), cut into output_height x
output_width bins, each sampled on a grid of sampling_ratio points a side (0: ceil(roi size /
bins)) at the grid cells' centres; a sample outside [-1, H] x [-1, W] counts 0, else it is
clamped into the image and interpolated from its 4 neighbours. avg: the mean of a bin's
samples; max: the largest over a bin's samples of the largest of the 4 weighted neighbours
(onnxruntime's definition). A batch index outside [0, N) fails with STATUS_OP_BAD_INDEX.
float32 / float64.
"""

import math

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    F64,
    FLOATS,
    I64,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
    DType,
    dim,
    dtype,
    numel,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.attributes import choice, onnx_float
from rtsoa.ops.cast import write_float
from rtsoa.ops.copying import holds
from rtsoa.ops.registry import register_op
from rtsoa.ops.shape import as_float64

HALF_PIXEL, MODE, HEIGHT, WIDTH, RATIO, SCALE = range(6)
MODES = {"avg": 0, "max": 1}
COORDINATE_MODES = {"output_half_pixel": 0, "half_pixel": 1}


@jit_with_nrt
def roi_align_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 6 or attrs[HALF_PIXEL] < 0 or attrs[MODE] < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if attrs[HEIGHT] < 1 or attrs[WIDTH] < 1 or attrs[RATIO] < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    kind = dtype(table, 0)
    if (kind != F32 and kind != F64) or dtype(table, 1) != kind or dtype(table, 2) != I64:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if rank(table, 0) != 4 or rank(table, 1) != 2 or rank(table, 2) != 1:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if dim(table, 1, 1) != 4 or dim(table, 1, 0) != dim(table, 2, 0):
        return np.int32(STATUS_OP_BAD_SHAPE)
    set_output(table, n_in, kind, 4)
    set_dim(table, n_in, 0, dim(table, 1, 0))
    set_dim(table, n_in, 1, dim(table, 0, 1))
    set_dim(table, n_in, 2, attrs[HEIGHT])
    set_dim(table, n_in, 3, attrs[WIDTH])
    return OK


@jit_with_nrt
def _samples(start, size, bins, grid, extent):
    """Per sample along one axis (bins * grid of them): (low, high, weight of high, inside)."""
    count = bins * max(grid, 0)
    low = np.zeros(count, dtype=np.int64)
    high = np.zeros(count, dtype=np.int64)
    fraction = np.zeros(count, dtype=np.float64)
    inside = np.zeros(count, dtype=np.bool_)
    step = size / bins
    k = 0
    for b in range(bins):
        for g in range(max(grid, 0)):
            at = start + b * step + (g + 0.5) * step / grid
            if at < -1.0 or at > extent:
                k += 1
                continue
            at = max(at, 0.0)
            below = np.int64(at)
            if below >= extent - 1:
                below = extent - 1
                above = below
                at = np.float64(below)
            else:
                above = below + 1
            low[k], high[k], fraction[k], inside[k] = below, above, at - below, True
            k += 1
    return low, high, fraction, inside


@jit_with_nrt
def _pool_roi(x, out, roi, batch, channels, height, width, attrs, scale):
    """Output [channels, output_height, output_width] of one roi into `out`."""
    offset = 0.5 if attrs[HALF_PIXEL] == 1 else 0.0
    start_w, start_h = roi[0] * scale - offset, roi[1] * scale - offset
    roi_w, roi_h = roi[2] * scale - offset - start_w, roi[3] * scale - offset - start_h
    if attrs[HALF_PIXEL] == 0:
        roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
    bins_h, bins_w = attrs[HEIGHT], attrs[WIDTH]
    grid_h = attrs[RATIO] if attrs[RATIO] > 0 else np.int64(math.ceil(roi_h / bins_h))
    grid_w = attrs[RATIO] if attrs[RATIO] > 0 else np.int64(math.ceil(roi_w / bins_w))
    count = max(grid_h * grid_w, 1)
    y_low, y_high, y_frac, y_in = _samples(start_h, roi_h, bins_h, grid_h, height)
    x_low, x_high, x_frac, x_in = _samples(start_w, roi_w, bins_w, grid_w, width)
    rows, columns = max(grid_h, 0), max(grid_w, 0)
    for c in range(channels):
        base = (batch * channels + c) * height * width
        for ph in range(bins_h):
            for pw in range(bins_w):
                total = 0.0
                largest = 0.0
                first = True
                for iy in range(rows):
                    sy = ph * rows + iy
                    for ix in range(columns):
                        sx = pw * columns + ix
                        v0 = v1 = v2 = v3 = 0.0
                        if y_in[sy] and x_in[sx]:
                            ly, lx = y_frac[sy], x_frac[sx]
                            top, bottom = base + y_low[sy] * width, base + y_high[sy] * width
                            v0 = (1.0 - ly) * (1.0 - lx) * x[top + x_low[sx]]
                            v1 = (1.0 - ly) * lx * x[top + x_high[sx]]
                            v2 = ly * (1.0 - lx) * x[bottom + x_low[sx]]
                            v3 = ly * lx * x[bottom + x_high[sx]]
                        total += v0 + v1 + v2 + v3
                        sample = max(max(v0, v1), max(v2, v3))
                        largest = sample if first else max(largest, sample)
                        first = False
                at = (c * bins_h + ph) * bins_w + pw
                out[at] = largest if attrs[MODE] == 1 else total / count


@jit_with_nrt
def roi_align_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = roi_align_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    for row in (0, 1, 2, n_in):
        if not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    batch, channels = dim(table, 0, 0), dim(table, 0, 1)
    height, width = dim(table, 0, 2), dim(table, 0, 3)
    count = dim(table, 1, 0)
    x = as_float64(arena, table, 0, numel(table, 0))
    rois = as_float64(arena, table, 1, numel(table, 1))
    indices = view(arena, table, 2, np.int64)
    per_roi = channels * attrs[HEIGHT] * attrs[WIDTH]
    out = np.zeros(count * per_roi, dtype=np.float64)
    for r in range(count):
        if indices[r] < 0 or indices[r] >= batch:
            return np.int32(STATUS_OP_BAD_INDEX)
        _pool_roi(
            x,
            out[r * per_roi : (r + 1) * per_roi],
            rois[4 * r : 4 * r + 4],
            indices[r],
            channels,
            height,
            width,
            attrs,
            fattrs[SCALE],
        )
    return write_float(arena, table, n_in, out, out.shape[0], False)


def encode_roi_align(attributes, inputs):
    """RoiAlign slots (see the module); an unknown mode is -1, which infer refuses. The
    converter sets coordinate_transformation_mode at every opset."""
    return [
        choice(attributes, "coordinate_transformation_mode", COORDINATE_MODES, "half_pixel"),
        choice(attributes, "mode", MODES, "avg"),
        int(attributes.get("output_height", 1)),
        int(attributes.get("output_width", 1)),
        int(attributes.get("sampling_ratio", 0)),
        onnx_float(attributes.get("spatial_scale", 1.0)),
    ]


register_op(
    "RoiAlign",
    roi_align_infer,
    roi_align_compute,
    encode=encode_roi_align,
    inputs=(3, 3),
    dtypes={0: FLOATS, 1: FLOATS, 2: frozenset({DType.INT64})},
)
