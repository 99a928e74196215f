"""GridSample (opsets 16-22): X (N, C, D1 .. Dr) sampled at the normalized coordinates of grid
(N, H1 .. Hr, r), giving (N, C, H1 .. Hr); r spatial axes, any r the rank limit allows (opset
16 has r = 2 only; its mode names bilinear / bicubic are linear / cubic). float32 / float64.

A grid entry holds the coordinates in reverse axis order (x, the last axis, first), each in
[-1, 1] across the axis (the corner pixels' centres with align_corners, else their outer
edges). As in onnx.reference: nearest rounds half to even, linear takes 2 and cubic 4 taps per
axis (cubic coefficient -0.75); a coordinate outside the axis is clamped (border) or
reflected (reflection) first, then a tap outside the input reads 0 (zeros), the edge
(border) or its reflection. Cubic mode skips the first step, as PyTorch and onnxruntime do
(onnx.reference clamps the coordinate first, which differs for border padding).
Coordinates are float32 when the grid is (what onnx.reference and onnxruntime compute in). A
coordinate that is NaN, or infinite after its padding mode, samples 0. Unknown mode or
padding_mode values are refused at lowering, by name (`rtsoa.lowering.resampling`).
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    F64,
    FLOATS,
    MAX_RANK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    dim,
    dtype,
    rank,
    set_dim,
    set_output,
)
from rtsoa.ops.attributes import choice
from rtsoa.ops.copying import holds
from rtsoa.ops.registry import register_op
from rtsoa.ops.resize import cubic_kernel
from rtsoa.ops.shape import as_float64, narrow_to
from rtsoa.ops.window import element_count

NEAREST, LINEAR, CUBIC = 0, 1, 2
MODES = {"nearest": NEAREST, "linear": LINEAR, "bilinear": LINEAR, "cubic": CUBIC, "bicubic": CUBIC}
ZEROS, BORDER, REFLECTION = 0, 1, 2
PADDING_MODES = {"zeros": ZEROS, "border": BORDER, "reflection": REFLECTION}
TAPS = (1, 2, 4)  # per axis, by mode


@jit_with_nrt
def _checks(table, attrs):
    """(status, spatial rank r, output positions per image H1 * .. * Hr)."""
    zero = np.int64(0)
    if attrs.shape[0] < 3 or not (NEAREST <= attrs[0] <= CUBIC and ZEROS <= attrs[1] <= REFLECTION):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), zero, zero
    if (dtype(table, 0) != F32 and dtype(table, 0) != F64) or (
        dtype(table, 1) != F32 and dtype(table, 1) != F64
    ):
        return np.int32(STATUS_OP_BAD_DTYPE), zero, zero
    r = rank(table, 0) - 2
    if r < 1 or rank(table, 1) != r + 2 or dim(table, 1, r + 1) != r:
        return np.int32(STATUS_OP_BAD_SHAPE), zero, zero
    if dim(table, 1, 0) != dim(table, 0, 0) or element_count(table, 0) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE), zero, zero
    if element_count(table, 1) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE), zero, zero
    positions = np.int64(1)
    for a in range(1, r + 1):
        positions *= dim(table, 1, a)
    return np.int32(0), np.int64(r), positions


@jit_with_nrt
def grid_sample_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, r, positions = _checks(table, attrs)
    if status != 0:
        return status
    if r + 2 > MAX_RANK:
        return np.int32(STATUS_OP_BAD_SHAPE)
    set_output(table, n_in, dtype(table, 0), r + 2)
    set_dim(table, n_in, 0, dim(table, 0, 0))
    set_dim(table, n_in, 1, dim(table, 0, 1))
    for a in range(r):
        set_dim(table, n_in, 2 + a, dim(table, 1, 1 + a))
    return np.int32(0)


@jit_with_nrt
def _reflect(x, low, high):
    """Reflect `x` at the borders `low` / `high` until it lies between them."""
    span = high - low
    if span <= 0.0:
        return low
    if x < low:
        distance = low - x
        flips = np.floor(distance / span)
        rest = distance - flips * span
        return low + rest if flips % 2 == 0 else high - rest
    if x > high:
        distance = x - high
        flips = np.floor(distance / span)
        rest = distance - flips * span
        return high - rest if flips % 2 == 0 else low + rest
    return x


@jit_with_nrt
def _pixel(padding, i, length, low, high):
    """(index, readable) of tap `i` of an axis of `length` (zeros: unreadable outside)."""
    if padding == ZEROS:
        return min(max(i, 0), length - 1), 0 <= i < length
    if padding == REFLECTION:
        i = np.int64(_reflect(np.float64(i), low, high))
    return min(max(i, 0), length - 1), True


@jit_with_nrt
def _axis_taps(attrs, v, length, single, indices, weights, readable):
    """Fill one axis's taps for the normalized coordinate `v`."""
    mode, padding = attrs[0], attrs[1]
    if attrs[2] != 0:
        low, high = 0.0, length - 1.0
        x = (v + 1.0) / 2.0 * (length - 1)
    else:
        low, high = -0.5, length - 0.5
        x = ((v + 1.0) * length - 1.0) / 2.0
    if single:
        x = np.float64(np.float32(x))
    if mode == NEAREST:
        x = np.rint(x)
    if mode != CUBIC and (x < low or x > high):  # cubic pads tap by tap (PyTorch's way)
        if padding == BORDER:
            x = min(max(x, 0.0), length - 1.0)
        elif padding == REFLECTION:
            x = _reflect(x, low, high)
    if not np.isfinite(x):  # NaN (or an infinity left by zeros / reflection): reads 0
        indices[:] = 0
        weights[:] = 0.0
        readable[:] = False
        return
    if mode == NEAREST:
        index, inside = _pixel(padding, np.int64(x), length, low, high)
        indices[0] = index
        readable[0] = inside
        weights[0] = 1.0
        return
    left = np.floor(x)
    t = x - left
    first = np.int64(left) - (1 if mode == CUBIC else 0)
    taps = 2 if mode == LINEAR else 4
    for k in range(taps):
        index, inside = _pixel(padding, first + k, length, low, high)
        indices[k] = index
        readable[k] = inside
        if mode == LINEAR:
            weights[k] = 1.0 - t if k == 0 else t
        else:
            weights[k] = cubic_kernel(-0.75, t + 1.0 - k)


