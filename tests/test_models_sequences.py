"""ONNX sequence ops resolved at lowering (rtsoa.lowering.sequences), judged by onnxruntime.

Each model is lowered once and run at one or more inputs; outputs must match onnxruntime's in
names, shapes, dtypes and values, with no leaked block, the device's bytes back where they were
and zero hazards (model_checks.run_and_compare). What cannot be resolved at lowering is refused
there, naming the op, node and opset; those tests check the message.
"""

import numpy as np
import pytest
from model_checks import run_and_compare, subgraph
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa.errors import LoweringError
from rtsoa.lowering import import_onnx, lower
from rtsoa.lowering.sequences import GROUP
from rtsoa.runtime import load_model
from rtsoa.testing.models import FLOAT, model

INT64 = TensorProto.INT64
SHAPE = [2, 3]


def _node(op, inputs, output, **attributes):
    return helper.make_node(op, inputs, [output], name=output, **attributes)


def _abc(seed=0, shape=SHAPE):
    """Three distinct float32 tensors a, b, c."""
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(np.float32) for name in "abc"}


def _abc_inputs(shape=SHAPE):
    return [(name, FLOAT, shape) for name in "abc"]


def _reads(sequence, positions, prefix="at"):
    """SequenceAt of each position (outputs at0, atm1 for -1, ...) and SequenceLength
    (`{prefix}_length`): (nodes, initializers, outputs)."""
    nodes, inits, outputs = [], [], []
    for position in positions:
        name = f"{prefix}{position}".replace("-", "m")
        nodes.append(_node("SequenceAt", [sequence, f"{name}_pos"], name))
        inits.append((f"{name}_pos", np.array(position, np.int64)))
        outputs.append((name, FLOAT, None))
    nodes.append(_node("SequenceLength", [sequence], f"{prefix}_length"))
    outputs.append((f"{prefix}_length", INT64, []))
    return nodes, inits, outputs


def _every_element(sequence, count):
    """_reads of each of `count` elements, from the front and from the back."""
    return _reads(sequence, list(range(count)) + list(range(-count, 0)))


# -- building sequences -----------------------------------------------------------------------


@pytest.mark.parametrize("position", [None, 0, 1, 2, -1, -2])
def test_insert_at_every_position_then_read_every_element(position):
    """[a, b] with c inserted (absent position: appended; -2 is the front); every element read."""
    inputs, inits = ["ab", "c"], []
    if position is not None:
        inputs.append("pos")
        inits.append(("pos", np.array(position, np.int64)))
    nodes = [_node("SequenceConstruct", ["a", "b"], "ab"), _node("SequenceInsert", inputs, "abc")]
    reads, read_inits, outputs = _every_element("abc", 3)
    proto = model(nodes + reads, _abc_inputs(), outputs, inits + read_inits)
    run_and_compare(proto, [_abc(1), _abc(2)])


@pytest.mark.parametrize("position", [None, 0, 2, -1, -3])
def test_erase_at_every_position(position):
    inputs, inits = ["abc"], []
    if position is not None:
        inputs.append("pos")
        inits.append(("pos", np.array(position, np.int32)))  # int32 positions too
    nodes = [_node("SequenceConstruct", list("abc"), "abc"), _node("SequenceErase", inputs, "two")]
    reads, read_inits, outputs = _every_element("two", 2)
    run_and_compare(model(nodes + reads, _abc_inputs(), outputs, inits + read_inits), [_abc()])


def test_empty_sequence_grown_by_inserts_of_int64_tensors():
    """SequenceEmpty(dtype=int64), two inserts, a join; the length of the empty one is 0."""
    nodes = [
        _node("SequenceEmpty", [], "none", dtype=INT64),
        _node("SequenceLength", ["none"], "zero"),
        _node("SequenceInsert", ["none", "i"], "one"),
        _node("SequenceInsert", ["one", "j", "front"], "two"),
        _node("ConcatFromSequence", ["two"], "joined", axis=0),
        _node("SequenceLength", ["two"], "length"),
    ]
    proto = model(
        nodes,
        [("i", INT64, [2]), ("j", INT64, [3])],
        [("zero", INT64, []), ("joined", INT64, [5]), ("length", INT64, [])],
        [("front", np.array(0, np.int64))],
    )
    run_and_compare(proto, [{"i": np.array([1, 2]), "j": np.array([7, 8, 9])}])


