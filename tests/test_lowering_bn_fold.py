"""BatchNormalization folded into the preceding Conv at lowering (rtsoa/lowering/fuse.py).

A folded pair must agree with the unfused ops within rtol 1e-5 and an absolute 1e-6 of the
output's largest magnitude (the weights are rounded once after scaling, so bits may differ, and
a sum that cancels near zero keeps the rounding of its terms' size), and with onnxruntime, which
folds the same pairs (onnx.reference for float64, which onnxruntime's Conv lacks). A pair whose
parameters are not constants, whose conv result is read elsewhere or returned, or whose
variance + epsilon is zero is left as the model has it.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa.graph.inspect import op_counts
from rtsoa.lowering import lower
from rtsoa.runtime import load_model
from rtsoa.testing.cnn import resnet
from rtsoa.testing.models import FLOAT, model, run_onnxruntime

RTOL, ATOL = 1e-5, 1e-6
RNG = np.random.default_rng(11)


def _params(channels, dtype=np.float32, var=None):
    rng = RNG
    return [
        ("s", (1 + 0.1 * rng.standard_normal(channels)).astype(dtype)),
        ("b", (0.1 * rng.standard_normal(channels)).astype(dtype)),
        ("m", (0.1 * rng.standard_normal(channels)).astype(dtype)),
        (
            "v",
            (1 + 0.1 * np.abs(rng.standard_normal(channels))).astype(dtype)
            if var is None
            else np.asarray(var, dtype=dtype),
        ),
    ]


def _conv_bn(
    cin=4,
    cout=6,
    kernel=3,
    group=1,
    bias=True,
    dims=2,
    dtype=np.float32,
    var=None,
    extra_outputs=(),
    dynamic=(),
):
    elem = TensorProto.DOUBLE if dtype == np.float64 else FLOAT
    w = RNG.standard_normal((cout, cin // group) + (kernel,) * dims).astype(dtype)
    inits = [("w", w)]
    conv_inputs = ["x", "w"]
    if bias:
        inits.append(("cb", RNG.standard_normal(cout).astype(dtype)))
        conv_inputs.append("cb")
    params = _params(cout, dtype, var)
    inputs = [("x", elem, [None, cin] + [7] * dims)]
    for name, array in params:
        if name in dynamic:
            inputs.append((name, elem, [cout]))
        else:
            inits.append((name, array))
    nodes = [
        helper.make_node("Conv", conv_inputs, ["c"], group=group, pads=[1] * (2 * dims)),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"], epsilon=1e-3),
    ]
    outputs = [("y", elem, None)] + [(n, elem, None) for n in extra_outputs]
    proto = model(nodes, inputs, outputs, inits)
    feeds = {"x": RNG.standard_normal((2, cin) + (7,) * dims).astype(dtype)}
    feeds.update({name: array for name, array in params if name in dynamic})
    return proto, feeds


def _run(graph, feeds):
    with load_model(graph) as executor:
        got = executor.execute_sync(feeds)
        assert executor.device.hazard_count == 0
    return got


def _check(proto, feeds, folded, oracle=True):
    fused, plain = lower(proto), lower(proto, fuse=False)
    assert ("BatchNormalization" not in op_counts(fused)) == folded
    assert "BatchNormalization" in op_counts(plain)
    got, unfused = _run(fused, feeds), _run(plain, feeds)
    if not oracle:
        want = unfused  # the unfused ops are the reference
    elif feeds["x"].dtype == np.float64:  # onnxruntime has no float64 Conv
        names = [output.name for output in proto.graph.output]
        want = dict(zip(names, ReferenceEvaluator(proto).run(None, feeds), strict=True))
    else:
        want = run_onnxruntime(proto, feeds)
    for name, expected in want.items():
        assert got[name].dtype == expected.dtype and got[name].shape == expected.shape
        finite = np.abs(expected[np.isfinite(expected)])
        atol = ATOL * max(1.0, float(finite.max()) if finite.size else 1.0)
        np.testing.assert_allclose(got[name], unfused[name], rtol=RTOL, atol=atol)
        np.testing.assert_allclose(got[name], expected, rtol=RTOL, atol=atol, equal_nan=True)
    return got


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"bias": False},
        {"group": 2},
        {"group": 4, "cout": 4},  # depthwise
        {"kernel": 1},
        {"dims": 1},
        {"dtype": np.float64},
    ],
    ids=["bias", "no-bias", "grouped", "depthwise", "1x1", "conv1d", "float64"],
)
def test_conv_batch_norm_pairs_fold(options):
    _check(*_conv_bn(**options), folded=True)


@pytest.mark.parametrize(
    "options",
    [
        {"extra_outputs": ("c",)},  # the conv's result is also returned
        {"dynamic": ("v",)},  # a parameter given at run time
        {"dynamic": ("s",)},
    ],
    ids=["conv-output-returned", "dynamic-var", "dynamic-scale"],
)
def test_pairs_that_could_differ_are_not_folded(options):
    _check(*_conv_bn(**options), folded=False)


def test_a_zero_variance_keeps_the_ops_inf_and_nan():
    """var + epsilon == 0 in one channel: not folded, so the channel's inf / nan are those of
    the BatchNormalization op (onnxruntime's own fold gives another pattern there)."""
    proto, feeds = _conv_bn(var=[1.0] * 5 + [-1e-3])
    got = _check(proto, feeds, folded=False, oracle=False)
    assert not np.isfinite(got["y"][:, 5]).any() and np.isfinite(got["y"][:, :5]).all()


def test_a_conv_read_by_a_second_op_is_not_folded():
    proto, feeds = _conv_bn()
    proto.graph.node.append(helper.make_node("Relu", ["c"], ["r"]))
    proto.graph.output.append(helper.make_tensor_value_info("r", FLOAT, None))
    _check(proto, feeds, folded=False)


def test_resnet_runs_without_batch_normalization_ops():
    proto = resnet(18, width=0.125, size=32, classes=10)
    graph = lower(proto)
    counts = op_counts(graph)
    assert "BatchNormalization" not in counts
    # activations fuse after, and 3 x 3 convs of 16 or more channels run by Winograd
    convs = sum(counts.get(op, 0) for op in ("Conv", "FusedConv", "WinogradConv"))
    assert convs == sum(node.op_type == "Conv" for node in proto.graph.node)
    x = RNG.standard_normal((2, 3, 32, 32)).astype(np.float32)
    got = _run(graph, {"x": x})["y"]
    np.testing.assert_allclose(got, run_onnxruntime(proto, {"x": x})["y"], rtol=1e-4, atol=1e-6)
