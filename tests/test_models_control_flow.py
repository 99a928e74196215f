"""ONNX If and Loop lowered onto rtsoa's control flow, judged by onnxruntime.

Every model runs on each executor that runs control flow (topological, priority), lowered once
and run at several inputs so both branches of an If and several trip counts of a Loop are
exercised; each run must leave zero hazards, no leaked block and the device's allocated bytes
back where they were. Tolerances: float32 within rtol 1e-5, atol 1e-6 of onnxruntime (the same
float32 operations in the same order); integers exactly.
"""

import re

import numpy as np
import pytest
from model_checks import ATOL, RTOL, run_and_compare, subgraph
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from rtsoa.errors import LoweringError
from rtsoa.executors import EXECUTORS, KernelError, prepare_executor
from rtsoa.graph.builder import GraphBuilder
from rtsoa.graph.io import load_graph, save_graph
from rtsoa.graph.schema import ValueKind
from rtsoa.kernels import REGISTRY
from rtsoa.kernels.model_control import STATUS_NO_SHAPE_ROWS, STATUS_NOT_A_SCALAR
from rtsoa.lowering import lower
from rtsoa.runtime import load_model
from rtsoa.testing.models import FLOAT, model, run_onnxruntime

INT64, BOOL = TensorProto.INT64, TensorProto.BOOL
CONTROL_FLOW_EXECUTORS = [name for name, cls in EXECUTORS.items() if cls.runs_control_flow]


def _kernel_count(graph, name):
    if name not in graph.kernel_names:
        return 0
    return int(np.sum(graph.node_kernel == graph.kernel_names.index(name)))


# -- If ---------------------------------------------------------------------------------------


def if_model():
    """y = If(sum(x) > 0) then x * 2 + h else concat(-h, x) (a different shape), h = |x| + 1
    computed outside and read in both branches; z = y + 1 after the join."""
    then_branch = subgraph(
        [
            helper.make_node("Mul", ["x", "two"], ["doubled"]),
            helper.make_node("Add", ["doubled", "h"], ["then_y"]),
        ],
        "then",
        [("then_y", FLOAT, None)],
        initializers=[("two", np.float32(2.0))],
    )
    else_branch = subgraph(
        [
            helper.make_node("Neg", ["h"], ["negated"]),
            helper.make_node("Concat", ["negated", "x"], ["else_y"], axis=1),
        ],
        "else",
        [("else_y", FLOAT, None)],
    )
    nodes = [
        helper.make_node("Abs", ["x"], ["absolute"]),
        helper.make_node("Add", ["absolute", "one"], ["h"]),
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["positive"]),
        helper.make_node(
            "If", ["positive"], ["y"], then_branch=then_branch, else_branch=else_branch
        ),
        helper.make_node("Add", ["y", "one"], ["z"]),
    ]
    return model(
        nodes,
        [("x", FLOAT, ["n", 3])],
        [("y", FLOAT, None), ("z", FLOAT, None)],
        [("one", np.float32(1.0)), ("zero", np.float32(0.0))],
    )


def _if_inputs():
    rng = np.random.default_rng(3)
    sets = []
    for rows, sign in ((2, 1), (4, -1), (1, 1), (3, -1)):
        x = (np.abs(rng.standard_normal((rows, 3))) * sign).astype(np.float32)
        sets.append({"x": x})
    return sets


@pytest.mark.parametrize("executor", CONTROL_FLOW_EXECUTORS)
def test_if_runs_the_branch_the_data_chooses(executor):
    graph = run_and_compare(if_model(), _if_inputs(), executor)
    assert _kernel_count(graph, "SwitchNotify") == 1
    assert _kernel_count(graph, "SelectTensor") == 1


def test_if_on_two_streams_has_no_hazards():
    run_and_compare(if_model(), _if_inputs(), "priority", streams=2)


