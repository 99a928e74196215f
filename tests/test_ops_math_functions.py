"""The math functions (`rtsoa.ops.math_functions`) through the compiled op entry, judged by
onnxruntime (single thread) on one-node models in float32 and by numpy in float64: values
inside and outside each function's domain, infinities, NaN, signed zeros and halves for Round;
IsNaN and IsInf with every pair of detect flags; integer inputs refused by element type."""

import numpy as np
import pytest
from onnx import helper
from test_ops_dtypes import ELEMENT

from rtsoa.ops.abi import STATUS_OP_BAD_DTYPE
from rtsoa.ops.host import OpError, run_numpy
from rtsoa.ops.math_functions import FUNCTIONS
from rtsoa.testing.models import run_onnxruntime

rng = np.random.default_rng(116)
SPECIAL = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0, -1.0, 0.999, 3.0, np.inf, -np.inf, np.nan]


def values(kind):
    return np.concatenate([SPECIAL, rng.standard_normal(40) * 3]).astype(kind)


def onnxruntime_output(op, x, attributes, out_kind):
    node = helper.make_node(op, ["x"], ["y"], **attributes)
    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info("x", ELEMENT[x.dtype], x.shape)],
        [helper.make_tensor_value_info("y", ELEMENT[np.dtype(out_kind)], None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 10
    return run_onnxruntime(model, {"x": x})["y"]


NUMPY = {
    "Cos": np.cos,
    "Sin": np.sin,
    "Tan": np.tan,
    "Acos": np.arccos,
    "Asin": np.arcsin,
    "Atan": np.arctan,
    "Cosh": np.cosh,
    "Sinh": np.sinh,
    "Acosh": np.arccosh,
    "Asinh": np.arcsinh,
    "Atanh": np.arctanh,
    "Ceil": np.ceil,
    "Floor": np.floor,
    "Round": np.rint,
    "Softsign": lambda x: x / (1 + np.abs(x)),
}


@pytest.mark.parametrize("op", sorted(FUNCTIONS))
def test_float32_functions_agree_with_onnxruntime(op):
    x = values(np.float32)
    want = onnxruntime_output(op, x, {}, np.float32)
    (got,) = run_numpy(op, [x], {}, 1)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("op", sorted(FUNCTIONS))
def test_float64_functions_agree_with_numpy(op):
    """onnxruntime's CPU provider lacks most of them in float64."""
    x = values(np.float64)
    with np.errstate(all="ignore"):
        want = NUMPY[op](x)
    (got,) = run_numpy(op, [x], {}, 1)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)


def test_round_takes_halves_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999], dtype=np.float64)
    (got,) = run_numpy("Round", [x], {}, 1)
    np.testing.assert_array_equal(got, [0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 2.0])


@pytest.mark.parametrize("positive, negative", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_is_inf_with_its_detect_flags(positive, negative):
    x = values(np.float32).reshape(6, 9)
    attributes = {"detect_positive": positive, "detect_negative": negative}
    want = onnxruntime_output("IsInf", x, attributes, np.bool_)
    (got,) = run_numpy("IsInf", [x], attributes, 1)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, want)


def test_is_nan():
    x = values(np.float64)
    (got,) = run_numpy("IsNaN", [x], {}, 1)
    np.testing.assert_array_equal(got, onnxruntime_output("IsNaN", x, {}, np.bool_))


@pytest.mark.parametrize("op", ["Cos", "Round", "IsNaN"])
def test_integer_inputs_fail_with_the_dtype_status(op):
    with pytest.raises(OpError) as caught:
        run_numpy(op, [np.arange(3, dtype=np.int32)], {}, 1)
    assert caught.value.status == STATUS_OP_BAD_DTYPE
