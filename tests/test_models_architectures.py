"""Model shapes users bring, judged by onnxruntime: a transformer decoder generating with a
KV cache over a symbolic cache length (the first step's cache is empty), and float16 models
(a transformer block and a residual CNN with half-precision weights, inputs and outputs).

Tolerances: float32 rtol 1e-4 / atol 1e-4 (summation order); float16 2e-2 absolute on
outputs of magnitude ~1, the difference of two half-precision computations that round at
different points (onnxruntime computes some ops in float32 inside, rtsoa others), checked
also against the float32 model so both runtimes are near the same answer.
"""

import numpy as np
import pytest

import rtsoa
from rtsoa import InferenceSession
from rtsoa.lowering import lower
from rtsoa.testing.models import (
    decoder_step,
    float16_model,
    run_onnxruntime,
    small_cnn,
    transformer_block,
)

HEADS, HEAD = 2, 16


def test_a_decoder_generates_with_its_kv_cache_over_growing_lengths():
    """Eight steps of one session, each fed the cache the step before returned: the cache
    length goes 0, 1, ..., 7 through one lowered model, dynamic in it."""
    proto = decoder_step()
    assert rtsoa.is_dynamic(lower(proto))
    rng = np.random.default_rng(8)
    batch = 2
    past_key = np.zeros((batch, HEADS, 0, HEAD), np.float32)
    past_value = np.zeros((batch, HEADS, 0, HEAD), np.float32)
    with InferenceSession(proto) as session:
        for step in range(8):
            feeds = {
                "x": rng.standard_normal((batch, 1, HEADS * HEAD)).astype(np.float32),
                "past_key": past_key,
                "past_value": past_value,
            }
            ours = dict(zip(session.output_names, session.run(None, feeds), strict=True))
            theirs = run_onnxruntime(proto, feeds)
            for name, want in theirs.items():
                assert ours[name].shape == want.shape, (step, name)
                np.testing.assert_allclose(ours[name], want, rtol=1e-4, atol=1e-4)
            assert ours["present_key"].shape == (batch, HEADS, step + 1, HEAD)
            past_key, past_value = ours["present_key"], ours["present_value"]
        assert session.device.hazard_count == 0


@pytest.mark.parametrize(
    "build, shape",
    [(transformer_block, (2, 7, 32)), (small_cnn, (2, 3, 16, 16))],
    ids=["transformer-block", "residual-cnn"],
)
def test_float16_models_match_onnxruntime(build, shape):
    full = build()
    half = float16_model(full)
    x = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
    with InferenceSession(half) as session:
        (ours,) = session.run(None, {"x": x.astype(np.float16)})
    theirs = run_onnxruntime(half, {"x": x.astype(np.float16)})["y"]
    exact = run_onnxruntime(full, {"x": x})["y"]
    assert ours.dtype == np.float16 and ours.shape == theirs.shape
    np.testing.assert_allclose(ours.astype(np.float32), theirs.astype(np.float32), atol=2e-2)
    np.testing.assert_allclose(ours.astype(np.float32), exact, atol=2e-2)
