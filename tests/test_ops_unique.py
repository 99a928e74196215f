"""Unique through the compiled op entry, judged by onnx.reference (numpy's unique) and
onnxruntime (single thread): flattened and along each axis, sorted and in first-occurrence
order, every element type, -0.0 and NaN, the optional outputs; a lowered model whose output
length comes from run-time data; the failure statuses.
"""

import numpy as np
import pytest
from one_node import failure
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa.ops.abi import STATUS_OP_BAD_ATTRIBUTE, STATUS_OP_BAD_DTYPE
from rtsoa.ops.host import run_numpy
from rtsoa.testing.models import run_onnxruntime
from tests.model_checks import run_and_compare

rng = np.random.default_rng(130)
NAMES = ["y", "indices", "inverse_indices", "counts"]
TYPES = [np.float32, np.float64, np.int8, np.int16, np.int32, np.int64]
TYPES += [np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]


def unique_model(x, attributes):
    node = helper.make_node("Unique", ["x"], NAMES, **attributes)
    element = helper.np_dtype_to_tensor_dtype(x.dtype)
    outputs = [helper.make_tensor_value_info(NAMES[0], element, None)]
    outputs += [helper.make_tensor_value_info(name, TensorProto.INT64, None) for name in NAMES[1:]]
    graph = helper.make_graph(
        [node], "unique", [helper.make_tensor_value_info("x", element, x.shape)], outputs
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 8
    return model


def numpy_unique(x, sorted_=1, axis=None):
    """numpy's unique, and for sorted 0 its groups ordered by first occurrence (onnx.reference
    indexes the unflattened input there)."""
    flat = x.reshape(-1) if axis is None else x
    y, indices, inverse, counts = np.unique(
        flat, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    inverse = inverse.reshape(-1)
    if not sorted_:
        by_first = np.argsort(indices, kind="stable")
        position = np.empty_like(by_first)
        position[by_first] = np.arange(by_first.size)
        y = np.take(y, by_first, axis=0 if axis is None else axis)
        indices, counts, inverse = indices[by_first], counts[by_first], position[inverse]
    return [y, indices.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)]


def check(x, attributes, judge="numpy"):
    model = unique_model(x, attributes)
    if judge == "onnxruntime":
        got_want = run_onnxruntime(model, {"x": x})
        want = [got_want[name] for name in NAMES]
    elif judge == "reference":
        want = ReferenceEvaluator(model).run(None, {"x": x})
    else:
        want = numpy_unique(x, attributes.get("sorted", 1), attributes.get("axis"))
    got = run_numpy("Unique", [x], attributes, 4)
    for name, g, w in zip(NAMES, got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, name
        np.testing.assert_array_equal(g, w, err_msg=name)


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("sorted_", [1, 0])
def test_unique_flattened_every_type(kind, sorted_):
    x = rng.integers(0, 5, size=(4, 6)).astype(kind)
    check(x, {"sorted": sorted_})
    if sorted_:
        check(x, {"sorted": sorted_}, judge="reference")


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
@pytest.mark.parametrize("sorted_", [1, 0])
def test_unique_slices_along_an_axis(axis, sorted_):
    x = rng.integers(0, 2, size=(4, 5, 3)).astype(np.float32)
    x = np.concatenate([x, x], axis=axis)  # every slice at least twice
    check(x, {"sorted": sorted_, "axis": axis})


def test_unique_against_onnxruntime():
    x = rng.integers(-3, 3, size=(5, 4)).astype(np.float32)
    check(x, {}, judge="onnxruntime")
    check(x, {"axis": 0}, judge="onnxruntime")
    check(x.astype(np.int64), {"sorted": 0}, judge="onnxruntime")


def test_unique_negative_zero_and_nan_are_numbers():
    """-0.0 equals 0.0 (the first one met stays) and NaNs are one value, after the numbers."""
    x = np.array([np.nan, -0.0, 1.0, 0.0, np.nan, -1.0], dtype=np.float32)
    y, indices, inverse, counts = run_numpy("Unique", [x], {}, 4)
    np.testing.assert_array_equal(y, np.array([-1.0, -0.0, 1.0, np.nan], np.float32))
    assert np.signbit(y[1])
    np.testing.assert_array_equal(indices, [5, 1, 2, 0])
    np.testing.assert_array_equal(inverse, [3, 1, 2, 1, 3, 0])
    np.testing.assert_array_equal(counts, [1, 2, 1, 2])


def test_unique_of_nothing_and_with_only_y_wanted():
    check(np.zeros((0, 3), np.int32), {})
    (y,) = run_numpy("Unique", [np.array([3, 1, 3], np.int64)], {}, 1)
    np.testing.assert_array_equal(y, [1, 3])


def test_unique_bad_axis_sorted_and_float16_fail():
    x = np.zeros((2, 3), np.float32)
    failure(STATUS_OP_BAD_ATTRIBUTE, "Unique", [x], {"axis": 2})
    failure(STATUS_OP_BAD_ATTRIBUTE, "Unique", [x], {"sorted": 2})
    failure(STATUS_OP_BAD_DTYPE, "Unique", [x.astype(np.float16)], {})


def test_a_model_with_a_run_time_number_of_distinct_values():
    x = rng.integers(0, 4, size=(3, 5)).astype(np.int64)
    model = unique_model(x, {"sorted": 1})
    y = rng.integers(0, 9, size=(3, 5)).astype(np.int64)
    run_and_compare(model, [{"x": x}, {"x": y}])


@pytest.mark.parametrize(
    "op, kind, name",
    [
        ("Unique", TensorProto.FLOAT8E4M3FN, "float8e4m3fn"),
        ("EyeLike", TensorProto.BFLOAT16, "bfloat16"),
    ],
)
def test_narrow_element_types_are_refused_at_lowering_naming_op_and_dtype(op, kind, name):
    """float8 is stored and cast, not compared, and bfloat16 not written as ones (Unique runs
    bfloat16 through float32): a model giving Unique or EyeLike one is refused at lowering, not
    at its first run."""
    from rtsoa.errors import LoweringError
    from rtsoa.lowering import lower

    x = helper.make_tensor_value_info("x", kind, [2, 2])
    y = helper.make_tensor_value_info("y", kind, None)
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(LoweringError, match=rf"{op} node \(#0\).*{name}"):
        lower(model)
