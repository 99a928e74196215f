"""Resize (and Resize-10 / Upsample through their converters) against onnxruntime (single
thread) on one-node models, beyond what the ONNX node suite covers: every mode with every
coordinate transformation mode, scales and sizes, up and down, antialias, integer element
types, 3-D and 5-D inputs; a small upsampling network lowered and run end to end; and one
test per refusal. Float32 within rtol 1e-5 / atol 1e-5 (rtsoa interpolates in float64,
onnxruntime in float32); integers exactly.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from rtsoa.errors import LoweringError, OpError
from rtsoa.lowering import lower
from rtsoa.ops.abi import STATUS_OP_BAD_ATTRIBUTE, STATUS_OP_BAD_SHAPE, STATUS_OP_MISSING_INPUT
from rtsoa.ops.host import run_numpy
from rtsoa.testing.models import run_onnxruntime
from tests.model_checks import run_and_compare, run_clean

ELEMENT = {
    np.float32: TensorProto.FLOAT,
    np.float64: TensorProto.DOUBLE,
    np.uint8: TensorProto.UINT8,
    np.int8: TensorProto.INT8,
    np.int32: TensorProto.INT32,
    np.int64: TensorProto.INT64,
}
rng = np.random.default_rng(123)
COORDINATES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
)


def resize_model(x, roi=None, scales=None, sizes=None, opset=19, op="Resize", **attributes):
    """A one-node model: X is a graph input, roi / scales / sizes initializers."""
    names, initializers = ["x"], []
    for name, value in (("roi", roi), ("scales", scales), ("sizes", sizes)):
        if value is None:
            names.append("")
        else:
            names.append(name)
            initializers.append(numpy_helper.from_array(np.asarray(value), name))
    while names[-1] == "":
        names.pop()
    node = helper.make_node(op, names, ["y"], **attributes)
    graph = helper.make_graph(
        [node],
        "resize",
        [helper.make_tensor_value_info("x", ELEMENT[x.dtype.type], x.shape)],
        [helper.make_tensor_value_info("y", ELEMENT[x.dtype.type], None)],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def onnxruntime_resize(model, x):
    return run_onnxruntime(model, {"x": x})["y"]


def rtsoa_resize(x, roi=None, scales=None, sizes=None, **attributes):
    """The Resize op on numpy arrays (absent inputs as None)."""
    inputs = [x, roi, scales, sizes]
    while inputs[-1] is None:
        inputs.pop()
    return run_numpy("Resize", inputs, attributes)[0]


def check(x, roi=None, scales=None, sizes=None, judge="onnxruntime", **attributes):
    """rtsoa's Resize against onnxruntime, or onnx.reference where onnxruntime differs from
    the ONNX test data (align_corners with scales: see below) or lacks the case (cubic beyond
    4-D, float64 cubic)."""
    model = resize_model(x, roi, scales, sizes, **attributes)
    if judge == "reference":
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    else:
        want = onnxruntime_resize(model, x)
    got = rtsoa_resize(x, roi, scales, sizes, **attributes)
    assert got.shape == want.shape and got.dtype == want.dtype
    if np.issubdtype(x.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("coordinate", COORDINATES)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("factors", [(1.0, 1.0, 2.0, 1.5), (1.0, 1.0, 0.5, 0.625)])
def test_every_mode_and_coordinate_mode_with_scales(mode, coordinate, factors):
    """Scales that binary floats hold exactly, so that float32 (onnxruntime) and float64
    (rtsoa) coordinates round nearest positions alike. align_corners with scales divides by
    the unrounded output length scale * in minus 1, as onnx.reference and the ONNX node cases
    do; onnxruntime divides by the output size minus 1, so onnx.reference judges those."""
    check(
        f32(2, 3, 6, 7),
        scales=np.array(factors, dtype=np.float32),
        judge="reference" if coordinate == "align_corners" else "onnxruntime",
        mode=mode,
        coordinate_transformation_mode=coordinate,
    )


@pytest.mark.parametrize("coordinate", COORDINATES)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("size", [(1, 2, 11, 4), (1, 2, 1, 9)])
def test_every_mode_and_coordinate_mode_with_sizes(mode, coordinate, size):
    """Sizes give scale = out / in; an axis of output length 1 exercises the special cases of
    align_corners and pytorch_half_pixel (the spec's x_original 0, as onnxruntime has it;
    onnx.reference samples at -0.5)."""
    check(
        f32(1, 2, 5, 6),
        sizes=np.array(size, dtype=np.int64),
        mode=mode,
        coordinate_transformation_mode=coordinate,
    )


@pytest.mark.parametrize(
    "nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
)
@pytest.mark.parametrize("coordinate", ["half_pixel", "asymmetric", "align_corners"])
def test_every_nearest_mode(nearest_mode, coordinate):
    for factors in ((1.0, 1.0, 2.5, 1.25), (1.0, 1.0, 0.625, 0.375)):
        check(
            f32(1, 2, 7, 9),
            scales=np.array(factors, dtype=np.float32),
            judge="reference" if coordinate == "align_corners" else "onnxruntime",
            mode="nearest",
            nearest_mode=nearest_mode,
            coordinate_transformation_mode=coordinate,
        )


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("factors", [(1.0, 1.0, 0.4, 0.6), (1.0, 1.0, 0.3, 1.5)])
def test_antialias(mode, factors):
    """Antialiasing widens the kernel of the axes that shrink; growing axes are unchanged."""
    check(
        f32(1, 2, 12, 10),
        scales=np.array(factors, dtype=np.float32),
        mode=mode,
        antialias=1,
    )


@pytest.mark.parametrize("a", [-0.5, -0.75])
@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_cubic_coefficient_and_exclude_outside(a, exclude_outside):
    for factors in ((1.0, 1.0, 1.7, 2.0), (1.0, 1.0, 0.8, 0.5)):
        check(
            f32(2, 1, 5, 6),
            scales=np.array(factors, dtype=np.float32),
            mode="cubic",
            cubic_coeff_a=a,
            exclude_outside=exclude_outside,
        )


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_keep_aspect_ratio_policy_with_axes(policy, mode):
    check(
        f32(1, 3, 5, 8),
        sizes=np.array([9, 7], dtype=np.int64),
        axes=[2, 3],
        mode=mode,
        keep_aspect_ratio_policy=policy,
    )


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_tf_crop_and_resize_with_extrapolation(mode):
    """The region reaches outside the input: those positions get extrapolation_value."""
    check(
        f32(1, 1, 6, 6),
        roi=np.array([0, 0, -0.21, 0.33, 1, 1, 0.69, 1.37], dtype=np.float32),
        sizes=np.array([1, 1, 5, 4], dtype=np.int64),
        mode=mode,
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=7.5,
    )


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_five_dimensional_and_three_dimensional_inputs(mode):
    """onnxruntime runs cubic on 2-D and 4-D inputs only: onnx.reference judges the rest."""
    judge = "reference" if mode == "cubic" else "onnxruntime"
    scales = np.array([1, 1, 2, 0.5, 1.5], np.float32)
    check(f32(1, 2, 3, 4, 5), scales=scales, judge=judge, mode=mode)
    check(f32(2, 3, 7), sizes=np.array([2, 3, 12], np.int64), judge=judge, mode=mode)


@pytest.mark.parametrize("kind", [np.uint8, np.int32])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_integer_element_types(kind, mode):
    """Integer outputs of linear mode round half to even and saturate, as onnx.reference does
    (onnxruntime rounds some values the other way); nearest copies, as onnxruntime does."""
    x = rng.integers(0, 250, size=(1, 2, 5, 6)).astype(kind)
    judge = "reference" if mode == "linear" else "onnxruntime"
    check(x, scales=np.array([1, 1, 1.6, 0.625], np.float32), judge=judge, mode=mode)


def test_nearest_copies_int64_exactly():
    """Nearest is a byte copy: int64 values beyond float64's 53-bit mantissa survive."""
    x = (np.arange(12, dtype=np.int64) + (1 << 60)).reshape(1, 1, 3, 4)
    got = rtsoa_resize(x, scales=np.array([1, 1, 2, 2], np.float32), mode="nearest")
    np.testing.assert_array_equal(got, np.repeat(np.repeat(x, 2, axis=2), 2, axis=3))


