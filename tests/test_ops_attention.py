"""Attention (opsets 23 to 25) and RMSNormalization against onnxruntime (single thread) and
onnx.reference, beyond the node suite's cases: a decoder block with grouped-query heads run
step by step on its own KV cache, shapes known only at run time, every qk_matmul_output mode
with a cache and a mask together, float64, and the refusals (lowering names the node; a shape
that only turns out wrong at run time fails the run with the op's status).

Tolerances: float32 rtol 1e-4 / atol 1e-5 (rtsoa sums in float64, onnxruntime in float32);
float64 rtol 1e-9 / atol 1e-12 against onnx.reference. Masked scores in the mode-2 output are
-inf, as the spec's reference computes them; onnxruntime writes the lowest float there, which
the comparison maps to -inf.
"""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import rtsoa
from rtsoa.errors import KernelError, LoweringError
from rtsoa.lowering import lower
from rtsoa.testing.models import run_onnxruntime

F32 = np.float32
F64 = np.float64
ELEMENT = {
    F32: TensorProto.FLOAT,
    F64: TensorProto.DOUBLE,
    np.float16: TensorProto.FLOAT16,
    np.int32: TensorProto.INT32,
    np.bool_: TensorProto.BOOL,
}
TOLERANCE = {F32: {"rtol": 1e-4, "atol": 1e-5}, F64: {"rtol": 1e-9, "atol": 1e-12}}
rng = np.random.default_rng(106)


def random(shape, kind=F32):
    return rng.standard_normal(shape).astype(kind)


