"""Mod, Trilu and GatherElements through the compiled op entry (`run_numpy`), judged by
onnxruntime (single thread) where its result is defined, and by numpy where onnxruntime's is
not (integer x mod 0, which rtsoa defines as 0); one test per failure status.
"""

import numpy as np
import pytest
from onnx import helper
from test_ops_dtypes import ELEMENT

from rtsoa.ops.abi import STATUS_OP_BAD_ATTRIBUTE, STATUS_OP_BAD_INDEX, STATUS_OP_BAD_SHAPE
from rtsoa.ops.host import OpError, run_numpy
from rtsoa.testing.models import run_onnxruntime

INTEGERS = [np.int8, np.int16, np.int32, np.int64, np.uint8]
rng = np.random.default_rng(120)


def onnxruntime_output(op, inputs, attributes, opset):
    names = [f"x{k}" if x is not None else "" for k, x in enumerate(inputs)]
    node = helper.make_node(op, names, ["y"], **attributes)
    graph_inputs = [
        helper.make_tensor_value_info(name, ELEMENT[x.dtype], x.shape)
        for name, x in zip(names, inputs, strict=True)
        if x is not None
    ]
    output = helper.make_tensor_value_info("y", ELEMENT[inputs[0].dtype], None)
    graph = helper.make_graph([node], "one", graph_inputs, [output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    feeds = {name: x for name, x in zip(names, inputs, strict=True) if x is not None}
    return run_onnxruntime(model, feeds)["y"]


def same_as_onnxruntime(op, inputs, attributes, opset):
    want = onnxruntime_output(op, inputs, attributes, opset)
    (got,) = run_numpy(op, inputs, attributes, 1)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def failure(status, op, inputs, attributes):
    with pytest.raises(OpError) as caught:
        run_numpy(op, inputs, attributes, 1)
    assert caught.value.status == status
    assert str(caught.value).startswith(f"{op}: ")


# -- Mod ------------------------------------------------------------------------------------------


def dividends_and_divisors(kind):
    """Every sign combination, the type's extremes, a broadcast divisor; no zero divisor."""
    info = np.iinfo(kind)
    a = np.array([7, -7, 7, -7, 0, info.min, info.max, info.min, 5, -128 % 256], dtype=np.int64)
    b = np.array([3, 3, -3, -3, 4, -1, 2, 3, 5, 7], dtype=np.int64)
    if info.min == 0:
        b = np.abs(b)
    return np.clip(a, info.min, info.max).astype(kind), b.astype(kind)


@pytest.mark.parametrize("kind", INTEGERS)
@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_mod_takes_the_divisor_s_sign_and_fmod_the_dividend_s(kind, fmod):
    a, b = dividends_and_divisors(kind)
    same_as_onnxruntime("Mod", [a, b], {"fmod": fmod}, 13)
    same_as_onnxruntime("Mod", [a.reshape(2, 5), b[:5]], {"fmod": fmod}, 13)  # broadcast


@pytest.mark.parametrize("kind", [np.int8, np.int64])
def test_integer_mod_by_zero_is_zero_and_min_by_minus_one_does_not_trap(kind):
    info = np.iinfo(kind)
    a = np.array([5, -5, info.min, info.min], dtype=kind)
    b = np.array([0, 0, -1, 0], dtype=kind)
    for fmod in (0, 1):
        (got,) = run_numpy("Mod", [a, b], {"fmod": fmod}, 1)
        np.testing.assert_array_equal(got, np.zeros(4, dtype=kind))


SPECIAL = [0.0, -0.0, 1.5, -1.5, 7.25, -7.25, np.inf, -np.inf, np.nan, 3.0]


@pytest.mark.parametrize("kind", [np.float32, np.float64])
def test_float_fmod_is_c_fmod(kind):
    a = np.array(SPECIAL * len(SPECIAL), dtype=kind)
    b = np.repeat(np.array(SPECIAL, dtype=kind), len(SPECIAL))
    b[b == 0] = 2.0  # onnxruntime's x fmod 0 differs by platform; rtsoa's is NaN (below)
    same_as_onnxruntime("Mod", [a, b], {"fmod": 1}, 13)
    (got,) = run_numpy("Mod", [a[:3], np.zeros(3, dtype=kind)], {"fmod": 1}, 1)
    assert np.isnan(got).all()


@pytest.mark.parametrize("kind", [np.float32, np.float64])
def test_float_mod_with_fmod_0_is_numpy_remainder_with_opset_28_s_special_cases(kind):
    """Mod-28 on floats with fmod 0: a zero result takes the divisor's sign, x % +-inf is x
    when the signs agree and the divisor otherwise, inf % y and x % 0 are NaN."""
    a = np.array(SPECIAL * len(SPECIAL), dtype=kind)
    b = np.repeat(np.array(SPECIAL, dtype=kind), len(SPECIAL))
    (got,) = run_numpy("Mod", [a, b], {"fmod": 0}, 1)
    with np.errstate(all="ignore"):
        want = np.remainder(a, b)
    want[np.isinf(a) | (b == 0)] = np.nan
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_mod_fmod_other_than_0_or_1_fails():
    a = np.arange(3, dtype=np.int32)
    failure(STATUS_OP_BAD_ATTRIBUTE, "Mod", [a, a + 1], {"fmod": 2})


# -- Trilu ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 2, -1, -4, 9, np.iinfo(np.int64).min])
@pytest.mark.parametrize("kind", [np.float32, np.int64, np.bool_])
def test_trilu_keeps_the_triangle_above_or_below_diagonal_k(upper, k, kind):
    x = (rng.standard_normal((2, 3, 4, 5)) * 10).astype(kind)
    inputs = [x] if k is None else [x, np.array(k, dtype=np.int64)]
    same_as_onnxruntime("Trilu", inputs, {"upper": upper}, 14)


def test_trilu_of_a_wide_and_an_empty_matrix():
    same_as_onnxruntime("Trilu", [np.arange(12, dtype=np.float64).reshape(2, 6)], {"upper": 0}, 14)
    (got,) = run_numpy("Trilu", [np.zeros((3, 0, 4), dtype=np.float64)], {}, 1)
    assert got.shape == (3, 0, 4)


def test_trilu_needs_a_matrix():
    failure(STATUS_OP_BAD_SHAPE, "Trilu", [np.zeros(4, dtype=np.float32)], {})


def test_trilu_k_must_be_one_value():
    x = np.zeros((3, 3), dtype=np.float32)
    failure(STATUS_OP_BAD_SHAPE, "Trilu", [x, np.zeros(2, dtype=np.int64)], {})


# -- GatherElements -------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("kind", [np.float32, np.int16, np.bool_])
@pytest.mark.parametrize("index_kind", [np.int32, np.int64])
def test_gather_elements_with_negative_indices_and_smaller_index_dims(axis, kind, index_kind):
    data = (rng.standard_normal((4, 5, 3)) * 10).astype(kind)
    shape = [3, 4, 2]
    size = data.shape[axis]
    shape[axis] = 6  # along the axis the indices may be longer than the data
    indices = rng.integers(-size, size, size=shape).astype(index_kind)
    same_as_onnxruntime("GatherElements", [data, indices], {"axis": axis}, 13)


def test_gather_elements_index_out_of_range_fails():
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    for bad in (3, -4):
        indices = np.array([[0, bad]], dtype=np.int64)
        failure(STATUS_OP_BAD_INDEX, "GatherElements", [data, indices], {"axis": 1})


def test_gather_elements_indices_larger_than_data_off_the_axis_fail():
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    indices = np.zeros((3, 1), dtype=np.int64)
    failure(STATUS_OP_BAD_SHAPE, "GatherElements", [data, indices], {"axis": 1})


def test_gather_elements_axis_out_of_range_fails():
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    failure(STATUS_OP_BAD_ATTRIBUTE, "GatherElements", [data, data.astype(np.int64)], {"axis": 2})
