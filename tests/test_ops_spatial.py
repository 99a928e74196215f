"""CenterCropPad, LpPool and GroupNormalization (composed at lowering) and AffineGrid through
lowered one-node models whose inputs are all given at run time: judged by onnxruntime (single
thread) on float32 and by onnx.reference or numpy on the other element types; the refusals at
lowering naming the op, the node and what is wrong.
"""

import numpy as np
import pytest
from one_node import failure, one_node_model, refused
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa.lowering import lower
from rtsoa.ops.abi import STATUS_OP_BAD_ATTRIBUTE, STATUS_OP_BAD_SHAPE
from tests.model_checks import run_and_compare, run_clean

rng = np.random.default_rng(128)


def against_reference(op, inputs, attributes, opset, rtol=0.0):
    model, feeds = one_node_model(op, inputs, attributes, opset)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = run_clean(lower(model), feeds)["y"]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


# -- CenterCropPad --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target, axes",
    [
        ([2, 3, 4], None),  # crop, keep, pad
        ([5, 1, 7], None),  # odd differences both ways
        ([6, 2], [0, -1]),
        ([1], [1]),
        ([3, 0, 4], None),  # a zero-size target
    ],
)
@pytest.mark.parametrize("shape_kind", [np.int64, np.int32])
def test_center_crop_pad_crops_and_pads(target, axes, shape_kind):
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    attributes = {} if axes is None else {"axes": axes}
    inputs = [x, np.array(target, dtype=shape_kind)]
    if shape_kind == np.int32:  # onnxruntime's expansion mixes int32 and int64 and fails
        against_reference("CenterCropPad", inputs, attributes, 18)
        return
    model, feeds = one_node_model("CenterCropPad", inputs, attributes, 18)
    run_and_compare(model, [feeds])


@pytest.mark.parametrize("kind", [np.float64, np.int8, np.uint16, np.bool_])
def test_center_crop_pad_of_other_types(kind):
    x = rng.integers(0, 5, size=(3, 6)).astype(kind)
    against_reference("CenterCropPad", [x, np.array([6, 3], np.int64)], {}, 18)


def test_center_crop_pad_with_bad_axes_is_refused():
    x = np.zeros((2, 3), np.float32)
    refused("CenterCropPad", [x, np.array([1, 1], np.int64)], {"axes": [0, 2]}, 18, "axes")
    refused("CenterCropPad", [x, np.array([1, 1], np.int64)], {"axes": [1, -1]}, 18, "axes")