def test_a_position_folded_at_lowering_is_a_constant():
    """pos = 1 + (-2) = -1 (an Add of two Constants, folded before the sequence op)."""
    nodes = [
        helper.make_node("Constant", [], ["c1"], value=helper.make_tensor("v1", INT64, [], [1])),
        helper.make_node("Constant", [], ["c2"], value=helper.make_tensor("v2", INT64, [], [-2])),
        helper.make_node("Add", ["c1", "c2"], ["pos"]),
        _node("SequenceConstruct", list("abc"), "abc"),
        _node("SequenceAt", ["abc", "pos"], "last"),
    ]
    graph = run_and_compare(model(nodes, _abc_inputs(), [("last", FLOAT, SHAPE)]), [_abc()])
    assert _launches(graph) == 1  # the Identity of c: the Add is folded, the sequence is gone


def _launches(graph):
    return sum(graph.kernel_name(n) == "OpLaunch" for n in range(graph.num_nodes))


def test_an_element_that_is_a_constant():
    k = np.arange(6, dtype=np.float32).reshape(SHAPE)
    nodes = [
        _node("SequenceConstruct", ["a", "k"], "ak"),
        _node("SequenceAt", ["ak", "pos"], "got_k"),
        _node("ConcatFromSequence", ["ak"], "joined", axis=1),
    ]
    proto = model(
        nodes,
        [("a", FLOAT, SHAPE)],
        [("got_k", FLOAT, SHAPE), ("joined", FLOAT, [2, 6])],
        [("k", k), ("pos", np.array(1, np.int64))],
    )
    run_and_compare(proto, [{"a": _abc()["a"]}])


# -- ConcatFromSequence -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "axis, new_axis", [(0, 0), (1, 0), (-1, 0), (-2, 0), (0, 1), (2, 1), (-1, 1), (-3, 1)]
)
def test_concat_from_sequence_on_every_axis(axis, new_axis):
    """Elements of rank 2: axes -2 .. 1, and -3 .. 2 with new_axis (a new axis of size 3);
    two streams."""
    nodes = [
        _node("SequenceConstruct", list("abc"), "abc"),
        _node("ConcatFromSequence", ["abc"], "joined", axis=axis, new_axis=new_axis),
    ]
    proto = model(nodes, _abc_inputs(), [("joined", FLOAT, None)])
    run_and_compare(proto, [_abc()], streams=2)


def test_concat_of_elements_with_a_symbolic_dim():
    """A run-time batch: the same lowered graph at two batch sizes."""
    nodes = [
        _node("SequenceConstruct", list("abc"), "abc"),
        _node("ConcatFromSequence", ["abc"], "joined", axis=-1, new_axis=1),
    ]
    proto = model(nodes, _abc_inputs(["batch", 3]), [("joined", FLOAT, None)])
    run_and_compare(proto, [_abc(1, (1, 3)), _abc(2, (5, 3))])


# -- SplitToSequence --------------------------------------------------------------------------


def _split(split=None, runtime_split=False, x_dims=(4, 6), **attributes):
    """SplitToSequence of x into "parts": (nodes, inputs, initializers)."""
    inputs, inits, split_inputs = [("x", FLOAT, list(x_dims))], [], ["x"]
    if split is not None:
        split_inputs.append("split")
        if runtime_split:
            inputs.append(("split", INT64, list(np.shape(split))))
        else:
            inits.append(("split", np.asarray(split, np.int64)))
    return [_node("SplitToSequence", split_inputs, "parts", **attributes)], inputs, inits


X = np.arange(24, dtype=np.float32).reshape(4, 6)


@pytest.mark.parametrize(
    "split, attributes, count",
    [
        (None, {}, 4),  # no split: one part per index of axis 0
        (None, {"axis": -1}, 6),
        (None, {"axis": 1, "keepdims": 0}, 6),  # the parts lose axis 1
        (2, {"axis": 1}, 3),  # a scalar split dividing the dim
        (4, {"axis": 1}, 2),  # ... and not dividing it: 4 + 2
        ([1, 0, 3], {}, 3),  # a 1-D split, with an empty part
        ([2, 4], {"axis": -1, "keepdims": 0}, 2),  # keepdims applies only without split
    ],
)
def test_split_to_sequence(split, attributes, count):
    nodes, inputs, inits = _split(split, **attributes)
    reads, read_inits, outputs = _every_element("parts", count)
    run_and_compare(model(nodes + reads, inputs, outputs, inits + read_inits), [{"x": X}])


