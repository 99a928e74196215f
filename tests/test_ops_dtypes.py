"""Element types: each op declares the dtypes it runs (`register_op(..., dtypes=...)`), lowering
refuses others naming the op, the node and the dtype, and what is declared runs and agrees
exactly with onnxruntime (single thread; onnx.reference where onnxruntime has no kernel):
int8 / int16 / uint8 / uint16 / uint32 / uint64 arithmetic (wrapping) and comparisons,
unsigned tensors through the data-movement ops, float16 Max / Min (compared in
float32 as onnxruntime does, the chosen input's bits returned), bool ReduceMax / ReduceMin,
and ReduceMax / ReduceMin over an empty axis (the lowest / highest value of the dtype, as
ONNX defines them).
"""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from rtsoa.errors import LoweringError
from rtsoa.lowering import lower
from rtsoa.runtime import InferenceSession
from rtsoa.testing.models import run_onnxruntime

ELEMENT = {
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.int16): TensorProto.INT16,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.uint16): TensorProto.UINT16,
    np.dtype(np.uint32): TensorProto.UINT32,
    np.dtype(np.uint64): TensorProto.UINT64,
    np.dtype(np.bool_): TensorProto.BOOL,
}
rng = np.random.default_rng(111)


def model_of(op, inputs, output_dtype, opset=18, dims=None, **attributes):
    """One `op` node over graph inputs named by `inputs` ({name: array})."""
    names = list(inputs)
    node = helper.make_node(op, names, ["y"], name=f"the_{op.lower()}", **attributes)
    graph_inputs = [
        helper.make_tensor_value_info(name, ELEMENT[a.dtype], dims or a.shape)
        for name, a in inputs.items()
    ]
    output = helper.make_tensor_value_info("y", ELEMENT[np.dtype(output_dtype)], None)
    graph = helper.make_graph([node], "one", graph_inputs, [output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def onnxruntime_outputs(model, feeds):
    """onnxruntime's output; where it has no kernel for the op and dtype (int16 Max / Min),
    onnx.reference's, which computes the ONNX definition."""
    try:
        return run_onnxruntime(model, feeds)["y"]
    except Exception as error:  # onnxruntime's own exception types
        if "NOT_IMPLEMENTED" not in str(error):
            raise
    return ReferenceEvaluator(model).run(None, feeds)[0]


def rtsoa_outputs(model, feeds):
    with InferenceSession(lower(model)) as executor:
        return executor.execute_sync(feeds)["y"]


def same_as_onnxruntime(model, feeds):
    want = onnxruntime_outputs(model, feeds)
    got = rtsoa_outputs(model, feeds)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    if got.dtype == np.float16:  # bit for bit, NaNs included
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    else:
        np.testing.assert_array_equal(got, want)
    return got


def integers(kind, shape):
    info = np.iinfo(kind)
    edges = np.array([info.min, info.max, 0, 1, info.max - 1, info.min + 1], dtype=kind)
    drawn = rng.integers(info.min, int(info.max) + 1, size=int(np.prod(shape)), dtype=kind)
    drawn[: edges.size] = edges
    return drawn.reshape(shape)


SMALL = [np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64]


@pytest.mark.parametrize("kind", SMALL, ids=lambda k: np.dtype(k).name)
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
def test_small_integer_arithmetic_wraps_like_onnxruntime(op, kind):
    a = integers(kind, (3, 8))
    b = integers(kind, (8,))  # broadcast along the rows
    if op == "Div":
        b[b == 0] = 3  # onnxruntime's integer x / 0 is undefined
        if np.dtype(kind).kind == "i":
            b[b == -1] = 5  # and INT_MIN / -1 traps there
    same_as_onnxruntime(model_of(op, {"a": a, "b": b}, kind), {"a": a, "b": b})


@pytest.mark.parametrize("kind", SMALL, ids=lambda k: np.dtype(k).name)
@pytest.mark.parametrize("op", ["Equal", "Less", "Greater"])
def test_small_integer_comparisons_agree_with_onnxruntime(op, kind):
    a = integers(kind, (4, 6))
    b = a.copy()
    b[::2] = integers(kind, (2, 6))
    same_as_onnxruntime(model_of(op, {"a": a, "b": b}, np.bool_), {"a": a, "b": b})


@pytest.mark.parametrize("kind", [np.uint16, np.uint32, np.uint64], ids=lambda k: np.dtype(k).name)
def test_unsigned_tensors_move_through_data_movement_ops(kind):
    """Storage: Transpose, Slice, Concat, Gather and Reshape copy bytes, so unsigned values
    (uint64 beyond float64's 53-bit mantissa included) come back exactly, as model inputs,
    constants and outputs."""
    x = integers(kind, (4, 6))
    table = integers(kind, (6,))
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
        helper.make_node("Slice", ["t", "starts", "ends"], ["s"]),
        helper.make_node("Concat", ["s", "t"], ["c"], axis=0),
        helper.make_node("Gather", ["c", "rows"], ["g"], axis=0),
        helper.make_node("Reshape", ["g", "flat"], ["r"]),
        helper.make_node("Concat", ["r", "table"], ["y"], axis=0),
    ]
    constants = {
        "starts": np.array([1, 0], np.int64),
        "ends": np.array([5, 4], np.int64),
        "rows": np.array([0, 5, 2, 3], np.int64),
        "flat": np.array([-1], np.int64),
        "table": table,
    }
    graph = helper.make_graph(
        nodes,
        "moves",
        [helper.make_tensor_value_info("x", ELEMENT[np.dtype(kind)], x.shape)],
        [helper.make_tensor_value_info("y", ELEMENT[np.dtype(kind)], None)],
        [numpy_helper.from_array(value, name) for name, value in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    got = same_as_onnxruntime(model, {"x": x})
    assert got.dtype == kind


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_float16_max_and_min_pick_the_input_onnxruntime_picks(op):
    special = [0.0, -0.0, np.inf, -np.inf, 65504.0, -65504.0, 6e-8, -6e-8, 1.0, 1.0009765625]
    a = np.array(special + list(rng.standard_normal(22) * 100), np.float16).reshape(4, 8)
    b = np.array(list(rng.standard_normal(16) * 100) + special[::-1] * 2, np.float16)[:32]
    b = b.reshape(4, 8)
    b[0, :2] = a[0, :2]  # ties
    same_as_onnxruntime(model_of(op, {"a": a, "b": b}, np.float16), {"a": a, "b": b})
    row = b[1]  # broadcast, three inputs
    feeds = {"a": a, "b": b, "c": row}
    same_as_onnxruntime(model_of(op, feeds, np.float16), feeds)


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_float16_max_and_min_propagate_nan(op):
    a = np.array([np.nan, 1.0, np.nan, -2.0], np.float16)
    b = np.array([1.0, np.nan, np.nan, -3.0], np.float16)
    got = rtsoa_outputs(model_of(op, {"a": a, "b": b}, np.float16), {"a": a, "b": b})
    assert np.isnan(got[:3]).all()
    assert got[3] == (np.float16(-2.0) if op == "Max" else np.float16(-3.0))


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_bool_reduce_max_and_min(op, keepdims):
    x = rng.random((4, 5)) < 0.3
    x[0] = True
    x[1] = False
    axes = np.array([1], np.int64)
    feeds = {"x": x, "axes": axes}
    same_as_onnxruntime(model_of(op, feeds, np.bool_, opset=20, keepdims=keepdims), feeds)


@pytest.mark.parametrize("kind", [np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8])
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_max_and_min_over_an_empty_axis(op, kind):
    x = np.zeros((2, 0, 4), kind)
    axes = np.array([1], np.int64)
    feeds = {"x": x, "axes": axes}
    model = model_of(op, feeds, kind, keepdims=1)
    got = rtsoa_outputs(model, feeds)
    if np.dtype(kind).kind == "f":
        bound = -np.inf if op == "ReduceMax" else np.inf
    else:
        bound = np.iinfo(kind).min if op == "ReduceMax" else np.iinfo(kind).max
    np.testing.assert_array_equal(got, np.full((2, 1, 4), bound, kind))
    if kind in (np.float32, np.int32, np.int64, np.int8, np.uint8):  # onnxruntime's kernels
        same_as_onnxruntime(model, feeds)


def test_small_integers_of_a_reduction_with_elements():
    x = integers(np.int8, (3, 5))
    feeds = {"x": x, "axes": np.array([0], np.int64)}
    same_as_onnxruntime(model_of("ReduceMax", feeds, np.int8, keepdims=0), feeds)


@pytest.mark.parametrize(
    "op, kind, output",
    [
        ("Add", np.bool_, np.bool_),  # bool arithmetic: not declared
        ("Sigmoid", np.int32, np.int32),
        ("ReduceSum", np.bool_, np.bool_),
    ],
)
def test_a_dtype_the_op_does_not_declare_is_refused_at_lowering(op, kind, output):
    x = np.ones((2, 3), kind)
    inputs = {"x": x} if op in ("Sigmoid", "ReduceSum") else {"x": x, "z": x}
    with pytest.raises(LoweringError) as error:
        lower(model_of(op, inputs, output))
    message = str(error.value)
    assert f"op {op}" in message
    assert f"the_{op.lower()}" in message  # the node
    assert f"element type {np.dtype(kind).name}" in message


def test_a_refused_dtype_is_named_even_when_shapes_are_symbolic():
    x = np.ones((2, 3), np.bool_)
    model = model_of("Add", {"a": x, "b": x}, np.bool_, dims=["n", 3])
    with pytest.raises(LoweringError, match="input 0 .'a'. has element type bool"):
        lower(model)
