"""Col2Im, MaxUnpool and RoiAlign beyond the ONNX node suite, against onnx.reference (and
onnxruntime for RoiAlign at opset 10): 1-D to 3-D images with dilations, pads and strides,
integer types and empty batches; MaxPool's own indices unpooled with and without
output_shape; regions inside, across and outside the image in both coordinate modes, avg and
max, fixed and adaptive sampling; and the refusals, at lowering naming the node, or as the
op's status."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa.errors import LoweringError, OpError
from rtsoa.lowering import lower
from rtsoa.ops.abi import STATUS_OP_BAD_INDEX, STATUS_OP_BAD_SHAPE
from rtsoa.ops.host import run_numpy
from rtsoa.testing.models import run_onnxruntime
from tests.model_checks import run_clean

rng = np.random.default_rng(145)


def reference(op, inputs, **attributes):
    """onnx.reference's outputs of one node on positional `inputs` (None: absent)."""
    names = [f"in{k}" if value is not None else "" for k, value in enumerate(inputs)]
    node = helper.make_node(op, names, ["y"], **attributes)
    feeds = {name: value for name, value in zip(names, inputs, strict=True) if name}
    return ReferenceEvaluator(node).run(None, feeds)[0]


def model_of(op, feeds, outputs=("y",), opset=22, **attributes):
    """A one-node model on named `feeds` (name -> array) with untyped-shape outputs."""
    node = helper.make_node(op, list(feeds), list(outputs), **attributes)
    element = helper.np_dtype_to_tensor_dtype(next(iter(feeds.values())).dtype)
    graph = helper.make_graph(
        [node],
        op.lower(),
        [
            helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape)
            )
            for name, value in feeds.items()
        ],
        [helper.make_tensor_value_info(name, element, None) for name in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


# -- Col2Im -----------------------------------------------------------------------------------


def col2im_case(image, block, dilations, pads, strides, batch=2, channels=3, kind=np.float32):
    blocks = [
        (i + p0 + p1 - d * (b - 1) - 1) // s + 1
        for i, b, d, p0, p1, s in zip(
            image, block, dilations, pads[: len(image)], pads[len(image) :], strides, strict=True
        )
    ]
    shape = (batch, channels * int(np.prod(block)), int(np.prod(blocks)))
    if np.issubdtype(kind, np.integer):
        x = rng.integers(-50, 50, shape).astype(kind)
    else:
        x = rng.standard_normal(shape).astype(kind)
    attributes = {"dilations": dilations, "pads": pads, "strides": strides}
    return [x, np.array(image, np.int64), np.array(block, np.int64)], attributes


@pytest.mark.parametrize("kind", [np.float32, np.float64, np.int32, np.int64])
def test_col2im_against_onnx_reference(kind):
    for image, block, dilations, pads, strides in (
        ([9], [3], [2], [1, 2], [2]),
        ([5, 5], [2, 2], [1, 1], [0, 0, 0, 0], [1, 1]),
        ([6, 7], [3, 2], [2, 1], [1, 0, 2, 1], [2, 3]),
        ([4, 5, 3], [2, 3, 1], [1, 2, 1], [0, 1, 1, 1, 0, 0], [1, 2, 2]),
    ):
        inputs, attributes = col2im_case(image, block, dilations, pads, strides, kind=kind)
        want = reference("Col2Im", inputs, **attributes)
        (got,) = run_numpy("Col2Im", inputs, attributes)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_col2im_defaults_and_an_empty_batch_lowered():
    inputs, _ = col2im_case([4, 4], [2, 2], [1, 1], [0, 0, 0, 0], [1, 1], batch=0)
    model = model_of("Col2Im", dict(zip(("x", "image", "block"), inputs, strict=True)))
    got = run_clean(lower(model), dict(zip(("x", "image", "block"), inputs, strict=True)))["y"]
    assert got.shape == (0, 3, 4, 4)
    inputs, _ = col2im_case([4, 4], [2, 2], [1, 1], [0, 0, 0, 0], [1, 1])
    feeds = dict(zip(("x", "image", "block"), inputs, strict=True))
    want = ReferenceEvaluator(model_of("Col2Im", feeds)).run(None, feeds)[0]
    np.testing.assert_allclose(run_clean(lower(model_of("Col2Im", feeds)), feeds)["y"], want)


def test_col2im_refusals():
    inputs, attributes = col2im_case([5, 5], [2, 2], [1, 1], [0, 0, 0, 0], [1, 1])
    with pytest.raises(OpError) as error:  # one column too many for the blocks
        run_numpy("Col2Im", [np.zeros((2, 12, 17), np.float32)] + inputs[1:], attributes)
    assert error.value.status == STATUS_OP_BAD_SHAPE
    with pytest.raises(OpError) as error:  # 10 rows are not channels of 4-element blocks
        run_numpy("Col2Im", [np.zeros((2, 10, 16), np.float32)] + inputs[1:], attributes)
    assert error.value.status == STATUS_OP_BAD_SHAPE
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], pads=[1, 1])
    graph = helper.make_graph(
        [node],
        "col2im",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            helper.make_tensor("image", TensorProto.INT64, [2], [5, 5]),
            helper.make_tensor("block", TensorProto.INT64, [2], [2, 2]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(LoweringError, match=r"Col2Im node .*pads has 2 values; 4 expected"):
        lower(model)
    model.graph.initializer[1].int64_data[:] = [2, 0]
    model.graph.node[0].attribute.pop()
    with pytest.raises(LoweringError, match=r"Col2Im node .*block_shape \[2, 0\] has a value"):
        lower(model)


# -- MaxUnpool --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [np.float32, np.float64])
def test_max_unpool_of_max_pool_indices(kind):
    """Geometries whose unpooled shape is the pooled input's, so MaxPool's indices fit it."""
    for dims, kernel, strides, pads in (
        ((2, 3, 10), [2], [2], [0, 0]),
        ((2, 3, 7), [3], [2], [1, 1]),
        ((1, 2, 6, 8), [2, 2], [2, 2], [0, 0, 0, 0]),
        ((2, 1, 7, 6), [3, 2], [2, 2], [1, 0, 1, 0]),
        ((1, 2, 4, 6, 4), [2, 3, 2], [2, 3, 2], [0, 0, 0, 0, 0, 0]),
    ):
        x = rng.standard_normal(dims).astype(kind)
        pool = {"kernel_shape": kernel, "strides": strides, "pads": pads}
        node = helper.make_node("MaxPool", ["x"], ["v", "i"], **pool)
        values, indices = ReferenceEvaluator(node).run(None, {"x": x})
        unpooled = [
            s * (v - 1) + k - p0 - p1
            for s, v, k, p0, p1 in zip(
                strides,
                values.shape[2:],
                kernel,
                pads[: len(kernel)],
                pads[len(kernel) :],
                strict=True,
            )
        ]
        for output_shape in (None, [*dims[:2], *(u + 2 for u in unpooled)]):
            inputs = [values, indices]
            if output_shape is not None:
                inputs.append(np.array(output_shape, np.int64))
            want = reference("MaxUnpool", inputs, **pool)
            (got,) = run_numpy("MaxUnpool", inputs, pool)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)


def test_max_unpool_lowered_with_a_run_time_output_shape():
    x = rng.standard_normal((1, 1, 2, 2)).astype(np.float32)
    indices = np.array([[[[5, 7], [13, 15]]]], np.int64)
    feeds = {"x": x, "i": indices, "shape": np.array([1, 1, 5, 6], np.int64)}
    model = model_of("MaxUnpool", feeds, kernel_shape=[2, 2], strides=[2, 2])
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_array_equal(run_clean(lower(model), feeds)["y"], want)


def test_max_unpool_refusals():
    x = np.ones((1, 1, 2, 2), np.float32)
    pool = {"kernel_shape": [2, 2], "strides": [2, 2]}
    with pytest.raises(OpError) as error:
        run_numpy("MaxUnpool", [x, np.full((1, 1, 2, 2), 16, np.int64)], pool)
    assert error.value.status == STATUS_OP_BAD_INDEX
    small = np.array([1, 1, 3, 4], np.int64)
    with pytest.raises(OpError) as error:
        run_numpy("MaxUnpool", [x, np.zeros((1, 1, 2, 2), np.int64), small], pool)
    assert error.value.status == STATUS_OP_BAD_SHAPE
    feeds = {"x": x, "i": np.zeros((1, 1, 2, 2), np.int64)}
    with pytest.raises(LoweringError, match=r"MaxUnpool node .*'kernel_shape' is missing"):
        lower(model_of("MaxUnpool", feeds))
    with pytest.raises(LoweringError, match=r"MaxUnpool node .*strides has 1 values; 2"):
        lower(model_of("MaxUnpool", feeds, kernel_shape=[2, 2], strides=[2]))


# -- RoiAlign ---------------------------------------------------------------------------------


def roi_inputs(kind, batch=2, channels=3, height=9, width=11, count=6):
    x = rng.standard_normal((batch, channels, height, width)).astype(kind)
    corners = rng.uniform(-4.0, 16.0, (count, 2, 2))
    rois = np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1)
    rois[0] = [30.0, 30.0, 40.0, 45.0]  # outside the image
    rois[1] = [2.0, 3.0, 2.0, 3.0]  # of no size
    indices = rng.integers(0, batch, count).astype(np.int64)
    return [x, rois.astype(kind), indices]