def test_split_with_a_split_read_at_run_time():
    """The number of parts is split's static length; its values (and x's length) change at
    run time, down to zero-size parts of a zero-size x (the shape of conformance model 8)."""
    nodes, inputs, _ = _split([0, 0, 0], runtime_split=True, x_dims=["n"])
    reads, read_inits, outputs = _every_element("parts", 3)
    proto = model(nodes + reads, inputs, outputs, read_inits)
    sets = [
        {"x": np.zeros(0, np.float32), "split": np.array([0, 0, 0])},
        {"x": np.arange(5, dtype=np.float32), "split": np.array([2, 0, 3])},
    ]
    run_and_compare(proto, sets)


def test_more_parts_than_one_op_takes_are_split_and_joined_in_groups():
    """GROUP + 6 parts: the Split and the Concat each become a tree of ops."""
    count = GROUP + 6
    nodes, inputs, _ = _split(x_dims=(count, 2), keepdims=0)
    nodes.append(_node("ConcatFromSequence", ["parts"], "joined", axis=-1, new_axis=1))
    reads, read_inits, outputs = _reads("parts", [0, GROUP, -1])
    proto = model(nodes + reads, inputs, [("joined", FLOAT, None)] + outputs, read_inits)
    graph = run_and_compare(proto, [{"x": np.arange(count * 2, dtype=np.float32).reshape(-1, 2)}])
    assert _launches(graph) > count + 2  # Squeezes, and more than one Split and one Concat


def test_keepdims_is_ignored_with_a_scalar_split_as_onnx_says():
    """onnxruntime 1.32 squeezes parts of a scalar split of 1 with keepdims=0 (and fails on
    larger ones); the ONNX spec and its reference implementation keep the axis, as rtsoa does."""
    nodes, inputs, inits = _split(1, axis=1, keepdims=0)
    reads, read_inits, outputs = _every_element("parts", 6)
    proto = model(nodes + reads, inputs, outputs, inits + read_inits)
    names = [output.name for output in proto.graph.output]
    want = dict(zip(names, ReferenceEvaluator(proto).run(None, {"x": X}), strict=True))
    with load_model(proto) as run:
        got = run.execute_sync({"x": X})
    for name, expected in want.items():
        np.testing.assert_array_equal(got[name], expected)
    assert got["at0"].shape == (4, 1)


# -- sequences inside an If -------------------------------------------------------------------


def test_if_branches_read_an_outer_sequence_and_build_their_own():
    """then: the outer sequence's last element; else: a sequence of its own, joined. Neither
    sequence leaves its scope."""
    then_branch = subgraph(
        [_node("SequenceAt", ["outer", "minus_one"], "then_y")], "then", [("then_y", FLOAT, None)]
    )
    else_branch = subgraph(
        [
            _node("SequenceConstruct", ["c", "a"], "inner"),
            _node("ConcatFromSequence", ["inner"], "else_y", axis=0),
        ],
        "else",
        [("else_y", FLOAT, None)],
    )
    nodes = [
        _node("SequenceConstruct", list("abc"), "outer"),
        helper.make_node("If", ["flag"], ["y"], then_branch=then_branch, else_branch=else_branch),
    ]
    proto = model(
        nodes,
        _abc_inputs() + [("flag", TensorProto.BOOL, [])],
        [("y", FLOAT, None)],
        [("minus_one", np.array(-1, np.int64))],
    )
    sets = [{**_abc(), "flag": np.array(flag)} for flag in (True, False)]
    run_and_compare(proto, sets, executor="topological")


# -- refused at lowering, naming the op, node and opset ----------------------------------------


def _refusal(model_or_graph):
    """The message of the LoweringError lowering raises."""
    with pytest.raises(LoweringError) as raised:
        lower(model_or_graph)
    return str(raised.value)


def _sequence_value(name):
    return helper.make_tensor_sequence_value_info(name, FLOAT, None)


def _positioned(op, position):
    """[a, b] then `op` at a constant `position`, its result read."""
    nodes = [_node("SequenceConstruct", ["a", "b"], "ab")]
    if op == "SequenceAt":
        nodes.append(_node(op, ["ab", "pos"], "y"))
        outputs = [("y", FLOAT, None)]
    else:
        inputs = ["ab", "a", "pos"] if op == "SequenceInsert" else ["ab", "pos"]
        nodes += [_node(op, inputs, "s"), _node("SequenceLength", ["s"], "y")]
        outputs = [("y", INT64, [])]
    return model(nodes, _abc_inputs(), outputs, [("pos", np.asarray(position))])


