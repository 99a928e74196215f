"""Ops lowered as compositions of rtsoa's own ops (`rtsoa.lowering.composed`): CastLike, Size,
GreaterOrEqual, LessOrEqual and Reciprocal, each judged by onnxruntime (single thread) on
one-node models, with NaNs, scalars and shapes known only at run time."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from test_ops_dtypes import ELEMENT, onnxruntime_outputs, rtsoa_outputs

from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering import ComputeGraph, Node, Tensor, lower

rng = np.random.default_rng(103)


def model_of(op, inputs, output_element, dims=None, opset=21):
    node = helper.make_node(op, list(inputs), ["y"], name=f"the_{op.lower()}")
    graph_inputs = [
        helper.make_tensor_value_info(name, ELEMENT[a.dtype], dims(name, a) if dims else a.shape)
        for name, a in inputs.items()
    ]
    output = helper.make_tensor_value_info("y", output_element, None)
    graph = helper.make_graph([node], "one", graph_inputs, [output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def agree(model, feeds):
    want = onnxruntime_outputs(model, feeds)
    got = rtsoa_outputs(model, feeds)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def symbolic(name, array):
    """Every axis a symbol of its own: the shapes are known only at run time."""
    return [f"{name}{k}" for k in range(array.ndim)]


@pytest.mark.parametrize(
    "source, target",
    [
        (np.float32, np.int64),
        (np.int32, np.float32),
        (np.float64, np.float32),
        (np.int64, np.bool_),
    ],
)
def test_cast_like_casts_to_the_second_input_s_type(source, target):
    x = (rng.standard_normal((3, 4)) * 50).astype(source)
    like = np.zeros(2, target)
    feeds = {"x": x, "like": like}
    agree(model_of("CastLike", feeds, ELEMENT[np.dtype(target)]), feeds)


@pytest.mark.parametrize("shape", [(), (0, 3), (2, 3, 4)])
@pytest.mark.parametrize("dynamic", [False, True])
def test_size_counts_elements(shape, dynamic):
    x = np.ones(shape, np.float32)
    model = model_of("Size", {"x": x}, TensorProto.INT64, dims=symbolic if dynamic else None)
    agree(model, {"x": x})


@pytest.mark.parametrize("op", ["GreaterOrEqual", "LessOrEqual"])
@pytest.mark.parametrize("kind", [np.float32, np.int64, np.uint8])
def test_or_equal_comparisons_with_broadcasting_and_nan(op, kind):
    a = (rng.standard_normal((3, 5)) * 4).astype(kind)
    b = a[0].copy()
    b[::2] += 1
    if np.dtype(kind).kind == "f":
        a[0, 0] = np.nan
        b[1] = np.nan
    feeds = {"a": a, "b": b}
    agree(model_of(op, feeds, TensorProto.BOOL, dims=symbolic), feeds)


@pytest.mark.parametrize("kind", [np.float32, np.float64])
def test_reciprocal(kind):
    x = np.array([2.0, -4.0, 0.0, -0.0, np.inf, 0.1, 3.0], kind)
    agree(model_of("Reciprocal", {"x": x}, ELEMENT[np.dtype(kind)], dims=symbolic), {"x": x})


def test_an_element_type_unknown_at_lowering_is_named():
    graph = ComputeGraph(name="g", opsets={"": 21})
    graph.tensors["x"] = Tensor("x", DType.FLOAT32, (2,))
    graph.tensors["t"] = Tensor("t")  # no element type: nothing said what it is
    graph.nodes.append(Node("CastLike", ["x", "t"], ["y"], name="cast_like_node"))
    graph.inputs = ["x", "t"]
    graph.outputs = ["y"]
    with pytest.raises(LoweringError, match="cast_like_node.*element type of input 't'"):
        lower(graph)


@pytest.mark.parametrize("opset", [18, 21, 28])
def test_optional_ops_on_tensors_and_absent_inputs(opset):
    """rtsoa has no optional values: a given tensor is a present optional, an absent input an
    empty one (onnx.reference is the judge: onnxruntime runs none of these)."""
    from onnx.reference import ReferenceEvaluator

    x = rng.standard_normal((2, 3)).astype(np.float32)
    cases = [
        ("OptionalHasElement", {"x": x}, TensorProto.BOOL),
        ("OptionalGetElement", {"x": x}, TensorProto.FLOAT),
        ("OptionalHasElement", {}, TensorProto.BOOL),
    ]
    for op, feeds, element in cases:
        model = model_of(op, feeds, element, opset=opset)
        if not feeds:  # the input slot named but empty, as the node suite writes it
            model.graph.node[0].input[:] = [""]
        (want,) = ReferenceEvaluator(model).run(None, feeds)
        got = rtsoa_outputs(model, feeds)
        assert got.dtype == want.dtype and got.shape == np.shape(want)
        np.testing.assert_array_equal(got, want)


def test_optional_get_element_without_an_input_is_refused_naming_the_node():
    model = model_of("OptionalGetElement", {}, TensorProto.FLOAT)
    model.graph.node[0].input[:] = [""]
    with pytest.raises(LoweringError, match="the_optionalgetelement.*empty optional"):
        lower(model)
