"""TopK beyond the ONNX node suite: every axis, largest / smallest and k from 0 to the axis
length on data full of ties (lower index first), each element type, against onnxruntime; NaN
against numpy's order; opset 1's attribute k; k known only at run time; the refusals."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.errors import LoweringError, OpError
from rtsoa.lowering import lower
from rtsoa.ops.abi import STATUS_OP_BAD_ATTRIBUTE, STATUS_OP_BAD_DTYPE, STATUS_OP_BAD_INDEX
from rtsoa.ops.host import run_numpy
from rtsoa.testing.models import run_onnxruntime
from tests.model_checks import run_and_compare

ELEMENT = {
    np.float32: TensorProto.FLOAT,
    np.float64: TensorProto.DOUBLE,
    np.int32: TensorProto.INT32,
    np.int64: TensorProto.INT64,
}
rng = np.random.default_rng(129)


def topk_model(kind, opset=24, k_input=True, **attributes):
    outputs = ("values", "indices")
    inputs = ["x", "k"] if k_input else ["x"]
    node = helper.make_node("TopK", inputs, list(outputs), **attributes)
    graph = helper.make_graph(
        [node],
        "topk",
        [helper.make_tensor_value_info("x", ELEMENT[kind], None)]
        + ([helper.make_tensor_value_info("k", TensorProto.INT64, [1])] if k_input else []),
        [
            helper.make_tensor_value_info(
                name, ELEMENT[kind] if j == 0 else TensorProto.INT64, None
            )
            for j, name in enumerate(outputs)
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("kind", list(ELEMENT))
@pytest.mark.parametrize("largest", [0, 1])
def test_ties_axes_and_every_k_against_onnxruntime(kind, largest):
    x = rng.integers(0, 4, (3, 5, 4)).astype(kind)  # four values: ties everywhere
    for axis in (0, 1, 2, -2):
        model = topk_model(kind, axis=axis, largest=largest)
        for k in range(x.shape[axis] + 1):
            feeds = {"x": x, "k": np.array([k], np.int64)}
            want = run_onnxruntime(model, feeds)
            values, indices = run_numpy(
                "TopK", [x, feeds["k"]], {"axis": axis, "largest": largest}, n_out=2
            )
            np.testing.assert_array_equal(values, want["values"])
            np.testing.assert_array_equal(indices, want["indices"])


@pytest.mark.parametrize("kind", [np.uint32, np.uint64])
def test_unsigned_types_against_a_python_reference(kind):
    """onnxruntime has no unsigned TopK: sorted Python ints, ties by the lower index."""
    x = rng.integers(0, 4, (3, 7)).astype(kind)
    x[0, :3] = np.iinfo(kind).max
    for largest in (0, 1):
        values, indices = run_numpy(
            "TopK", [x, np.array([4], np.int64)], {"largest": largest}, n_out=2
        )
        for row in range(3):
            line = [int(value) for value in x[row]]
            order = sorted(range(7), key=lambda i: (-line[i] if largest else line[i], i))[:4]
            np.testing.assert_array_equal(indices[row], order)
            np.testing.assert_array_equal(values[row], x[row, order])


def test_nan_orders_above_every_number():
    x = np.array([1.0, np.nan, 3.0, np.nan, -np.inf], np.float32)
    values, indices = run_numpy("TopK", [x, np.array([3], np.int64)], {}, n_out=2)
    np.testing.assert_array_equal(indices, [1, 3, 2])
    assert np.isnan(values[:2]).all() and values[2] == 3.0
    values, indices = run_numpy("TopK", [x, np.array([2], np.int64)], {"largest": 0}, n_out=2)
    np.testing.assert_array_equal(indices, [4, 0])


def test_opset_1_attribute_k():
    x = rng.standard_normal((4, 6)).astype(np.float32)
    run_and_compare(topk_model(np.float32, opset=1, k_input=False, k=3), [{"x": x}])


def test_k_known_only_at_run_time():
    model = topk_model(np.float32, axis=0, largest=0)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    run_and_compare(model, [{"x": x, "k": np.array([k], np.int64)} for k in (1, 5, 0)])


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x, k, attributes, status",
    [
        (np.zeros((2, 3), np.float32), [4], {}, STATUS_OP_BAD_INDEX),
        (np.zeros((2, 3), np.float32), [-1], {}, STATUS_OP_BAD_INDEX),
        (np.zeros((2, 3), np.float32), [1], {"axis": 2}, STATUS_OP_BAD_ATTRIBUTE),
        (np.zeros((2, 3), np.float32), [1], {"largest": 2}, STATUS_OP_BAD_ATTRIBUTE),
        (np.zeros((2, 3), np.int8), [1], {}, STATUS_OP_BAD_DTYPE),
        (np.zeros((2, 3), np.float32), np.array([1], np.int32), {}, STATUS_OP_BAD_DTYPE),
    ],
)
def test_bad_operands_get_a_status(x, k, attributes, status):
    with pytest.raises(OpError) as error:
        run_numpy("TopK", [x, np.asarray(k, dtype=getattr(k, "dtype", np.int64))], attributes, 2)
    assert error.value.status == status


def test_a_constant_k_beyond_the_axis_is_refused_at_lowering():
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"])
    graph = helper.make_graph(
        [node],
        "topk",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("values", TensorProto.FLOAT, None)],
        [helper.make_tensor("k", TensorProto.INT64, [1], [4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    with pytest.raises(LoweringError, match="TopK node .*index out of range"):
        lower(model)
