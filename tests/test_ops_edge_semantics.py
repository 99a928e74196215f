"""NaN and integer-overflow semantics of the ops, checked against onnxruntime (and onnx.reference
where onnxruntime has no defined answer): Max / Min with NaN in either order, HardSigmoid of NaN,
integer Div at INT_MIN, integer Pow with negative exponents, and element counts that overflow
int64 (Range at run time and in folding, Expand / Tile folding)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtsoa.errors import LoweringError
from rtsoa.executors import KernelError
from rtsoa.lowering import lower
from rtsoa.ops.abi import STATUS_OP_TOO_LARGE
from rtsoa.ops.host import run_numpy
from rtsoa.runtime import load_model
from rtsoa.testing.models import run_onnxruntime

NAN = np.nan


def _single_op(op, arrays, opset=17, **attributes):
    """A model of one `op` node whose inputs i0, i1, ... are graph inputs, with its feeds."""
    names = [f"i{k}" for k in range(len(arrays))]
    elem = helper.np_dtype_to_tensor_dtype(arrays[0].dtype)
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attributes)],
        op,
        [
            helper.make_tensor_value_info(name, elem, array.shape)
            for name, array in zip(names, arrays, strict=True)
        ],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return proto, dict(zip(names, arrays, strict=True))


def _onnxruntime(op, arrays, **attributes):
    proto, feeds = _single_op(op, arrays, **attributes)
    return run_onnxruntime(proto, feeds)["y"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_and_min_give_nan_for_a_nan_in_either_order(op, dtype):
    a = np.array([1.0, NAN, NAN, -np.inf, 2.0], dtype=dtype)
    b = np.array([NAN, 1.0, NAN, NAN, -3.0], dtype=dtype)
    for inputs in ([a, b], [b, a], [a, b, a], [b[:1], a]):  # both orders, variadic, broadcast
        (got,) = run_numpy(op, inputs)
        want = _onnxruntime(op, inputs)
        np.testing.assert_array_equal(got, want)
    (got,) = run_numpy(op, [np.array([1.0], dtype), np.array([NAN], dtype)])
    assert np.isnan(got[0])  # before: Max(1, NaN) was 1 and Max(NaN, 1) NaN


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_hard_sigmoid_of_nan_is_nan(dtype):
    x = np.array([NAN, -np.inf, np.inf, 0.0, -10.0, 10.0], dtype=dtype)
    (got,) = run_numpy("HardSigmoid", [x], {"alpha": 0.2, "beta": 0.5})
    if dtype == np.float32:
        want = _onnxruntime("HardSigmoid", [x], alpha=0.2, beta=0.5)
    else:  # onnxruntime has no float64 HardSigmoid: the formula, NaN staying NaN
        want = np.clip(0.2 * x + 0.5, 0.0, 1.0)
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[0])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_div_truncates_toward_zero_at_int_min(dtype):
    low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    a = np.array([5, low, low, low, -7, 7, high, low + 1, -1, high], dtype=dtype)
    b = np.array([low, 7, 1, 2, 2, -2, -1, -1, low, low], dtype=dtype)
    (got,) = run_numpy("Div", [a, b])
    np.testing.assert_array_equal(got, _onnxruntime("Div", [a, b]))
    # what C and onnxruntime leave undefined (int64 INT_MIN / -1 traps there): INT_MIN / -1
    # wraps to INT_MIN and x / 0 is 0
    (got,) = run_numpy("Div", [np.array([low, 3], dtype), np.array([-1, 0], dtype)])
    assert got.tolist() == [low, 0]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_pow_with_a_negative_exponent(dtype):
    low = np.iinfo(dtype).min
    base = np.array([1, -1, -1, 1, -1, -1, 2, -2, 3, -5], dtype=dtype)
    exponent = np.array([-1, -1, -2, low, low, low + 1, -1, -3, -5, -2], dtype=dtype)
    (got,) = run_numpy("Pow", [base, exponent])
    assert got.tolist() == [1, -1, 1, 1, 1, -1, 0, 0, 0, 0]
    # onnxruntime goes through double: (-1) ** (INT64_MIN + 1) is 1 there, its exponent rounded
    small = slice(0, 5) if dtype == np.int64 else slice(None)
    want = _onnxruntime("Pow", [base[small], exponent[small]])
    np.testing.assert_array_equal(got[small], want)
    # 0 ** negative divides by zero: 0, as integer x / 0 (onnxruntime casts inf: INT_MIN)
    (got,) = run_numpy("Pow", [np.array([0], dtype), np.array([-1], dtype)])
    assert got.tolist() == [0]


def _range_model(initializers=()):
    inputs = [("a", []), ("b", []), ("d", [])]
    constant = {name for name, _ in initializers}
    graph = helper.make_graph(
        [helper.make_node("Range", ["a", "b", "d"], ["y"])],
        "range",
        [
            helper.make_tensor_value_info(name, TensorProto.INT64, dims)
            for name, dims in inputs
            if name not in constant
        ],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        [numpy_helper.from_array(np.asarray(v, np.int64), name) for name, v in initializers],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def test_range_whose_count_overflows_is_refused_at_run_time():
    """The element count of Range(INT64_MIN, INT64_MAX, 1) is 2**64 - 1: int64 subtraction
    wrapped it to an empty tensor."""
    with load_model(lower(_range_model())) as model:
        feeds = {"a": np.array(0), "b": np.array(5), "d": np.array(2)}
        assert model.execute_sync(feeds)["y"].tolist() == [0, 2, 4]
        # at int64's end, where the old span limit - start was near wrapping
        edges = {"a": np.array(INT64_MAX), "b": np.array(INT64_MAX - 7), "d": np.array(-3)}
        want = run_onnxruntime(_range_model(), edges)["y"]
        np.testing.assert_array_equal(model.execute_sync(edges)["y"], want)
        feeds = {"a": np.array(INT64_MIN), "b": np.array(INT64_MAX), "d": np.array(1)}
        with pytest.raises(KernelError, match="result too large") as caught:
            model.execute_sync(feeds)
        assert caught.value.status == STATUS_OP_TOO_LARGE


@pytest.mark.parametrize(
    "start, limit, delta",
    [(INT64_MIN, INT64_MAX, 1), (INT64_MAX, INT64_MIN, -1), (INT64_MIN, INT64_MAX, 2**4)],
)
def test_range_whose_count_overflows_is_refused_at_folding(start, limit, delta):
    proto = _range_model([("a", start), ("b", limit), ("d", delta)])
    with pytest.raises(LoweringError, match="Range.*result too large"):
        lower(proto)


def _folded_copy_model(op, data, sizes):
    """`op`(data, sizes) of constants, read through Shape so that folding must compute it."""
    graph = helper.make_graph(
        [
            helper.make_node(op, ["c", "s"], ["e"]),
            helper.make_node("Shape", ["e"], ["shape"]),
            helper.make_node("Add", ["shape", "x"], ["y"]),
        ],
        op,
        [helper.make_tensor_value_info("x", TensorProto.INT64, [len(sizes)])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        [
            numpy_helper.from_array(np.asarray(data, np.int64), "c"),
            numpy_helper.from_array(np.asarray(sizes, np.int64), "s"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "op, data, sizes",
    [
        ("Expand", [3], [2**32, 2**32]),  # product 2**64 wraps to 0
        ("Expand", [3], [2**21, 2**21, 2**22]),  # 2**64 again, over three dims
        ("Expand", [[3]], [2**31, 3, 2**33]),  # wraps to a positive count
        ("Tile", [[3]], [2**32, 2**32]),
        ("Tile", [3, 4], [2**62]),  # one dim's product wraps
    ],
)
def test_folding_expand_and_tile_to_dims_that_overflow_is_refused(op, data, sizes):
    with pytest.raises(LoweringError, match=f"{op}.*result too large"):
        lower(_folded_copy_model(op, data, sizes))


def test_expand_to_dims_that_overflow_is_refused_at_run_time():
    graph = helper.make_graph(
        [helper.make_node("Expand", ["x", "s"], ["y"])],
        "expand",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
            helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with load_model(lower(proto)) as model:
        x = np.ones(1, np.float32)
        assert model.execute_sync({"x": x, "s": np.array([2, 3])})["y"].shape == (2, 3)
        with pytest.raises(KernelError, match="result too large"):
            model.execute_sync({"x": x, "s": np.array([2**32, 2**32])})


def test_expand_to_a_zero_dim_beside_a_huge_one_is_empty():
    """A zero dim makes the count 0 however large the others are (not 'too large')."""
    (got,) = run_numpy("Expand", [np.ones(1, np.float32), np.array([2**60, 0])])
    assert got.shape == (2**60, 0)  # onnxruntime's shape too
    (got,) = run_numpy("Tile", [np.ones((1, 0), np.float32), np.array([2**60, 5])])
    assert got.shape == (2**60, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sign_of_negative_zero_is_positive_zero(dtype):
    x = np.array([-0.0, 0.0, NAN, -2.0, 3.0], dtype=dtype)
    (got,) = run_numpy("Sign", [x])
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got, np.sign(x))  # the ONNX reference's formula
    assert not np.signbit(got[:2]).any()  # before: Sign(-0.0) was -0.0
    if dtype == np.float32:
        np.testing.assert_array_equal(got, _onnxruntime("Sign", [x]))


def test_clip_without_a_bound_clips_infinities_to_the_dtype_range():
    """ONNX: an absent min / max is numeric_limits lowest() / max(), so +-inf are clipped to
    them, as onnxruntime does (before: an absent bound was +-inf)."""
    x = np.array([np.inf, -np.inf, NAN, 1.0], dtype=np.float32)
    for bounds in ([], [np.array(0.0, np.float32)], [None, np.array(2.0, np.float32)]):
        inputs = [x, *bounds]
        (got,) = run_numpy("Clip", inputs)
        proto, feeds = _single_op("Clip", [a for a in inputs if a is not None])
        if len(bounds) == 2:  # min absent, max given: inputs ["i0", "", "i1"]
            proto.graph.node[0].input[:] = ["i0", "", "i1"]
        np.testing.assert_array_equal(got, run_onnxruntime(proto, feeds)["y"])
    (got,) = run_numpy("Clip", [np.array([np.inf, -np.inf])])
    assert got.tolist() == [np.finfo(np.float64).max, -np.finfo(np.float64).max]


def test_max_pooling_gives_nan_for_a_nan_anywhere_in_the_window():
    """Before, a NaN counted only as the window's first tap (MaxPool) or not at all
    (GlobalMaxPool). onnxruntime depends on the NaN's place too, and onnx.reference drops it;
    rtsoa propagates it as its Max and ReduceMax do (numpy's max of each window)."""
    x = np.arange(2 * 16, dtype=np.float32).reshape(1, 2, 4, 4)
    x[0, 0, 1, 2] = NAN  # inside two windows, never their first tap
    x[0, 1, 0, 0] = NAN  # the first tap of one window
    attributes = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}
    (got,) = run_numpy("MaxPool", [x], attributes)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    want = np.empty((1, 2, 2, 2), np.float32)
    for i in range(2):
        for j in range(2):
            want[:, :, i, j] = padded[:, :, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3].max(axis=(2, 3))
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[0, 0]).sum() == 2 and np.isnan(got[0, 1]).sum() == 1
    (got,) = run_numpy("GlobalMaxPool", [x])
    assert np.isnan(got).all()
