"""The lowering's Gemm -> Relu fusion (rtsoa/lowering/fuse.py, op FusedGemm).

A fused pair must give the unfused ops' results bit for bit (the Relu over the finished Gemm,
as the Relu op computes it) and onnxruntime's within the model tests' tolerance; a pair whose
intermediate is read elsewhere or returned is left as the model has it.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.ops.host import OpError, infer_shapes, run_numpy
from rtsoa.testing.models import FLOAT, model
from tests.model_checks import check_fusion

DOUBLE = TensorProto.DOUBLE
RNG = np.random.default_rng(11)


def _check(proto, inputs, fused_ops):
    return check_fusion(proto, inputs, "FusedGemm", fused_ops)


def _gemm_relu(a_shape, b, c, dtype=np.float32, extra_outputs=(), **attributes):
    """Relu(Gemm(x, B, C)) with input x of `a_shape` and constant B (random of that shape if
    `b` is a shape) and C (unless None)."""
    elem = DOUBLE if dtype == np.float64 else FLOAT
    if isinstance(b, tuple):
        b = RNG.standard_normal(b)
    inits = [("b", np.asarray(b, dtype))]
    gemm_inputs = ["x", "b"]
    if c is not None:
        inits.append(("c", np.asarray(c, dtype)))
        gemm_inputs.append("c")
    nodes = [
        helper.make_node("Gemm", gemm_inputs, ["g"], **attributes),
        helper.make_node("Relu", ["g"], ["y"]),
    ]
    outputs = [("y", elem, None)] + [(name, elem, None) for name in extra_outputs]
    return model(nodes, [("x", elem, list(a_shape))], outputs, inits)


@pytest.mark.parametrize(
    "a_shape, b_shape, c_shape, attributes",
    [
        ((3, 8), (8, 5), (5,), {}),
        ((3, 8), (5, 8), (5,), {"transB": 1}),  # a classifier's layout
        ((8, 3), (8, 5), (3, 5), {"transA": 1}),
        ((8, 3), (5, 8), (1, 5), {"transA": 1, "transB": 1, "alpha": 0.5, "beta": -2.0}),
        ((3, 8), (8, 5), (3, 1), {"beta": 0.0}),  # C broadcast along rows, then ignored
        ((3, 8), (8, 5), None, {"alpha": 3.0}),  # no C
        ((1, 8), (8, 1), (), {}),  # scalar C
    ],
)
def test_fused_gemm_relu_equals_the_ops_it_replaces(a_shape, b_shape, c_shape, attributes):
    c = None if c_shape is None else RNG.standard_normal(c_shape)
    proto = _gemm_relu(a_shape, b_shape, c, **attributes)
    x = RNG.standard_normal(a_shape).astype(np.float32)
    _check(proto, {"x": x}, fused_ops=1)


def test_float64_gemm_relu_fuses():
    proto = _gemm_relu((4, 6), (6, 3), RNG.standard_normal(3), dtype=np.float64)
    _check(proto, {"x": RNG.standard_normal((4, 6))}, fused_ops=1)


def test_relu_of_nan_infinities_and_negative_zero_is_relus():
    """Relu keeps NaN and -0 and zeroes -inf: the fused op's bits, sign of zero included."""
    proto = _gemm_relu((2, 4), np.eye(4), np.zeros(4))
    x = np.array([[np.inf, -np.inf, np.nan, -1.0], [2.0, -0.0, 0.0, -3.0]], np.float32)
    _check(proto, {"x": x}, fused_ops=1)


@pytest.mark.parametrize("case", ["gemm is returned", "gemm read twice", "no relu"])
def test_pairs_whose_intermediate_is_needed_are_not_fused(case):
    c = RNG.standard_normal(5)
    if case == "gemm is returned":
        proto = _gemm_relu((3, 8), (8, 5), c, extra_outputs=("g",))
    elif case == "gemm read twice":
        proto = _gemm_relu((3, 8), (8, 5), c, extra_outputs=("t",))
        proto.graph.node.append(helper.make_node("Tanh", ["g"], ["t"]))
    else:
        proto = _gemm_relu((3, 8), (8, 5), c)
        proto.graph.node[1].op_type = "Sigmoid"
    counts = _check(proto, {"x": RNG.standard_normal((3, 8)).astype(np.float32)}, fused_ops=0)
    assert counts.get("Gemm") == 1


def test_fused_gemm_refuses_what_gemm_refuses_and_a_bad_activation():
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    b = RNG.standard_normal((3, 4)).astype(np.float32)
    (out,), flops = infer_shapes("FusedGemm", [a, b], {"activation": 1})
    assert out.dims == (2, 4) and flops == 2 * 2 * 3 * 4
    (got,) = run_numpy("FusedGemm", [a, b], {"activation": 1})
    np.testing.assert_allclose(got, np.maximum(a @ b, np.float32(0)), rtol=1e-6, atol=1e-6)
    with pytest.raises(OpError):
        infer_shapes("FusedGemm", [a, b], {"activation": 2})
    with pytest.raises(OpError):
        infer_shapes("FusedGemm", [a, b.T.copy()], {"activation": 1})  # inner dims differ
    with pytest.raises(OpError):
        infer_shapes("FusedGemm", [a, b.astype(np.float64)], {"activation": 1})
