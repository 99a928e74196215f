"""One-node ONNX models for the op tests: built from numpy inputs, run against onnx.reference
or onnxruntime, and lowered expecting a refusal that names the op, the node and what is wrong;
an op failing with a status."""

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from test_ops_dtypes import ELEMENT

from rtsoa.errors import LoweringError, OpError
from rtsoa.lowering import lower
from rtsoa.ops.host import run_numpy
from rtsoa.testing.models import run_onnxruntime


def one_node_model(op, inputs, attributes, opset, output=None):
    """A model of one node whose inputs are graph inputs (None: absent); its output's element
    type is `output` (a numpy dtype), by default input 0's."""
    names = [f"x{k}" if x is not None else "" for k, x in enumerate(inputs)]
    node = helper.make_node(op, names, ["y"], name="the_node", **attributes)
    graph_inputs = [
        helper.make_tensor_value_info(name, ELEMENT[x.dtype], x.shape)
        for name, x in zip(names, inputs, strict=True)
        if x is not None
    ]
    output = helper.make_tensor_value_info("y", ELEMENT[np.dtype(output or inputs[0].dtype)], None)
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


def check(op, inputs, attributes, opset, judge="reference", output=None):
    """rtsoa's op on `inputs` (None: absent) against onnx.reference (or onnxruntime): dtype,
    shape and every element."""
    model, feeds = one_node_model(op, inputs, attributes, opset, output)
    if judge == "onnxruntime":
        want = run_onnxruntime(model, feeds)["y"]
    else:
        want = ReferenceEvaluator(model).run(None, feeds)[0]
    (got,) = run_numpy(op, [x for x in inputs if x is not None], attributes, 1)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def failure(status, op, inputs, attributes):
    """The op fails with `status`, its message naming it."""
    with pytest.raises(OpError) as caught:
        run_numpy(op, inputs, attributes, 1)
    assert caught.value.status == status
    assert str(caught.value).startswith(f"{op}: ")
