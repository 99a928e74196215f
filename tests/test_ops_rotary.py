"""RotaryEmbedding beyond the ONNX node suite, against onnx.reference (and onnxruntime where
it runs the op): 3-D and 4-D inputs, interleaved or halves, a partial rotary dim, position ids
or per-token caches, float64; a lowered model; the refusals."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa.errors import OpError
from rtsoa.ops.abi import STATUS_OP_BAD_ATTRIBUTE, STATUS_OP_BAD_INDEX, STATUS_OP_BAD_SHAPE
from rtsoa.ops.host import run_numpy
from tests.model_checks import run_clean

ELEMENT = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE}
rng = np.random.default_rng(124)


def case(four_d, positions, rot=0, kind=np.float32, batch=2, seq=3, heads=2, head=8):
    x_shape = (batch, heads, seq, head) if four_d else (batch, seq, heads * head)
    half = (rot or head) // 2
    cache = (7, half) if positions else (batch, seq, half)
    inputs = [
        rng.standard_normal(x_shape).astype(kind),
        rng.standard_normal(cache).astype(kind),
        rng.standard_normal(cache).astype(kind),
    ]
    if positions:
        inputs.append(rng.integers(0, 7, (batch, seq)).astype(np.int64))
    return inputs


def rotary_model(inputs, **attributes):
    names = ["x", "cos", "sin", "positions"][: len(inputs)]
    node = helper.make_node("RotaryEmbedding", names, ["y"], **attributes)
    values = [
        helper.make_tensor_value_info(
            name, TensorProto.INT64 if name == "positions" else ELEMENT[value.dtype], value.shape
        )
        for name, value in zip(names, inputs, strict=True)
    ]
    graph = helper.make_graph(
        [node],
        "rotary",
        values,
        [helper.make_tensor_value_info("y", ELEMENT[inputs[0].dtype], None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    return model, dict(zip(names, inputs, strict=True))


@pytest.mark.parametrize("rot", [0, 4])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("positions", [False, True])
@pytest.mark.parametrize("four_d", [False, True])
def test_against_onnx_reference(four_d, positions, interleaved, rot):
    inputs = case(four_d, positions, rot)
    attributes = {"interleaved": interleaved, "rotary_embedding_dim": rot}
    if not four_d:
        attributes["num_heads"] = 2
    model, feeds = rotary_model(inputs, **attributes)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    (got,) = run_numpy("RotaryEmbedding", inputs, attributes)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_float64_lowered():
    inputs = case(True, True, kind=np.float64)
    model, feeds = rotary_model(inputs, interleaved=1)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    from rtsoa.lowering import lower

    got = run_clean(lower(model), feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_a_position_beyond_the_cache_fails():
    inputs = case(True, True)
    inputs[3][1, 2] = 7
    with pytest.raises(OpError) as error:
        run_numpy("RotaryEmbedding", inputs)
    assert error.value.status == STATUS_OP_BAD_INDEX


@pytest.mark.parametrize(
    "four_d, attributes, status",
    [
        (False, {}, STATUS_OP_BAD_SHAPE),  # 3-D needs num_heads
        (False, {"num_heads": 3}, STATUS_OP_BAD_SHAPE),  # 16 features in 3 heads
        (True, {"rotary_embedding_dim": 5}, STATUS_OP_BAD_ATTRIBUTE),  # odd
        (True, {"rotary_embedding_dim": 10}, STATUS_OP_BAD_ATTRIBUTE),  # beyond the head
        (True, {"interleaved": 2}, STATUS_OP_BAD_ATTRIBUTE),
    ],
)
def test_bad_attributes_get_a_status(four_d, attributes, status):
    with pytest.raises(OpError) as error:
        run_numpy("RotaryEmbedding", case(four_d, False), attributes)
    assert error.value.status == status