# -- LpPool ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize(
    "shape, attributes",
    [
        ((1, 3, 9), {"kernel_shape": [3]}),
        ((2, 2, 6, 7), {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}),
        ((1, 2, 7, 7), {"kernel_shape": [2, 2], "dilations": [2, 3]}),
        ((1, 2, 5, 6), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        ((1, 2, 5, 6), {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER"}),
        ((1, 1, 4, 4, 5), {"kernel_shape": [2, 2, 2], "auto_pad": "VALID"}),
    ],
)
def test_lp_pool_against_onnxruntime(p, shape, attributes):
    x = rng.standard_normal(shape).astype(np.float32)
    model, feeds = one_node_model("LpPool", [x], {**attributes, "p": p}, 18)
    run_and_compare(model, [feeds])


def test_lp_pool_float64_against_onnx_reference():
    x = rng.standard_normal((1, 2, 6, 5))
    against_reference("LpPool", [x], {"kernel_shape": [2, 2], "p": 2}, 18, rtol=1e-12)


def test_lp_pool_ceil_mode_and_unknown_channels_are_refused():
    x = np.zeros((1, 2, 4, 4), np.float32)
    refused("LpPool", [x], {"kernel_shape": [2, 2], "ceil_mode": 1}, 18, "ceil_mode 1")
    node = helper.make_node("LpPool", ["x"], ["y"], name="the_node", kernel_shape=[2, 2])
    graph = helper.make_graph(
        [node],
        "symbolic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "channels", 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(Exception, match="the_node.*channel count"):
        lower(model)


# -- GroupNormalization ---------------------------------------------------------------------------


def group_inputs(groups_or_channels, kind):
    x = (rng.standard_normal((2, 6, 3, 4)) * 2 + 1).astype(kind)
    scale = rng.standard_normal(groups_or_channels).astype(kind)
    bias = rng.standard_normal(groups_or_channels).astype(kind)
    return [x, scale, bias]


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_group_normalization_21_against_onnxruntime(groups):
    inputs = group_inputs(6, np.float32)
    attributes = {"num_groups": groups, "epsilon": 1e-3}
    model, feeds = one_node_model("GroupNormalization", inputs, attributes, 21)
    run_and_compare(model, [feeds])


@pytest.mark.parametrize("groups", [2, 3])
def test_group_normalization_18_scales_per_group(groups):
    inputs = group_inputs(groups, np.float32)
    against_reference("GroupNormalization", inputs, {"num_groups": groups}, 18, rtol=1e-5)


def test_group_normalization_of_float64_is_computed_in_float32():
    """stash_type 1 (the default): the float64 result is within float32 rounding of the
    float64 computation, and equal to the float32 computation widened."""
    inputs = group_inputs(6, np.float64)
    against_reference("GroupNormalization", inputs, {"num_groups": 3}, 21, rtol=1e-5)
    narrow = [x.astype(np.float32) for x in inputs]
    model, feeds = one_node_model("GroupNormalization", inputs, {"num_groups": 3}, 21)
    wide = run_clean(lower(model), feeds)["y"]
    model, feeds = one_node_model("GroupNormalization", narrow, {"num_groups": 3}, 21)
    np.testing.assert_array_equal(wide, run_clean(lower(model), feeds)["y"].astype(np.float64))


def test_group_normalization_bad_attributes_are_refused():
    inputs = group_inputs(6, np.float32)
    refused("GroupNormalization", inputs, {"num_groups": 0}, 21, "num_groups")
    refused("GroupNormalization", inputs, {"num_groups": 2, "stash_type": 0}, 21, "stash_type 0")


# -- AffineGrid -----------------------------------------------------------------------------------


def affine_grid_in_numpy(theta, size, align_corners):
    """The grid by its definition, in float64."""

    def positions(n):
        if align_corners:
            return np.array([-1.0]) if n == 1 else np.linspace(-1.0, 1.0, n)
        return -1.0 + (2.0 * np.arange(n) + 1.0) / n

    axes = [positions(int(n)) for n in size[2:]][::-1]  # x (width) first
    mesh = np.meshgrid(*axes[::-1], indexing="ij")[::-1]
    points = np.stack([*mesh, np.ones_like(mesh[0])], axis=-1)
    return np.einsum("nrj,...j->n...r", theta.astype(np.float64), points)


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 1, 1, 3], [2, 1, 3, 2, 4]])
def test_affine_grid_against_onnxruntime_and_its_definition(align_corners, size):
    spatial = len(size) - 2
    theta = rng.standard_normal((size[0], spatial, spatial + 1)).astype(np.float32)
    inputs = [theta, np.array(size, np.int64)]
    model, feeds = one_node_model("AffineGrid", inputs, {"align_corners": align_corners}, 20)
    if not (align_corners and 1 in size[2:]):  # onnxruntime puts a lone point at 1, not -1
        run_and_compare(model, [feeds])
    want = affine_grid_in_numpy(theta, size, align_corners)
    got = run_clean(lower(model), feeds)["y"]
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-6, atol=1e-6)


def test_affine_grid_float64_is_the_definition_rounded_once():
    theta = rng.standard_normal((2, 2, 3))
    size = np.array([2, 1, 3, 4], np.int64)
    model, feeds = one_node_model("AffineGrid", [theta, size], {}, 20)
    got = run_clean(lower(model), feeds)["y"]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, affine_grid_in_numpy(theta, size, 0), rtol=1e-15, atol=1e-15)


def test_affine_grid_then_grid_sample():
    """The spatial transformer pattern: AffineGrid feeding GridSample, against onnxruntime."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5, 6])
    theta = helper.make_tensor_value_info("theta", TensorProto.FLOAT, [2, 2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    size = helper.make_tensor("size", TensorProto.INT64, [4], [2, 3, 4, 4])
    nodes = [
        helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=0),
        helper.make_node("GridSample", ["x", "grid"], ["y"], mode="linear"),
    ]
    graph = helper.make_graph(nodes, "transformer", [x, theta], [y], [size])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    feeds = {
        "x": rng.standard_normal((2, 3, 5, 6)).astype(np.float32),
        "theta": (np.eye(2, 3) + rng.standard_normal((2, 2, 3)) * 0.2).astype(np.float32),
    }
    run_and_compare(model, [feeds])


def test_affine_grid_bad_inputs_fail():
    theta = np.zeros((2, 2, 3), np.float32)
    failure(STATUS_OP_BAD_SHAPE, "AffineGrid", [theta, np.array([2, 1, 3], np.int64)], {})
    failure(STATUS_OP_BAD_SHAPE, "AffineGrid", [theta, np.array([3, 1, 3, 3], np.int64)], {})
    failure(STATUS_OP_BAD_SHAPE, "AffineGrid", [theta, np.array([2, 1, 3, 3, 3], np.int64)], {})
    failure(
        STATUS_OP_BAD_ATTRIBUTE,
        "AffineGrid",
        [theta, np.array([2, 1, 3, 3], np.int64)],
        {"align_corners": 2},
    )
