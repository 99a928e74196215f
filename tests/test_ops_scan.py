"""Scan beyond the ONNX node suite, against onnxruntime: scan input axes and directions, scan
output axes (negative too) and directions, several states and scan outputs, a body reading a
tensor of the enclosing graph, opset 8's batch axis; and the refusals, naming the node."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.errors import LoweringError
from rtsoa.lowering import lower
from rtsoa.testing.models import run_onnxruntime
from tests.model_checks import run_and_compare, run_clean, subgraph

FLOAT = TensorProto.FLOAT
rng = np.random.default_rng(125)


def accumulate_body(outer=None):
    """state [2], x [2] -> state + x (* outer), and (state + x) * 2 as the scan output."""
    nodes = [helper.make_node("Add", ["state", "x"], ["sum"])]
    if outer:
        nodes += [helper.make_node("Mul", ["sum", outer], ["next"])]
    else:
        nodes += [helper.make_node("Identity", ["sum"], ["next"])]
    nodes += [
        helper.make_node("Add", ["next", "next"], ["doubled"]),
        helper.make_node("Neg", ["x"], ["negated"]),
    ]
    return subgraph(
        nodes,
        "body",
        [("next", FLOAT, [2]), ("doubled", FLOAT, [2]), ("negated", FLOAT, [2])],
        [("state", FLOAT, [2]), ("x", FLOAT, [2])],
    )


def scan_model(x_shape, opset=11, body=None, outputs=("final", "ys", "negs"), extra=(), **attrs):
    node = helper.make_node(
        "Scan",
        ["initial", "xs"],
        list(outputs),
        body=body or accumulate_body(),
        num_scan_inputs=1,
        **attrs,
    )
    graph = helper.make_graph(
        [node],
        "scan",
        [
            helper.make_tensor_value_info("initial", FLOAT, [2]),
            helper.make_tensor_value_info("xs", FLOAT, x_shape),
            *extra,
        ],
        [helper.make_tensor_value_info(name, FLOAT, None) for name in outputs if name],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def feeds(x_shape, **more):
    return {
        "initial": rng.standard_normal(2).astype(np.float32),
        "xs": rng.standard_normal(x_shape).astype(np.float32),
        **more,
    }


@pytest.mark.parametrize(
    "attributes",
    [
        {},
        {"scan_input_directions": [1]},
        {"scan_output_directions": [1, 0]},
        {"scan_output_axes": [1, -1]},
        {"scan_output_axes": [-2, 1], "scan_output_directions": [0, 1]},
    ],
)
def test_directions_and_output_axes(attributes):
    run_and_compare(scan_model([5, 2], **attributes), [feeds([5, 2])])


def test_scan_along_axis_1():
    model = scan_model([2, 4], scan_input_axes=[1], scan_input_directions=[1])
    run_and_compare(model, [feeds([2, 4])])


def test_two_states_and_an_outer_tensor():
    """States [2] and a counter; the body multiplies by a graph input it does not take."""
    body = subgraph(
        [
            helper.make_node("Add", ["state", "x"], ["sum"]),
            helper.make_node("Mul", ["sum", "scale"], ["next"]),
            helper.make_node("Add", ["count", "one"], ["counted"]),
            helper.make_node("Mul", ["next", "counted"], ["weighted"]),
        ],
        "body",
        [("next", FLOAT, [2]), ("counted", FLOAT, []), ("weighted", FLOAT, [2])],
        [("state", FLOAT, [2]), ("count", FLOAT, []), ("x", FLOAT, [2])],
        [("one", np.array(1.0, np.float32))],
    )
    node = helper.make_node(
        "Scan",
        ["initial", "zero", "xs"],
        ["final", "count", "ys"],
        body=body,
        num_scan_inputs=1,
    )
    graph = helper.make_graph(
        [node],
        "scan",
        [
            helper.make_tensor_value_info("initial", FLOAT, [2]),
            helper.make_tensor_value_info("zero", FLOAT, []),
            helper.make_tensor_value_info("xs", FLOAT, [3, 2]),
            helper.make_tensor_value_info("scale", FLOAT, [2]),
        ],
        [helper.make_tensor_value_info(name, FLOAT, None) for name in ("final", "count", "ys")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    model.ir_version = 8
    inputs = feeds([3, 2], zero=np.array(0.0, np.float32), scale=np.array([0.5, -2.0], np.float32))
    run_and_compare(model, [inputs])


def test_unused_outputs_are_left_out():
    """Only the stacked output wanted (onnxruntime refuses empty Scan output names: it runs
    the model with every output)."""
    inputs = feeds([4, 2])
    got = run_clean(lower(scan_model([4, 2], outputs=("", "ys", ""))), inputs)
    want = run_onnxruntime(scan_model([4, 2]), inputs)
    assert sorted(got) == ["ys"]
    np.testing.assert_allclose(got["ys"], want["ys"], rtol=1e-6, atol=1e-6)


def test_opset_8_batch_axis_and_directions():
    """[batch 3, seq 4, 2]: each batch entry scanned in reverse, states stacked too."""
    body = accumulate_body()
    node = helper.make_node(
        "Scan",
        ["", "initial", "xs"],
        ["final", "ys", "negs"],
        body=body,
        num_scan_inputs=1,
        directions=[1],
    )
    graph = helper.make_graph(
        [node],
        "scan8",
        [
            helper.make_tensor_value_info("initial", FLOAT, [3, 2]),
            helper.make_tensor_value_info("xs", FLOAT, [3, 4, 2]),
        ],
        [helper.make_tensor_value_info(name, FLOAT, None) for name in ("final", "ys", "negs")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)])
    model.ir_version = 4
    inputs = {
        "initial": rng.standard_normal((3, 2)).astype(np.float32),
        "xs": rng.standard_normal((3, 4, 2)).astype(np.float32),
    }
    run_and_compare(model, [inputs])


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x_shape, attributes, named",
    [
        (["n", 2], {}, "length of scan input 'xs' is not known at lowering"),
        ([0, 2], {}, "a Scan of length 0"),
        ([3, 2], {"scan_input_axes": [2]}, "scan axis 2 is out of range"),
        ([3, 2], {"scan_input_directions": [2]}, "scan_input_directions \\[2\\]"),
        ([3, 2], {"scan_output_axes": [0]}, "scan_output_axes has 1 entries; 2 expected"),
        ([3, 2], {"scan_output_axes": [0, 3]}, "scan output axis 3 is out of range"),
    ],
)
def test_refusals_name_the_node(x_shape, attributes, named):
    with pytest.raises(LoweringError, match=named) as error:
        lower(scan_model(x_shape, **attributes))
    assert "Scan node" in str(error.value)


def test_a_body_of_the_wrong_arity_is_refused():
    body = subgraph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "body",
        [("y", FLOAT, [2])],
        [("x", FLOAT, [2])],
    )
    with pytest.raises(LoweringError, match="the body takes 1 inputs; 2 expected"):
        lower(scan_model([3, 2], body=body, outputs=("final",)))
