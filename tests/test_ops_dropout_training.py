"""Dropout in training mode (the DropoutTraining op): its draws are rtsoa's own, so outputs are
judged by what the definition fixes: y == x * mask * scale, scale = 1 / (1 - ratio), with a
bool mask, the kept share near 1 - ratio, the same draws for the same seed, the identity when
training mode is false or the ratio 0 (against onnxruntime), and bad ratios or types refused
by name."""

import numpy as np
import pytest
from model_checks import run_and_compare
from onnx import TensorProto, helper, numpy_helper

from rtsoa import InferenceSession
from rtsoa.errors import LoweringError, RtsoaError
from rtsoa.lowering import lower

F, D, B = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.BOOL
SHAPE = [40, 50]
X = np.random.default_rng(7).standard_normal(SHAPE).astype(np.float32)


def _model(data_type=F, ratio_type=F, seed=3, ratio=None, training=None, mask=True):
    """Dropout(x, r, t) -> y[, z]; r and t graph inputs unless given as initializers."""
    attributes = {} if seed is None else {"seed": seed}
    outputs = ["y", "z"] if mask else ["y"]
    node = helper.make_node("Dropout", ["x", "r", "t"], outputs, **attributes)
    inputs = [helper.make_tensor_value_info("x", data_type, SHAPE)]
    initializers = []
    if ratio is None:
        inputs.append(helper.make_tensor_value_info("r", ratio_type, []))
    else:
        initializers.append(numpy_helper.from_array(np.asarray(ratio, np.float32), "r"))
    if training is None:
        inputs.append(helper.make_tensor_value_info("t", B, []))
    else:
        initializers.append(numpy_helper.from_array(np.asarray(training), "t"))
    declared = [helper.make_tensor_value_info("y", data_type, SHAPE)]
    if mask:
        declared.append(helper.make_tensor_value_info("z", B, SHAPE))
    graph = helper.make_graph([node], "dropout", inputs, declared, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def seeded():
    """The seeded model with ratio and training mode given at run time, loaded once."""
    with InferenceSession(lower(_model())) as run:
        yield run


def _feeds(ratio, training=True, x=X):
    return {"x": x, "r": np.array(ratio, np.float32), "t": np.array(training)}


def _check_consistent(x, y, mask, ratio):
    assert mask.dtype == np.bool_ and mask.shape == x.shape
    assert y.dtype == x.dtype and y.shape == x.shape
    scale = 1.0 / (1.0 - np.float64(ratio))  # the definition's scale, then data * mask * scale
    want = (x.astype(np.float64) * mask * scale).astype(x.dtype)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.75])
def test_output_is_the_kept_data_scaled_and_the_kept_share_is_one_minus_ratio(seeded, ratio):
    got = seeded.execute_sync(_feeds(ratio))
    _check_consistent(X, got["y"], got["z"], ratio)
    # 2,000 Bernoulli(1 - ratio) draws: the share is within 5 standard deviations
    share, n = got["z"].mean(), got["z"].size
    assert abs(share - (1 - ratio)) < 5 * np.sqrt(ratio * (1 - ratio) / n)


def test_a_seed_gives_the_same_draws_in_every_run_and_session(seeded):
    first = seeded.execute_sync(_feeds(0.5))
    again = seeded.execute_sync(_feeds(0.5))
    np.testing.assert_array_equal(first["z"], again["z"])
    with InferenceSession(lower(_model(seed=3))) as other:
        np.testing.assert_array_equal(other.execute_sync(_feeds(0.5))["z"], first["z"])
    with InferenceSession(lower(_model(seed=4))) as other:
        assert not np.array_equal(other.execute_sync(_feeds(0.5))["z"], first["z"])


def test_without_a_seed_each_run_draws_afresh():
    with InferenceSession(lower(_model(seed=None, mask=True))) as run:
        first = run.execute_sync(_feeds(0.5))["z"]
        second = run.execute_sync(_feeds(0.5))["z"]
    assert not np.array_equal(first, second)  # equal with probability 2**-2000


@pytest.mark.parametrize(("ratio", "training"), [(0.0, True), (0.5, False), (0.0, False)])
def test_ratio_zero_or_training_off_is_the_identity_as_in_onnxruntime(ratio, training):
    run_and_compare(_model(), [_feeds(ratio, training)])


def test_constant_training_mode_lowers_to_the_training_op_and_float64_data_runs():
    proto = _model(data_type=D, ratio=0.3, training=True)
    x = X.astype(np.float64)
    with InferenceSession(lower(proto)) as run:
        got = run.execute_sync({"x": x})
    _check_consistent(x, got["y"], got["z"], np.float32(0.3))
    assert 0 < got["z"].sum() < got["z"].size


def test_a_dropped_inf_is_nan_as_the_definition_s_product_gives(seeded):
    x = np.full(SHAPE, np.inf, np.float32)
    got = seeded.execute_sync(_feeds(0.5, x=x))
    assert np.isnan(got["y"][~got["z"]]).all() and np.isinf(got["y"][got["z"]]).all()


def test_zero_size_data_gives_empty_outputs():
    proto = _model()
    for value in proto.graph.input[:1]:
        value.type.tensor_type.shape.dim[0].dim_value = 0
    for value in proto.graph.output:
        value.type.tensor_type.shape.dim[0].dim_value = 0
    with InferenceSession(lower(proto)) as run:
        got = run.execute_sync(_feeds(0.5, x=np.zeros((0, 50), np.float32)))
    assert got["y"].shape == (0, 50) and got["z"].shape == (0, 50)
    assert got["z"].dtype == np.bool_


@pytest.mark.parametrize("ratio", [1.0, -0.1, np.nan])
def test_a_ratio_outside_zero_to_one_fails_the_run_naming_the_op(seeded, ratio):
    with pytest.raises(RtsoaError, match="DropoutTraining.*bad attribute value") as failure:
        seeded.execute_sync(_feeds(ratio))
    assert failure.value.op == "DropoutTraining"


@pytest.mark.parametrize(
    ("data_type", "ratio_type", "what"),
    [(TensorProto.FLOAT16, F, "data of element type FLOAT16"), (F, TensorProto.FLOAT16, "ratio")],
)
def test_half_precision_training_is_refused_at_lowering_naming_the_node(
    data_type, ratio_type, what
):
    with pytest.raises(LoweringError, match=f"Dropout node.*training mode with {what}"):
        lower(_model(data_type=data_type, ratio_type=ratio_type))
