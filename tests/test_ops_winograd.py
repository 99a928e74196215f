"""WinogradConv (rtsoa/ops/winograd.py) and the lowering's "winograd" fusion
(rtsoa/lowering/fuse.py).

The op is judged by independent convolutions: onnxruntime's float32 Conv, and a float64
convolution computed here with numpy from the untransformed weights. Its error bound, 1e-5 of
the output's largest magnitude, is the one the op and the fusion state; the tests record the
largest error they see. The fusion is judged by what it must and must not rewrite and by
onnxruntime on the models it rewrites.
"""

import numpy as np
import pytest
from figures import report
from onnx import helper

from rtsoa.abi.status import OpStatus
from rtsoa.graph.inspect import op_counts
from rtsoa.lowering import lower
from rtsoa.lowering.fuse import (
    FUSIONS,
    WINOGRAD_CHANNELS,
    WINOGRAD_PAIRS,
    WINOGRAD_PLANE,
)
from rtsoa.ops.host import OpError, infer_shapes, run_numpy
from rtsoa.ops.winograd import transform_weights
from rtsoa.testing.cnn import resnet
from rtsoa.testing.models import FLOAT, model, run_onnxruntime
from tests.model_checks import run_clean

RNG = np.random.default_rng(11)
BOUND = 1e-5  # of the output's largest magnitude (float32), as the module docstring states
WINOGRAD = tuple(FUSIONS)  # every fusion, "winograd" among them
DIRECT = set(FUSIONS) - {"winograd"}
ERRORS = {}  # shape -> the op's float32 error over the output's largest magnitude


def _direct(x, w, pads):
    """The 3 x 3 stride-1 convolution in float64: (N, M, OH, OW)."""
    top, left, bottom, right = pads
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, _, h, wd = x.shape
    m = w.shape[0]
    y = np.zeros((n, m, h - 2, wd - 2))
    for kh in range(3):
        for kw in range(3):
            patch = x[:, :, kh : kh + h - 2, kw : kw + wd - 2]
            y += np.einsum("nchw,mc->nmhw", patch, w[:, :, kh, kw].astype(np.float64))
    return y


def _error(got, want):
    return float(np.abs(got.astype(np.float64) - want).max() / max(np.abs(want).max(), 1e-30))


SHAPES = [  # (N, C, H, W, M, pads top, left, bottom, right)
    (1, 16, 8, 8, 16, (1, 1, 1, 1)),
    (1, 16, 7, 9, 17, (1, 1, 1, 1)),  # odd output rows: the last tile half outside
    (2, 19, 5, 6, 21, (0, 2, 1, 0)),  # asymmetric pads, two images
    (1, 16, 3, 3, 16, (0, 0, 0, 0)),  # one output element
    (1, 16, 1, 1, 16, (1, 1, 1, 1)),  # all but one input cell padding
    (1, 24, 57, 30, 16, (1, 1, 1, 1)),  # several blocks of tile rows
    (1, 16, 2, 300, 16, (1, 1, 1, 1)),  # one tile row wider than a block
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s[:5])))
def test_winograd_conv_agrees_with_a_float64_convolution_and_onnxruntime(shape):
    n, c, h, w, m, pads = shape
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    weights = RNG.standard_normal((m, c, 3, 3)).astype(np.float32)
    (got,) = run_numpy("WinogradConv", [x, transform_weights(weights)], {"pads": list(pads)})
    exact = _direct(x, weights, pads)
    assert got.dtype == np.float32 and got.shape == exact.shape
    error = _error(got, exact)
    assert error <= BOUND, error
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=list(pads))
    proto = model([node], [("x", FLOAT, list(x.shape))], [("y", FLOAT, None)], [("w", weights)])
    onnxruntime = run_onnxruntime(proto, {"x": x})["y"]
    assert _error(got, onnxruntime.astype(np.float64)) <= BOUND
    ERRORS[shape[:5]] = error
    lines = [f"  {error:.2e}  N, C, H, W, M = {key}" for key, error in sorted(ERRORS.items())]
    report("winograd float32 error over max |y|, by shape", lines)