def nested_if_model():
    """y = If(a) then (If(b) then x * 3 else x - 1) else x + 5; b read inside the branch."""
    inner_then = subgraph(
        [helper.make_node("Mul", ["x", "three"], ["inner_then_y"])],
        "inner_then",
        [("inner_then_y", FLOAT, None)],
        initializers=[("three", np.float32(3.0))],
    )
    inner_else = subgraph(
        [helper.make_node("Sub", ["x", "one"], ["inner_else_y"])],
        "inner_else",
        [("inner_else_y", FLOAT, None)],
    )
    outer_then = subgraph(
        [
            helper.make_node(
                "If", ["b"], ["inner_y"], then_branch=inner_then, else_branch=inner_else
            ),
            helper.make_node("Mul", ["inner_y", "one"], ["outer_then_y"]),
        ],
        "outer_then",
        [("outer_then_y", FLOAT, None)],
    )
    outer_else = subgraph(
        [helper.make_node("Add", ["x", "five"], ["outer_else_y"])],
        "outer_else",
        [("outer_else_y", FLOAT, None)],
        initializers=[("five", np.float32(5.0))],
    )
    nodes = [helper.make_node("If", ["a"], ["y"], then_branch=outer_then, else_branch=outer_else)]
    return model(
        nodes,
        [("a", BOOL, []), ("b", BOOL, []), ("x", FLOAT, [2, 2])],
        [("y", FLOAT, [2, 2])],
        [("one", np.float32(1.0))],
    )


@pytest.mark.parametrize("executor", CONTROL_FLOW_EXECUTORS)
def test_nested_if_takes_every_path(executor):
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    sets = [
        {"a": np.array(a, dtype=bool), "b": np.array(b, dtype=bool), "x": x}
        for a in (True, False)
        for b in (True, False)
    ]
    graph = run_and_compare(nested_if_model(), sets, executor)
    assert _kernel_count(graph, "SwitchNotify") == 2


def test_if_with_a_constant_condition_keeps_only_the_branch_it_takes():
    proto = if_model()
    graph_proto = proto.graph
    # replace the data-dependent condition by a constant True
    for node in list(graph_proto.node):
        if node.op_type in ("ReduceSum", "Greater"):
            graph_proto.node.remove(node)
    graph_proto.initializer.append(numpy_helper.from_array(np.array(True), "positive"))
    graph = run_and_compare(proto, _if_inputs()[:2], "topological")
    assert _kernel_count(graph, "SwitchNotify") == 0
    assert _kernel_count(graph, "SelectTensor") == 0


def test_if_condition_must_be_integer_or_bool():
    then_branch = subgraph([helper.make_node("Neg", ["x"], ["t"])], "t", [("t", FLOAT, None)])
    else_branch = subgraph([helper.make_node("Abs", ["x"], ["e"])], "e", [("e", FLOAT, None)])
    proto = model(
        [
            helper.make_node(
                "If", ["c"], ["y"], name="if1", then_branch=then_branch, else_branch=else_branch
            )
        ],
        [("c", FLOAT, []), ("x", FLOAT, [2])],
        [("y", FLOAT, [2])],
    )
    message = "If node 'if1' (#0) (opset 17): the condition 'c' has element type FLOAT32"
    with pytest.raises(LoweringError, match=re.escape(message)):
        lower(proto)


# -- Loop -------------------------------------------------------------------------------------


