"""OneHot, EyeLike, NonZero, Compress and ReverseSequence through the compiled op entry, judged
by onnx.reference on every element type and by onnxruntime (single thread) on common ones;
lowered models whose output shapes depend on run-time data; one test per failure status and
the refusals at lowering naming the op, the node and what is wrong.
"""

import numpy as np
import pytest
from one_node import check, failure, refused
from onnx import TensorProto, helper

from rtsoa.ops.abi import (
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
)
from rtsoa.ops.host import run_numpy
from tests.model_checks import run_and_compare

rng = np.random.default_rng(127)
EVERY = [
    np.float32,
    np.float64,
    np.float16,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.bool_,
]


def values(shape, kind):
    return (rng.integers(0, 3, size=shape) * rng.integers(0, 2, size=shape)).astype(kind)


# -- OneHot ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 0, 1, 2, -3])
@pytest.mark.parametrize("index_kind", [np.int64, np.int32, np.float32, np.uint8])
def test_one_hot_axes_index_types_and_out_of_range_indices(axis, index_kind):
    depth = 5
    low = 0 if index_kind == np.uint8 else -7
    indices = rng.integers(low, 8, size=(3, 4)).astype(index_kind)  # some beyond the depth
    values_ = np.array([-2.5, 4.0], dtype=np.float32)
    inputs = [indices, np.array(depth, dtype=np.int64), values_]
    check("OneHot", inputs, {"axis": axis}, 11, output=np.float32)


@pytest.mark.parametrize("kind", EVERY)
def test_one_hot_values_of_every_type_and_a_float_depth(kind):
    indices = np.array([[0, -1], [2, 9]], dtype=np.int64)
    values_ = np.array([0, 1], dtype=kind)
    if kind == np.bool_:  # onnx.reference subtracts the values
        (got,) = run_numpy("OneHot", [indices, np.array(3.0, np.float32), values_], {}, 1)
        np.testing.assert_array_equal(
            got, np.eye(3, dtype=np.bool_)[[[0, 2], [2, 0]]] & (indices < 3)[..., None]
        )
        return
    check("OneHot", [indices, np.array(3.0, np.float32), values_], {}, 11, output=kind)


def test_one_hot_truncates_a_fractional_depth_as_a_cast_to_int64_does():
    """ONNX casts a non-integer depth to int64 (3.7 -> 3), as onnxruntime does; onnx.reference
    takes np.arange(3.7), four positions."""
    inputs = [
        np.array([0, 2, 3], np.int64),
        np.array(3.7, np.float32),
        np.array([0, 1], np.float32),
    ]
    check("OneHot", inputs, {}, 11, judge="onnxruntime", output=np.float32)


def test_one_hot_against_onnxruntime_and_with_no_indices():
    indices = np.array([1, -1, 0, 7], dtype=np.int64)
    inputs = [indices, np.array(4, np.int64), np.array([0, 9], np.int64)]
    check("OneHot", inputs, {"axis": 0}, 11, judge="onnxruntime", output=np.int64)
    empty = [np.zeros((0, 2), np.int64), np.array(3, np.int64), np.array([0, 1], np.int64)]
    check("OneHot", empty, {}, 11, output=np.int64)


def test_one_hot_bad_depth_values_and_axis_fail():
    indices = np.array([1, 0], dtype=np.int64)
    pair = np.array([0, 1], np.float32)
    failure(STATUS_OP_BAD_SHAPE, "OneHot", [indices, np.array(0, np.int64), pair], {})
    failure(STATUS_OP_BAD_SHAPE, "OneHot", [indices, np.array(2, np.int64), pair[:1]], {})
    failure(STATUS_OP_BAD_SHAPE, "OneHot", [indices, np.array([2, 2], np.int64), pair], {})
    failure(STATUS_OP_BAD_ATTRIBUTE, "OneHot", [indices, np.array(2, np.int64), pair], {"axis": 2})
    failure(STATUS_OP_BAD_DTYPE, "OneHot", [indices > 0, np.array(2, np.int64), pair], {})


# -- EyeLike --------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, 1, -2, 4, -9, np.iinfo(np.int64).max])
@pytest.mark.parametrize("shape", [(3, 4), (4, 3), (0, 2)])
def test_eye_like_diagonals_and_shapes(k, shape):
    check("EyeLike", [np.zeros(shape, np.float32)], {"k": int(k)}, 22)


@pytest.mark.parametrize("onnx_type", [0, TensorProto.INT8, TensorProto.UINT64, TensorProto.BOOL])
def test_eye_like_output_types(onnx_type):
    attributes = {"k": 1} if not onnx_type else {"k": 1, "dtype": onnx_type}
    x = np.zeros((3, 3), np.int32)
    check("EyeLike", [x], attributes, 22, output=helper.tensor_dtype_to_np_dtype(onnx_type or 6))
    if onnx_type in (0, TensorProto.UINT64):  # onnxruntime has no int8 or bool EyeLike
        x = np.zeros((2, 3), np.float64)
        output = helper.tensor_dtype_to_np_dtype(onnx_type or 11)
        check("EyeLike", [x], attributes, 22, judge="onnxruntime", output=output)


def test_eye_like_needs_a_matrix_and_a_type_rtsoa_has():
    failure(STATUS_OP_BAD_SHAPE, "EyeLike", [np.zeros(3, np.float32)], {})
    x = np.zeros((2, 2), np.float32)
    refused("EyeLike", [x], {"dtype": TensorProto.BFLOAT16}, 22, "dtype 16")
    refused("EyeLike", [x.astype(np.float16)], {}, 22, "element type float16")


# -- NonZero --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", EVERY)
def test_non_zero_of_every_type(kind):
    check("NonZero", [values((3, 2, 4), kind)], {}, 13, output=np.int64)