@pytest.mark.parametrize(
    "op, position, message",
    [
        (
            "SequenceAt",
            2,
            "SequenceAt node 'y' (#1) (opset 17): position 2 is out of range for "
            "a sequence of 2 element(s) (valid: -2 .. 1)",
        ),
        ("SequenceAt", -3, "SequenceAt node 'y' (#1) (opset 17): position -3 is out of range"),
        (
            "SequenceInsert",
            3,
            "SequenceInsert node 's' (#1) (opset 17): position 3 is out of "
            "range for a sequence of 2 element(s) (valid: -2 .. 2)",
        ),
        ("SequenceInsert", -3, "SequenceInsert node 's' (#1) (opset 17): position -3 is out"),
        ("SequenceErase", 2, "SequenceErase node 's' (#1) (opset 17): position 2 is out of range"),
        ("SequenceErase", -3, "SequenceErase node 's' (#1) (opset 17): position -3 is out"),
        (
            "SequenceAt",
            np.float32(1),
            "SequenceAt node 'y' (#1) (opset 17): position 'pos' must "
            "be one int32 / int64 element, not FLOAT32",
        ),
        (
            "SequenceAt",
            [0, 1],
            "position 'pos' must be one int32 / int64 element, not INT64 of shape (2,)",
        ),
    ],
)
def test_bad_positions_are_refused_naming_the_node(op, position, message):
    assert message in _refusal(_positioned(op, position))


def test_a_position_read_at_run_time_is_refused():
    nodes = [_node("SequenceConstruct", ["a", "b"], "ab"), _node("SequenceAt", ["ab", "p"], "y")]
    proto = model(nodes, _abc_inputs() + [("p", INT64, [])], [("y", FLOAT, None)])
    message = _refusal(proto)
    assert message.startswith("SequenceAt node 'y' (#1) (opset 17): position 'p' is not a constant")


def test_empty_sequences_are_refused_where_an_element_is_needed():
    for op, attributes in (("SequenceErase", {}), ("ConcatFromSequence", {"axis": 0})):
        nodes = [_node("SequenceEmpty", [], "none"), _node(op, ["none"], "y", **attributes)]
        nodes.append(_node("Shape" if op == "ConcatFromSequence" else "SequenceLength", ["y"], "n"))
        proto = model(nodes, [], [("n", INT64, None)])
        assert f"{op} node 'y' (#1) (opset 17): the sequence is empty" in _refusal(proto)


def test_a_sequence_graph_input_is_refused_and_an_output_is_returned_as_its_elements():
    read = model([_node("SequenceLength", ["s"], "n")], [], [("n", INT64, [])])
    read.graph.input.append(_sequence_value("s"))
    assert _refusal(read).startswith(
        "SequenceLength node 'n' (#0) (opset 17): sequence 's' is a graph input"
    )
    assert "rtsoa.InferenceSession" in _refusal(read)
    unread = model(
        [helper.make_node("Neg", ["a"], ["y"])], [("a", FLOAT, [2])], [("y", FLOAT, [2])]
    )
    unread.graph.input.append(_sequence_value("s"))
    assert _refusal(unread).startswith("graph input 's' is a sequence value")
    made = model([_node("SequenceConstruct", ["a", "a"], "s")], [("a", FLOAT, [2])], [])
    made.graph.output.append(_sequence_value("s"))
    graph = lower(made)
    assert [entry[0] for entry in graph.io_description()["outputs"]] == ["s[0]", "s[1]"]
    taken = model([_node("SequenceConstruct", ["s[0]"], "s")], [("s[0]", FLOAT, [2])], [])
    taken.graph.output.append(_sequence_value("s"))
    assert "graph output 's': its element 0 would be returned as 's[0]'" in _refusal(taken)


def test_other_ops_are_refused_a_sequence():
    nodes = [_node("SequenceConstruct", ["a"], "s"), helper.make_node("Neg", ["s"], ["y"])]
    proto = model(nodes, [("a", FLOAT, [2])], [("y", FLOAT, None)])
    assert _refusal(proto).startswith("Neg node (#1) (opset 17): 's' is a sequence value")