def counter_body():
    """acc_out = acc_in + float(i) * x; count_out = count_in + 1; cond_out = cond_in."""
    return subgraph(
        [
            helper.make_node("Cast", ["i"], ["i_float"], to=FLOAT),
            helper.make_node("Mul", ["i_float", "x"], ["step"]),
            helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
            helper.make_node("Add", ["count_in", "one_int"], ["count_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [("cond_out", BOOL, []), ("acc_out", FLOAT, None), ("count_out", INT64, [])],
        inputs=[("i", INT64, []), ("cond_in", BOOL, []), ("acc_in", FLOAT, None)]
        + [("count_in", INT64, [])],
        initializers=[("one_int", np.int64(1))],
    )


def m_only_model():
    nodes = [
        helper.make_node(
            "Loop",
            ["M", "", "acc0", "count0"],
            ["acc", "count"],
            name="counter",
            body=counter_body(),
        )
    ]
    return model(
        nodes,
        [("M", INT64, []), ("x", FLOAT, [3])],
        [("acc", FLOAT, [3]), ("count", INT64, [])],
        [("acc0", np.zeros(3, np.float32)), ("count0", np.int64(0))],
    )


@pytest.mark.parametrize("executor", CONTROL_FLOW_EXECUTORS)
def test_loop_with_a_trip_count_counts_and_accumulates(executor):
    x = np.array([1.0, -2.0, 0.5], np.float32)
    sets = [{"M": np.array(trips, np.int64), "x": x} for trips in (0, 1, 5, 3)]
    graph = run_and_compare(m_only_model(), sets, executor)
    assert graph.meta.has_loops


def doubling_body(limit_name):
    """v_out = v_in * 2; cond_out = sum(v_out) < limit."""
    return subgraph(
        [
            helper.make_node("Mul", ["v_in", "two"], ["v_out"]),
            helper.make_node("ReduceSum", ["v_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", limit_name], ["cond_out"]),
        ],
        "body",
        [("cond_out", BOOL, []), ("v_out", FLOAT, None)],
        inputs=[("i", INT64, []), ("cond_in", BOOL, []), ("v_in", FLOAT, None)],
        initializers=[("two", np.float32(2.0))],
    )


def condition_model(with_trip_count):
    inputs = ["M" if with_trip_count else "", "start", "v0"]
    nodes = [
        helper.make_node(
            "ReduceSum",
            [
                "v0",
            ],
            ["first_total"],
            keepdims=0,
        ),
        helper.make_node("Less", ["first_total", "limit"], ["start"]),
        helper.make_node("Loop", inputs, ["v"], body=doubling_body("limit")),
    ]
    graph_inputs = [("v0", FLOAT, [2]), ("limit", FLOAT, [])]
    if with_trip_count:
        graph_inputs.append(("M", INT64, []))
    return model(nodes, graph_inputs, [("v", FLOAT, [2])])


@pytest.mark.parametrize("executor", CONTROL_FLOW_EXECUTORS)
def test_loop_with_a_condition_only_runs_until_it_fails(executor):
    v0 = np.array([1.0, 0.5], np.float32)
    sets = [{"v0": v0, "limit": np.array(limit, np.float32)} for limit in (100.0, 1.0, 7.0)]
    run_and_compare(condition_model(False), sets, executor)


@pytest.mark.parametrize("executor", CONTROL_FLOW_EXECUTORS)
def test_loop_with_trip_count_and_condition_stops_at_the_first(executor):
    v0 = np.array([1.0, 0.5], np.float32)
    sets = [
        {"v0": v0, "limit": np.array(limit, np.float32), "M": np.array(trips, np.int64)}
        for limit, trips in ((100.0, 3), (100.0, 20), (10.0, 20), (0.5, 4))
    ]
    run_and_compare(condition_model(True), sets, executor)


def growing_model():
    """v grows by x every iteration (its shape changes per iteration): v = concat(v, x)."""
    body = subgraph(
        [
            helper.make_node("Concat", ["v_in", "x"], ["v_out"], axis=0),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [("cond_out", BOOL, []), ("v_out", FLOAT, None)],
        inputs=[("i", INT64, []), ("cond_in", BOOL, []), ("v_in", FLOAT, None)],
    )
    nodes = [helper.make_node("Loop", ["M", "", "x"], ["v"], body=body)]
    return model(nodes, [("M", INT64, []), ("x", FLOAT, [2])], [("v", FLOAT, None)])


@pytest.mark.parametrize("executor", CONTROL_FLOW_EXECUTORS)
def test_loop_carried_tensor_may_grow_every_iteration(executor):
    x = np.array([1.5, -1.0], np.float32)
    sets = [{"M": np.array(trips, np.int64), "x": x} for trips in (4, 0, 1, 7)]
    run_and_compare(growing_model(), sets, executor)


def growing_shape_model():
    """v grows by x every iteration (v = concat(v, x)) and s = Shape(v) is taken inside the
    body before it grows: after M iterations s is [2 * M] (the shape of the last iteration's
    v), v has 2 * (M + 1) elements."""
    body = subgraph(
        [
            helper.make_node("Shape", ["v_in"], ["s_out"]),
            helper.make_node("Concat", ["v_in", "x"], ["v_out"], axis=0),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [("cond_out", BOOL, []), ("v_out", FLOAT, None), ("s_out", INT64, None)],
        inputs=[("i", INT64, []), ("cond_in", BOOL, []), ("v_in", FLOAT, None)]
        + [("s_in", INT64, None)],
    )
    nodes = [helper.make_node("Loop", ["M", "", "x", "s0"], ["v", "s"], body=body)]
    return model(
        nodes,
        [("M", INT64, []), ("x", FLOAT, [2])],
        [("v", FLOAT, None), ("s", INT64, None)],
        [("s0", np.array([0], np.int64))],
    )


@pytest.mark.parametrize("executor", CONTROL_FLOW_EXECUTORS)
def test_a_shape_inside_a_loop_body_follows_a_growing_carried_value(executor):
    """The body's Shape must not fold to the initial value's dims (2): the carried value's
    dims widen to unknown before the body is folded, so with three iterations s is [6]."""
    x = np.array([1.5, -1.0], np.float32)
    sets = [{"M": np.array(trips, np.int64), "x": x} for trips in (3, 1, 5)]
    graph = run_and_compare(growing_shape_model(), sets, executor)
    with load_model(graph, executor=executor) as run:
        got = run.execute_sync({"M": np.array(3, np.int64), "x": x})
    np.testing.assert_array_equal(got["s"], [6])
    assert got["v"].shape == (8,)


@pytest.mark.parametrize("executor", CONTROL_FLOW_EXECUTORS)
def test_if_branches_returning_one_tensor_for_two_outputs(executor):
    """A branch returning the same tensor for both outputs (then: t, t; else: e, e), both read
    after the join: each output is a block of its own. Judged by onnx.reference (onnxruntime
    returns garbage for the second output of such a branch)."""
    then_branch = subgraph(
        [helper.make_node("Neg", ["x"], ["t"])], "then", [("t", FLOAT, None), ("t", FLOAT, None)]
    )
    else_branch = subgraph(
        [helper.make_node("Abs", ["x"], ["e"])], "else", [("e", FLOAT, None), ("e", FLOAT, None)]
    )
    proto = model(
        [
            helper.make_node(
                "If", ["c"], ["y1", "y2"], then_branch=then_branch, else_branch=else_branch
            ),
            helper.make_node("Mul", ["y1", "y2"], ["product"]),
        ],
        [("c", BOOL, []), ("x", FLOAT, [3])],
        [("y1", FLOAT, [3]), ("y2", FLOAT, [3]), ("product", FLOAT, [3])],
    )
    x = np.array([1.0, -2.0, 3.5], np.float32)
    judge = ReferenceEvaluator(proto)
    with load_model(lower(proto), executor=executor) as run:
        for flag in (True, False, True):
            inputs = {"c": np.array(flag), "x": x}
            got = run.execute_sync(inputs)
            want = dict(zip(["y1", "y2", "product"], judge.run(None, inputs), strict=True))
            for name, expected in want.items():
                np.testing.assert_array_equal(got[name], expected)
            assert run.main.leaked_blocks == 0
        assert run.device.hazard_count == 0


def test_lowered_loop_saves_and_reloads(tmp_path):
    proto = m_only_model()
    path = save_graph(lower(proto), tmp_path / "loop.rtsoa")
    inputs = {"M": np.array(4, np.int64), "x": np.array([1.0, 2.0, 3.0], np.float32)}
    with load_model(load_graph(path), executor="topological") as run:
        got = run.execute_sync(inputs)
    want = run_onnxruntime(proto, inputs)
    np.testing.assert_allclose(got["acc"], want["acc"], RTOL, ATOL)
    np.testing.assert_array_equal(got["count"], want["count"])


def test_loop_with_if_in_its_body():
    """acc += (i is even ? x : -x): an If inside the body, reading the iteration number."""
    even = subgraph(
        [helper.make_node("Identity", ["x"], ["even_y"])], "e", [("even_y", FLOAT, None)]
    )
    odd = subgraph([helper.make_node("Neg", ["x"], ["odd_y"])], "o", [("odd_y", FLOAT, None)])
    body = subgraph(
        [
            helper.make_node("Div", ["i", "two"], ["half"]),  # integer division: i >= 0
            helper.make_node("Mul", ["half", "two"], ["even_part"]),
            helper.make_node("Sub", ["i", "even_part"], ["parity"]),
            helper.make_node("Equal", ["parity", "zero"], ["is_even"]),
            helper.make_node("If", ["is_even"], ["term"], then_branch=even, else_branch=odd),
            helper.make_node("Add", ["acc_in", "term"], ["acc_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [("cond_out", BOOL, []), ("acc_out", FLOAT, None)],
        inputs=[("i", INT64, []), ("cond_in", BOOL, []), ("acc_in", FLOAT, None)],
        initializers=[("two", np.int64(2)), ("zero", np.int64(0))],
    )
    proto = model(
        [helper.make_node("Loop", ["M", "", "acc0"], ["acc"], body=body)],
        [("M", INT64, []), ("x", FLOAT, [2])],
        [("acc", FLOAT, [2])],
        [("acc0", np.zeros(2, np.float32))],
    )
    x = np.array([1.0, 3.0], np.float32)
    for executor in CONTROL_FLOW_EXECUTORS:
        run_and_compare(proto, [{"M": np.array(m, np.int64), "x": x} for m in (5, 2)], executor)


def test_loop_with_a_constant_zero_trip_count_is_its_initial_values():
    proto = m_only_model()
    proto.graph.input.remove(proto.graph.input[0])
    proto.graph.initializer.append(numpy_helper.from_array(np.int64(0), "M"))
    graph = run_and_compare(proto, [{"x": np.ones(3, np.float32)}], "topological")
    assert _kernel_count(graph, "Enter") == 0


def test_unknown_outer_tensor_in_a_branch_is_named():
    then_branch = subgraph([helper.make_node("Neg", ["ghost"], ["t"])], "t", [("t", FLOAT, None)])
    else_branch = subgraph([helper.make_node("Abs", ["x"], ["e"])], "e", [("e", FLOAT, None)])
    proto = model(
        [
            helper.make_node(
                "If", ["c"], ["y"], name="if2", then_branch=then_branch, else_branch=else_branch
            )
        ],
        [("c", BOOL, []), ("x", FLOAT, [2])],
        [("y", FLOAT, [2])],
    )
    with pytest.raises(LoweringError, match="tensor 'ghost' is not defined"):
        lower(proto)


def test_loop_body_with_the_wrong_inputs_is_refused_naming_the_node():
    body = subgraph([helper.make_node("Identity", ["x"], ["z"])], "body", [("z", FLOAT, [2])])
    proto = model(
        [helper.make_node("Loop", ["n", "c"], ["y"], name="bad", body=body)],
        [("n", INT64, []), ("c", BOOL, []), ("x", FLOAT, [2])],
        [("y", FLOAT, [2])],
    )
    message = "Loop node 'bad' (#0) (opset 17): the body takes 0 inputs; 2 expected"
    with pytest.raises(LoweringError, match=re.escape(message)):
        lower(proto)


@pytest.mark.parametrize("executor", CONTROL_FLOW_EXECUTORS)
def test_if_branches_returning_an_outer_tensor_and_a_constant(executor):
    """Results no op of the branch computes (an enclosing tensor, a constant) are copied.
    onnxruntime refuses a branch returning an enclosing tensor directly, so the reference is
    the hand computation y = x if c else k."""
    k = np.array([7.0, 8.0], np.float32)
    then_branch = subgraph([], "then", [("x", FLOAT, [2])])
    else_branch = subgraph([], "else", [("k", FLOAT, [2])], initializers=[("k", k)])
    proto = model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)],
        [("c", BOOL, []), ("x", FLOAT, [2])],
        [("y", FLOAT, [2])],
    )
    x = np.array([1.0, 2.0], np.float32)
    with load_model(lower(proto), executor=executor) as run:
        for flag in (True, False, True):
            got = run.execute_sync({"c": np.array(flag), "x": x})["y"]
            np.testing.assert_array_equal(got, x if flag else k)
            assert run.main.leaked_blocks == 0
        assert run.device.hazard_count == 0


def test_a_condition_of_more_than_one_element_fails_the_run_naming_the_read():
    # the condition's shape is symbolic, so only the run can tell it is not one element
    then_branch = subgraph([helper.make_node("Neg", ["x"], ["t"])], "t", [("t", FLOAT, None)])
    else_branch = subgraph([helper.make_node("Abs", ["x"], ["e"])], "e", [("e", FLOAT, None)])
    proto = model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)],
        [("c", BOOL, ["k"]), ("x", FLOAT, [2])],
        [("y", FLOAT, [2])],
    )
    x = np.ones(2, np.float32)
    with load_model(proto, executor="topological") as run:
        with pytest.raises(KernelError) as failure:
            run.execute_sync({"c": np.array([True, False]), "x": x})
        assert failure.value.status == STATUS_NOT_A_SCALAR
        assert failure.value.kernel == "TensorToInt"
        assert "(control flow: a condition or trip count tensor does not hold exactly one" in (
            str(failure.value)
        )
        assert run.main.leaked_blocks == 0
        # the executor stays usable: a one-element condition runs
        got = run.execute_sync({"c": np.array([False]), "x": -x})["y"]
        np.testing.assert_array_equal(got, x)


def test_tensor_moves_refuse_a_graph_without_shape_rows():
    builder = GraphBuilder(name="no-shapes")
    _, (flag,) = REGISTRY.add_node(builder, "ConstInt", attributes=[0])
    shape = builder.add_value(kind=ValueKind.SHAPE)
    block = builder.add_value(kind=ValueKind.MEMORY_BLOCK)
    REGISTRY.add_node(builder, "SelectTensor", inputs=[flag, shape, block])
    builder.add_edge(0, 1)
    executor = prepare_executor(builder.finalize(), executor="topological")
    with pytest.raises(KernelError) as failure:
        executor.run()
    assert failure.value.status == STATUS_NO_SHAPE_ROWS
    assert failure.value.kernel == "SelectTensor"
    assert "(control flow: the graph's values have no shape rows" in str(failure.value)
