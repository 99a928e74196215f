"""ONNX import of malformed graphs (`rtsoa.lowering.onnx_import`, `compute_graph.sort_nodes`):
nodes listed out of topological order are sorted, as onnxruntime does, and lowered normally;
a cycle, a tensor nothing defines, a tensor two nodes produce and an initializer without an
element type are one-line LoweringErrors naming what is wrong, never a traceback.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.errors import LoweringError
from rtsoa.lowering import import_onnx, lower
from rtsoa.runtime import load_model
from rtsoa.testing.models import FLOAT, mlp, model, run_onnxruntime

X = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)


def shuffled(proto, order):
    """A copy of `proto` with its top-level nodes listed in `order` (indices)."""
    copy = type(proto)()
    copy.CopyFrom(proto)
    nodes = [copy.graph.node[i] for i in order]
    copy.graph.ClearField("node")
    copy.graph.node.extend(nodes)
    return copy


def chain(*nodes, initializers=()):
    return model(list(nodes), [("x", FLOAT, [2, 3])], [("y", FLOAT, [2, 3])], initializers)


def test_nodes_out_of_order_are_sorted_and_match_onnxruntime():
    proto = mlp(seed=7)
    count = len(proto.graph.node)
    reversed_proto = shuffled(proto, range(count - 1, -1, -1))
    graph = import_onnx(reversed_proto)
    assert [n.op_type for n in graph.nodes] == [n.op_type for n in proto.graph.node]
    want = run_onnxruntime(reversed_proto, {"x": X})["y"]  # onnxruntime sorts them too
    with load_model(reversed_proto.SerializeToString()) as executor:
        got = executor.execute_sync({"x": X})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_sorted_graph_keeps_its_order():
    """Independent nodes stay in the listed order (the first listed ready node goes first)."""
    proto = chain(
        helper.make_node("Neg", ["x"], ["b"], name="second_branch"),
        helper.make_node("Relu", ["x"], ["a"], name="first_branch"),
        helper.make_node("Add", ["a", "b"], ["y"], name="join"),
    )
    assert [n.name for n in import_onnx(proto).nodes] == ["second_branch", "first_branch", "join"]


def test_a_cycle_is_refused_naming_its_nodes():
    proto = chain(
        helper.make_node("Relu", ["x"], ["a"], name="entry"),
        helper.make_node("Add", ["a", "c"], ["b"], name="add"),
        helper.make_node("Neg", ["b"], ["c"], name="neg"),
        helper.make_node("Identity", ["b"], ["y"], name="out"),
    )
    with pytest.raises(LoweringError, match="nodes form a cycle") as error:
        lower(proto)
    message = str(error.value)
    assert "'add'" in message and "'neg'" in message and "'entry'" not in message
    assert "\n" not in message


def test_a_node_reading_itself_is_a_cycle():
    proto = chain(
        helper.make_node("Add", ["x", "y"], ["y"], name="self"),
    )
    with pytest.raises(LoweringError, match=r"nodes form a cycle: Add node 'self' \(#0\) ->"):
        import_onnx(proto)


def test_a_tensor_nothing_defines_is_named_with_its_node():
    proto = chain(
        helper.make_node("Add", ["x", "ghost"], ["y"], name="reader"),
    )
    with pytest.raises(
        LoweringError, match="Add node 'reader' .*tensor 'ghost' is not defined"
    ) as error:
        lower(proto)
    assert "\n" not in str(error.value)


def test_an_undefined_graph_output_and_a_tensor_made_twice_are_named():
    proto = model(
        [helper.make_node("Relu", ["x"], ["a"])], [("x", FLOAT, [2])], [("y", FLOAT, [2])]
    )
    with pytest.raises(LoweringError, match="graph output 'y' is not defined"):
        import_onnx(proto)
    proto = chain(
        helper.make_node("Relu", ["x"], ["y"], name="one"),
        helper.make_node("Neg", ["x"], ["y"], name="two"),
    )
    with pytest.raises(LoweringError, match="'two'.*'one'.*both produce tensor 'y'"):
        import_onnx(proto)


def test_a_subgraph_reads_outer_tensors_and_orders_its_node():
    """An If branch reading a tensor of the outer graph depends on its producer, listed after."""
    then_graph = helper.make_graph(
        [helper.make_node("Relu", ["outer"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", FLOAT, [2, 3])],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Neg", ["outer"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", FLOAT, [2, 3])],
    )
    nodes = [
        helper.make_node(
            "If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph, name="if"
        ),
        helper.make_node("Sin", ["x"], ["outer"], name="producer"),
    ]
    proto = model(
        nodes, [("x", FLOAT, [2, 3]), ("cond", TensorProto.BOOL, [])], [("y", FLOAT, [2, 3])]
    )
    assert [n.name for n in import_onnx(proto).nodes] == ["producer", "if"]
    broken = helper.make_graph(
        [helper.make_node("Relu", ["nowhere"], ["t"], name="inner")],
        "then",
        [],
        [helper.make_tensor_value_info("t", FLOAT, [2, 3])],
    )
    nodes[0] = helper.make_node(
        "If", ["cond"], ["y"], then_branch=broken, else_branch=else_graph, name="if"
    )
    proto = model(
        nodes, [("x", FLOAT, [2, 3]), ("cond", TensorProto.BOOL, [])], [("y", FLOAT, [2, 3])]
    )
    with pytest.raises(
        LoweringError,
        match="If node 'if' .*'then_branch': Relu node 'inner' .*tensor 'nowhere' is not defined",
    ):
        import_onnx(proto)


def test_an_initializer_without_element_type_is_named():
    proto = chain(
        helper.make_node("Add", ["x", "W"], ["y"]),
        initializers=[("W", np.ones((2, 3), np.float32))],
    )
    proto.graph.initializer[0].data_type = TensorProto.UNDEFINED
    with pytest.raises(LoweringError, match="initializer 'W': element type UNDEFINED") as error:
        lower(proto)
    assert "\n" not in str(error.value)


def test_an_initializer_whose_data_does_not_fit_its_dims_is_named():
    proto = chain(
        helper.make_node("Add", ["x", "W"], ["y"]),
        initializers=[("W", np.ones((2, 3), np.float32))],
    )
    proto.graph.initializer[0].dims[1] = 5  # 10 elements declared, 6 stored
    with pytest.raises(LoweringError, match="initializer 'W': unreadable tensor data"):
        lower(proto)


@pytest.mark.parametrize(
    "node, message",
    [
        # a MatMul with a second output (the fusions used to see it before any count check)
        (helper.make_node("MatMul", ["x", "w"], ["y", "extra"]), "gives 1..1 outputs, 2"),
        (helper.make_node("Relu", ["x", "x"], ["y"]), "takes 1..1 inputs, got 2"),
    ],
)
def test_an_op_call_with_counts_the_op_does_not_have_is_refused_naming_the_node(node, message):
    proto = chain(node, initializers=[("w", np.eye(3, dtype=np.float32))])
    with pytest.raises(LoweringError, match=rf"{node.op_type} node \(#0\).*{message}"):
        lower(proto)
