"""Published CNN architectures (rtsoa.testing.cnn, random weights) against onnxruntime.

Each network keeps its real block structure (residual Adds, depthwise convs with Relu6, dense
Concats, parallel Inception branches) at reduced width and image size, so the whole suite of
them runs in seconds; the full-size networks are the asv benchmark models
(asv_bench/benchmarks/bench_cnn.py)."""

import numpy as np
import pytest
from model_checks import run_and_compare

from rtsoa.testing.cnn import ARCHITECTURES, resnet
from rtsoa.testing.models import run_onnxruntime

SMALL = {
    "resnet18": dict(width=0.125, size=32, classes=10),
    "resnet50": dict(width=0.0625, size=32, classes=10, stages=3),
    "mobilenet_v2": dict(width=0.25, size=32, classes=10, stages=5),
    "densenet121": dict(width=0.25, size=32, classes=10, blocks=(2, 2)),
    "inception_v1": dict(width=0.125, size=32, classes=10, blocks=3),
}


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_architecture_matches_onnxruntime(name):
    proto = ARCHITECTURES[name](**SMALL[name])
    rng = np.random.default_rng(1)
    inputs = [{"x": rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)} for batch in (1, 3)]
    run_and_compare(proto, inputs)


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_outputs_are_not_saturated(name):
    """The comparison above checks every layer only if the softmax is not one-hot."""
    proto = ARCHITECTURES[name](**SMALL[name])
    x = np.random.default_rng(2).standard_normal((2, 3, 32, 32)).astype(np.float32)
    probabilities = run_onnxruntime(proto, {"x": x})["y"]
    assert probabilities.max() < 0.9


def test_depth_is_checked():
    with pytest.raises(ValueError, match="depth must be 18 or 50"):
        resnet(34)


@pytest.mark.parametrize("mask", ["unnamed", "named", "graph-output"])
def test_a_cnn_with_dropout_before_its_classifier(mask):
    """Exported inference graphs keep Dropout (ratio 0.2, no training mode) before the
    classifier, some with its mask named: an identity for the output, all-true mask."""
    from onnx import TensorProto, helper

    proto = ARCHITECTURES["mobilenet_v2"](**SMALL["mobilenet_v2"])
    graph = proto.graph
    (gemm,) = [node for node in graph.node if node.op_type == "Gemm"]
    features = gemm.input[0]
    outputs = ["dropped"] + ([] if mask == "unnamed" else ["mask"])
    ratio = helper.make_tensor("ratio", TensorProto.FLOAT, [], [0.2])
    graph.initializer.append(ratio)
    dropout = helper.make_node("Dropout", [features, "ratio"], outputs, name="drop")
    position = list(graph.node).index(gemm)
    graph.node.insert(position, dropout)
    gemm.input[0] = "dropped"
    if mask == "graph-output":
        graph.output.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, None))
    x = np.random.default_rng(3).standard_normal((2, 3, 32, 32)).astype(np.float32)
    run_and_compare(proto, [{"x": x}])
