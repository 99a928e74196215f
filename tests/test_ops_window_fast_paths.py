"""The direct kernels of windowed ops: depthwise Conv (one input channel per group) and
MaxPool / AveragePool without Indices, one output row at a time (rtsoa/ops/conv.py,
rtsoa/ops/pool_loops.py).

Judges: onnxruntime for float32 (onnx.reference for float64), and for the pools the per-window
loop that MaxPool with Indices still runs, which must give the same values bit for bit over
random geometries.
"""

import numpy as np
import pytest
from numba import njit
from test_ops_nn import check, onnxruntime_outputs, random

from rtsoa.ops.host import run_numpy
from rtsoa.ops.phases import PAIRED_PITCH, fill_phases, phase_buffer

DEPTHWISE_CASES = [
    ((1, 4, 9, 9), (4, 1, 3, 3), True, {"group": 4, "pads": [1, 1, 1, 1]}),
    ((1, 32, 14, 14), (32, 1, 3, 3), True, {"group": 32, "pads": [1, 1, 1, 1]}),  # MobileNet
    ((1, 16, 15, 15), (16, 1, 3, 3), False, {"group": 16, "strides": [2, 2], "pads": [0, 0, 1, 1]}),
    ((2, 3, 11, 10), (6, 1, 3, 3), True, {"group": 3, "strides": [2, 2], "pads": [1, 0, 2, 1]}),
    ((1, 4, 12, 13), (8, 1, 3, 2), False, {"group": 4, "strides": [3, 2], "dilations": [2, 3]}),
    ((1, 5, 7, 7), (5, 1, 5, 5), True, {"group": 5, "auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 3), (2, 1, 5, 5), False, {"group": 2, "pads": [3, 3, 3, 3]}),  # kernel > input
    ((1, 2, 6, 6), (2, 1, 1, 1), True, {"group": 2, "strides": [2, 2]}),  # depthwise 1x1
    ((2, 3, 20), (3, 1, 5), True, {"group": 3, "strides": [2], "pads": [2, 1]}),
    ((1, 2, 5, 6, 4), (4, 1, 2, 3, 2), True, {"group": 2, "pads": [1, 0, 1, 0, 1, 1]}),
]


@pytest.mark.parametrize("x_shape, w_shape, bias, attributes", DEPTHWISE_CASES)
def test_depthwise_conv_matches_onnxruntime(x_shape, w_shape, bias, attributes):
    inputs = [random(x_shape), random(w_shape)] + ([random(w_shape[0])] if bias else [])
    check("Conv", inputs, attributes)


def test_depthwise_conv_float64():
    inputs = [random((1, 3, 8, 8), np.float64), random((6, 1, 3, 3), np.float64)]
    check("Conv", inputs, {"group": 3, "strides": [2, 1], "pads": [1, 1, 0, 2]})


@pytest.mark.parametrize(
    "x_shape, w_shape, attributes",
    [
        ((1, 64, 32, 32), (8, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
        ((2, 128, 47, 45), (6, 64, 3, 3), {"group": 2, "strides": [2, 1], "pads": [0, 1, 2, 1]}),
        ((1, 8, 128, 130), (4, 8, 5, 5), {"pads": [2, 2, 2, 2], "dilations": [1, 2]}),
    ],
)
def test_convs_whose_im2col_leaves_the_cache_run_in_row_tiles(x_shape, w_shape, attributes):
    """Column matrices over `conv.TILE_BYTES` (2 MB) are built a tile of output rows at a
    time (uneven last tiles, groups, two images, strides, pads, dilations): onnxruntime's
    answers."""
    from rtsoa.ops.conv import TILE_BYTES

    inputs = [random(x_shape), random(w_shape), random(w_shape[0])]
    (y,) = run_numpy("Conv", inputs, attributes)
    k = w_shape[1] * w_shape[2] * w_shape[3]
    assert k * y.shape[2] * y.shape[3] * 4 > TILE_BYTES  # the whole matrix would not fit
    (want,) = onnxruntime_outputs("Conv", inputs, attributes)
    # sums of hundreds of products of magnitude ~1, in another order than onnxruntime's
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("seed", range(4))
def test_convs_built_from_stride_phases_match_the_judges(seed):
    """2-D and 1-D kernels of several taps build their column matrix from the input's
    stride phases (`conv.phase_tile`): random kernels, strides, dilations, uneven pads,
    groups, odd sizes and two images, against onnxruntime (float32) and onnx.reference
    (float64)."""
    rng = np.random.default_rng(seed)
    for _ in range(6):
        spatial = int(rng.integers(1, 3))
        kernel = [int(k) for k in rng.integers(1, 4, spatial)]
        if np.prod(kernel) == 1:
            kernel[0] = 2
        group = int(rng.integers(1, 3))
        c, m = group * int(rng.integers(1, 4)), group * int(rng.integers(1, 4))
        shape = (int(rng.integers(1, 3)), c) + tuple(int(d) for d in rng.integers(5, 16, spatial))
        attributes = {
            "group": group,
            "strides": [int(v) for v in rng.integers(1, 4, spatial)],
            "dilations": [int(v) for v in rng.integers(1, 3, spatial)],
            "pads": [int(v) for v in rng.integers(0, 3, 2 * spatial)],
        }
        dtype = np.float32 if rng.random() < 0.7 else np.float64
        inputs = [random(shape, dtype), random((m, c // group, *kernel), dtype)]
        check("Conv", inputs + [random(m, dtype)], attributes)


@pytest.mark.parametrize("dilations", [[1, 1], [2, 2]])
@pytest.mark.parametrize("pads", [[1, 1, 1, 1], [0, 2, 0, 0]])
@pytest.mark.parametrize("width", [27, 30])
def test_convs_from_column_stride_2_phases_on_wide_planes(dilations, pads, width):
    """A column stride 2 whose phase rows are `phases.PAIRED_PITCH` or more long fills both
    column phases of a row in one loop: onnxruntime's values, odd and even widths."""
    inputs = [random((1, 3, 9, width)), random((4, 3, 3, 3)), random(4)]
    for strides in ([2, 2], [1, 2]):
        attributes = {"strides": strides, "pads": pads, "dilations": dilations}
        check("Conv", inputs, attributes)


@pytest.mark.parametrize(
    "x_shape, w_shape, attributes",
    [
        # a stem: 3 channels, 7 x 7 stride 2, a column matrix of 2.1 MB (row tiles)
        ((1, 3, 120, 120), (8, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
        # MobileNet's stem, odd size, padding at the end only
        ((2, 3, 281, 279), (16, 3, 3, 3), {"strides": [2, 2], "pads": [0, 0, 1, 1]}),
        # row stride 1, column stride 3, two groups
        ((1, 4, 90, 600), (6, 2, 5, 5), {"strides": [1, 3], "pads": [2, 2, 2, 2], "group": 2}),
    ],
)
def test_strided_convs_over_few_channels_build_phase_tiles(x_shape, w_shape, attributes):
    """A column stride above 1 over few input channels takes the phase-built column matrix
    even where it is larger than `conv.TILE_BYTES` (in row tiles): onnxruntime's values."""
    check("Conv", [random(x_shape), random(w_shape), random(w_shape[0])], attributes)


def _taps_in_order(x, w, strides, pads, multiplier):
    """A 2-D depthwise convolution summed as the kernels sum it: per element, from +0, the
    products of the taps inside the input in (kh, kw) order, each rounded in x's dtype."""
    n, c, t_h, t_w = x.shape
    k_h, k_w = w.shape[2:]
    n_h = (t_h + pads[0] + pads[2] - k_h) // strides[0] + 1
    n_w = (t_w + pads[1] + pads[3] - k_w) // strides[1] + 1
    y = np.zeros((n, c * multiplier, n_h, n_w), x.dtype)
    for image, out, oh, ow in np.ndindex(y.shape):
        acc = x.dtype.type(0)
        for kh, kw in np.ndindex(k_h, k_w):
            ih, iw = oh * strides[0] - pads[0] + kh, ow * strides[1] - pads[1] + kw
            if 0 <= ih < t_h and 0 <= iw < t_w:
                acc = acc + w[out, 0, kh, kw] * x[image, out // multiplier, ih, iw]
        y[image, out, oh, ow] = acc
    return y


@pytest.mark.parametrize("seed", range(6))
def test_depthwise_3x3_sums_the_taps_in_order_bit_for_bit(seed):
    """The 3 x 3 kernel (`_depthwise_3x3`: interior columns in registers, checked taps near
    the padding) over random strides, pads, small planes (down to 1 x 1, smaller than the
    kernel) and channel multipliers: exactly the in-order sums."""
    rng = np.random.default_rng(seed)
    for _ in range(8):
        strides = [int(v) for v in rng.integers(1, 4, 2)]
        pads = [int(v) for v in rng.integers(0, 3, 4)]
        multiplier = int(rng.integers(1, 3))
        c = int(rng.integers(2, 5))  # one group is a plain conv (im2col + GEMM)
        shape = (int(rng.integers(1, 3)), c, int(rng.integers(1, 10)), int(rng.integers(1, 12)))
        if shape[2] + pads[0] + pads[2] < 3 or shape[3] + pads[1] + pads[3] < 3:
            continue  # no output
        dtype = np.float32 if rng.random() < 0.75 else np.float64
        x, w = random(shape, dtype), random((c * multiplier, 1, 3, 3), dtype)
        attributes = {"group": c, "strides": strides, "pads": pads}
        (got,) = run_numpy("Conv", [x, w], attributes)
        want = _taps_in_order(x, w, strides, pads, multiplier)
        assert got.dtype == want.dtype and np.array_equal(got, want), (shape, attributes)


@pytest.mark.parametrize("plane", [(3, 3), (3, 7), (7, 7), (14, 14), (9, 4), (2, 5)])
@pytest.mark.parametrize("multiplier", [1, 2])
def test_depthwise_3x3_same_padding_bit_for_bit(plane, multiplier):
    """Stride 1 and one element of padding all round (the flat interior loop, from 3 x 3
    up; a 2-row plane takes the row path): exactly the in-order sums, two images."""
    x = random((2, 3) + plane)
    w = random((3 * multiplier, 1, 3, 3))
    pads = [1, 1, 1, 1]
    (got,) = run_numpy("Conv", [x, w], {"group": 3, "pads": pads})
    assert np.array_equal(got, _taps_in_order(x, w, [1, 1], pads, multiplier))


@pytest.mark.parametrize(
    "shape, strides, pads",
    [
        ((1, 4, 28, 28), [2, 2], [1, 1, 1, 1]),  # MobileNet's stride-2 layers
        ((1, 3, 15, 15), [2, 2], [0, 0, 1, 1]),  # TensorFlow's SAME: the end padded only
        ((1, 3, 14, 17), [1, 2], [1, 0, 1, 2]),  # one phase row, two phase columns
        ((1, 3, 13, 9), [2, 1], [2, 1, 0, 1]),  # two phase rows, one phase column
        ((2, 2, 7, 7), [1, 1], [0, 0, 0, 0]),  # no padding: no padding cell
        ((1, 2, 1, 30), [1, 1], [1, 1, 1, 1]),  # one row: two rows of padding cells
        ((1, 2, 40, 3), [2, 2], [2, 2, 2, 2]),  # padding wider than a stride
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_depthwise_3x3_phases_bit_for_bit(shape, strides, pads, dtype):
    """Column strides 1 and 2 run on the zero-padded stride phases (`rtsoa.ops.phases`): the
    in-order sums exactly, over the borders, odd sizes and uneven pads."""
    c = shape[1]
    x, w = random(shape, dtype), random((2 * c, 1, 3, 3), dtype)
    attributes = {"group": c, "strides": strides, "pads": pads}
    (got,) = run_numpy("Conv", [x, w], attributes)
    want = _taps_in_order(x, w, strides, pads, 2)
    assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("width", [23, 24, 25, 26, 40])
@pytest.mark.parametrize(
    "pads", [[1, 1, 1, 1], [0, 0, 1, 1], [1, 0, 0, 1], [2, 3, 2, 3], [0, 0, 0, 0]]
)
def test_depthwise_3x3_column_stride_2_on_wide_planes_bit_for_bit(width, pads):
    """Column stride 2 with phase rows of `phases.PAIRED_PITCH` or more fills both column
    phases of a row in one loop: odd and even widths, pads at either end or none, pads
    wider than a stride; the in-order sums exactly."""
    x, w = random((1, 3, 6, width)), random((3, 1, 3, 3))
    for strides in ([2, 2], [1, 2]):
        (got,) = run_numpy("Conv", [x, w], {"group": 3, "strides": strides, "pads": pads})
        assert np.array_equal(got, _taps_in_order(x, w, strides, pads, 1)), strides


CHUNK_BORDERS = [(1, 2, 1, 15), (1, 2, 1, 16), (1, 2, 1, 17), (1, 2, 2, 7), (1, 2, 1, 32)]


@pytest.mark.parametrize("shape", [*CHUNK_BORDERS, (2, 3, 5, 33)])
@pytest.mark.parametrize("strides", [[1, 1], [1, 2], [1, 3]])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_depthwise_3x3_flat_loop_chunk_borders_bit_for_bit(shape, strides, dtype):
    """The flat loop runs in whole chunks of `depthwise.CHUNK` outputs: planes whose flat
    output count (to the last row's end) is a chunk less one, one, one more, two, and one
    output row: the in-order sums exactly, nothing past the plane written."""
    c = shape[1]
    x, w = random(shape, dtype), random((c, 1, 3, 3), dtype)
    attributes = {"group": c, "strides": strides, "pads": [1, 1, 1, 1]}
    (got,) = run_numpy("Conv", [x, w], attributes)
    want = _taps_in_order(x, w, strides, [1, 1, 1, 1], 1)
    assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("strides", [[1, 1], [2, 2]])
def test_depthwise_3x3_with_infinite_weights_skips_the_padding_taps(strides):
    """A channel with an infinite or NaN weight runs the row kernel, which skips the taps in
    the padding: a padding cell's 0 times an infinite weight would make its borders NaN."""
    x = random((1, 3, 9, 8))
    w = random((3, 1, 3, 3))
    w[0, 0, 0, 0] = np.inf  # the top-left tap: in the padding on the top row and left column
    w[1, 0, 2, 1] = -np.inf
    w[2, 0, 1, 2] = np.nan
    attributes = {"group": 3, "strides": strides, "pads": [1, 1, 1, 1]}
    (got,) = run_numpy("Conv", [x, w], attributes)
    want = _taps_in_order(x, w, strides, [1, 1, 1, 1], 1)
    np.testing.assert_array_equal(got, want)
    assert np.isfinite(got[0, 0, 0]).all() and np.isfinite(got[0, 1, -1]).all()


@pytest.mark.parametrize(
    "shape, attributes",
    [
        ((1, 16, 14, 14), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # Inception's
        ((1, 8, 28, 28), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
        ((1, 4, 112, 112), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ((2, 3, 7, 7), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
        ((1, 3, 9, 10), {"kernel_shape": [3, 2], "strides": [3, 1], "dilations": [2, 3]}),
        ((1, 3, 30), {"kernel_shape": [4], "strides": [3], "pads": [2, 3]}),
        ((1, 2, 5, 5), {"kernel_shape": [5, 5], "pads": [4, 4, 4, 4]}),  # padding-only windows
        # column stride 2 on wide planes: both column phases filled in one loop, odd widths,
        # a pad at one end only, pads of a window's width
        ((1, 3, 9, 27), {"kernel_shape": [3, 3], "strides": [1, 2], "pads": [0, 0, 1, 1]}),
        ((1, 2, 8, 26), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [2, 2, 2, 2]}),
        ((1, 2, 5, 31), {"kernel_shape": [2, 4], "strides": [3, 2], "pads": [1, 3, 0, 0]}),
    ],
)
def test_max_pool_phases_match_onnxruntime_and_the_window_loop(shape, attributes):
    """2-D and 1-D MaxPool without Indices runs on -inf-padded stride phases: onnxruntime's
    values, and the per-window loop's bit for bit, NaN included."""
    x = random(shape)
    check("MaxPool", [x], attributes)
    x.reshape(-1)[:: max(1, x.size // 9)] = np.nan
    (got,) = run_numpy("MaxPool", [x], attributes)
    values, _ = run_numpy("MaxPool", [x], attributes, 2)
    np.testing.assert_array_equal(got, values)


def _max_pool_in_tap_order(x, kernel, strides, dilations, pads, out_hw):
    """MaxPool of a 2-D window in Python, each window's taps in row-major order with the
    select the kernels state: a NaN replaces the running max, of equal values the first
    stays; all-padding windows give -inf."""
    n, c, h, w = x.shape
    y = np.empty((n, c, *out_hw), dtype=x.dtype)
    for i in np.ndindex(n, c, *out_hw):
        best = x.dtype.type(-np.inf)
        for kh in range(kernel[0]):
            for kw in range(kernel[1]):
                r = i[2] * strides[0] - pads[0] + kh * dilations[0]
                q = i[3] * strides[1] - pads[1] + kw * dilations[1]
                if 0 <= r < h and 0 <= q < w:
                    v = x[i[0], i[1], r, q]
                    if v > best or v != v:
                        best = v
        y[i] = best
    return y


@pytest.mark.parametrize(
    "shape, attributes",
    [
        ((1, 3, 9, 8), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        ((1, 2, 11, 12), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ((1, 2, 10, 9), {"kernel_shape": [2, 4], "strides": [1, 2], "dilations": [2, 1]}),
        ((2, 1, 9, 13), {"kernel_shape": [4, 3], "strides": [3, 2], "pads": [2, 1, 1, 2]}),
    ],
)
def test_max_pool_phases_keep_the_tap_order_nan_and_signed_zero(shape, attributes):
    """The separable passes give the bits of the taps one by one in row-major order: which of
    several NaNs (payloads differ) and which of +0 / -0 a window gives."""
    rng = np.random.default_rng(5)
    for dtype, bits in ((np.float32, np.uint32), (np.float64, np.uint64)):
        # windows whose max is zero, +0 and -0 both in many; several NaNs in many
        x = rng.choice(np.array([-1.0, -0.0, 0.0], dtype), shape)
        nan = rng.random(shape) < 0.12
        payloads = np.array(np.nan, dtype).view(bits) | rng.integers(1, 1000, shape).astype(bits)
        x[nan] = payloads[nan].view(dtype)
        (got,) = run_numpy("MaxPool", [x], attributes)
        kernel = attributes["kernel_shape"]
        want = _max_pool_in_tap_order(
            x,
            kernel,
            attributes.get("strides", [1, 1]),
            attributes.get("dilations", [1, 1]),
            attributes.get("pads", [0, 0, 0, 0])[:2],
            got.shape[2:],
        )
        np.testing.assert_array_equal(got.view(bits), want.view(bits))
        assert np.isnan(got).any() and (got.view(bits) == np.array(-0.0, dtype).view(bits)).any()


def _ties_and_nans(rng, shape, dtype, bits):
    """MaxPool inputs whose windows tie: -1, -0, +0 and 2, and NaNs of differing payloads."""
    x = rng.choice(np.array([-1.0, -0.0, 0.0, 2.0], dtype), shape)
    nan = rng.random(shape) < 0.08
    payloads = np.array(np.nan, dtype).view(bits) | rng.integers(1, 1000, shape).astype(bits)
    x[nan] = payloads[nan].view(dtype)
    return x


@pytest.mark.parametrize(
    "shape, strides, pads",
    [
        ((1, 2, 112, 112), [2, 2], [1, 1, 1, 1]),  # ResNet's stem pool
        ((1, 3, 130, 130), [2, 2], [1, 1, 1, 1]),  # a plane per pass: three passes
        ((1, 300, 12, 12), [2, 2], [1, 1, 1, 1]),  # many planes per pass, three passes
        ((2, 5, 14, 14), [1, 1], [1, 1, 1, 1]),  # Inception's 3 x 3 / 1
        ((1, 3, 9, 10), [2, 2], [2, 2, 1, 0]),  # odd height, begin pads of 2
        ((1, 3, 7, 12), [1, 2], [0, 1, 2, 0]),  # row stride 1, column stride 2
        ((1, 2, 10, 6), [2, 1], [0, 0, 3, 2]),  # end rows of padding only: -inf
        ((1, 2, 3, 2), [1, 1], [2, 2, 0, 0]),  # rows and columns with no tap all inside
        ((1, 2, 1, 4), [1, 2], [1, 1, 1, 1]),  # one input row
    ],
)
def test_max_pool_3x3_rows_then_columns_bit_for_bit(shape, strides, pads):
    """3 x 3 MaxPool over W = n_w * s_w takes the row-maxima pass (`_max_pool_3x3`): the bits
    of the taps one by one in row-major order (several NaN payloads, +0 and -0, -inf for
    windows of padding only), over plane blocks' borders and rows whose taps leave the input."""
    from rtsoa.ops.pool_loops import _max3_fits
    from rtsoa.ops.window_layout import G_C, G_D, G_IN, G_K, G_N, G_OUT, G_PB, G_PE, G_S, GEOMETRY

    attributes = {"kernel_shape": [3, 3], "strides": strides, "pads": pads}
    geo = np.zeros(GEOMETRY, dtype=np.int64)
    geo[G_N], geo[G_C] = shape[:2]
    geo[G_IN : G_IN + 3] = (1, *shape[2:])
    geo[G_K : G_K + 3] = (1, 3, 3)
    geo[G_S : G_S + 3] = (1, *strides)
    geo[G_D : G_D + 3] = 1
    geo[G_PB : G_PB + 3] = (0, *pads[:2])
    geo[G_PE : G_PE + 3] = (0, *pads[2:])
    for axis in (1, 2):
        total = geo[G_IN + axis] + geo[G_PB + axis] + geo[G_PE + axis] - 3
        geo[G_OUT + axis] = total // geo[G_S + axis] + 1
    geo[G_OUT] = 1
    assert _max3_fits(geo)
    rng = np.random.default_rng(sum(shape))
    for dtype, bits in ((np.float32, np.uint32), (np.float64, np.uint64)):
        x = _ties_and_nans(rng, shape, dtype, bits)
        (got,) = run_numpy("MaxPool", [x], attributes)
        want = _max_pool_in_tap_order(x, [3, 3], strides, [1, 1], pads[:2], got.shape[2:])
        np.testing.assert_array_equal(got.view(bits), want.view(bits))
    if max(pads) < 3:  # onnxruntime takes pads shorter than the kernel only
        check("MaxPool", [random(shape)], attributes)


@pytest.mark.parametrize("shape", [(1, 3, 56, 56), (2, 2, 7, 9), (1, 2, 2, 2), (1, 2, 3, 2)])
def test_2x2_stride_2_pools_take_row_pairs_bit_for_bit(shape):
    """2 x 2 / 2 pools without padding (`_pool_2x2`), odd sizes leaving the last row or column
    out, one output: MaxPool's bits of the taps in row-major order (NaN payloads, signed
    zeros), AveragePool's float64 sum from +0 in that order over 4."""
    attributes = {"kernel_shape": [2, 2], "strides": [2, 2]}
    rng = np.random.default_rng(sum(shape))
    for dtype, bits in ((np.float32, np.uint32), (np.float64, np.uint64)):
        x = _ties_and_nans(rng, shape, dtype, bits)
        (got,) = run_numpy("MaxPool", [x], attributes)
        want = _max_pool_in_tap_order(x, [2, 2], [2, 2], [1, 1], [0, 0], got.shape[2:])
        np.testing.assert_array_equal(got.view(bits), want.view(bits))
        x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-20, 20, shape)).astype(dtype)
        x[rng.random(shape) < 0.2] = -0.0  # windows of -0 alone give +0
        (got,) = run_numpy("AveragePool", [x], attributes)
        want = np.zeros(got.shape, dtype)
        for i in np.ndindex(got.shape):
            total = 0.0  # Python floats: float64, in row-major tap order
            for kh, kw in np.ndindex(2, 2):
                total += float(x[i[0], i[1], 2 * i[2] + kh, 2 * i[3] + kw])
            want[i] = total / 4
        np.testing.assert_array_equal(got.view(bits), want.view(bits))
    check("MaxPool", [random(shape)], attributes)
    check("AveragePool", [random(shape)], attributes)


def _random_window(rng, spatial):
    kernel = [int(k) for k in rng.integers(1, 4, spatial)]
    attributes = {
        "kernel_shape": kernel,
        "strides": [int(s) for s in rng.integers(1, 4, spatial)],
        "ceil_mode": int(rng.integers(0, 2)),
    }
    if rng.random() < 0.5:
        attributes["dilations"] = [int(d) for d in rng.integers(1, 3, spatial)]
    pads = [int(rng.integers(0, k)) for k in kernel] + [int(rng.integers(0, k)) for k in kernel]
    attributes["pads"] = pads
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4))) + tuple(
        int(d) for d in rng.integers(4, 12, spatial)
    )
    return shape, attributes


@pytest.mark.parametrize("seed", range(4))
def test_max_pool_rows_equal_the_window_loop(seed):
    """Without Indices MaxPool runs the row kernel, with them the per-window loop: the same
    values, NaN and all-padding windows (-inf) included."""
    rng = np.random.default_rng(seed)
    for _ in range(40):
        spatial = int(rng.integers(1, 4))
        shape, attributes = _random_window(rng, spatial)
        dtype = np.float32 if rng.random() < 0.7 else np.float64
        x = rng.standard_normal(shape).astype(dtype)
        x[rng.random(shape) < 0.05] = np.nan
        try:
            (rows,) = run_numpy("MaxPool", [x], attributes)
        except Exception as error:  # a geometry the op refuses: both paths must refuse it
            with pytest.raises(type(error)):
                run_numpy("MaxPool", [x], attributes, 2)
            continue
        values, _ = run_numpy("MaxPool", [x], attributes, 2)
        np.testing.assert_array_equal(rows, values, err_msg=str((shape, attributes)))


@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool_rows_match_onnxruntime_over_random_geometries(include_pad):
    rng = np.random.default_rng(include_pad)
    for _ in range(30):
        spatial = int(rng.integers(1, 4))
        shape, attributes = _random_window(rng, spatial)
        attributes.pop("dilations", None)  # onnxruntime's AveragePool takes none before opset 19
        attributes["count_include_pad"] = include_pad
        check("AveragePool", [random(shape)], attributes)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_propagates_nan_wherever_it_is_in_the_window(dtype):
    """A NaN anywhere in a window gives NaN, as numpy's max and PyTorch's max_pool do; before,
    the window loop kept a NaN only as the window's first tap (onnx.reference does the same;
    onnxruntime skips NaN, giving the lowest float for an all-NaN window)."""
    x = np.array([[[np.nan, 1.0, 1.0, np.nan, np.nan, np.nan, -np.inf, 2.0]]], dtype=dtype)
    attributes = {"kernel_shape": [2], "strides": [2]}
    want = np.array([[[np.nan, np.nan, np.nan, 2.0]]], dtype=dtype)
    (rows,) = run_numpy("MaxPool", [x], attributes)
    values, indices = run_numpy("MaxPool", [x], attributes, 2)
    np.testing.assert_array_equal(rows, want)
    np.testing.assert_array_equal(values, want)
    assert indices.reshape(-1).tolist() == [0, 3, 4, 7]  # the window's first NaN


@njit
def _phases_of(x, geo, padding):
    buffer = phase_buffer(geo, padding, x, 16)
    fill_phases(x, 0, geo, buffer)
    return buffer


@pytest.mark.parametrize("seed", range(4))
def test_stride_phases_hold_each_input_element_once_and_padding_elsewhere(seed):
    """`phases.fill_phases` against its definition: phase (a, b) row i column j holds input
    (s_h * i + a - pad_h, s_w * j + b - pad_w), the padding value where that lies outside,
    over random strides (the paired column-stride-2 rows of PAIRED_PITCH or more among them),
    pads, kernels, dilations and plane sizes, odd and even."""
    from rtsoa.ops.phases import phase_shape
    from rtsoa.ops.window_layout import G_D, G_IN, G_K, G_OUT, G_PB, G_PE, G_S, GEOMETRY

    rng = np.random.default_rng(seed)
    paired = 0
    for _ in range(60):
        t_h, t_w = (int(v) for v in rng.integers(1, 60, 2))
        s_h, s_w = (int(v) for v in rng.choice([1, 2, 2, 3], 2))
        k_h, k_w = (int(v) for v in rng.integers(1, 6, 2))
        d_h, d_w = (int(v) for v in rng.integers(1, 3, 2))
        pads = [int(v) for v in rng.integers(0, 4, 4)]  # begin h, w; end h, w
        n_h = (t_h + pads[0] + pads[2] - d_h * (k_h - 1) - 1) // s_h + 1
        n_w = (t_w + pads[1] + pads[3] - d_w * (k_w - 1) - 1) // s_w + 1
        if n_h < 1 or n_w < 1:
            continue
        geo = np.zeros(GEOMETRY, dtype=np.int64)
        geo[G_IN : G_IN + 3], geo[G_K : G_K + 3] = (1, t_h, t_w), (1, k_h, k_w)
        geo[G_S : G_S + 3], geo[G_D : G_D + 3] = (1, s_h, s_w), (1, d_h, d_w)
        geo[G_PB : G_PB + 3], geo[G_PE : G_PE + 3] = (0, pads[0], pads[1]), (0, pads[2], pads[3])
        geo[G_OUT : G_OUT + 3] = (1, n_h, n_w)
        x = rng.standard_normal(t_h * t_w).astype(np.float32)
        buffer = _phases_of(x, geo, np.float32(-7.5))
        rows, pitch = phase_shape(geo)
        paired += s_w == 2 and pitch >= PAIRED_PITCH
        plane = x.reshape(t_h, t_w)
        want = np.full((s_h, s_w, rows, pitch), -7.5, dtype=np.float32)
        for a in range(s_h):
            for b in range(s_w):
                r = s_h * np.arange(rows) + a - pads[0]
                c = s_w * np.arange(pitch) + b - pads[1]
                inside_r, inside_c = (r >= 0) & (r < t_h), (c >= 0) & (c < t_w)
                want[a, b][np.ix_(inside_r, inside_c)] = plane[np.ix_(r[inside_r], c[inside_c])]
        got = buffer[: want.size].reshape(want.shape)
        np.testing.assert_array_equal(got, want, err_msg=f"{geo.tolist()}")
        assert (buffer[want.size :] == np.float32(-7.5)).all()  # the slack
    assert paired >= 5  # the paired rows were reached
