"""The lowering's BatchNormalization -> Relu fusion (rtsoa/lowering/fuse.py, op
FusedBatchNormalization): a BatchNormalization not folded into a conv (DenseNet's, after a
Concat) and its Relu in one pass.

A fused pair must give the unfused ops' results bit for bit (the Relu over each rounded
normalized value, as the Relu op computes it) and onnxruntime's within the model tests'
tolerance; a pair whose intermediate is read elsewhere or returned is left as the model has it.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.ops.host import OpError, infer_shapes, run_numpy
from rtsoa.testing.models import FLOAT, model
from tests.model_checks import check_fusion

DOUBLE = TensorProto.DOUBLE
RNG = np.random.default_rng(12)


def _parameters(channels, dtype):
    scale = RNG.standard_normal(channels).astype(dtype)
    bias = RNG.standard_normal(channels).astype(dtype)
    mean = RNG.standard_normal(channels).astype(dtype)
    var = (RNG.random(channels) + 0.25).astype(dtype)
    return [("s", scale), ("b", bias), ("m", mean), ("v", var)]


def _concat_bn_relu(shape, dtype=np.float32, extra_outputs=(), epsilon=1e-5):
    """Relu(BatchNormalization(Concat(x, x2))): x and x2 of `shape`, channels doubled."""
    elem = DOUBLE if dtype == np.float64 else FLOAT
    channels = 2 * shape[1]
    nodes = [
        helper.make_node("Concat", ["x", "x2"], ["c"], axis=1),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], epsilon=epsilon),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    outputs = [("y", elem, None)] + [(name, elem, None) for name in extra_outputs]
    inputs = [("x", elem, list(shape)), ("x2", elem, list(shape))]
    return model(nodes, inputs, outputs, _parameters(channels, dtype))


def _inputs(shape, dtype=np.float32):
    return {name: RNG.standard_normal(shape).astype(dtype) for name in ("x", "x2")}


@pytest.mark.parametrize(
    "shape",
    [(1, 3, 5, 7), (2, 16, 14, 14), (1, 1, 1, 1), (3, 5, 17), (1, 4, 2, 3, 5), (2, 3)],
)
def test_fused_batch_norm_relu_equals_the_ops_it_replaces(shape):
    _check = check_fusion(_concat_bn_relu(shape), _inputs(shape), "FusedBatchNormalization", 1)
    assert "Relu" not in _check and "BatchNormalization" not in _check


def test_float64_batch_norm_relu_fuses():
    shape = (2, 3, 4, 4)
    proto = _concat_bn_relu(shape, dtype=np.float64, epsilon=1e-3)
    check_fusion(proto, _inputs(shape, np.float64), "FusedBatchNormalization", 1)


def test_relu_of_nan_infinities_and_negative_zero_is_relus():
    """Relu keeps NaN and -0 and zeroes -inf: the fused op's bits, sign of zero included."""
    shape = (1, 1, 2, 4)
    x = np.array([[[[np.inf, -np.inf, np.nan, -1.0], [2.0, -0.0, 0.0, -3.0]]]], np.float32)
    proto = _concat_bn_relu(shape)
    for initializer in proto.graph.initializer:  # identity normalization: x itself reaches Relu
        values = {"s": 1.0, "b": 0.0, "m": 0.0, "v": 1.0}[initializer.name]
        initializer.CopyFrom(helper.make_tensor(initializer.name, FLOAT, [2], [values] * 2))
    for node in proto.graph.node:
        if node.op_type == "BatchNormalization":
            node.attribute[0].f = 0.0
    check_fusion(proto, {"x": x, "x2": -x}, "FusedBatchNormalization", 1)


@pytest.mark.parametrize("case", ["normalized is returned", "normalized read twice", "no relu"])
def test_pairs_whose_intermediate_is_needed_are_not_fused(case):
    shape = (1, 2, 3, 3)
    if case == "normalized is returned":
        proto = _concat_bn_relu(shape, extra_outputs=("n",))
    elif case == "normalized read twice":
        proto = _concat_bn_relu(shape, extra_outputs=("t",))
        proto.graph.node.append(helper.make_node("Tanh", ["n"], ["t"]))
    else:
        proto = _concat_bn_relu(shape)
        proto.graph.node[2].op_type = "Sigmoid"
    counts = check_fusion(proto, _inputs(shape), "FusedBatchNormalization", 0)
    assert counts.get("BatchNormalization") == 1


def test_fused_batch_norm_refuses_what_batch_norm_refuses_and_a_bad_activation():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    parameters = [value for _, value in _parameters(3, np.float32)]
    scale, bias, mean, var = parameters
    (out,), _ = infer_shapes("FusedBatchNormalization", [x, *parameters], {"activation": 1})
    assert out.dims == (2, 3, 4)
    (got,) = run_numpy("FusedBatchNormalization", [x, *parameters], {"activation": 1})
    a = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + np.float64(np.float32(1e-5)))
    want = (x * a[:, None] + (bias - mean * a)[:, None]).astype(np.float32)
    np.testing.assert_array_equal(got, np.maximum(want, np.float32(0)))
    with pytest.raises(OpError):
        infer_shapes("FusedBatchNormalization", [x, *parameters], {"activation": 2})
    with pytest.raises(OpError):  # a parameter of another channel count
        infer_shapes("FusedBatchNormalization", [x, scale[:2], bias, mean, var], {"activation": 1})
    with pytest.raises(OpError):  # training mode
        infer_shapes(
            "FusedBatchNormalization", [x, *parameters], {"activation": 1, "training_mode": 1}
        )