def test_float64_is_exact_to_float64_rounding():
    x = RNG.standard_normal((1, 16, 9, 11))
    weights = RNG.standard_normal((16, 16, 3, 3))
    (got,) = run_numpy("WinogradConv", [x, transform_weights(weights)], {"pads": [1, 1, 1, 1]})
    assert got.dtype == np.float64
    assert _error(got, _direct(x, weights, (1, 1, 1, 1))) <= 1e-13


@pytest.mark.parametrize("activation", [0, 1, 2])
def test_bias_residual_and_activation_are_fused_convs(activation):
    """The bias, the residual and Relu / Clip as FusedConv applies them, on every block."""
    x = RNG.standard_normal((2, 16, 40, 12)).astype(np.float32)
    weights = RNG.standard_normal((16, 16, 3, 3)).astype(np.float32)
    bias = RNG.standard_normal(16).astype(np.float32)
    z = RNG.standard_normal((2, 16, 40, 12)).astype(np.float32)
    attributes = {"pads": [1, 1, 1, 1], "activation": activation, "clip_min": -1.0, "clip_max": 2.5}
    (got,) = run_numpy("WinogradConv", [x, transform_weights(weights), bias, z], attributes)
    want = _direct(x, weights, (1, 1, 1, 1)) + bias.reshape(1, -1, 1, 1) + z
    if activation == 1:
        want = np.maximum(want, 0)
    elif activation == 2:
        want = np.clip(want, -1.0, 2.5)
    assert np.abs(got - want).max() <= BOUND * np.abs(want).max()


def test_operands_it_cannot_compute_fail_with_a_status():
    x = RNG.standard_normal((1, 16, 4, 4)).astype(np.float32)
    u = transform_weights(RNG.standard_normal((16, 16, 3, 3)).astype(np.float32))
    pads = {"pads": [1, 1, 1, 1]}
    cases = [
        ([x, u[:, :, :8]], pads, OpStatus.BAD_SHAPE),  # U's input channels are not X's
        ([x, u[:8]], pads, OpStatus.BAD_SHAPE),  # not 16 transformed taps
        ([x[0], u], pads, OpStatus.BAD_SHAPE),  # X not 4-D
        ([x, u.astype(np.float64)], pads, OpStatus.BAD_DTYPE),
        ([x.astype(np.int32), u], pads, OpStatus.BAD_DTYPE),
        ([x[:, :, :1, :1], u], {"pads": [0, 0, 0, 0]}, OpStatus.BAD_SHAPE),  # no output
        ([x, u], {"pads": [1, 1, 1, 1], "activation": 7}, OpStatus.BAD_ATTRIBUTE),
        ([x, u, np.ones(3, np.float32)], pads, OpStatus.BAD_SHAPE),  # bias of 3 for 16
        ([x, u, np.ones(16, np.float32), np.ones((1, 16, 4, 1), np.float32)], pads,
         OpStatus.BAD_SHAPE),  # a residual that would broadcast
    ]  # fmt: skip
    for inputs, attributes, status in cases:
        with pytest.raises(OpError) as caught:
            infer_shapes("WinogradConv", inputs, attributes)
        assert caught.value.status == status, (status, caught.value)
    (out,), _ = infer_shapes("WinogradConv", [x, u], {"pads": [2, 0, 1, 3]})
    assert out.dims == (1, 16, 5, 5)


def test_huge_pads_are_refused_before_anything_is_allocated():
    """Pads that would make the scratch of an im2col larger than Conv accepts: too large."""
    x = RNG.standard_normal((1, 16, 2, 2)).astype(np.float32)
    u = transform_weights(RNG.standard_normal((16, 16, 3, 3)).astype(np.float32))
    with pytest.raises(OpError) as caught:
        infer_shapes("WinogradConv", [x, u], {"pads": [1 << 20, 1 << 20, 1 << 20, 1 << 20]})
    assert caught.value.status == OpStatus.TOO_LARGE
    with pytest.raises(OpError) as caught:
        infer_shapes("WinogradConv", [x, u], {"pads": [1 << 40, 0, 0, 0]})
    assert caught.value.status == OpStatus.BAD_ATTRIBUTE


