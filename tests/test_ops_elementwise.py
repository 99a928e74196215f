"""Sign, Shrink and Relu against onnxruntime (single thread) on one-node ONNX models, through the
compiled op entry (`run_numpy`), and through lowering and a ModelExecutor.

Exact comparisons: both ops select or shift single values, so rtsoa (which evaluates Shrink in
float64 and rounds once) and onnxruntime (float32 arithmetic for float32) agree bit for bit on
these inputs; integer Shrink truncates the shifted value toward zero in both. Float64 Shrink is
judged by onnx.reference: onnxruntime's float64 Shrink returns values rounded to float32
(1.4999 comes back as 1.499899983406067), which the ONNX definition does not.
"""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa.ops.abi import STATUS_OP_BAD_DTYPE
from rtsoa.ops.host import OpError, run_numpy
from rtsoa.runtime import load_model

ELEMENT = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.uint8): TensorProto.UINT8,
}
rng = np.random.default_rng(113)


def one_node(op, x, attributes, opset):
    node = helper.make_node(op, ["x"], ["y"], **attributes)
    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info("x", ELEMENT[x.dtype], ["n", x.shape[1]])],
        [helper.make_tensor_value_info("y", ELEMENT[x.dtype], None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def onnxruntime_output(model, x):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, {"x": x})[0]


def values(kind):
    """Negative, zero, positive values; halves and values near the Shrink thresholds."""
    if np.dtype(kind).kind == "f":
        special = np.array([0.0, -0.0, 1.5, -1.5, 1.4999, -1.5001, 0.5, -0.5, 3.25, -7.75])
        x = np.concatenate([special, rng.standard_normal(30) * 4]).astype(kind)
    else:
        x = np.concatenate([np.arange(-5, 6), rng.integers(-1000, 1000, 29)]).astype(kind)
    return x.reshape(5, 8)


KINDS = [np.float32, np.float64, np.int32, np.int64]
SHRINKS = [{}, {"lambd": 1.5, "bias": 1.5}, {"lambd": 0.0, "bias": -2.25}, {"bias": 0.75}]


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: np.dtype(kind).name)
def test_sign_matches_onnxruntime(kind):
    x = values(kind)
    want = onnxruntime_output(one_node("Sign", x, {}, 13), x)
    (got,) = run_numpy("Sign", [x])
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_sign_keeps_nan():
    """onnxruntime's Sign is numpy's: NaN stays NaN (a branch on v > 0 / v < 0 alone would
    give 0)."""
    x = np.array([[np.nan, -np.inf, np.inf, 0.0]], dtype=np.float32)
    (got,) = run_numpy("Sign", [x])
    np.testing.assert_array_equal(got, np.array([[np.nan, -1, 1, 0]], dtype=np.float32))
    np.testing.assert_array_equal(got, onnxruntime_output(one_node("Sign", x, {}, 13), x))


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: np.dtype(kind).name)
def test_relu_matches_onnxruntime(kind):
    """Relu of every type ONNX (opset 14) and rtsoa share; onnxruntime has no int64 Relu,
    so that one is judged by onnx.reference. Floats: -0 stays -0 and NaN stays NaN, as
    onnxruntime has them."""
    x = values(kind)
    if x.dtype.kind == "f":
        x[0, :3] = [np.nan, -0.0, -np.inf]
    model = one_node("Relu", x, {}, 14)
    if kind == np.int64:
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    else:
        want = onnxruntime_output(model, x)
    (got,) = run_numpy("Relu", [x])
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    if x.dtype.kind == "f":
        assert np.signbit(got[0, 1]) == np.signbit(want[0, 1])


@pytest.mark.parametrize("attributes", SHRINKS, ids=str)
@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: np.dtype(kind).name)
def test_shrink_matches_onnxruntime(kind, attributes):
    x = values(kind)
    model = one_node("Shrink", x, attributes, 10)
    if kind == np.float64:
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    else:
        want = onnxruntime_output(model, x)
    (got,) = run_numpy("Shrink", [x], attributes)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_shrink_by_hand():
    """The ONNX definition on the conformance case's input (lambd = bias = 1.5)."""
    x = np.array([-2.0, -1.0, 0.0, 1.0, 2.0], dtype=np.float32)
    (got,) = run_numpy("Shrink", [x], {"lambd": 1.5, "bias": 1.5})
    np.testing.assert_array_equal(got, np.array([-0.5, 0, 0, 0, 0.5], dtype=np.float32))
    # integers: -7 + 0.75 = -6.25 -> -6, 7 - 0.75 = 6.25 -> 6 (toward zero, not floor)
    xi = np.array([-7, -1, 0, 1, 7], dtype=np.int32)
    (got,) = run_numpy("Shrink", [xi], {"lambd": 0.5, "bias": 0.75})
    np.testing.assert_array_equal(got, np.array([-6, 0, 0, 0, 6], dtype=np.int32))


@pytest.mark.parametrize("op", ["Sign", "Shrink", "Relu"])
def test_unsupported_dtype_is_refused(op):
    with pytest.raises(OpError) as caught:
        run_numpy(op, [np.ones((2, 2), dtype=np.uint8)])
    assert caught.value.status == STATUS_OP_BAD_DTYPE


@pytest.mark.parametrize(
    "op, attributes, opset, kind",
    [
        ("Sign", {}, 13, np.float32),
        ("Shrink", {"lambd": 0.25, "bias": 0.5}, 10, np.int64),
        ("Relu", {}, 14, np.int32),
    ],
)
def test_lowered_model_matches_onnxruntime(op, attributes, opset, kind):
    """The same ops lowered (symbolic batch) and run by a ModelExecutor at two batch sizes."""
    x = values(kind)
    model = one_node(op, x, attributes, opset)
    with load_model(model) as executor:
        for rows in (5, 2):
            got = executor.execute_sync({"x": x[:rows]})["y"]
            np.testing.assert_array_equal(got, onnxruntime_output(model, x[:rows]))
