"""RandomUniformLike and Bernoulli (rtsoa.ops.randomness): statistics over many draws,
determinism for a fixed seed, fresh draws without one, and what lowering refuses.

Random outputs have no reference to equal: each test judges the draws by their distribution
(mean and variance within five standard errors of the exact ones over 200,000 draws) and by
exact properties (the range, the two values of a Bernoulli draw, p = 0 and p = 1)."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import rtsoa
from rtsoa.errors import LoweringError
from rtsoa.lowering import lower

COUNT = 200_000
FLOAT, DOUBLE = TensorProto.FLOAT, TensorProto.DOUBLE


def _model(op, elem, out_elem, shape, **attributes):
    node = helper.make_node(op, ["x"], ["y"], name="draw", **attributes)
    graph = helper.make_graph(
        [node],
        "random",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", out_elem, shape)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


def _runs(proto, x, times=2):
    with rtsoa.InferenceSession(proto) as session:
        return [session.run(None, {"x": x})[0] for _ in range(times)]


def _close(values, mean, variance):
    """The draws' mean and variance within five standard errors of `mean` / `variance`."""
    n = values.size
    assert abs(values.mean() - mean) < 5 * np.sqrt(variance / n)
    fourth = 9 / 5 * variance**2  # a uniform's fourth central moment, above a Bernoulli's here
    assert abs(values.var() - variance) < 5 * np.sqrt(fourth / n)


@pytest.mark.parametrize("elem, kind", [(FLOAT, np.float32), (DOUBLE, np.float64)])
def test_uniform_draws_have_the_uniform_mean_and_variance(elem, kind):
    proto = _model(
        "RandomUniformLike", TensorProto.INT64, elem, [COUNT], dtype=elem, low=-2.0, high=3.0
    )
    first, second = _runs(proto, np.zeros(COUNT, np.int64))
    assert first.dtype == kind and first.shape == (COUNT,)
    assert first.min() >= -2.0 and first.max() <= 3.0
    _close(first.astype(np.float64), 0.5, 25 / 12)
    assert not np.array_equal(first, second)  # no seed: a fresh stream every run


def test_a_seed_gives_the_same_draws_every_run_and_session():
    proto = _model("RandomUniformLike", FLOAT, FLOAT, [1000], seed=7.0)
    x = np.zeros(1000, np.float32)
    first, second = _runs(proto, x)
    (third,) = _runs(proto, x, times=1)
    assert np.array_equal(first, second) and np.array_equal(first, third)
    other = _runs(_model("RandomUniformLike", FLOAT, FLOAT, [1000], seed=8.0), x, times=1)[0]
    assert not np.array_equal(first, other)


@pytest.mark.parametrize("p", [0.3, 0.9])
def test_bernoulli_draws_one_with_probability_p(p):
    proto = _model("Bernoulli", FLOAT, FLOAT, [COUNT])
    first, second = _runs(proto, np.full(COUNT, p, np.float32))
    assert set(np.unique(first)) <= {0.0, 1.0}
    _close(first.astype(np.float64), p, p * (1 - p))
    assert not np.array_equal(first, second)


def test_bernoulli_output_types_and_the_certain_cases():
    p = np.array([0.0, 1.0, 0.0, 1.0], np.float64)
    for elem, kind in [(TensorProto.BOOL, np.bool_), (TensorProto.INT32, np.int32)]:
        for out in (TensorProto.FLOAT16, elem):
            proto = _model("Bernoulli", DOUBLE, out, [4], dtype=out, seed=1.0)
            (y,) = _runs(proto, p, times=1)
            expected = kind if out == elem else np.float16
            assert y.dtype == expected
            np.testing.assert_array_equal(y.astype(np.float64), p)


def test_a_constant_input_is_not_folded_into_one_draw():
    node = helper.make_node("RandomUniformLike", ["c"], ["y"])
    graph = helper.make_graph(
        [node],
        "random",
        [],
        [helper.make_tensor_value_info("y", FLOAT, [64])],
        [helper.make_tensor("c", FLOAT, [64], np.zeros(64, np.float32))],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    with rtsoa.InferenceSession(proto) as session:
        first, second = session.run(None, {})[0], session.run(None, {})[0]
    assert not np.array_equal(first, second)


def test_unsupported_types_are_refused_at_lowering():
    bad_output = _model("RandomUniformLike", FLOAT, TensorProto.INT32, [3], dtype=6)
    with pytest.raises(LoweringError, match=r"RandomUniformLike node 'draw'.*INT32"):
        lower(bad_output)
    bad_input = _model("Bernoulli", TensorProto.INT32, TensorProto.INT32, [3])
    with pytest.raises(LoweringError, match=r"Bernoulli node 'draw'.*int32"):
        lower(bad_input)
