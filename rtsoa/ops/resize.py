"""Resize (opset 11-19 semantics; opset 10 and Upsample through their converters in
`rtsoa.lowering.resampling`): nearest, linear and cubic interpolation over any subset of axes.

Inputs: X, roi, scales, sizes (roi, scales and sizes may be absent or empty; exactly one of
scales and sizes is given). The output size of an axis is floor(scale * in) from scales, or
the size from sizes (keep_aspect_ratio_policy not_larger / not_smaller: one scale for every
resized axis, the size round-half-up of scale * in). Interpolation is separable, as in
onnx.reference: each resized axis in the order of `axes` is resampled in turn, every output
position a weighted sum of `taps` source positions along that axis (edge positions repeat,
as in ONNX's edge padding), so linear and cubic modes, antialias and exclude_outside differ
only in the per-axis (index, weight) tables. Linear and cubic compute in float64 (integer
outputs round half to even and saturate, as onnx.reference does); nearest without
tf_crop_and_resize is a byte gather through the copy engine, exact for every dtype.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    F64,
    FLOATS,
    I8,
    I16,
    I32,
    I64,
    NUMBERS,
    OK,
    SMALL_INTEGERS,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_MISSING_INPUT,
    STATUS_OP_NEEDS_DATA,
    STATUS_OP_TOO_LARGE,
    U8,
    DType,
    dtype,
    has_data,
    numel,
    present,
    rank,
    view,
)
from rtsoa.ops.attributes import choice, onnx_float
from rtsoa.ops.copying import (
    copy_into,
    holds,
    linear_tables,
    row_dims,
    row_strides,
    set_dims,
)
from rtsoa.ops.lists import attr_list, encode_list, input_list, normalize_axes
from rtsoa.ops.registry import register_op
from rtsoa.ops.shape import as_float64, as_int64
from rtsoa.ops.window import MAX_ELEMENTS

NEAREST, LINEAR, CUBIC = 0, 1, 2
MODES = {"nearest": NEAREST, "linear": LINEAR, "cubic": CUBIC}
HALF_PIXEL, HALF_PIXEL_SYMMETRIC, PYTORCH_HALF_PIXEL, ALIGN_CORNERS = 0, 1, 2, 3
ASYMMETRIC, TF_HALF_PIXEL_FOR_NN, TF_CROP_AND_RESIZE = 4, 5, 6
COORDINATE_MODES = {
    "half_pixel": HALF_PIXEL,
    "half_pixel_symmetric": HALF_PIXEL_SYMMETRIC,
    "pytorch_half_pixel": PYTORCH_HALF_PIXEL,
    "align_corners": ALIGN_CORNERS,
    "asymmetric": ASYMMETRIC,
    "tf_half_pixel_for_nn": TF_HALF_PIXEL_FOR_NN,
    "tf_crop_and_resize": TF_CROP_AND_RESIZE,
}
# "simple" is not an ONNX nearest_mode: it is how Resize-10 and Upsample round (floor when an
# axis grows, ceil when it shrinks), what onnxruntime does for them.
PREFER_FLOOR, PREFER_CEIL, FLOOR, CEIL, SIMPLE = 0, 1, 2, 3, 4
NEAREST_MODES = {
    "round_prefer_floor": PREFER_FLOOR,
    "round_prefer_ceil": PREFER_CEIL,
    "floor": FLOOR,
    "ceil": CEIL,
    "simple": SIMPLE,
}
STRETCH, NOT_LARGER, NOT_SMALLER = 0, 1, 2
ASPECT_POLICIES = {"stretch": STRETCH, "not_larger": NOT_LARGER, "not_smaller": NOT_SMALLER}

# attribute slots
S_MODE, S_COORDINATE, S_NEAREST, S_CUBIC_A, S_EXCLUDE = 0, 1, 2, 3, 4
S_EXTRAPOLATION, S_ANTIALIAS, S_POLICY, S_AXES = 5, 6, 7, 8
ROI, SCALES, SIZES = 1, 2, 3
INTERPOLATED = NUMBERS | SMALL_INTEGERS
INDICES = frozenset({DType.INT32, DType.INT64})


@jit_with_nrt
def _float_input(arena, table, n_in, row):
    """(status, values, given) of optional float32 / float64 input `row` of rank 1 as float64;
    an absent or empty input is not given."""
    empty = np.zeros(0, dtype=np.float64)
    if row >= n_in or not present(table, row) or numel(table, row) == 0:
        return OK, empty, False
    if not has_data(table, row):
        return np.int32(STATUS_OP_NEEDS_DATA), empty, False
    kind = dtype(table, row)
    if kind != F32 and kind != F64:
        return np.int32(STATUS_OP_BAD_DTYPE), empty, False
    if rank(table, row) != 1 or not holds(table, row):
        return np.int32(STATUS_OP_BAD_SHAPE), empty, False
    return OK, as_float64(arena, table, row, numel(table, row)), True


@jit_with_nrt
def _attributes_valid(attrs):
    """Are the enumerated attribute slots in range (and antialias off in nearest mode)?"""
    if attrs.shape[0] <= S_AXES:
        return False
    mode = attrs[S_MODE]
    return (
        NEAREST <= mode <= CUBIC
        and HALF_PIXEL <= attrs[S_COORDINATE] <= TF_CROP_AND_RESIZE
        and PREFER_FLOOR <= attrs[S_NEAREST] <= SIMPLE
        and STRETCH <= attrs[S_POLICY] <= NOT_SMALLER
        and (attrs[S_ANTIALIAS] == 0 or (attrs[S_ANTIALIAS] == 1 and mode != NEAREST))
    )


@jit_with_nrt
def _interpolates(kind):
    """Can Resize compute in element type `kind` (float64 arithmetic on its values)?"""
    return (
        kind == F32
        or kind == F64
        or kind == U8
        or kind == I8
        or kind == I16
        or (kind == I32 or kind == I64)
    )


@jit_with_nrt
def _plan(arena, table, n_in, attrs):
    """(status, output dims, per-axis scales, axes): the output shape from sizes or scales."""
    r = rank(table, 0)
    out = row_dims(table, 0)
    scales = np.ones(max(r, 0), dtype=np.float64)
    axes = np.zeros(0, dtype=np.int64)
    if not _attributes_valid(attrs):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), out, scales, axes
    status, given_axes, given, _ = attr_list(attrs, S_AXES)
    if status != 0:
        return status, out, scales, axes
    if not given:
        given_axes = np.arange(r).astype(np.int64)
    status, axes = normalize_axes(given_axes, r)
    if status != 0:
        return status, out, scales, axes
    n = axes.shape[0]
    sizes = np.zeros(0, dtype=np.int64)
    has_sizes = n_in > SIZES and present(table, SIZES) and numel(table, SIZES) > 0
    if has_sizes:
        status, sizes, has_sizes = input_list(arena, table, n_in, SIZES)
        if status != 0:
            return status, out, scales, axes
    status, factors, has_scales = _float_input(arena, table, n_in, SCALES)
    if status != 0:
        return status, out, scales, axes
    if has_sizes and has_scales:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), out, scales, axes  # only one of them
    if has_sizes:
        if sizes.shape[0] != n:
            return np.int32(STATUS_OP_BAD_SHAPE), out, scales, axes
        for k in range(n):
            a = axes[k]
            if out[a] <= 0 or sizes[k] < 0 or sizes[k] >= MAX_ELEMENTS:
                return np.int32(STATUS_OP_BAD_SHAPE), out, scales, axes
            scales[a] = sizes[k] / out[a]
        if attrs[S_POLICY] != STRETCH and n > 0:
            chosen = scales[axes[0]]
            for k in range(n):
                if attrs[S_POLICY] == NOT_LARGER:
                    chosen = min(chosen, scales[axes[k]])
                else:
                    chosen = max(chosen, scales[axes[k]])
            for k in range(n):
                scales[axes[k]] = chosen
                out[axes[k]] = np.int64(chosen * out[axes[k]] + 0.5)
        else:
            for k in range(n):
                out[axes[k]] = sizes[k]
    elif has_scales:
        if factors.shape[0] != n:
            return np.int32(STATUS_OP_BAD_SHAPE), out, scales, axes
        for k in range(n):
            a = axes[k]
            if not factors[k] > 0.0:
                return np.int32(STATUS_OP_BAD_ATTRIBUTE), out, scales, axes
            length = factors[k] * out[a]
            if length >= MAX_ELEMENTS:
                return np.int32(STATUS_OP_TOO_LARGE), out, scales, axes
            scales[a] = factors[k]
            out[a] = np.int64(length)
    else:
        return np.int32(STATUS_OP_MISSING_INPUT), out, scales, axes
    count = np.int64(1)
    for a in range(r):
        if out[a] > 0 and count >= MAX_ELEMENTS // out[a]:
            return np.int32(STATUS_OP_TOO_LARGE), out, scales, axes
        count *= out[a]
    return OK, out, scales, axes


@jit_with_nrt
def resize_infer(arena, table, n_in, n_out, attrs, fattrs):
    if not _interpolates(dtype(table, 0)):
        return np.int32(STATUS_OP_BAD_DTYPE)
    status, out, _, _ = _plan(arena, table, n_in, attrs)
    if status != 0:
        return status
    return set_dims(table, n_in, dtype(table, 0), out)


@jit_with_nrt
def _source_coordinate(mode, x, scale, in_w, out_w, roi_low, roi_high):
    """Where output position `x` of an axis samples the input (ONNX's x_original)."""
    length = scale * in_w  # the unrounded output length, as the ONNX reference uses it
    if mode == HALF_PIXEL:
        return (x + 0.5) / scale - 0.5
    if mode == HALF_PIXEL_SYMMETRIC:
        offset = in_w / 2.0 * (1.0 - out_w / length)
        return offset + (x + 0.5) / scale - 0.5
    if mode == PYTORCH_HALF_PIXEL:  # the spec's 0 for one output (onnx.reference has -0.5)
        return 0.0 if out_w <= 1 else (x + 0.5) / scale - 0.5
    if mode == ALIGN_CORNERS:
        return 0.0 if length == 1.0 else x * (in_w - 1) / (length - 1.0)
    if mode == ASYMMETRIC:
        return x / scale
    if mode == TF_HALF_PIXEL_FOR_NN:
        return (x + 0.5) / scale
    if length == 1.0:  # TF_CROP_AND_RESIZE
        return (roi_high - roi_low) * (in_w - 1) / 2.0 + roi_low * (in_w - 1)
    return x * (roi_high - roi_low) * (in_w - 1) / (length - 1.0) + roi_low * (in_w - 1)


@jit_with_nrt
def _nearest_index(rounding, x, scale):
    """The input position nearest mode picks for source coordinate `x` (not yet clamped)."""
    low = np.floor(x)
    if x == low:
        return np.int64(low)
    ratio = x - low
    if rounding == PREFER_FLOOR:
        up = ratio > 0.5
    elif rounding == PREFER_CEIL:
        up = ratio >= 0.5
    elif rounding == FLOOR:
        up = False
    elif rounding == CEIL:
        up = True
    else:  # SIMPLE
        up = scale < 1.0
    return np.int64(low) + (1 if up else 0)


@jit_with_nrt
def cubic_kernel(a, x):
    """The cubic convolution kernel with coefficient `a` at distance `x`."""
    x = abs(x)
    if x <= 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    if x < 2.0:
        return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return 0.0


@jit_with_nrt
def _taps(mode, antialias, scale):
    """(taps per output position, first tap's offset from the position left of x, kernel
    scale): 1 for nearest, 2 for linear, 4 for cubic, wider when antialiasing shrinks."""
    if mode == NEAREST:
        return np.int64(1), np.int64(0), 1.0
    support = 1.0 if mode == LINEAR else 2.0
    if antialias and scale < 1.0:
        start = np.int64(np.floor(-support / scale)) + 1
        return 2 - 2 * start, start, scale
    start = np.int64(1 - support)
    return 2 - 2 * start, start, 1.0


@jit_with_nrt
def axis_tables(attrs, fattrs, scale, in_w, out_w, roi_low, roi_high):
    """(taps, indices, weights, outside) of one axis: output position j is
    sum_k weights[j * taps + k] * input[indices[j * taps + k]], or the extrapolation value
    where outside[j] (tf_crop_and_resize beyond the input)."""
    mode = attrs[S_MODE]
    antialias = attrs[S_ANTIALIAS] != 0
    taps, start, kernel_scale = _taps(mode, antialias, scale)
    indices = np.zeros(out_w * taps, dtype=np.int64)
    weights = np.zeros(out_w * taps, dtype=np.float64)
    outside = np.zeros(out_w, dtype=np.bool_)
    for j in range(out_w):
        x = _source_coordinate(attrs[S_COORDINATE], j, scale, in_w, out_w, roi_low, roi_high)
        if attrs[S_COORDINATE] == TF_CROP_AND_RESIZE and (x < 0.0 or x > in_w - 1):
            outside[j] = True
        base = j * taps
        if mode == NEAREST:
            index = _nearest_index(attrs[S_NEAREST], x, scale)
            indices[base] = min(max(index, 0), in_w - 1)
            weights[base] = 1.0
            continue
        low = np.floor(x)
        ratio = 1.0 if x == low else x - low  # an integer x: the tap right of the left one
        left = np.int64(x - ratio)
        total = 0.0
        for k in range(taps):
            distance = (start + k - ratio) * kernel_scale
            if mode == LINEAR:
                weight = max(1.0 - abs(distance), 0.0)
            else:
                weight = cubic_kernel(fattrs[S_CUBIC_A], distance)
            index = left + start + k
            if attrs[S_EXCLUDE] != 0 and (index < 0 or index >= in_w):
                weight = 0.0
            weights[base + k] = weight
            indices[base + k] = min(max(index, 0), in_w - 1)
            total += weight
        if (antialias or attrs[S_EXCLUDE] != 0) and total != 0.0:
            for k in range(taps):
                weights[base + k] /= total
    return taps, indices, weights, outside


@jit_with_nrt
def _resample_axis(source, outer, in_w, inner, out_w, taps, indices, weights, outside, fill):
    """One axis of the separable resize: source (outer, in_w, inner) -> (outer, out_w, inner)."""
    result = np.zeros(outer * out_w * inner, dtype=np.float64)
    if inner == 1:  # the last axis: one sum per output, no inner loop to set up
        for o in range(outer):
            for j in range(out_w):
                total = 0.0
                for k in range(taps):
                    total += weights[j * taps + k] * source[o * in_w + indices[j * taps + k]]
                result[o * out_w + j] = fill if outside[j] else total
        return result
    for o in range(outer):
        for j in range(out_w):
            d = (o * out_w + j) * inner
            if outside[j]:
                result[d : d + inner] = fill
                continue
            for k in range(taps):
                w = weights[j * taps + k]
                s = (o * in_w + indices[j * taps + k]) * inner
                for i in range(inner):
                    result[d + i] += w * source[s + i]
    return result


@jit_with_nrt
def _roi(arena, table, n_in, axes, r):
    """(status, low, high) per axis of the tf_crop_and_resize region (default 0 .. 1)."""
    low = np.zeros(r, dtype=np.float64)
    high = np.ones(r, dtype=np.float64)
    status, roi, given = _float_input(arena, table, n_in, ROI)
    if status != 0 or not given:
        return status, low, high
    n = axes.shape[0]
    if roi.shape[0] != 2 * n:
        return np.int32(STATUS_OP_BAD_SHAPE), low, high
    for k in range(n):
        low[axes[k]] = roi[k]
        high[axes[k]] = roi[n + k]
    return OK, low, high


@jit_with_nrt
def _is_identity(scale, in_w, out_w, low, high, coordinate):
    """Does an axis keep its input (scale 1, same size, the whole region)? onnx.reference skips
    such axes; so does rtsoa."""
    if abs(scale - 1.0) > 1e-9 or in_w != out_w:
        return False
    if coordinate != TF_CROP_AND_RESIZE:
        return True
    return abs(low) <= 1e-9 and abs(high - 1.0) <= 1e-9


@jit_with_nrt
def _store(arena, table, row, values):
    """Write float64 `values` into output `row` in its dtype: integers round half to even and
    saturate (onnx.reference's saturate_cast)."""
    kind = dtype(table, row)
    n = values.shape[0]
    if kind == F32:
        out32 = view(arena, table, row, np.float32)
        for i in range(n):
            out32[i] = values[i]
    elif kind == F64:
        view(arena, table, row, np.float64)[:n] = values
    elif kind == U8:
        _store_integers(values, view(arena, table, row, np.uint8), 0.0, 255.0)
    elif kind == I8:
        _store_integers(values, view(arena, table, row, np.int8), -128.0, 127.0)
    elif kind == I16:
        _store_integers(values, view(arena, table, row, np.int16), -32768.0, 32767.0)
    elif kind == I32:
        _store_integers(values, view(arena, table, row, np.int32), -2147483648.0, 2147483647.0)
    elif kind == I64:
        _store_integers(values, view(arena, table, row, np.int64), -(2.0**63), 2.0**63 - 1024.0)
    else:
        return np.int32(STATUS_OP_BAD_DTYPE)
    return OK


@jit_with_nrt
def _store_integers(values, out, lowest, highest):
    for i in range(values.shape[0]):
        out[i] = min(max(np.rint(values[i]), lowest), highest)


@jit_with_nrt
def _resize_nearest(arena, table, n_in, attrs, fattrs, out, scales, axes):
    """Nearest mode as a byte gather: per-axis tables of source offsets."""
    dims = row_dims(table, 0)
    strides = row_strides(table, 0)
    tables, starts = linear_tables(out, np.zeros(dims.shape[0], dtype=np.int64), strides)
    for a in axes:
        _, indices, _, _ = axis_tables(attrs, fattrs, scales[a], dims[a], out[a], 0.0, 1.0)
        for j in range(out[a]):
            tables[starts[a] + j] = indices[j] * strides[a]
    return copy_into(arena, table, 0, n_in, out, tables, starts, row_strides(table, n_in), 0)


@jit_with_nrt
def resize_compute(arena, table, n_in, n_out, attrs, fattrs):
    status, out, scales, axes = _plan(arena, table, n_in, attrs)
    if status != 0:
        return status
    r = out.shape[0]
    count = numel(table, n_in)
    if rank(table, n_in) != r or dtype(table, n_in) != dtype(table, 0):
        return np.int32(STATUS_OP_BAD_SHAPE)
    for a in range(r):
        if table[n_in, 4 + a] != out[a]:
            return np.int32(STATUS_OP_BAD_SHAPE)
    if not holds(table, 0) or not holds(table, n_in) or count == 0:
        return np.int32(STATUS_OP_BAD_SHAPE) if count != 0 else OK
    coordinate = attrs[S_COORDINATE]
    if attrs[S_MODE] == NEAREST and coordinate != TF_CROP_AND_RESIZE:
        return _resize_nearest(arena, table, n_in, attrs, fattrs, out, scales, axes)
    status, low, high = _roi(arena, table, n_in, axes, r)
    if status != 0:
        return status
    kind = dtype(table, 0)
    n = numel(table, 0)
    if kind == F32 or kind == F64:
        values = as_float64(arena, table, 0, n)
    else:
        values = as_int64(arena, table, 0, n).astype(np.float64)
    dims = row_dims(table, 0)
    for a in axes:
        if _is_identity(scales[a], dims[a], out[a], low[a], high[a], coordinate):
            continue
        taps, indices, weights, outside = axis_tables(
            attrs, fattrs, scales[a], dims[a], out[a], low[a], high[a]
        )
        outer = np.int64(1)
        for b in range(a):
            outer *= dims[b]
        inner = np.int64(1)
        for b in range(a + 1, r):
            inner *= dims[b]
        values = _resample_axis(
            values,
            outer,
            dims[a],
            inner,
            out[a],
            taps,
            indices,
            weights,
            outside,
            fattrs[S_EXTRAPOLATION],
        )
        dims[a] = out[a]
    return _store(arena, table, n_in, values)


def encode_resize(attributes, inputs):
    """Resize slots: mode, coordinate mode, nearest mode, cubic_coeff_a, exclude_outside,
    extrapolation_value, antialias, keep_aspect_ratio_policy, then the axes list."""
    return [
        choice(attributes, "mode", MODES, "nearest"),
        choice(attributes, "coordinate_transformation_mode", COORDINATE_MODES, "half_pixel"),
        choice(attributes, "nearest_mode", NEAREST_MODES, "round_prefer_floor"),
        onnx_float(attributes.get("cubic_coeff_a", -0.75)),
        int(attributes.get("exclude_outside", 0)),
        onnx_float(attributes.get("extrapolation_value", 0.0)),
        int(attributes.get("antialias", 0)),
        choice(attributes, "keep_aspect_ratio_policy", ASPECT_POLICIES, "stretch"),
        *encode_list(attributes.get("axes")),
    ]


register_op(
    "Resize",
    resize_infer,
    resize_compute,
    encode=encode_resize,
    inputs=(1, 4),
    data_inputs=(SCALES, SIZES),
    dtypes={
        0: INTERPOLATED,
        ROI: FLOATS,
        SCALES: FLOATS,
        SIZES: frozenset({DType.INT64, DType.INT32}),
    },
    doc="Resize: nearest, linear and cubic interpolation (opset 11-19 attributes)",
)