def test_float64_against_onnx_reference():
    """onnxruntime's CPU Resize has no float64 cubic; onnx.reference judges it (within 1e-5:
    it computes the cubic coefficients in float32, the type of cubic_coeff_a)."""
    check(
        rng.standard_normal((1, 2, 4, 5)),
        scales=np.array([1, 1, 1.5, 0.8], dtype=np.float32),
        judge="reference",
        mode="cubic",
        exclude_outside=1,
    )


@pytest.mark.parametrize("op, opset", [("Resize", 10), ("Upsample", 9)])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_10_and_upsample_lowered(op, opset, mode):
    """Resize-10 and Upsample take (X, scales), sample asymmetrically and round nearest
    positions by direction; lowered through their converters and run."""
    x = f32(1, 2, 5, 10)
    factors = [(1, 1, 2.5, 1.7)] if op == "Upsample" else [(1, 1, 2.5, 1.7), (1, 1, 0.6, 0.35)]
    for scale in factors:
        scales = np.array(scale, dtype=np.float32)
        node = helper.make_node(op, ["x", "scales"], ["y"], mode=mode)
        graph = helper.make_graph(
            [node],
            "legacy",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(scales, "scales")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 7
        got = run_clean(lower(model), {"x": x})["y"]
        np.testing.assert_allclose(got, onnxruntime_resize(model, x), rtol=1e-5, atol=1e-5)


def test_an_upsampling_network_against_onnxruntime():
    """A feature-pyramid step as detection and segmentation models have it: a coarse map
    upsampled 2x (nearest) and added to a finer one, then resized to the input's size
    (linear, half_pixel) read at run time from Shape, and to a fixed size (cubic)."""
    coarse = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "two")
    nodes = [
        helper.make_node("Resize", ["low", "", "two"], ["up"], mode="nearest"),
        helper.make_node("Add", ["up", "high"], ["merged"]),
        helper.make_node("Shape", ["image"], ["image_shape"]),
        helper.make_node(
            "Resize",
            ["merged", "", "", "image_shape"],
            ["mask"],
            mode="linear",
            coordinate_transformation_mode="half_pixel",
        ),
        helper.make_node("Resize", ["merged", "", "", "fixed"], ["thumb"], mode="cubic"),
    ]
    fixed = numpy_helper.from_array(np.array([1, 4, 5, 5], np.int64), "fixed")
    graph = helper.make_graph(
        nodes,
        "pyramid",
        [
            helper.make_tensor_value_info("low", TensorProto.FLOAT, [1, 4, 4, 5]),
            helper.make_tensor_value_info("high", TensorProto.FLOAT, [1, 4, 8, 10]),
            helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 4, 32, 40]),
        ],
        [
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("thumb", TensorProto.FLOAT, None),
        ],
        [coarse, fixed],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    inputs = [
        {"low": f32(1, 4, 4, 5), "high": f32(1, 4, 8, 10), "image": f32(1, 4, 32, 40)}
        for _ in range(2)
    ]
    run_and_compare(model, inputs)


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attributes, named",
    [
        ({"coordinate_transformation_mode": "corner_pixels"}, "coordinate_transformation_mode"),
        ({"mode": "bilinear"}, "mode 'bilinear'"),
        ({"nearest_mode": "simple"}, "nearest_mode 'simple'"),
        ({"keep_aspect_ratio_policy": "fit"}, "keep_aspect_ratio_policy"),
        ({"mode": "nearest", "antialias": 1}, "antialias"),
    ],
)
def test_unsupported_attribute_values_are_refused_by_name(attributes, named):
    x = f32(1, 1, 2, 2)
    model = resize_model(x, scales=np.array([1, 1, 2, 2], np.float32), **attributes)
    with pytest.raises(LoweringError, match=named):
        lower(model)


