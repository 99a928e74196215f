"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss against onnxruntime (float32, single
thread) and onnx.reference (float64, which onnxruntime's CPU losses lack), beyond the ONNX node
suite: every reduction with and without weights and ignore_index, int32 targets, the log_prob
output, a lowered model, and one test per refusal. rtsoa sums in float64: float32 within rtol
1e-5 / atol 1e-6.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa.errors import LoweringError, OpError
from rtsoa.lowering import lower
from rtsoa.ops.abi import (
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
)
from rtsoa.ops.host import run_numpy
from rtsoa.testing.models import run_onnxruntime
from tests.model_checks import run_clean

ELEMENT = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}
INDEX = {np.int32: TensorProto.INT32, np.int64: TensorProto.INT64}
LOSSES = ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
rng = np.random.default_rng(115)


def loss_model(op, x, target, weight=None, log_prob=False, **attributes):
    names = ["x", "target"] + (["weight"] if weight is not None else [])
    outputs = ["loss", "log_prob"] if log_prob else ["loss"]
    node = helper.make_node(op, names, outputs, **attributes)
    kind = ELEMENT[x.dtype.type]
    inputs = [
        helper.make_tensor_value_info("x", kind, x.shape),
        helper.make_tensor_value_info("target", INDEX[target.dtype.type], target.shape),
    ]
    if weight is not None:
        inputs.append(helper.make_tensor_value_info("weight", kind, weight.shape))
    graph = helper.make_graph(
        [node], "loss", inputs, [helper.make_tensor_value_info(n, kind, None) for n in outputs]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def feeds(x, target, weight):
    given = {"x": x, "target": target}
    if weight is not None:
        given["weight"] = weight
    return given


def expected(op, x, target, weight=None, log_prob=False, **attributes):
    """onnxruntime's outputs for float32, onnx.reference's for float64."""
    model = loss_model(op, x, target, weight, log_prob, **attributes)
    if x.dtype == np.float64:
        return ReferenceEvaluator(model).run(None, feeds(x, target, weight))
    return list(run_onnxruntime(model, feeds(x, target, weight)).values())


def rtsoa_loss(op, x, target, weight=None, log_prob=False, **attributes):
    return run_numpy(op, [x, target, weight], attributes, n_out=2 if log_prob else 1)


def targets(shape, classes, kind=np.int64, ignore=None):
    values = rng.integers(0, classes, size=shape).astype(kind)
    if ignore is not None:
        values.reshape(-1)[::3] = ignore  # every third element ignored
    return values


def compare(got, want):
    assert len(got) == len(want)
    for have, wanted in zip(got, want, strict=True):
        assert have.shape == wanted.shape and have.dtype == wanted.dtype
        np.testing.assert_allclose(have, wanted, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", LOSSES)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 2, -1])
def test_every_reduction_weight_and_ignore_index(op, reduction, weighted, ignore):
    x = rng.standard_normal((3, 5, 2, 4)).astype(np.float32)
    target = targets((3, 2, 4), 5, ignore=ignore)
    weight = rng.uniform(0.1, 2.0, 5).astype(np.float32) if weighted else None
    attributes = {"reduction": reduction}
    if ignore is not None:
        attributes["ignore_index"] = ignore
    compare(
        rtsoa_loss(op, x, target, weight, **attributes),
        expected(op, x, target, weight, **attributes),
    )


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_log_prob_output_and_int32_targets(reduction):
    x = rng.standard_normal((4, 6, 3)).astype(np.float32) * 4
    target = targets((4, 3), 6, kind=np.int32)
    op = "SoftmaxCrossEntropyLoss"
    compare(
        rtsoa_loss(op, x, target, log_prob=True, reduction=reduction),
        expected(op, x, target, log_prob=True, reduction=reduction),
    )


@pytest.mark.parametrize("op", LOSSES)
def test_float64_against_onnx_reference(op):
    x = rng.standard_normal((2, 3, 5))
    target = targets((2, 5), 3, ignore=1)
    weight = rng.uniform(0.5, 1.5, 3)
    compare(
        rtsoa_loss(op, x, target, weight, reduction="mean", ignore_index=1),
        expected(op, x, target, weight, reduction="mean", ignore_index=1),
    )


def test_two_dimensional_input():
    """(N, C) input and (N) target: no spatial dims."""
    x = rng.standard_normal((7, 4)).astype(np.float32)
    target = targets((7,), 4)
    for op in LOSSES:
        compare(rtsoa_loss(op, x, target), expected(op, x, target))


def test_mean_with_every_target_ignored_is_nan():
    """mean divides by the total weight of the targets not ignored: 0 / 0 is NaN."""
    x = rng.standard_normal((2, 3)).astype(np.float32)
    target = np.array([1, 1], dtype=np.int64)
    (loss,) = rtsoa_loss("NegativeLogLikelihoodLoss", x, target, ignore_index=1)
    assert loss.shape == () and np.isnan(loss)


def test_a_lowered_model_with_both_outputs():
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    target = targets((3, 5), 4, ignore=0)
    weight = rng.uniform(0.5, 1.5, 4).astype(np.float32)
    op = "SoftmaxCrossEntropyLoss"
    model = loss_model(op, x, target, weight, log_prob=True, ignore_index=0)
    got = run_clean(lower(model), feeds(x, target, weight))
    want = expected(op, x, target, weight, log_prob=True, ignore_index=0)
    compare([got["loss"], got["log_prob"]], want)


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize("op", LOSSES)
@pytest.mark.parametrize("bad", [5, -1])
def test_a_target_outside_the_classes_fails(op, bad):
    x = rng.standard_normal((2, 5)).astype(np.float32)
    with pytest.raises(OpError) as error:
        rtsoa_loss(op, x, np.array([0, bad], dtype=np.int64))
    assert error.value.status == STATUS_OP_BAD_INDEX


@pytest.mark.parametrize(
    "x_shape, target_shape, weight_shape",
    [
        ((4,), (4,), None),  # no class axis
        ((2, 3, 4), (2,), None),  # target rank
        ((2, 3, 4), (3, 4), None),  # batch
        ((2, 3, 4), (2, 5), None),  # spatial
        ((2, 3), (2,), (4,)),  # weight length
    ],
)
def test_mismatched_shapes_are_refused(x_shape, target_shape, weight_shape):
    x = np.zeros(x_shape, np.float32)
    weight = None if weight_shape is None else np.ones(weight_shape, np.float32)
    with pytest.raises(OpError) as error:
        rtsoa_loss("NegativeLogLikelihoodLoss", x, np.zeros(target_shape, np.int64), weight)
    assert error.value.status == STATUS_OP_BAD_SHAPE


def test_bad_element_types_and_reduction_are_refused():
    x = np.zeros((2, 3), np.float32)
    target = np.zeros(2, np.int64)
    cases = [
        ((x.astype(np.int32), target, None, {}), STATUS_OP_BAD_DTYPE),
        ((x, target.astype(np.float32), None, {}), STATUS_OP_BAD_DTYPE),
        ((x, target, np.ones(3, np.float64), {}), STATUS_OP_BAD_DTYPE),
        ((x, target, None, {"reduction": "max"}), STATUS_OP_BAD_ATTRIBUTE),
    ]
    for (data, labels, weight, attributes), status in cases:
        with pytest.raises(OpError) as error:
            rtsoa_loss("SoftmaxCrossEntropyLoss", data, labels, weight, **attributes)
        assert error.value.status == status


def test_lowering_refuses_an_integer_input_by_name():
    x = np.zeros((2, 3), np.float32)
    model = loss_model("NegativeLogLikelihoodLoss", x, np.zeros(2, np.int64))
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.INT32
    with pytest.raises(LoweringError, match="NegativeLogLikelihoodLoss.*int32"):
        lower(model)
