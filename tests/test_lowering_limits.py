"""The work a lowering may do is bounded (`rtsoa.limits.LoweringLimits`): a model of a hundred
bytes that asks for millions of sequence elements or op calls is refused at once, naming the
op, the node and the limit, and a caller may raise or lower the limits."""

import time

import pytest
from onnx import TensorProto, helper

from rtsoa.errors import LoweringError
from rtsoa.limits import LoweringLimits, check_lowering_limits
from rtsoa.lowering import lower


def _split_and_join(length, keepdims=1):
    """SplitToSequence of a [length] input into parts of one element, then ConcatFromSequence:
    one op per element once resolved."""
    nodes = [
        helper.make_node("SplitToSequence", ["x"], ["parts"], name="split", keepdims=keepdims),
        helper.make_node("ConcatFromSequence", ["parts"], ["y"], name="join", axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [length])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return proto.SerializeToString()


def test_a_tiny_model_asking_for_millions_of_elements_is_refused_at_once():
    model = _split_and_join(2_000_000)
    assert len(model) < 200
    start = time.perf_counter()
    with pytest.raises(LoweringError) as refused:
        lower(model)
    assert time.perf_counter() - start < 5  # it ran for minutes, one op per element
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("SplitToSequence node 'split' (#0) (opset 18): needs 2,000,000 ")
    assert (
        "2,000,000 in this lowering, past its limit of 65,536 (LoweringLimits.sequence_elements;"
        in message
    )


def test_the_limits_count_the_whole_lowering_and_the_caller_sets_them():
    small = _split_and_join(300)
    lower(small)  # within the defaults
    lower(small, limits=LoweringLimits(sequence_elements=600))  # 300 made, 300 read
    with pytest.raises(
        LoweringError, match=r"^ConcatFromSequence node 'join' \(#1\).*: needs 300 .*, 600 in this"
    ):
        lower(small, limits=LoweringLimits(sequence_elements=599))
    with pytest.raises(LoweringError) as refused:
        lower(_split_and_join(300, keepdims=0), limits=LoweringLimits(op_calls=50))
    message = str(refused.value)  # a Squeeze per element goes past it
    assert message.startswith(
        "SplitToSequence node 'split' (#0) (op Squeeze, opset 18): needs 1 op"
    )
    assert "calls, 51 in this lowering, past its limit of 50 (LoweringLimits.op_calls;" in message


def test_bad_limits_are_refused():
    assert check_lowering_limits(None) == LoweringLimits()
    with pytest.raises(ValueError, match="LoweringLimits.op_calls must be in 1 .."):
        lower(_split_and_join(3), limits=LoweringLimits(op_calls=0))
    with pytest.raises(ValueError, match="limits must be a LoweringLimits, got dict"):
        lower(_split_and_join(3), limits={"op_calls": 5})
