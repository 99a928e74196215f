"""Gelu, Swish, ThresholdedRelu, Celu, HardSwish and Mish (members of the activation family)
through the compiled op entry, judged by onnxruntime (single thread) on float32 and by
onnx.reference on float64 (its float64 formulas; onnxruntime runs most of these on float32
only); with their attributes, extreme values, NaN, zero-size inputs, and the refusals at
lowering naming the op, the node and the attribute or element type.
"""

import math

import numpy as np
import pytest
from executor_checks import property_settings
from hypothesis import given
from hypothesis import strategies as st
from numba import njit
from one_node import one_node_model, refused
from onnx import helper

from rtsoa.ops.abi import STATUS_OP_BAD_ATTRIBUTE
from rtsoa.ops.elementwise_loops import clip_bounds, clip_value
from rtsoa.ops.host import OpError, run_numpy
from rtsoa.testing.models import run_onnxruntime
from tests.model_checks import run_and_compare

rng = np.random.default_rng(105)
# (op, attributes, opset)
CASES = [
    ("Gelu", {}, 20),
    ("Gelu", {"approximate": "tanh"}, 20),
    ("Swish", {}, 24),
    ("Swish", {"alpha": 0.75}, 24),
    ("ThresholdedRelu", {}, 22),
    ("ThresholdedRelu", {"alpha": -0.5}, 22),
    ("Celu", {}, 12),
    ("Celu", {"alpha": 2.5}, 12),
    ("HardSwish", {}, 22),
    ("Mish", {}, 22),
]
IDS = [f"{op}-{attributes}" for op, attributes, _ in CASES]


def inputs(kind):
    """Random values, the bends of every formula (-3, 0, 3, alpha), overflow-range values,
    signed zeros and NaN."""
    special = [-1e4, -100.0, -3.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.5, 3.0, 100.0, 1e4, np.nan]
    return np.concatenate([rng.standard_normal(51) * 4, special]).astype(kind).reshape(4, 16)


def _softplus(v):
    return v + math.log1p(math.exp(-v)) if v > 0 else math.log1p(math.exp(v))


def _sigmoid(v):
    return 1 / (1 + math.exp(-v)) if v >= 0 else math.exp(v) / (1 + math.exp(v))


# the ONNX definitions, one Python float at a time
FORMULAS = {
    "Gelu": lambda v, a: 0.5 * v * (1 + math.erf(v / math.sqrt(2))),
    "Gelu-tanh": lambda v, a: (
        0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
    ),
    "Swish": lambda v, a: v * _sigmoid(a * v),
    "ThresholdedRelu": lambda v, a: v if v > a else 0.0,
    "Celu": lambda v, a: max(0.0, v) + min(0.0, a * (math.exp(min(v / a, 700.0)) - 1)),
    "HardSwish": lambda v, a: v * max(0.0, min(1.0, v / 6 + 0.5)),
    "Mish": lambda v, a: v * math.tanh(_softplus(v)),
}


def formula(op, attributes, x):
    name = op + ("-tanh" if attributes.get("approximate") == "tanh" else "")
    alpha = attributes.get("alpha", 1.0)
    at_nan = 0.0 if op == "ThresholdedRelu" else np.nan  # NaN > alpha is false
    flat = [at_nan if v != v else FORMULAS[name](float(v), alpha) for v in x.reshape(-1)]
    return np.array(flat, dtype=x.dtype).reshape(x.shape)


@pytest.mark.parametrize("op, attributes, opset", CASES, ids=IDS)
def test_float32_against_onnxruntime(op, attributes, opset):
    """onnxruntime computes in float32 (its own approximations of erf, tanh, exp), so its
    results are within float32 rounding of the values, not exact."""
    x = inputs(np.float32)
    model, feeds = one_node_model(op, [x], attributes, opset)
    want = run_onnxruntime(model, feeds)["y"]
    (got,) = run_numpy(op, [x], attributes, 1)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op, attributes, opset", CASES, ids=IDS)
