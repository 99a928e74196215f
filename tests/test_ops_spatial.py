"""CenterCropPad, LpPool and GroupNormalization, composed at lowering, through lowered one-node
models whose inputs are all given at run time: judged by onnxruntime (single thread) on float32
and by onnx.reference on the other element types; the refusals at lowering naming the op, the
node and what is wrong.
"""

import numpy as np
import pytest
from one_node import one_node_model, refused
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa.lowering import lower
from tests.model_checks import run_and_compare, run_clean

rng = np.random.default_rng(20261206)


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