def _if_returning_a_sequence(reader):
    branches = {
        label: subgraph(
            [_node("SequenceConstruct", ["a"], f"{label}_s")], label, [], initializers=()
        )
        for label in ("then", "else")
    }
    for label, branch in branches.items():
        branch.output.append(_sequence_value(f"{label}_s"))
    nodes = [
        helper.make_node(
            "If",
            ["flag"],
            ["s"],
            name="choose",
            then_branch=branches["then"],
            else_branch=branches["else"],
        ),
        reader,
    ]
    inputs = [("a", FLOAT, [2]), ("flag", TensorProto.BOOL, [])]
    return model(nodes, inputs, [(reader.output[0], FLOAT, None)])


def test_a_sequence_leaving_an_if_of_an_unknown_condition_is_refused_naming_the_if():
    """Typed by ONNX's shape inference or not, the If's branch must be known at lowering
    (tests/test_ops_sequence_regions.py: a known one is taken)."""
    proto = _if_returning_a_sequence(helper.make_node("SequenceLength", ["s"], ["n"]))
    start = "If node 'choose' (#0) (opset 17): a sequence leaves it"
    assert _refusal(proto).startswith(start)
    assert "condition 'flag' must be known" in _refusal(proto)
    untyped = import_onnx(
        _if_returning_a_sequence(helper.make_node("Identity", ["s"], ["y"])), infer_shapes=False
    )
    assert _refusal(untyped).startswith(start)


def test_a_loop_carrying_a_sequence_with_an_unknown_trip_count_is_refused_naming_it():
    body = subgraph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            _node("SequenceInsert", ["carried_in", "a"], "carried_out"),
        ],
        "body",
        [("cond_out", TensorProto.BOOL, [])],
        [("i", INT64, []), ("cond_in", TensorProto.BOOL, [])],
    )
    body.input.append(_sequence_value("carried_in"))
    body.output.append(_sequence_value("carried_out"))
    nodes = [
        _node("SequenceEmpty", [], "start"),
        helper.make_node("Loop", ["M", "", "start"], ["final"], body=body, name="repeat"),
        helper.make_node("SequenceLength", ["final"], ["n"]),
    ]
    proto = model(nodes, [("a", FLOAT, [2]), ("M", INT64, [])], [("n", INT64, [])])
    assert _refusal(proto).startswith(
        "Loop node 'repeat' (#1) (opset 17): it carries a sequence, and rtsoa resolves "
        "sequences at lowering, so it is unrolled there: its trip count and condition must be "
        "known at lowering"
    )


def _split_length(split=None, runtime_split=False, x_dims=(4, 6)):
    """SplitToSequence of x and its length: (nodes, inputs)."""
    nodes, inputs, inits = _split(split, runtime_split, x_dims)
    assert not inits
    return nodes + [_node("SequenceLength", ["parts"], "y")], inputs


def _construct_then(op, elements=(("x", FLOAT),), **attributes):
    """SequenceConstruct of `elements`, then `op` on it: (nodes, inputs)."""
    nodes = [_node("SequenceConstruct", [name for name, _ in elements], "s")]
    nodes.append(_node(op, ["s"], "y", **attributes))
    return nodes, [(name, elem, [4, 6]) for name, elem in elements]


@pytest.mark.parametrize(
    "nodes_inputs, opset, message",
    [
        (
            _split_length(x_dims=["n", 6]),
            17,
            "SplitToSequence node 'parts' (#0) (opset 17): dim 0 of 'x' is 'n', not known at "
            "lowering",
        ),
        (
            _split_length(3, runtime_split=True),
            17,
            "SplitToSequence node 'parts' (#0) (opset 17): split 'split' is read at run time "
            "and its length is not known at lowering (shape ())",
        ),
        (
            _construct_then("SequenceMap"),
            17,
            "SequenceMap node 'y' (#1) (opset 17): attribute 'body' is missing",
        ),
        (
            _construct_then("SequenceLength"),
            10,
            "SequenceConstruct node 's' (#0) (opset 10): op 'SequenceConstruct' is not supported",
        ),
        (
            _construct_then("SequenceLength", (("x", FLOAT), ("i", INT64))),
            17,
            "SequenceConstruct node 's' (#0) (opset 17): 'i': element types differ (FLOAT32 "
            "and INT64)",
        ),
        (
            _construct_then("ConcatFromSequence", axis=2),
            17,
            "ConcatFromSequence node 'y' (#1) (opset 17): axis 2 is out of range for elements "
            "of rank 2",
        ),
    ],
)
def test_what_is_not_known_or_valid_at_lowering_is_refused_naming_the_node(
    nodes_inputs, opset, message
):
    nodes, inputs = nodes_inputs
    assert message in _refusal(model(nodes, inputs, [("y", FLOAT, None)], opset=opset))