@pytest.mark.parametrize("kind", [np.float32, np.float64])
def test_the_formula_evaluated_in_float64_and_rounded_once(op, attributes, opset, kind):
    x = inputs(kind)
    (got,) = run_numpy(op, [x], attributes, 1)
    want = formula(op, attributes, x.astype(np.float64)).astype(kind)
    assert got.dtype == kind and got.shape == x.shape
    np.testing.assert_allclose(got, want, rtol=4e-16 if kind == np.float64 else 1e-7, atol=0)


@pytest.mark.parametrize("op, attributes, opset", CASES, ids=IDS)
def test_a_zero_size_input_runs(op, attributes, opset):
    (got,) = run_numpy(op, [np.zeros((2, 0, 3), np.float64)], attributes, 1)
    assert got.shape == (2, 0, 3) and got.dtype == np.float64


def test_an_unknown_gelu_approximation_fails_the_op_and_is_refused_at_lowering():
    x = np.ones(3, np.float32)
    with pytest.raises(OpError) as caught:
        run_numpy("Gelu", [x], {"approximate": "erf"}, 1)
    assert caught.value.status == STATUS_OP_BAD_ATTRIBUTE
    refused("Gelu", [x], {"approximate": "erf"}, 20, "approximate 'erf'")


def test_celu_alpha_zero_and_integer_inputs_are_refused_at_lowering():
    refused("Celu", [np.ones(3, np.float32)], {"alpha": 0.0}, 12, "alpha 0")
    refused("Mish", [np.ones(3, np.int32)], {}, 22, "element type int32")


def test_a_model_of_the_new_activations_lowered_and_run():
    """A chain of every new activation through lowering and an executor, one op per node."""
    x = helper.make_tensor_value_info("x", 1, [3, 8])
    y = helper.make_tensor_value_info("y", 1, None)
    names = ["x", "a", "b", "c", "d", "e", "y"]
    nodes = [
        helper.make_node(op, [names[k]], [names[k + 1]], **attributes)
        for k, (op, attributes) in enumerate(
            [
                ("Gelu", {"approximate": "tanh"}),
                ("Swish", {"alpha": 1.5}),
                ("ThresholdedRelu", {"alpha": 0.1}),
                ("Celu", {"alpha": 0.5}),
                ("HardSwish", {}),
                ("Mish", {}),
            ]
        )
    ]
    graph = helper.make_graph(nodes, "activations", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    model.ir_version = 10
    run_and_compare(model, [{"x": (rng.standard_normal((3, 8)) * 3).astype(np.float32)}])


@njit
def _clipped(x, low, high):
    y = np.empty_like(x)
    lowest, highest, below, above = clip_bounds(y, low, high)
    for i in range(x.shape[0]):
        y[i] = clip_value(x[i], lowest, highest, below, above)
    return y


_BOUNDS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, 6.0, 0.1, -0.1, 5.9, 1e-45, 3.4028235e38, 3.5e38, 1e300, -1e300]
)


@property_settings(300)
@given(
    st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), max_size=64),
    _BOUNDS,
    _BOUNDS,
    st.sampled_from([np.float32, np.float64]),
)
def test_clip_in_the_elements_dtype_gives_the_float64_comparisons_bits(values, low, high, kind):
    """Clip (the op and the conv epilogue) compares in the elements' own dtype with bounds
    rounded outward (`clip_bounds`) instead of widening every element to float64: the same
    bits for any bounds (not representable in float32, infinite, NaN, low > high) and any
    element (signed zeros, infinities, quiet NaN; a signalling NaN, which no arithmetic
    produces, is kept as it is rather than quietened)."""
    x = np.array(values, dtype=kind)
    x[np.isnan(x)] = np.nan  # quiet NaN
    widened = x.astype(np.float64)
    widened = np.where(widened < low, low, widened)
    with np.errstate(over="ignore"):  # a bound beyond float32's range rounds to infinity
        want = np.where(widened > high, high, widened).astype(kind)
    got = _clipped(x, low, high)
    bits = np.uint32 if kind == np.float32 else np.uint64
    np.testing.assert_array_equal(got.view(bits), want.view(bits))