def test_a_non_finite_input_spreads_over_its_tiles_as_documented():
    """An inf reaches every output of the 2 x 2 tiles whose 4 x 4 input tile holds it (as NaN
    or inf): also outputs whose 3 x 3 window does not. The direct conv keeps those finite."""
    x = RNG.standard_normal((1, 16, 8, 8)).astype(np.float32)
    x[0, 3, 0, 0] = np.inf  # padded cell (1, 1): tile (0, 0) only
    weights = RNG.standard_normal((16, 16, 3, 3)).astype(np.float32)
    (got,) = run_numpy("WinogradConv", [x, transform_weights(weights)], {"pads": [1, 1, 1, 1]})
    assert not np.isfinite(got[0, :, :2, :2]).any()
    assert np.isfinite(got[0, :, 2:, :]).all() and np.isfinite(got[0, :, :, 2:]).all()


# -- the lowering's fusion --------------------------------------------------------------------


def _conv_model(c=64, m=64, size=(14, 14), weights=None, **attributes):
    attributes.setdefault("pads", [1, 1, 1, 1])
    if weights is None:
        weights = (RNG.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attributes)
    dims = [1, c, *size]
    return model([node], [("x", FLOAT, dims)], [("y", FLOAT, None)], [("w", weights)]), dims


@pytest.mark.parametrize(
    "attributes",
    [
        {},
        {"pads": [0, 0, 0, 0]},
        {"pads": [2, 1, 0, 1]},
        {"pads": None, "auto_pad": "SAME_UPPER"},
        {"pads": None, "auto_pad": "SAME_LOWER"},
        {"pads": None, "auto_pad": "VALID"},
        {"strides": [1, 1], "dilations": [1, 1], "kernel_shape": [3, 3], "group": 1},
    ],
    ids=["pads1", "pads0", "asymmetric", "same_upper", "same_lower", "valid", "explicit"],
)
def test_a_3x3_stride_1_conv_becomes_winograd_and_agrees_with_onnxruntime(attributes):
    attributes = {k: v for k, v in attributes.items() if v is not None}
    if "auto_pad" in attributes:
        attributes["pads"] = None
    proto, dims = _conv_model(**{k: v for k, v in attributes.items()})
    counts = op_counts(lower(proto, fuse=WINOGRAD))
    assert counts == {"WinogradConv": 1}, counts
    x = {"x": RNG.standard_normal(dims).astype(np.float32)}
    got = run_clean(lower(proto, fuse=WINOGRAD), x)["y"]
    want = run_onnxruntime(proto, x)["y"]
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= BOUND * np.abs(want).max()


def test_winograd_is_a_default_fusion_that_a_fusion_list_can_leave_out():
    """`fuse=True` (the default) runs it; a list without "winograd" keeps the direct conv."""
    proto, _ = _conv_model()
    assert op_counts(lower(proto)) == {"WinogradConv": 1}
    assert op_counts(lower(proto, fuse=WINOGRAD)) == {"WinogradConv": 1}
    assert op_counts(lower(proto, fuse=DIRECT)) == {"Conv": 1}


def test_the_thresholds_are_the_measured_ones():
    """Winograd where it measured faster than the direct conv (see `rtsoa.lowering.fuse`)."""
    assert (WINOGRAD_CHANNELS, WINOGRAD_PAIRS, WINOGRAD_PLANE) == (32, 4096, 144)


