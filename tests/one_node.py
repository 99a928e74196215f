"""One-node ONNX models for the op tests: built from numpy inputs, and lowered expecting a
refusal that names the op, the node and what is wrong."""

import pytest
from onnx import helper
from test_ops_dtypes import ELEMENT

from rtsoa.errors import LoweringError
from rtsoa.lowering import lower


def one_node_model(op, inputs, attributes, opset):
    """A model of one node whose inputs are graph inputs (None: absent)."""
    names = [f"x{k}" if x is not None else "" for k, x in enumerate(inputs)]
    node = helper.make_node(op, names, ["y"], name="the_node", **attributes)
    graph_inputs = [
        helper.make_tensor_value_info(name, ELEMENT[x.dtype], x.shape)
        for name, x in zip(names, inputs, strict=True)
        if x is not None
    ]
    output = helper.make_tensor_value_info("y", ELEMENT[inputs[0].dtype], None)
    graph = helper.make_graph([node], "one", graph_inputs, [output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    feeds = {name: x for name, x in zip(names, inputs, strict=True) if x is not None}
    return model, feeds


def refused(op, inputs, attributes, opset, named):
    """Lowering the one-node model fails naming the op, the node and `named`."""
    model, _ = one_node_model(op, inputs, attributes, opset)
    with pytest.raises(LoweringError) as caught:
        lower(model)
    message = str(caught.value)
    assert op in message and "the_node" in message
    assert named in message, message