@pytest.mark.parametrize("kind", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("coordinates", ["half_pixel", "output_half_pixel"])
def test_roi_align_against_onnx_reference(kind, mode, coordinates):
    inputs = roi_inputs(kind)
    for height, width, ratio, scale in ((3, 4, 0, 1.0), (2, 2, 2, 0.5), (5, 1, 1, 0.75)):
        attributes = {
            "mode": mode,
            "coordinate_transformation_mode": coordinates,
            "output_height": height,
            "output_width": width,
            "sampling_ratio": ratio,
            "spatial_scale": scale,
        }
        want = reference("RoiAlign", inputs, **attributes)
        (got,) = run_numpy("RoiAlign", inputs, attributes)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_roi_align_at_opset_10_against_onnxruntime():
    """Opset 10 has no coordinate mode: its sampling is output_half_pixel."""
    x, rois, indices = roi_inputs(np.float32)
    feeds = {"x": x, "rois": rois, "batch": indices}
    model = model_of("RoiAlign", feeds, opset=10, output_height=3, output_width=3)
    np.testing.assert_allclose(
        run_clean(lower(model), feeds)["y"],
        run_onnxruntime(model, feeds)["y"],
        rtol=1e-5,
        atol=1e-6,
    )


def test_roi_align_refusals():
    inputs = roi_inputs(np.float32)
    with pytest.raises(OpError) as error:
        run_numpy("RoiAlign", inputs[:2] + [np.array([0, 1, 2, 0, 0, 0], np.int64)], {})
    assert error.value.status == STATUS_OP_BAD_INDEX
    feeds = dict(zip(("x", "rois", "batch"), inputs, strict=True))
    with pytest.raises(LoweringError, match=r"RoiAlign node .*mode 'sum' is not one of avg"):
        lower(model_of("RoiAlign", feeds, mode="sum"))
    with pytest.raises(LoweringError, match=r"RoiAlign node .*output_width must be at least 1"):
        lower(model_of("RoiAlign", feeds, output_width=0))
    with pytest.raises(LoweringError, match=r"RoiAlign node .*attribute from opset 16"):
        lower(model_of("RoiAlign", feeds, opset=10, coordinate_transformation_mode="half_pixel"))


# -- DeformConv -------------------------------------------------------------------------------


def deform_inputs(kind, batch, channels, outputs, kernel, size, out_size, group, offset_group):
    taps = kernel[0] * kernel[1]
    x = rng.standard_normal((batch, channels, *size)).astype(kind)
    w = rng.standard_normal((outputs, channels // group, *kernel)).astype(kind)
    offset = rng.uniform(-2.0, 2.0, (batch, offset_group * taps * 2, *out_size)).astype(kind)
    bias = rng.standard_normal(outputs).astype(kind)
    mask = rng.uniform(0.0, 1.0, (batch, offset_group * taps, *out_size)).astype(kind)
    return [x, w, offset, bias, mask]


@pytest.mark.parametrize("kind", [np.float32, np.float64])
def test_deform_conv_against_onnx_reference(kind):
    for case, attributes, optional in (
        ((2, 4, 6, (3, 3), (7, 8), (5, 6), 2, 2), {"group": 2, "offset_group": 2}, 2),
        ((1, 3, 2, (2, 3), (6, 7), (3, 2), 1, 3), {"offset_group": 3, "strides": [2, 3]}, 1),
        (
            (1, 2, 4, (3, 2), (6, 6), (4, 6), 2, 1),
            {"group": 2, "pads": [1, 0, 1, 1], "dilations": [2, 1], "kernel_shape": [3, 2]},
            0,
        ),
    ):
        inputs = deform_inputs(kind, *case)[: 3 + optional]
        want = reference("DeformConv", inputs, **attributes)
        (got,) = run_numpy("DeformConv", inputs, attributes)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_deform_conv_without_offsets_is_conv():
    """Zero offsets and no mask sample the kernel taps themselves: onnxruntime's Conv."""
    x, w, offset, bias, _ = deform_inputs(np.float32, 2, 4, 6, (3, 3), (8, 9), (4, 3), 2, 1)
    offset[:] = 0.0
    attributes = {"group": 2, "strides": [2, 2], "pads": [1, 1, 1, 0], "dilations": [1, 2]}
    feeds = {"x": x, "w": w, "b": bias}
    want = run_onnxruntime(model_of("Conv", feeds, opset=19, **attributes), feeds)["y"]
    feeds = {"x": x, "w": w, "offset": offset, "b": bias}
    model = model_of("DeformConv", feeds, opset=19, **attributes)
    np.testing.assert_allclose(run_clean(lower(model), feeds)["y"], want, rtol=1e-5, atol=1e-5)


def test_deform_conv_refusals():
    x, w, offset, _, _ = deform_inputs(np.float32, 1, 2, 2, (3, 3), (5, 5), (3, 3), 1, 1)
    with pytest.raises(OpError) as error:  # offsets for another output size
        run_numpy("DeformConv", [x, w, offset[:, :, :2]], {})
    assert error.value.status == STATUS_OP_BAD_SHAPE
    feeds = {"x": x[:, :, 0], "w": w[:, :, 0], "offset": offset[:, :6, 0]}
    with pytest.raises(LoweringError, match=r"DeformConv node .*only 2-D DeformConv"):
        lower(model_of("DeformConv", feeds))
    feeds = {"x": x, "w": w, "offset": offset}
    with pytest.raises(LoweringError, match=r"DeformConv node .*strides has 1 values"):
        lower(model_of("DeformConv", feeds, strides=[1]))
