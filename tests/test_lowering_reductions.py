"""Reductions composed at lowering (`rtsoa.lowering.reductions`): ReduceL1, ReduceL2,
ReduceSumSquare, ReduceLogSum and ReduceLogSumExp against onnxruntime (single thread), with the
axes as an attribute (opset 13) and as an input (opset 18), kept and dropped dims, shapes known
only at run time; integers where ONNX's function bodies allow them, and refused by name where
rtsoa does not run them."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from test_ops_dtypes import ELEMENT

import rtsoa
from rtsoa.errors import LoweringError
from rtsoa.lowering import lower
from rtsoa.testing.models import run_onnxruntime

rng = np.random.default_rng(104)
OPS = ["ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


def reduction_model(op, x, axes, keepdims, opset, symbolic=False):
    inputs = ["x"]
    attributes = {"keepdims": keepdims}
    initializers = []
    if axes is not None and opset >= 18:
        inputs.append("axes")
        initializers.append(helper.make_tensor("axes", TensorProto.INT64, [len(axes)], axes))
    elif axes is not None:
        attributes["axes"] = axes
    node = helper.make_node(op, inputs, ["y"], name="the_reduction", **attributes)
    dims = [f"d{k}" for k in range(x.ndim)] if symbolic else x.shape
    graph = helper.make_graph(
        [node],
        "reduce",
        [helper.make_tensor_value_info("x", ELEMENT[x.dtype], dims)],
        [helper.make_tensor_value_info("y", ELEMENT[x.dtype], None)],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def agree(model, x):
    want = run_onnxruntime(model, {"x": x})["y"]
    with rtsoa.InferenceSession(model) as session:
        (got,) = session.run(None, {"x": x})
    assert got.dtype == want.dtype and got.shape == want.shape
    if np.issubdtype(got.dtype, np.integer):
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("axes, keepdims", [(None, 1), ([1], 0), ([-1, 0], 1), ([0, 2], 0)])
def test_float_reductions_agree_with_onnxruntime(op, opset, axes, keepdims):
    x = rng.random((3, 4, 5)).astype(np.float32) + 0.1  # positive: LogSum's log is defined
    agree(reduction_model(op, x, axes, keepdims, opset), x)


@pytest.mark.parametrize("op", OPS)
def test_float64_and_shapes_known_only_at_run_time(op):
    x = rng.random((2, 3, 4)) + 0.1
    agree(reduction_model(op, x, [1], 1, 18, symbolic=True), x)


def test_log_sum_exp_does_not_overflow_where_the_result_is_finite():
    """exp(100) overflows float32; the function body sums in float64, and so does rtsoa."""
    x = np.array([[100.0, 99.0, -5.0]], dtype=np.float32)
    model = reduction_model("ReduceLogSumExp", x, [1], 0, 18)
    with rtsoa.InferenceSession(model) as session:
        (got,) = session.run(None, {"x": x})
    want = np.log(np.exp(np.float64(100.0)) + np.exp(99.0) + np.exp(-5.0))
    np.testing.assert_allclose(got, [want], rtol=1e-6)


@pytest.mark.parametrize("op", ["ReduceL1", "ReduceSumSquare"])
@pytest.mark.parametrize("kind", [np.int32, np.int64])
def test_l1_and_sum_square_run_on_integers(op, kind):
    x = rng.integers(-50, 50, size=(4, 6)).astype(kind)
    agree(reduction_model(op, x, [0], 0, 18), x)


@pytest.mark.parametrize("op", ["ReduceL2", "ReduceLogSum", "ReduceLogSumExp"])
def test_integer_inputs_of_the_float_reductions_are_refused_by_name(op):
    x = np.ones((2, 3), dtype=np.int64)
    with pytest.raises(LoweringError) as caught:
        lower(reduction_model(op, x, [1], 1, 18))
    message = str(caught.value)
    assert f"{op} node 'the_reduction'" in message and "float32 / float64" in message
