"""CumSum and CumProd beyond the ONNX node suite: every exclusive / reverse combination on
every axis of a 3-D tensor against onnxruntime, each element type against numpy (onnxruntime
has no unsigned kernels), zero-size shapes, an axis known only at run time in a lowered
model, integer wrap-around, and the refusals."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.errors import LoweringError, OpError
from rtsoa.lowering import lower
from rtsoa.ops.abi import STATUS_OP_BAD_ATTRIBUTE, STATUS_OP_BAD_DTYPE, STATUS_OP_BAD_SHAPE
from rtsoa.ops.host import run_numpy
from rtsoa.testing.models import run_onnxruntime
from tests.model_checks import run_and_compare

OPSET = {"CumSum": 14, "CumProd": 26}
NUMPY = {"CumSum": (np.cumsum, 0), "CumProd": (np.cumprod, 1)}
rng = np.random.default_rng(108)


def reference(op, x, axis, exclusive=0, reverse=0):
    """numpy's cumsum / cumprod, flipped for reverse and shifted by one for exclusive."""
    function, start = NUMPY[op]
    data = np.flip(x, axis) if reverse else x
    result = function(data, axis=axis, dtype=x.dtype)
    if exclusive and x.shape[axis] > 0:
        result = np.roll(result, 1, axis=axis)
        index = [slice(None)] * x.ndim
        index[axis] = 0
        result[tuple(index)] = start
    return np.flip(result, axis) if reverse else result


def model(op, x_type, axis_type=TensorProto.INT64, axis_shape=(), **attributes):
    node = helper.make_node(op, ["x", "axis"], ["y"], **attributes)
    graph = helper.make_graph(
        [node],
        op.lower(),
        [
            helper.make_tensor_value_info("x", x_type, None),
            helper.make_tensor_value_info("axis", axis_type, list(axis_shape)),
        ],
        [helper.make_tensor_value_info("y", x_type, None)],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET[op])])
    proto.ir_version = 10
    return proto


@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
def test_every_axis_and_flag_against_onnxruntime(op, exclusive, reverse):
    x = rng.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    proto = model(op, TensorProto.FLOAT, exclusive=exclusive, reverse=reverse)
    for axis in (0, 1, 2, -1, -3):
        feeds = {"x": x, "axis": np.array(axis, np.int64)}
        want = run_onnxruntime(proto, feeds)["y"]
        (got,) = run_numpy(op, [x, feeds["axis"]], {"exclusive": exclusive, "reverse": reverse})
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("kind", [np.float64, np.int32, np.int64, np.uint32, np.uint64])
@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
def test_element_types_against_numpy(op, kind):
    x = rng.integers(1, 5, (4, 6)).astype(kind)
    for exclusive, reverse in ((0, 0), (1, 1)):
        (got,) = run_numpy(
            op, [x, np.array([1], np.int32)], {"exclusive": exclusive, "reverse": reverse}
        )
        assert got.dtype == kind
        np.testing.assert_array_equal(got, reference(op, x, 1, exclusive, reverse))


def test_integers_wrap_around():
    x = np.full(5, 2**31 - 1, np.int32)
    (got,) = run_numpy("CumSum", [x, np.array(0, np.int64)])
    np.testing.assert_array_equal(got, np.cumsum(x, dtype=np.int32))
    x = np.full(70, 3, np.uint64)
    (got,) = run_numpy("CumProd", [x, np.array(0, np.int64)])
    np.testing.assert_array_equal(got, np.cumprod(x, dtype=np.uint64))


@pytest.mark.parametrize("shape, axis", [((0, 3), 0), ((0, 3), 1), ((2, 0, 3), 2), ((1,), 0)])
def test_zero_size_and_one_element(shape, axis):
    x = rng.standard_normal(shape).astype(np.float32)
    for op in ("CumSum", "CumProd"):
        (got,) = run_numpy(op, [x, np.array(axis, np.int64)], {"exclusive": 1})
        assert got.shape == shape
        np.testing.assert_array_equal(got, reference(op, x, axis, exclusive=1))


def test_axis_known_only_at_run_time():
    """The axis is a graph input: shape inference waits for its data at run time."""
    proto = model("CumSum", TensorProto.FLOAT, reverse=1)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    run_and_compare(proto, [{"x": x, "axis": np.array(a, np.int64)} for a in (0, 1, -1)])


# -- refusals --------------------------------------------------------------------------------


def test_a_constant_axis_out_of_range_is_refused_at_lowering():
    node = helper.make_node("CumSum", ["x", "axis"], ["y"])
    graph = helper.make_graph(
        [node],
        "cumsum",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("axis", TensorProto.INT64, [], [2])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    with pytest.raises(LoweringError, match="CumSum node .*bad attribute"):
        lower(proto)


def test_an_undeclared_element_type_is_refused_at_lowering_by_name():
    with pytest.raises(LoweringError, match="element type int8, which op CumSum does not"):
        lower(model("CumSum", TensorProto.INT8))


@pytest.mark.parametrize(
    "x, axis, attributes, status",
    [
        (np.float32(1.0), np.array(0), {}, STATUS_OP_BAD_SHAPE),  # a scalar has no axis
        (np.zeros((2, 2), np.float32), np.array([0, 1]), {}, STATUS_OP_BAD_SHAPE),
        (np.zeros((2, 2), np.float32), np.array(0.0), {}, STATUS_OP_BAD_DTYPE),
        (np.zeros((2, 2), np.float32), np.array(-3), {}, STATUS_OP_BAD_ATTRIBUTE),
        (np.zeros((2, 2), np.float32), np.array(0), {"exclusive": 2}, STATUS_OP_BAD_ATTRIBUTE),
        (np.zeros((2, 2), np.int8), np.array(0), {}, STATUS_OP_BAD_DTYPE),
    ],
)
def test_bad_operands_get_a_status(x, axis, attributes, status):
    with pytest.raises(OpError) as error:
        run_numpy("CumProd", [np.asarray(x), axis], attributes)
    assert error.value.status == status