def test_scales_and_sizes_together_are_refused():
    with pytest.raises(OpError) as error:
        rtsoa_resize(
            f32(1, 1, 2, 2),
            scales=np.array([1, 1, 2, 2], np.float32),
            sizes=np.array([1, 1, 4, 4], np.int64),
        )
    assert error.value.status == STATUS_OP_BAD_ATTRIBUTE


def test_neither_scales_nor_sizes_is_refused():
    with pytest.raises(OpError) as error:
        rtsoa_resize(f32(1, 1, 2, 2), scales=np.zeros(0, np.float32))
    assert error.value.status == STATUS_OP_MISSING_INPUT


@pytest.mark.parametrize(
    "scales, sizes, axes, status",
    [
        (np.array([1, 2], np.float32), None, None, STATUS_OP_BAD_SHAPE),  # one per axis
        (np.array([1, 1, 0, 2], np.float32), None, None, STATUS_OP_BAD_ATTRIBUTE),
        (np.array([1, 1, -2, 2], np.float32), None, None, STATUS_OP_BAD_ATTRIBUTE),
        (None, np.array([4, 4], np.int64), None, STATUS_OP_BAD_SHAPE),
        (None, np.array([1, 1, -1, 4], np.int64), None, STATUS_OP_BAD_SHAPE),
        (None, np.array([4, 4], np.int64), [2, 2], STATUS_OP_BAD_ATTRIBUTE),  # repeated
        (None, np.array([4, 4], np.int64), [2, 4], STATUS_OP_BAD_ATTRIBUTE),  # out of range
    ],
)
def test_bad_scales_sizes_and_axes_are_refused(scales, sizes, axes, status):
    attributes = {} if axes is None else {"axes": axes}
    with pytest.raises(OpError) as error:
        rtsoa_resize(f32(1, 1, 2, 2), scales=scales, sizes=sizes, **attributes)
    assert error.value.status == status


