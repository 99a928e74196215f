"""MeanVarianceNormalization, LpNormalization and Hardmax (composed at lowering) through lowered
one-node models, and the DepthToSpace / SpaceToDepth ops through the compiled op entry; judged
by onnxruntime (single thread) on float32 and by onnx.reference on float64 and the other element
types; the refusals at lowering naming the op, the node and what is wrong.
"""

import numpy as np
import pytest
from one_node import check, failure, one_node_model, refused
from onnx.reference import ReferenceEvaluator

from rtsoa.lowering import lower
from rtsoa.ops.abi import STATUS_OP_BAD_ATTRIBUTE, STATUS_OP_BAD_SHAPE
from tests.model_checks import run_and_compare, run_clean

rng = np.random.default_rng(119)


def lowered_against(want, op, x, attributes, opset):
    """The lowered one-node model's output on `x` is `want` (None: onnx.reference's), within
    float64 rounding."""
    model, feeds = one_node_model(op, [x], attributes, opset)
    if want is None:
        want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = run_clean(lower(model), feeds)["y"]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# -- MeanVarianceNormalization ----------------------------------------------------------------


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [1], [-1, -2], [0, 1, 2, 3]])
def test_mean_variance_normalization_over_axes(axes):
    x = (rng.standard_normal((2, 3, 4, 5)) * 3 + 1).astype(np.float32)
    attributes = {} if axes is None else {"axes": axes}
    model, feeds = one_node_model("MeanVarianceNormalization", [x], attributes, 13)
    run_and_compare(model, [feeds])
    x = x.astype(np.float64)  # onnx.reference runs the function body's float32 constants
    axes = tuple(axes or (0, 2, 3))
    mean = x.mean(axis=axes, keepdims=True)
    deviation = np.sqrt((x**2).mean(axis=axes, keepdims=True) - mean**2)
    want = (x - mean) / (deviation + 1e-9)
    lowered_against(want, "MeanVarianceNormalization", x, attributes, 13)


def test_mean_variance_normalization_needs_a_float_input():
    refused("MeanVarianceNormalization", [np.ones((2, 3), np.int32)], {"axes": [1]}, 13, "int32")


# -- LpNormalization ------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_lp_normalization_with_zero_rows(p, axis):
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    x[1] = 0.0  # zero norms along every axis somewhere
    x[:, :, 2] = 0.0
    model, feeds = one_node_model("LpNormalization", [x], {"p": p, "axis": axis}, 22)
    run_and_compare(model, [feeds])
    x = x.astype(np.float64)  # onnx.reference's p = 1 sums x, not |x|
    norm = (np.abs(x) ** p).sum(axis=axis, keepdims=True) ** (1 / p)
    with np.errstate(invalid="ignore"):
        want = np.where(norm == 0, 0.0, x / norm)
    lowered_against(want, "LpNormalization", x, {"p": p, "axis": axis}, 22)


def test_lp_normalization_of_other_p_or_integers_is_refused():
    x = np.ones((2, 3), np.float32)
    refused("LpNormalization", [x], {"p": 3}, 22, "p 3")
    refused("LpNormalization", [x.astype(np.int64)], {}, 22, "int64")


# -- Hardmax --------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("opset", [11, 13])
def test_hardmax_first_maximum_with_ties(axis, opset):
    x = rng.integers(0, 3, size=(3, 4, 5)).astype(np.float32)  # many ties
    model, feeds = one_node_model("Hardmax", [x], {"axis": axis}, opset)
    run_and_compare(model, [feeds])
    if opset >= 13:  # onnx.reference takes Hardmax-11 as Hardmax-13
        lowered_against(None, "Hardmax", x.astype(np.float64), {"axis": axis}, opset)


def test_hardmax_default_axes_and_a_zero_size_input():
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    for opset in (11, 13):
        model, feeds = one_node_model("Hardmax", [x], {}, opset)
        run_and_compare(model, [feeds])
    model, feeds = one_node_model("Hardmax", [np.zeros((0, 4), np.float32)], {}, 13)
    assert run_clean(lower(model), feeds)["y"].shape == (0, 4)


def test_hardmax_of_integers_is_refused():
    refused("Hardmax", [np.ones((2, 3), np.int32)], {}, 13, "int32")


# -- DepthToSpace / SpaceToDepth ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("blocksize", [1, 2, 3])
@pytest.mark.parametrize("kind", [np.float32, np.int8, np.uint64, np.bool_])
def test_depth_to_space_and_back(mode, blocksize, kind):
    x = rng.integers(0, 100, size=(2, 2 * blocksize * blocksize, 3, 2)).astype(kind)
    attributes = {"blocksize": blocksize, "mode": mode}
    check("DepthToSpace", [x], attributes, 13)
    y = rng.integers(0, 100, size=(2, 3, 2 * blocksize, 3 * blocksize)).astype(kind)
    check("SpaceToDepth", [y], attributes, 28)


def test_depth_to_space_and_space_to_depth_against_onnxruntime():
    x = rng.standard_normal((1, 8, 3, 4)).astype(np.float32)
    check("DepthToSpace", [x], {"blocksize": 2, "mode": "CRD"}, 13, judge="onnxruntime")
    check("DepthToSpace", [x], {"blocksize": 2}, 13, judge="onnxruntime")
    y = rng.standard_normal((1, 2, 4, 6)).astype(np.float32)
    check("SpaceToDepth", [y], {"blocksize": 2}, 13, judge="onnxruntime")


def test_space_to_depth_before_opset_28_is_dcr():
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    model, feeds = one_node_model("SpaceToDepth", [x], {"blocksize": 2}, 13)
    run_and_compare(model, [feeds])


def test_blocks_that_do_not_divide_and_bad_blocksizes_fail():
    x = np.zeros((1, 6, 2, 2), np.float32)
    failure(STATUS_OP_BAD_SHAPE, "DepthToSpace", [x], {"blocksize": 2})  # 6 % 4
    failure(
        STATUS_OP_BAD_SHAPE, "SpaceToDepth", [np.zeros((1, 1, 3, 2), np.float32)], {"blocksize": 2}
    )
    failure(STATUS_OP_BAD_ATTRIBUTE, "DepthToSpace", [x], {"blocksize": 0})
    failure(
        STATUS_OP_BAD_SHAPE, "DepthToSpace", [np.zeros((6, 2, 2), np.float32)], {"blocksize": 1}
    )


def test_an_unknown_block_mode_is_refused_at_lowering():
    x = np.zeros((1, 4, 2, 2), np.float32)
    refused("DepthToSpace", [x], {"blocksize": 2, "mode": "RDC"}, 13, "mode 'RDC'")
