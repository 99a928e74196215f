"""FlexAttention (ai.onnx.preview, `rtsoa.lowering.flex_attention`) beyond the node suite,
against onnx.reference: grouped query heads, an explicit scale, every softmax_precision, a
score_mod (a soft cap and a bias) and a prob_mod subgraph, float16, a head
count known only from a symbolic batch, and the refusals naming the node.

Tolerances: float32 rtol 1e-5 / atol 1e-6; float64 1e-12; float16 outputs within one float16
step (2^-10 relative, 1e-3 absolute on values below 1)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from rtsoa.errors import LoweringError
from rtsoa.lowering import lower
from tests.model_checks import run_clean

ELEMENT = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.float16): TensorProto.FLOAT16,
}
TOLERANCE = {
    np.dtype(np.float32): {"rtol": 1e-5, "atol": 1e-6},
    np.dtype(np.float64): {"rtol": 1e-12, "atol": 1e-12},
    np.dtype(np.float16): {"rtol": 2**-10, "atol": 1e-3},
}
rng = np.random.default_rng(142)


def modifier(name, kind, nodes, initializers=()):
    """A one-input, one-output modifier subgraph `x -> y` of element type `kind`."""
    return helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", ELEMENT[np.dtype(kind)], None)],
        [helper.make_tensor_value_info("y", ELEMENT[np.dtype(kind)], None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers],
    )


def flex_model(q, k, v, batch_dim=None, initializers=(), **attributes):
    node = helper.make_node(
        "FlexAttention",
        ["q", "k", "v"],
        ["y"],
        name="the_node",
        domain="ai.onnx.preview",
        **attributes,
    )
    inputs = []
    for name, value in (("q", q), ("k", k), ("v", v)):
        dims = list(value.shape)
        if batch_dim is not None:
            dims[0] = batch_dim
        inputs.append(helper.make_tensor_value_info(name, ELEMENT[value.dtype], dims))
    graph = helper.make_graph(
        [node],
        "flex",
        inputs,
        [helper.make_tensor_value_info("y", ELEMENT[v.dtype], None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)],
    )
    model.ir_version = 11
    return model


def tensors(q_heads=4, kv_heads=2, length=3, source=5, head=8, v_head=6, kind=np.float32):
    return (
        rng.standard_normal((2, q_heads, length, head)).astype(kind),
        rng.standard_normal((2, kv_heads, source, head)).astype(kind),
        rng.standard_normal((2, kv_heads, source, v_head)).astype(kind),
    )


def compare(q, k, v, **options):
    model = flex_model(q, k, v, **options)
    feeds = {"q": q, "k": k, "v": v}
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    got = run_clean(lower(model), feeds)["y"]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(
        got.astype(np.float64), want.astype(np.float64), **TOLERANCE[want.dtype]
    )


@pytest.mark.parametrize("q_heads, kv_heads", [(2, 2), (4, 2), (3, 1), (6, 3)])
def test_head_groups(q_heads, kv_heads):
    compare(*tensors(q_heads, kv_heads))


@pytest.mark.parametrize("precision", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_scale_and_softmax_precision(precision):
    compare(*tensors(), scale=0.3, softmax_precision=precision)


def test_float64_inputs_compute_in_float64():
    compare(*tensors(kind=np.float64))


def test_float16_inputs_and_a_float16_softmax():
    compare(*tensors(kind=np.float16))
    compare(*tensors(kind=np.float16), softmax_precision=TensorProto.FLOAT)


def test_score_and_prob_modifiers():
    bias = rng.standard_normal((3, 5)).astype(np.float32)
    cap = np.array(2.0, np.float32)
    score_mod = modifier(
        "soft_cap",
        np.float32,
        [
            helper.make_node("Div", ["x", "cap"], ["scaled"]),
            helper.make_node("Tanh", ["scaled"], ["capped"]),
            helper.make_node("Mul", ["capped", "cap"], ["shaped"]),
            helper.make_node("Add", ["shaped", "bias"], ["y"]),
        ],
        [("cap", cap), ("bias", bias)],
    )
    prob_mod = modifier("square", np.float32, [helper.make_node("Mul", ["x", "x"], ["y"])])
    compare(*tensors(), score_mod=score_mod, prob_mod=prob_mod)


def test_a_symbolic_batch_runs_at_two_sizes():
    q, k, v = tensors(4, 2)
    model = flex_model(q, k, v, batch_dim="batch")
    graph = lower(model)
    for batch in (1, 2):
        feeds = {"q": q[:batch], "k": k[:batch], "v": v[:batch]}
        (want,) = ReferenceEvaluator(model).run(None, feeds)
        np.testing.assert_allclose(run_clean(graph, feeds)["y"], want, rtol=1e-5, atol=1e-6)


def refused(model, named):
    with pytest.raises(LoweringError) as caught:
        lower(model)
    assert "the_node" in str(caught.value) and named in str(caught.value), str(caught.value)


def test_refusals():
    q, k, v = tensors(3, 2)
    refused(flex_model(q, k, v), "Q's 3 heads are not a multiple of K's 2")
    q, k, v = tensors()
    refused(flex_model(q, k, v, batch_dim=None, softmax_precision=7), "softmax_precision 7")
    two_outputs = modifier("two", np.float32, [helper.make_node("Identity", ["x"], ["y"])])
    two_outputs.output.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, None))
    refused(flex_model(q, k, v, score_mod=two_outputs), "score_mod must take one input")
    model = flex_model(q, k, v)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "heads"
    refused(model, "dimension 1 of Q 'q' must be known at lowering")