def test_a_roi_of_the_wrong_length_is_refused():
    with pytest.raises(OpError) as error:
        rtsoa_resize(
            f32(1, 1, 2, 2),
            roi=np.array([0, 1], np.float32),
            sizes=np.array([1, 1, 3, 3], np.int64),
            mode="linear",
            coordinate_transformation_mode="tf_crop_and_resize",
        )
    assert error.value.status == STATUS_OP_BAD_SHAPE


def test_sizes_and_scales_given_at_run_time():
    """Sizes and scales fed as graph inputs: the output shape is inferred when the model
    runs, one shape per feed."""
    nodes = [
        helper.make_node("Resize", ["x", "", "", "sizes"], ["by_size"], mode="linear"),
        helper.make_node("Resize", ["x", "", "scales"], ["by_scale"], mode="nearest"),
    ]
    graph = helper.make_graph(
        nodes,
        "dynamic",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 5]),
            helper.make_tensor_value_info("sizes", TensorProto.INT64, [4]),
            helper.make_tensor_value_info("scales", TensorProto.FLOAT, [4]),
        ],
        [
            helper.make_tensor_value_info("by_size", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("by_scale", TensorProto.FLOAT, None),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    inputs = [
        {
            "x": f32(1, 2, 4, 5),
            "sizes": np.array(sizes, np.int64),
            "scales": np.array(scales, np.float32),
        }
        for sizes, scales in (([1, 2, 7, 3], [1, 1, 2, 3]), ([1, 2, 2, 9], [1, 1, 0.5, 1.5]))
    ]
    run_and_compare(model, inputs)