@jit_with_nrt
def _sample(x, grid, out, attrs, n, channels, dims, positions, single):
    r = dims.shape[0]
    taps = TAPS[attrs[0]]
    image = np.int64(1)
    for a in range(r):
        image *= dims[a]
    strides = np.ones(r, dtype=np.int64)
    for a in range(r - 2, -1, -1):
        strides[a] = strides[a + 1] * dims[a + 1]
    indices = np.zeros((r, taps), dtype=np.int64)
    weights = np.zeros((r, taps), dtype=np.float64)
    readable = np.zeros((r, taps), dtype=np.bool_)
    combos = taps**r
    offsets = np.zeros(combos, dtype=np.int64)
    factors = np.zeros(combos, dtype=np.float64)
    for b in range(n):
        for p in range(positions):
            entry = (b * positions + p) * r
            for a in range(r):  # the grid lists the last axis first
                _axis_taps(
                    attrs,
                    grid[entry + r - 1 - a],
                    dims[a],
                    single,
                    indices[a],
                    weights[a],
                    readable[a],
                )
            for combo in range(combos):
                rest = combo
                offset = np.int64(0)
                factor = 1.0
                for a in range(r - 1, -1, -1):
                    k = rest % taps
                    rest //= taps
                    offset += indices[a, k] * strides[a]
                    factor = factor * weights[a, k] if readable[a, k] else 0.0
                offsets[combo] = offset
                factors[combo] = factor
            for c in range(channels):
                base = (b * channels + c) * image
                total = 0.0
                for combo in range(combos):
                    if factors[combo] != 0.0:
                        total += factors[combo] * x[base + offsets[combo]]
                out[(b * channels + c) * positions + p] = total


@jit_with_nrt
def grid_sample_compute(arena, table, n_in, n_out, attrs, fattrs):
    status, r, positions = _checks(table, attrs)
    if status != 0:
        return status
    n, channels = dim(table, 0, 0), dim(table, 0, 1)
    dims = np.zeros(r, dtype=np.int64)
    image = np.int64(1)
    for a in range(r):
        dims[a] = dim(table, 0, 2 + a)
        image *= dims[a]
    count = n * channels * positions
    if not holds(table, 0) or not holds(table, 1) or not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    if count == 0:
        return np.int32(0)
    if image == 0:
        return np.int32(STATUS_OP_BAD_SHAPE)  # nothing to sample from
    x = as_float64(arena, table, 0, n * channels * image)
    grid = as_float64(arena, table, 1, n * positions * r)
    out = np.zeros(count, dtype=np.float64)
    _sample(x, grid, out, attrs, n, channels, dims, positions, dtype(table, 1) == F32)
    return narrow_to(arena, table, n_in, dtype(table, 0), out, count)


def encode_grid_sample(attributes, inputs):
    """GridSample slots: mode, padding mode, align_corners."""
    return [
        choice(attributes, "mode", MODES, "linear"),
        choice(attributes, "padding_mode", PADDING_MODES, "zeros"),
        int(attributes.get("align_corners", 0)),
    ]


register_op(
    "GridSample",
    grid_sample_infer,
    grid_sample_compute,
    encode=encode_grid_sample,
    inputs=(2, 2),
    dtypes={0: FLOATS, 1: FLOATS},
)
