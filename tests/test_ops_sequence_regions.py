"""Sequences through If and Loop (`rtsoa.lowering.sequence_regions`): the branch chosen and the
loop unrolled at lowering, judged against onnx.reference; what cannot be known at lowering is
refused naming the node."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from rtsoa import InferenceSession
from rtsoa.errors import LoweringError
from rtsoa.limits import LoweringLimits
from rtsoa.lowering import lower

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
X = np.arange(1, 7, dtype=np.float32)


def _constant(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value))


def _sequence_info(name):
    return helper.make_tensor_sequence_value_info(name, F, None)


def _model(nodes, inputs, outputs, opset=16):
    graph = helper.make_graph(nodes, "regions", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _prefixes_body(condition_nodes=None):
    """Loop body: the sequence so far with X[: iteration + 1] inserted; its condition output
    `condition_nodes` compute (default: the condition given)."""
    nodes = [
        _constant("x", X),
        _constant("one", np.array(1, np.int64)),
        _constant("start", np.array([0], np.int64)),
        _constant("axes", np.array([0], np.int64)),
        helper.make_node("Add", ["i", "one"], ["end"]),
        helper.make_node("Unsqueeze", ["end", "axes"], ["ends"]),
        helper.make_node("Slice", ["x", "start", "ends"], ["prefix"]),
        helper.make_node("SequenceInsert", ["seq_in", "prefix"], ["seq_out"]),
    ]
    nodes += condition_nodes or [helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    return helper.make_graph(
        nodes,
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond_in", B, []),
            _sequence_info("seq_in"),
        ],
        [helper.make_tensor_value_info("cond_out", B, []), _sequence_info("seq_out")],
    )


def _loop_model(body, trip_input=True):
    inputs = [helper.make_tensor_value_info("cond", B, [])]
    loop_inputs = ["", "cond", "empty"]
    if trip_input:
        inputs.insert(0, helper.make_tensor_value_info("trip", I64, []))
        loop_inputs[0] = "trip"
    nodes = [
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
        helper.make_node("Loop", loop_inputs, ["result"], body=body),
    ]
    return _model(nodes, inputs, [_sequence_info("result")])


def _check_against_reference(proto, feeds_list, reference_proto=None):
    """Each run's `result` equals onnx.reference's of `reference_proto` (default: `proto`)."""
    reference = ReferenceEvaluator(reference_proto or proto)
    with InferenceSession(proto.SerializeToString()) as session:
        for feeds in feeds_list:
            (want,) = reference.run(None, feeds)
            got = session.execute_sync(feeds)["result"]
            assert len(got) == len(want)
            for have, expected in zip(got, want, strict=True):
                assert have.dtype == expected.dtype and have.shape == expected.shape
                np.testing.assert_array_equal(have, expected)


def test_a_loop_carrying_a_sequence_is_unrolled_per_trip_count():
    """Elements of a different shape each iteration; trip counts 0, 1 and 4 are three
    lowerings of one session (the trip count a graph input, part of the run's signature)."""
    proto = _loop_model(_prefixes_body())
    _check_against_reference(
        proto,
        [{"trip": np.array(n, np.int64), "cond": np.array(True)} for n in (4, 0, 1)]
        + [{"trip": np.array(3, np.int64), "cond": np.array(False)}],
    )


def test_an_unrolled_loop_stops_where_its_condition_folds_to_false():
    stop = [
        _constant("two", np.array(2, np.int64)),
        helper.make_node("Less", ["i", "two"], ["cond_out"]),
    ]
    proto = _loop_model(_prefixes_body(stop))
    _check_against_reference(proto, [{"trip": np.array(10, np.int64), "cond": np.array(True)}])


def test_an_unrolled_loop_that_never_ends_reaches_the_op_call_limit():
    proto = _loop_model(_prefixes_body(), trip_input=False)
    proto.graph.input.pop()  # cond: a constant true
    proto.graph.node.insert(0, _constant("cond", np.array(True)))
    with pytest.raises(LoweringError, match=r"Loop node.*iteration.*LoweringLimits.op_calls"):
        lower(proto, limits=LoweringLimits(op_calls=200))


def test_a_loop_carrying_a_sequence_with_a_run_time_trip_count_is_refused():
    proto = _loop_model(_prefixes_body())
    proto.graph.node.insert(0, helper.make_node("ReduceSum", ["counts"], ["trip"], keepdims=0))
    proto.graph.input[0].CopyFrom(helper.make_tensor_value_info("counts", I64, [2]))
    with InferenceSession(proto.SerializeToString()) as session:
        feeds = {"counts": np.array([1, 2], np.int64), "cond": np.array(True)}
        with pytest.raises(LoweringError, match=r"Loop node.*trip count and condition must be"):
            session.execute_sync(feeds)


def _branch(name, value, optional=False):
    nodes = [
        _constant(f"{name}_x", value),
        helper.make_node("SequenceConstruct", [f"{name}_x"], [name]),
    ]
    if optional:
        nodes.append(helper.make_node("Optional", [name], [f"{name}_opt"]))
        name = f"{name}_opt"
    output = _sequence_info(name)
    if optional:
        output = helper.make_value_info(
            name,
            helper.make_optional_type_proto(
                helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None))
            ),
        )
    return helper.make_graph(nodes, f"{name}_branch", [], [output])


def _if_model(optional):
    then_branch = _branch("then_seq", X[:2], optional)
    else_branch = _branch("else_seq", X[2:], optional)
    node = helper.make_node(
        "If", ["cond"], ["result"], then_branch=then_branch, else_branch=else_branch
    )
    inputs = [helper.make_tensor_value_info("cond", B, [])]
    return _model([node], inputs, [_sequence_info("result")])


@pytest.mark.parametrize("optional", [False, True])
def test_an_if_with_a_sequence_result_takes_the_branch_its_condition_names(optional):
    """Optional(sequence) is that sequence (onnx.reference nests it in a list of its own: the
    reference is the model without the Optional)."""
    feeds = [{"cond": np.array(flag)} for flag in (True, False)]
    _check_against_reference(_if_model(optional), feeds, _if_model(False))


def test_an_if_with_a_sequence_result_and_a_computed_condition_is_refused():
    node = helper.make_node(
        "If",
        ["cond"],
        ["result"],
        then_branch=_branch("then_seq", X[:2]),
        else_branch=_branch("else_seq", X[2:]),
    )
    nodes = [helper.make_node("ReduceMax", ["flags"], ["cond"], keepdims=0), node]
    inputs = [helper.make_tensor_value_info("flags", B, [2])]
    proto = _model(nodes, inputs, [_sequence_info("result")], opset=20)
    with InferenceSession(proto.SerializeToString()) as session:
        with pytest.raises(LoweringError, match=r"If node.*condition 'cond' must be known"):
            session.execute_sync({"flags": np.array([True, False])})


def test_an_empty_optional_made_in_a_branch_is_refused_naming_the_node():
    optional_type = helper.make_optional_type_proto(
        helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None))
    )
    empty = helper.make_graph(
        [helper.make_node("Optional", [], ["none"], type=optional_type)],
        "empty",
        [],
        [helper.make_value_info("none", optional_type)],
    )
    node = helper.make_node(
        "If", ["cond"], ["result"], then_branch=empty, else_branch=_branch("else_seq", X, True)
    )
    proto = _model(
        [node], [helper.make_tensor_value_info("cond", B, [])], [_sequence_info("result")]
    )
    with InferenceSession(proto.SerializeToString()) as session:
        with pytest.raises(LoweringError, match=r"Optional node.*empty optional"):
            session.execute_sync({"cond": np.array(True)})
