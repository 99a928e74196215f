"""SwiGLU, CausalConvWithState (`rtsoa.lowering.gated`) and LinearAttention
(`rtsoa.ops.linear_attention`) beyond the node suite, against onnx.reference: attributes, every
update rule with grouped heads and both decay layouts, float16, zero-size steps, a decoder
run step by step on its own state equal to one prefill; the refusals name the node and what is
wrong.

Tolerances: float32 rtol 1e-5 / atol 1e-6 (LinearAttention carries its state in float64, the
reference in float32: 1e-4 / 1e-5 there); float16 within one float16 step (2^-10 relative).
"""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa.errors import LoweringError
from rtsoa.lowering import lower
from tests.model_checks import run_clean

ELEMENT = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}
rng = np.random.default_rng(143)


def random(shape, kind=np.float32, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(kind)


def one_node(op, feeds, outputs, attributes, opset):
    """A model of op `op` (node `the_node`) on graph inputs `feeds` ({name: array or None for
    an absent input}); `outputs` {name: element type as a numpy dtype}."""
    names = [name if value is not None else "" for name, value in feeds.items()]
    node = helper.make_node(op, names, list(outputs), name="the_node", **attributes)
    graph = helper.make_graph(
        [node],
        "gated",
        [
            helper.make_tensor_value_info(n, ELEMENT[a.dtype], a.shape)
            for n, a in feeds.items()
            if a is not None
        ],
        [helper.make_tensor_value_info(n, ELEMENT[np.dtype(k)], None) for n, k in outputs.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 11
    return model, {n: a for n, a in feeds.items() if a is not None}


def compare(op, feeds, outputs, attributes, opset, rtol=1e-5, atol=1e-6):
    model, given = one_node(op, feeds, outputs, attributes, opset)
    want = ReferenceEvaluator(model).run(None, given)
    got = run_clean(lower(model), given)
    for name, expected in zip(outputs, want, strict=True):
        assert got[name].dtype == expected.dtype and got[name].shape == expected.shape, name
        np.testing.assert_allclose(
            got[name].astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol
        )
    return got


def refused(op, feeds, outputs, attributes, opset, named):
    model, _ = one_node(op, feeds, outputs, attributes, opset)
    with pytest.raises(LoweringError) as caught:
        lower(model)
    assert "the_node" in str(caught.value) and named in str(caught.value), str(caught.value)


# -- SwiGLU ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [1.0, 1.702, -0.5])
@pytest.mark.parametrize("shape", [(2, 3, 8), (0, 4), ()])
def test_swiglu(shape, alpha):
    feeds = {"a": random(shape), "b": random(shape)}
    compare("SwiGLU", feeds, {"y": np.float32}, {"alpha": alpha}, 28)


def test_swiglu_float16():
    feeds = {"a": random((4, 16), np.float16), "b": random((4, 16), np.float16)}
    compare("SwiGLU", feeds, {"y": np.float16}, {"alpha": 1.5}, 28, rtol=2**-10, atol=1e-4)


def test_swiglu_refuses_shapes_that_differ():
    feeds = {"a": random((2, 8)), "b": random((1, 8))}
    refused("SwiGLU", feeds, {"y": np.float32}, {}, 28, "must have one shape")


# -- CausalConvWithState -------------------------------------------------------------------

CONV_OUT = {"y": np.float32, "state": np.float32}


def conv_feeds(batch=2, channels=3, length=5, k=4, bias=True, past=True, kind=np.float32):
    return {
        "x": random((batch, channels, length), kind),
        "w": random((channels, 1, k), kind),
        "bias": random((channels,), kind) if bias else None,
        "past": random((batch, channels, k - 1), kind) if past else None,
    }


@pytest.mark.parametrize("activation", ["none", "silu", "swish"])
@pytest.mark.parametrize("bias, past", [(False, False), (True, False), (False, True), (True, True)])
def test_causal_conv(bias, past, activation):
    feeds = conv_feeds(bias=bias, past=past)
    compare("CausalConvWithState", feeds, CONV_OUT, {"activation": activation}, 27)


@pytest.mark.parametrize("length, k", [(1, 4), (2, 5), (6, 1), (0, 3)])
def test_causal_conv_lengths_and_kernel_sizes(length, k):
    compare("CausalConvWithState", conv_feeds(length=length, k=k), CONV_OUT, {}, 27)


def test_causal_conv_float16():
    feeds = conv_feeds(kind=np.float16)
    outputs = {"y": np.float16, "state": np.float16}
    attributes = {"activation": "silu"}
    compare("CausalConvWithState", feeds, outputs, attributes, 27, rtol=2**-10, atol=1e-3)


def test_causal_conv_decoding_step_by_step_equals_one_pass():
    feeds = conv_feeds(length=6, past=False)
    model, given = one_node("CausalConvWithState", feeds, CONV_OUT, {"activation": "silu"}, 27)
    whole = run_clean(lower(model), given)
    step_feeds = dict(feeds, x=feeds["x"][:, :, :1], past=np.zeros((2, 3, 3), np.float32))
    step, _ = one_node("CausalConvWithState", step_feeds, CONV_OUT, {"activation": "silu"}, 27)
    graph = lower(step)
    state, outputs = step_feeds["past"], []
    for t in range(6):
        got = run_clean(
            graph,
            {
                "x": feeds["x"][:, :, t : t + 1],
                "w": feeds["w"],
                "bias": feeds["bias"],
                "past": state,
            },
        )
        outputs.append(got["y"])
        state = got["state"]
    np.testing.assert_allclose(np.concatenate(outputs, axis=2), whole["y"], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(state, whole["state"])


@pytest.mark.parametrize(
    "change, named",
    [
        ({"attributes": {"activation": "gelu"}}, "activation 'gelu' is not supported"),
        ({"w": random((3, 2, 4))}, "weight must be (channels, 1, k)"),
        ({"w": random((2, 1, 4))}, "weight has 2 channels, input 3"),
        ({"past": random((2, 3, 2))}, "past_state [2, 3, 2] must be (batch, 3, 3)"),
    ],
)
def test_causal_conv_refusals(change, named):
    feeds = conv_feeds()
    attributes = change.pop("attributes", {})
    feeds.update(change)
    refused("CausalConvWithState", feeds, CONV_OUT, attributes, 27, named)


# -- LinearAttention ----------------------------------------------------------------------------


def attention_feeds(rule, q_heads=4, kv_heads=2, batch=2, steps=5, dk=3, dv=4, **options):
    kind = options.get("kind", np.float32)
    feeds = {
        "q": random((batch, steps, q_heads * dk), kind),
        "k": random((batch, steps, kv_heads * dk), kind, 0.5),
        "v": random((batch, steps, kv_heads * dv), kind),
        "past": random((batch, kv_heads, dk, dv), kind) if options.get("past", True) else None,
        "decay": None,
        "beta": None,
    }
    if rule in ("gated", "gated_delta"):
        width = kv_heads * dk if options.get("per_key") else kv_heads
        feeds["decay"] = -np.abs(random((batch, steps, width), kind, 0.3))
    if rule in ("delta", "gated_delta"):
        width = 1 if options.get("shared_beta") else kv_heads
        feeds["beta"] = (1 / (1 + np.exp(-random((batch, steps, width))))).astype(kind)
    while feeds and list(feeds.values())[-1] is None:
        feeds.popitem()
    return feeds


ATTENTION_OUT = {"y": np.float32, "state": np.float32}
LOOSE = {"rtol": 1e-4, "atol": 1e-5}


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("q_heads, kv_heads", [(2, 2), (4, 2), (3, 1)])
def test_linear_attention_rules_and_head_groups(rule, q_heads, kv_heads):
    feeds = attention_feeds(rule, q_heads, kv_heads)
    attributes = {"update_rule": rule, "q_num_heads": q_heads, "kv_num_heads": kv_heads}
    compare("LinearAttention", feeds, ATTENTION_OUT, attributes, 27, **LOOSE)


@pytest.mark.parametrize(
    "options",
    [{"per_key": True}, {"shared_beta": True}, {"past": False}, {"steps": 0}, {"batch": 0}],
    ids=["per-key-decay", "shared-beta", "no-past", "zero-steps", "zero-batch"],
)
def test_linear_attention_layouts_and_sizes(options):
    feeds = attention_feeds("gated_delta", **options)
    attributes = {"q_num_heads": 4, "kv_num_heads": 2, "scale": 0.25, "chunk_size": 2}
    compare("LinearAttention", feeds, ATTENTION_OUT, attributes, 27, **LOOSE)


def test_linear_attention_float16_with_a_float32_state():
    feeds = attention_feeds("gated", kind=np.float16)
    feeds["past"] = feeds["past"].astype(np.float32)
    attributes = {"update_rule": "gated", "q_num_heads": 4, "kv_num_heads": 2}
    outputs = {"y": np.float16, "state": np.float32}
    compare("LinearAttention", feeds, outputs, attributes, 27, rtol=2**-10, atol=2e-3)


def test_linear_attention_decoding_step_by_step_equals_one_prefill():
    feeds = attention_feeds("gated_delta", steps=6)
    attributes = {"q_num_heads": 4, "kv_num_heads": 2}
    model, given = one_node("LinearAttention", feeds, ATTENTION_OUT, attributes, 27)
    whole = run_clean(lower(model), given)
    step_feeds = {name: value[:, :1] if value.ndim == 3 else value for name, value in given.items()}
    step, _ = one_node("LinearAttention", step_feeds, ATTENTION_OUT, attributes, 27)
    graph = lower(step)
    state, outputs = given["past"], []
    for t in range(6):
        inputs = {n: v[:, t : t + 1] if v.ndim == 3 else v for n, v in given.items()}
        got = run_clean(graph, dict(inputs, past=state))
        outputs.append(got["y"])
        state = got["state"]
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), whole["y"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(state, whole["state"], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "rule, attributes, change, named",
    [
        ("linear", {"update_rule": "mamba"}, {}, "update_rule 'mamba' is not supported"),
        ("linear", {"q_num_heads": 3}, {}, "q_num_heads 3 is not a multiple of kv_num_heads 2"),
        ("linear", {"kv_num_heads": 0}, {}, "'kv_num_heads' must be positive"),
        ("gated", {"update_rule": "linear"}, {}, "update_rule 'linear' takes no input 'decay'"),
        ("linear", {"update_rule": "delta"}, {}, "update_rule 'delta' needs input 'beta'"),
        ("linear", {}, {"q": random((2, 5, 3, 4))}, "query must be rank 3"),
    ],
)
def test_linear_attention_refusals(rule, attributes, change, named):
    feeds = attention_feeds(rule)
    feeds.update(change)
    merged = {"update_rule": rule, "q_num_heads": 4, "kv_num_heads": 2, **attributes}
    refused("LinearAttention", feeds, ATTENTION_OUT, merged, 27, named)


def test_linear_attention_needs_both_head_counts():
    feeds = attention_feeds("linear")
    attributes = {"update_rule": "linear", "q_num_heads": 4}
    refused("LinearAttention", feeds, ATTENTION_OUT, attributes, 27, "'kv_num_heads' is required")
