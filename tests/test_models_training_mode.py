"""Ops with a training mode, as exported models hold them: Dropout with its mask named, and
BatchNormalization's training mode refused by name (never a silent inference). Dropout's
training mode runs: tests/test_ops_dropout_training.py."""

import numpy as np
import pytest
from model_checks import run_and_compare
from onnx import TensorProto, helper, numpy_helper

from rtsoa.errors import LoweringError
from rtsoa.lowering import lower

F = TensorProto.FLOAT
X = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)


def _model(node, inputs, outputs, initializers=()):
    graph = helper.make_graph(
        [node],
        "dropout",
        [helper.make_tensor_value_info(*entry) for entry in inputs],
        [helper.make_tensor_value_info(*entry) for entry in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("training", [None, False])
def test_dropout_with_its_mask_named_lowers_and_matches_onnxruntime(training):
    """Both outputs named: the converter emitted an Identity for output 0 and then the Dropout
    op for both outputs ("tensor 'y' is produced twice")."""
    inputs = ["x"] if training is None else ["x", "r", "t"]
    initializers = [] if training is None else [("r", np.float32(0.4)), ("t", np.bool_(training))]
    proto = _model(
        helper.make_node("Dropout", inputs, ["y", "mask"]),
        [("x", F, [3, 4])],
        [("y", F, [3, 4]), ("mask", TensorProto.BOOL, [3, 4])],
        initializers,
    )
    run_and_compare(proto, [{"x": X}])


def test_training_mode_with_ratio_zero_is_the_identity():
    proto = _model(
        helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"]),
        [("x", F, [3, 4])],
        [("y", F, [3, 4]), ("mask", TensorProto.BOOL, [3, 4])],
        [("r", np.float32(0.0)), ("t", np.bool_(False))],
    )
    run_and_compare(proto, [{"x": X}])


@pytest.mark.parametrize("training_outputs", [False, True])
def test_batch_normalization_in_training_mode_is_refused_by_name(training_outputs):
    c = 2
    outputs = ["y", "running_mean", "running_var"] if training_outputs else ["y"]
    node = helper.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], outputs, training_mode=1
    )
    params = [(n, np.ones(c, dtype=np.float32)) for n in ("s", "b", "m", "v")]
    declared = [("y", F, [1, c, 2])] + [(name, F, [c]) for name in outputs[1:]]
    proto = _model(node, [("x", F, [1, c, 2])], declared, params)
    proto.opset_import[0].version = 15
    with pytest.raises(LoweringError, match="BatchNormalization.*training mode"):
        lower(proto)