def test_non_zero_negative_zero_is_zero_and_nan_is_not():
    x = np.array([0.0, -0.0, np.nan, 1.0, -1.0, -np.inf], dtype=np.float32)
    (got,) = run_numpy("NonZero", [x], {}, 1)
    np.testing.assert_array_equal(got, np.array([[2, 3, 4, 5]]))
    x = x.reshape(2, 3)
    check("NonZero", [x], {}, 13, judge="onnxruntime", output=np.int64)


def test_non_zero_of_all_zeros_and_of_nothing():
    check("NonZero", [np.zeros((2, 3), np.int32)], {}, 13, output=np.int64)
    check("NonZero", [np.zeros((2, 0), np.int32)], {}, 13, output=np.int64)


def test_non_zero_of_a_scalar_fails():
    failure(STATUS_OP_BAD_SHAPE, "NonZero", [np.array(3.0, np.float32)], {})


# -- Compress -------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [None, 0, 1, -1, 2])
@pytest.mark.parametrize("kind", [np.float32, np.int8, np.bool_, np.uint64])
def test_compress_along_each_axis_and_flattened(axis, kind):
    x = values((3, 4, 2), kind)
    length = x.size if axis is None else x.shape[axis]
    condition = rng.integers(0, 2, size=length - 1).astype(np.bool_)  # shorter than the axis
    attributes = {} if axis is None else {"axis": axis}
    check("Compress", [x, condition], attributes, 11)


def test_compress_against_onnxruntime_and_with_nothing_kept():
    x = rng.standard_normal((3, 4)).astype(np.float32)
    condition = np.array([True, False, True, True])
    check("Compress", [x, condition], {"axis": 1}, 11, judge="onnxruntime")
    check("Compress", [x, np.zeros(3, np.bool_)], {"axis": 0}, 11)


def test_compress_true_beyond_the_axis_and_bad_inputs_fail():
    x = np.zeros((2, 3), np.float32)
    failure(STATUS_OP_BAD_INDEX, "Compress", [x, np.array([0, 0, 0, 1], np.bool_)], {"axis": 1})
    failure(STATUS_OP_BAD_DTYPE, "Compress", [x, np.array([0, 1], np.int64)], {"axis": 0})
    failure(STATUS_OP_BAD_ATTRIBUTE, "Compress", [x, np.array([1], np.bool_)], {"axis": 2})
    failure(STATUS_OP_BAD_SHAPE, "Compress", [x, np.ones((1, 1), np.bool_)], {"axis": 0})


# -- ReverseSequence ------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_axis, time_axis", [(1, 0), (0, 1)])
@pytest.mark.parametrize("kind", [np.float32, np.int16, np.bool_])
def test_reverse_sequence_both_layouts(batch_axis, time_axis, kind):
    x = values((4, 3, 2) if batch_axis == 1 else (3, 4, 2), kind)
    lengths = np.array([4, 0, 2], dtype=np.int64)
    attributes = {"batch_axis": batch_axis, "time_axis": time_axis}
    check("ReverseSequence", [x, lengths], attributes, 10)


def test_reverse_sequence_against_onnxruntime():
    x = rng.standard_normal((5, 3)).astype(np.float32)
    lengths = np.array([5, 1, 3], dtype=np.int64)
    check("ReverseSequence", [x, lengths], {}, 10, judge="onnxruntime")


def test_reverse_sequence_bad_lengths_and_axes_fail():
    x = np.zeros((4, 2), np.float32)
    failure(STATUS_OP_BAD_INDEX, "ReverseSequence", [x, np.array([5, 1], np.int64)], {})
    failure(STATUS_OP_BAD_INDEX, "ReverseSequence", [x, np.array([-1, 1], np.int64)], {})
    failure(STATUS_OP_BAD_SHAPE, "ReverseSequence", [x, np.array([1, 1, 1], np.int64)], {})
    same = {"batch_axis": 0, "time_axis": 0}
    failure(STATUS_OP_BAD_ATTRIBUTE, "ReverseSequence", [x, np.array([1] * 4, np.int64)], same)


# -- lowered models -------------------------------------------------------------------------------


def test_a_model_whose_shapes_depend_on_run_time_data():
    """NonZero, Compress with a computed condition, and OneHot with a run-time depth: their
    output shapes are known only when they run; two input sets of different counts."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    depth = helper.make_tensor_value_info("depth", TensorProto.INT64, [])
    outputs = [
        helper.make_tensor_value_info(name, kind, None)
        for name, kind in (("where", TensorProto.INT64), ("kept", TensorProto.FLOAT))
    ] + [helper.make_tensor_value_info("hot", TensorProto.FLOAT, None)]
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    pair = helper.make_tensor("pair", TensorProto.FLOAT, [2], [0.0, 1.0])
    nodes = [
        helper.make_node("NonZero", ["x"], ["where"]),
        helper.make_node("ReduceSum", ["x"], ["rows"], axes=[1], keepdims=0),
        helper.make_node("Greater", ["rows", "zero"], ["condition"]),
        helper.make_node("Compress", ["x", "condition"], ["kept"], axis=0),
        helper.make_node("ArgMax", ["x"], ["best"], axis=1, keepdims=0),
        helper.make_node("OneHot", ["best", "depth", "pair"], ["hot"]),
    ]
    graph = helper.make_graph(nodes, "dynamic", [x, depth], outputs, [zero, pair])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 8
    sets = []
    for depth_value in (4, 6):
        x_value = (rng.standard_normal((3, 4)) * rng.integers(0, 2, size=(3, 4))).astype(np.float32)
        sets.append({"x": x_value, "depth": np.array(depth_value, np.int64)})
    run_and_compare(model, sets)