@pytest.mark.parametrize(
    "change",
    [
        {"strides": [2, 2]},
        {"dilations": [2, 2]},
        {"c": 128, "group": 2},
        {"c": WINOGRAD_CHANNELS - 1, "m": 256},
        {"m": WINOGRAD_CHANNELS - 1, "c": 256},
        {"c": 32, "m": WINOGRAD_PAIRS // 32 - 1},
        {"size": (11, 13)},  # 143 output positions
        {"kernel": 5},
        {"nan_weight": True},
    ],
    ids=[
        "stride",
        "dilation",
        "groups",
        "few_inputs",
        "few_outputs",
        "few_pairs",
        "small_plane",
        "kernel5",
        "nan",
    ],
)
def test_convs_winograd_cannot_compute_or_would_not_pay_stay_convs(change):
    c, m = change.pop("c", 64), change.pop("m", 64)
    k = change.pop("kernel", 3)
    weights = (RNG.standard_normal((m, c // change.get("group", 1), k, k)) / 10).astype(np.float32)
    if change.pop("nan_weight", False):
        weights[1, 2, 0, 0] = np.nan
    size = change.pop("size", (14, 14))
    proto, dims = _conv_model(c=c, m=m, size=size, weights=weights, **change)
    counts = op_counts(lower(proto, fuse=WINOGRAD))
    assert "WinogradConv" not in counts and counts.get("Conv") == 1, counts
    x = {"x": RNG.standard_normal(dims).astype(np.float32)}
    direct = run_clean(lower(proto, fuse=False), x)["y"]
    np.testing.assert_array_equal(run_clean(lower(proto, fuse=WINOGRAD), x)["y"], direct)


def test_weights_computed_at_run_time_stay_a_conv():
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    proto = model(
        [node],
        [("x", FLOAT, [1, 64, 14, 14]), ("w", FLOAT, [64, 64, 3, 3])],
        [("y", FLOAT, None)],
    )
    assert op_counts(lower(proto, fuse=WINOGRAD)) == {"Conv": 1}


def test_an_input_of_unknown_height_and_width_is_taken_as_large_enough():
    proto, _ = _conv_model(size=("h", "w"))
    assert op_counts(lower(proto, fuse=WINOGRAD)) == {"WinogradConv": 1}
    x = {"x": RNG.standard_normal((1, 64, 5, 9)).astype(np.float32)}
    got = run_clean(lower(proto, fuse=WINOGRAD), x)["y"]
    want = run_onnxruntime(proto, x)["y"]
    assert got.shape == want.shape == (1, 64, 5, 9)
    assert np.abs(got - want).max() <= BOUND * np.abs(want).max()


def test_shared_weights_are_transformed_once_and_the_fusion_is_chosen_by_name():
    weights = (RNG.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["a", "w"], ["y"], pads=[1, 1, 1, 1]),
    ]
    proto = model(nodes, [("x", FLOAT, [1, 64, 12, 12])], [("y", FLOAT, None)], [("w", weights)])
    graph = lower(proto, fuse=WINOGRAD)
    assert op_counts(graph) == {"WinogradConv": 2}
    # the transform (16 x 64 x 64 float32) once, and the weights nothing reads any more dropped
    assert graph.constants.shape[0] == 16 * 64 * 64 * 4, graph.constants.shape
    assert op_counts(lower(proto, fuse=DIRECT)) == {"Conv": 2}
    x = {"x": RNG.standard_normal((1, 64, 12, 12)).astype(np.float32)}
    want = run_onnxruntime(proto, x)["y"]
    got = run_clean(graph, x)["y"]
    assert np.abs(got - want).max() <= BOUND * np.abs(want).max()


def test_a_resnet_runs_its_3x3_convs_by_winograd_within_the_bound():
    """Folded BatchNormalization, residual Adds and Relus (FusedConv) on the Winograd convs."""
    proto = resnet(size=64, classes=10, stages=2)  # 64 channels on 16 x 16 planes
    x = {proto.graph.input[0].name: RNG.standard_normal((2, 3, 64, 64)).astype(np.float32)}
    graph = lower(proto, fuse=WINOGRAD)
    counts = op_counts(graph)
    assert counts.get("WinogradConv", 0) >= 4 and "Relu" not in counts, counts
    got = run_clean(graph, x)
    direct = run_clean(lower(proto, fuse=DIRECT), x)
    want = run_onnxruntime(proto, x)
    for name, expected in want.items():
        scale = np.abs(expected).max()
        assert np.abs(got[name] - expected).max() <= BOUND * scale
        assert np.abs(direct[name] - expected).max() <= BOUND * scale