def one_node(op, feeds, attributes, n_out=1, opset=23, symbolic=False):
    """A model of one `op` node on inputs `feeds` ({name: array or None for absent}); outputs
    y0 .. y{n_out - 1}. `symbolic`: every input dim a symbol (shapes known at run time only)."""
    names = [name if array is not None else "" for name, array in feeds.items()]
    outputs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outputs, name=f"the_{op.lower()}", **attributes)
    inputs = [
        helper.make_tensor_value_info(
            name,
            ELEMENT.get(array.dtype.type, TensorProto.INT64),
            [f"{name}_{k}" for k in range(array.ndim)] if symbolic else array.shape,
        )
        for name, array in feeds.items()
        if array is not None
    ]
    kind = ELEMENT[next(iter(feeds.values())).dtype.type]
    graph_outputs = [helper.make_tensor_value_info(name, kind, None) for name in outputs]
    graph = helper.make_graph([node], "one", inputs, graph_outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def present_feeds(feeds):
    return {name: array for name, array in feeds.items() if array is not None}


def rtsoa_run(model, feeds):
    with rtsoa.InferenceSession(model) as session:
        return session.run(None, feeds)


def agree(model, feeds, judge="onnxruntime"):
    feeds = present_feeds(feeds)
    if judge == "onnxruntime":
        want = list(run_onnxruntime(model, feeds).values())
        for theirs in want:  # its masked scores (mode 2) are the lowest float, not -inf
            theirs[theirs == -np.finfo(theirs.dtype).max] = -np.inf
    else:
        want = ReferenceEvaluator(model).run(None, feeds)
    got = rtsoa_run(model, feeds)
    for mine, theirs in zip(got, want, strict=True):
        assert mine.shape == theirs.shape and mine.dtype == theirs.dtype
        np.testing.assert_allclose(mine, theirs, **TOLERANCE[theirs.dtype.type])
    return got


def attention_feeds(batch, q_heads, kv_heads, q_len, kv_len, past, head, v_head, kind=F32):
    return {
        "Q": random((batch, q_heads, q_len, head), kind),
        "K": random((batch, kv_heads, kv_len, head), kind),
        "V": random((batch, kv_heads, kv_len, v_head), kind),
        "attn_mask": None,
        "past_key": random((batch, kv_heads, past, head), kind) if past else None,
        "past_value": random((batch, kv_heads, past, v_head), kind) if past else None,
    }


# -- Attention against onnxruntime ----------------------------------------------------------------


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("mask_kind", [F32, np.bool_])
def test_every_qk_output_mode_with_a_cache_a_mask_gqa_and_softcap(mode, mask_kind):
    feeds = attention_feeds(2, 6, 2, 3, 4, 5, 8, 5)
    mask = random((2, 1, 3, 9)) if mask_kind == F32 else rng.random((3, 9)) > 0.3
    mask[..., 0, :] = 0 if mask_kind == F32 else False  # one row masked out entirely (bool)
    feeds["attn_mask"] = mask
    attributes = {"qk_matmul_output_mode": mode, "softcap": 2.5, "is_causal": 1}
    model = one_node("Attention", feeds, attributes, n_out=4)
    agree(model, feeds)


@pytest.mark.parametrize(
    "q_heads, kv_heads, q_len, kv_len, head, v_head, attributes",
    [
        (4, 4, 5, 5, 8, 8, {"is_causal": 1}),
        (8, 2, 3, 7, 4, 6, {"scale": 0.3}),
        (3, 1, 6, 2, 5, 5, {"is_causal": 1, "scale": 0.05}),
        (2, 2, 1, 9, 16, 3, {"softcap": 0.7}),
    ],
)
def test_3d_inputs_take_the_head_counts_from_attributes(
    q_heads, kv_heads, q_len, kv_len, head, v_head, attributes
):
    feeds = {
        "Q": random((2, q_len, q_heads * head)),
        "K": random((2, kv_len, kv_heads * head)),
        "V": random((2, kv_len, kv_heads * v_head)),
    }
    attributes = dict(attributes, q_num_heads=q_heads, kv_num_heads=kv_heads)
    agree(one_node("Attention", feeds, attributes), feeds)


def test_shapes_known_only_at_run_time():
    """Every dim symbolic: the op's shape inference runs in the lowered graph."""
    feeds = attention_feeds(1, 4, 2, 3, 3, 2, 8, 8)
    feeds["attn_mask"] = random((3, 5))
    model = one_node("Attention", feeds, {"is_causal": 1}, n_out=3, symbolic=True)
    agree(model, feeds)


def test_float64_against_onnx_reference():
    feeds = attention_feeds(2, 4, 2, 3, 5, 2, 6, 4, kind=F64)
    feeds["attn_mask"] = random((2, 4, 3, 7), F64)
    model = one_node("Attention", feeds, {"softcap": 3.0, "qk_matmul_output_mode": 2}, 4)
    agree(model, feeds, judge="reference")


def test_sliding_window_with_padding_keys_against_onnx_reference():
    """Opset 25's windows with nonpad_kv_seqlen (an external cache): onnxruntime lacks them."""
    feeds = attention_feeds(2, 2, 1, 3, 8, 0, 4, 4)
    feeds["attn_mask"] = None
    feeds["past_key"] = feeds["past_value"] = None
    feeds["nonpad_kv_seqlen"] = np.array([5, 8], dtype=np.int64)
    attributes = {"is_causal": 1, "left_window_size": 2, "right_window_size": 0}
    model = one_node("Attention", feeds, attributes, n_out=1, opset=25)
    agree(model, feeds, judge="reference")


# -- a decoder block over a KV cache --------------------------------------------------------------

HIDDEN, Q_HEADS, KV_HEADS, HEAD = 16, 4, 2, 4


def decoder_block():
    """x (batch, steps, hidden) -> projections -> causal grouped-query Attention with a KV
    cache (past in, present out) -> output projection plus the residual."""
    weights = {
        "wq": random((HIDDEN, Q_HEADS * HEAD)),
        "wk": random((HIDDEN, KV_HEADS * HEAD)),
        "wv": random((HIDDEN, KV_HEADS * HEAD)),
        "wo": random((Q_HEADS * HEAD, HIDDEN)),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node(
            "Attention",
            ["q", "k", "v", "", "past_key", "past_value"],
            ["attended", "present_key", "present_value"],
            is_causal=1,
            q_num_heads=Q_HEADS,
            kv_num_heads=KV_HEADS,
        ),
        helper.make_node("MatMul", ["attended", "wo"], ["projected"]),
        helper.make_node("Add", ["projected", "x"], ["y"]),
    ]
    cache = ["batch", KV_HEADS, "past", HEAD]
    graph = helper.make_graph(
        nodes,
        "decoder",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "steps", HIDDEN]),
            helper.make_tensor_value_info("past_key", TensorProto.FLOAT, cache),
            helper.make_tensor_value_info("past_value", TensorProto.FLOAT, cache),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("present_key", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("present_value", TensorProto.FLOAT, None),
        ],
        initializer=[
            helper.make_tensor(name, TensorProto.FLOAT, w.shape, w) for name, w in weights.items()
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    return model


def test_a_decoder_block_generates_step_by_step_on_its_kv_cache():
    """A 4-token prompt on a 1-token cache, then 5 decode steps of one token each, every step
    fed the caches the step before returned (rtsoa's to rtsoa, onnxruntime's to onnxruntime),
    so the errors of one step would carry into the next."""
    model = decoder_block()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    reference = onnxruntime.InferenceSession(model.SerializeToString(), options)
    start = {
        "past_key": random((2, KV_HEADS, 1, HEAD)),
        "past_value": random((2, KV_HEADS, 1, HEAD)),
    }
    mine, theirs = dict(start), dict(start)
    with rtsoa.InferenceSession(model) as session:
        for step, length in enumerate([4, 1, 1, 1, 1, 1]):
            x = random((2, length, HIDDEN))
            got = session.run(None, dict(mine, x=x))
            want = reference.run(None, dict(theirs, x=x))
            for a, b in zip(got, want, strict=True):
                assert a.shape == b.shape, step
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
            mine = {"past_key": got[1], "past_value": got[2]}
            theirs = {"past_key": want[1], "past_value": want[2]}
    assert mine["past_key"].shape == (2, KV_HEADS, 1 + 4 + 5, HEAD)


# -- refusals -------------------------------------------------------------------------------------


def refusal(model):
    with pytest.raises(LoweringError) as caught:
        lower(model)
    return str(caught.value)


def test_window_attributes_before_opset_25_are_refused():
    feeds = attention_feeds(1, 2, 2, 3, 3, 0, 4, 4)
    message = refusal(one_node("Attention", feeds, {"left_window_size": 1}, opset=24))
    assert "the_attention" in message and "'left_window_size'" in message and "25" in message


def test_head_counts_with_4d_inputs_are_refused_from_opset_25():
    feeds = attention_feeds(1, 2, 2, 3, 3, 0, 4, 4)
    message = refusal(one_node("Attention", feeds, {"q_num_heads": 2}, opset=25))
    assert "q_num_heads" in message and "4-D" in message


@pytest.mark.parametrize(
    "attributes, named",
    [
        ({"qk_matmul_output_mode": 4}, "qk_matmul_output_mode"),
        ({"is_causal": 2}, "is_causal"),
        ({"softmax_precision": 7}, "softmax_precision"),
    ],
)
def test_attribute_values_outside_the_spec_are_refused(attributes, named):
    feeds = attention_feeds(1, 2, 2, 3, 3, 0, 4, 4)
    assert named in refusal(one_node("Attention", feeds, attributes))


def test_3d_inputs_without_both_head_counts_are_refused():
    feeds = {"Q": random((1, 3, 8)), "K": random((1, 3, 8)), "V": random((1, 3, 8))}
    message = refusal(one_node("Attention", feeds, {"q_num_heads": 2}))
    assert "q_num_heads and kv_num_heads" in message and "the_attention" in message


def test_an_integer_input_is_refused_by_element_type():
    feeds = attention_feeds(1, 2, 2, 3, 3, 0, 4, 4)
    feeds = {name: a.astype(np.int32) if a is not None else None for name, a in feeds.items()}
    message = refusal(one_node("Attention", feeds, {}))
    assert "int32" in message and "Attention" in message


def test_mismatched_head_sizes_fail_at_lowering_when_shapes_are_known():
    feeds = attention_feeds(1, 2, 2, 3, 3, 0, 4, 4)
    feeds["K"] = random((1, 2, 3, 5))
    assert "Attention" in refusal(one_node("Attention", feeds, {}))


def test_mismatched_head_sizes_fail_the_run_when_shapes_are_symbolic():
    feeds = attention_feeds(1, 2, 2, 3, 3, 0, 4, 4)
    model = one_node("Attention", feeds, {}, symbolic=True)
    feeds["K"] = random((1, 2, 3, 5))
    with pytest.raises(KernelError) as caught:
        rtsoa_run(model, present_feeds(feeds))
    assert "Attention" in str(caught.value)


# -- RMSNormalization -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, scale_shape, axis",
    [((2, 3, 8), (8,), -1), ((4, 5, 6), (5, 6), 1), ((3, 4, 5), (1, 4, 5), 0), ((2, 7), (), -1)],
)
def test_rms_normalization_against_onnxruntime(shape, scale_shape, axis):
    feeds = {"X": random(shape), "scale": random(scale_shape)}
    model = one_node("RMSNormalization", feeds, {"axis": axis, "epsilon": 1e-3})
    agree(model, feeds)


def test_rms_normalization_float64_with_scale_broadcast_over_leading_axes():
    """Scale broadcasts to all of X (its leading dims may be X's), as onnx.reference does."""
    feeds = {"X": random((3, 4, 5), F64), "scale": random((3, 1, 5), F64)}
    model = one_node("RMSNormalization", feeds, {"axis": -1})
    agree(model, feeds, judge="reference")


def test_rms_normalization_stash_type_other_than_float_is_refused():
    feeds = {"X": random((2, 3)), "scale": random((3,))}
    message = refusal(one_node("RMSNormalization", feeds, {"stash_type": 0}))
    assert "RMSNormalization" in message
