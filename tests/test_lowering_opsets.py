"""Which default-domain opsets the importer accepts, and the per-op check of definitions: a node
runs only when its op's definition in force at the model's opset (the installed onnx schema's
since_version) is one rtsoa implements; a newer one is refused naming op, node, opset and the
version that changed it. Models importing no default-domain opset are accepted and their ops
refused by name."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import rtsoa
from rtsoa.errors import LoweringError
from rtsoa.lowering import converters, lower
from rtsoa.lowering.converters import IMPLEMENTED_OPSET, changed_definition
from rtsoa.lowering.onnx_import import supported_opsets

NEWEST = onnx.defs.onnx_opset_version()


def cast_model(opset, to=TensorProto.DOUBLE, domain=""):
    node = helper.make_node("Cast", ["x"], ["y"], name="the_cast", to=to)
    graph = helper.make_graph(
        [node],
        "cast",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", to, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    model.ir_version = 10
    return model


def run(model, x):
    with rtsoa.InferenceSession(model) as session:
        return session.run(None, {"x": x})[0]


def test_the_importer_accepts_up_to_the_newest_opset_onnx_defines():
    assert supported_opsets() == (1, NEWEST)
    assert NEWEST > IMPLEMENTED_OPSET
    x = np.array([1.5, -2.0, 3.25], dtype=np.float32)
    np.testing.assert_array_equal(run(cast_model(NEWEST), x), x.astype(np.float64))


def test_an_opset_newer_than_onnx_defines_is_refused():
    with pytest.raises(LoweringError, match=f"default-domain opset {NEWEST + 1} is not supported"):
        lower(cast_model(NEWEST + 1))


def test_a_definition_unchanged_since_an_implemented_opset_runs_at_the_newest():
    """Add's definition at the newest opset is Add-14: rtsoa implements it."""
    assert changed_definition("Add", "", NEWEST) is None
    node = helper.make_node("Add", ["x", "x"], ["y"])
    graph = helper.make_graph(
        [node],
        "add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", NEWEST)])
    model.ir_version = 10
    np.testing.assert_array_equal(run(model, np.array([1, 2], np.float32)), [2, 4])


def test_a_definition_newer_than_any_converter_implements_is_refused(monkeypatch):
    """Without the converter registered for Cast-28, a Cast at opset 28 is refused by name,
    while the same model at opset 25 (Cast-25) still lowers."""
    entries = [entry for entry in converters._CONVERTERS[("", "Cast")] if entry[0] != 28]
    monkeypatch.setitem(converters._CONVERTERS, ("", "Cast"), entries)
    assert changed_definition("Cast", "", 28) == 28
    with pytest.raises(LoweringError) as caught:
        lower(cast_model(28))
    message = str(caught.value)
    assert "Cast node 'the_cast'" in message and "(opset 28)" in message
    assert "changed in opset 28" in message and f"up to opset {IMPLEMENTED_OPSET}" in message
    lower(cast_model(25))


def test_ops_that_are_not_onnx_ops_are_not_checked():
    assert changed_definition("NoSuchOp", "", NEWEST) is None
    assert changed_definition("Cast", "com.example", NEWEST) is None


def ml_only_model(op, **attributes):
    node = helper.make_node(op, ["x"], ["y"], domain="ai.onnx.ml", **attributes)
    graph = helper.make_graph(
        [node],
        "ml",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 10
    return model


def test_a_model_of_another_domain_only_is_refused_by_its_op():
    model = ml_only_model("CategoryMapper", cats_int64s=[1, 2], cats_strings=["a", "b"])
    with pytest.raises(LoweringError, match="op 'CategoryMapper' is not supported"):
        lower(model)


def test_a_model_of_another_domain_only_runs_the_ops_rtsoa_has():
    x = np.array([0.25, 0.5, 0.75], dtype=np.float32)
    with rtsoa.InferenceSession(ml_only_model("Binarizer", threshold=0.5)) as session:
        (y,) = session.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.array([0.0, 0.0, 1.0], dtype=np.float32))


def test_a_default_domain_node_without_a_default_domain_opset_is_refused():
    model = cast_model(1, domain="ai.onnx.ml")  # the Cast node itself is in the default domain
    with pytest.raises(LoweringError) as caught:
        lower(model)
    message = str(caught.value)
    assert "Cast node 'the_cast'" in message and "no default-domain opset" in message
    assert "ai.onnx.ml" in message


def test_a_model_importing_no_opset_at_all_is_refused():
    model = cast_model(NEWEST)
    del model.opset_import[:]
    with pytest.raises(LoweringError, match="imports no opset"):
        lower(model)
