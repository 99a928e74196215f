"""Executors against the pure-Python reference: checksums, edge order, priorities, errors."""

import pytest
from executor_checks import (
    GENERATED,
    generated_case,
    property_settings,
    random_priority_graph,
    run_recorded,
)
from hypothesis import given
from hypothesis import strategies as st
from numba import types
from reference import RecordingBuilder, check_dag_order, recorded_generate, simulate

from rtsoa import GraphBuilder, load_graph, save_graph
from rtsoa.errors import GraphFormatError, RtsoaError, UnknownKernelError
from rtsoa.executors import (
    EXECUTORS,
    KernelError,
    Profiler,
    RunResult,
    prepare_executor,
)
from rtsoa.graph.generators import generate
from rtsoa.graph.schema import GraphKind, ValueKind
from rtsoa.kernels import STATUS_END_OF_SEQUENCE, expected_checksum
from rtsoa.kernels.control_flow import add_const_int, add_if

# Executors with one fixed order the reference computes; the multithread executor's order
# depends on timing, so tests/test_multithread.py checks it (answers, edge order) instead.
SINGLE_THREAD = tuple(name for name, cls in EXECUTORS.items() if not cls.uses_threads)
SETTINGS = property_settings(25)


def check_all_executors(graph, description):
    """Every executor runs every Main node once, in exactly the order the reference computes
    from the user's description for its policy, with the reference's checksum."""
    expected = expected_checksum(graph)
    for name in SINGLE_THREAD:
        reference = simulate(description, name)
        assert reference.kind == "ok" and reference.checksum == expected, name
        executor = prepare_executor(graph, name)
        result, order = run_recorded(executor)
        assert result == RunResult(0, graph.nodes_of().shape[0], expected, False), name
        assert order.tolist() == reference.order, name
        check_dag_order(graph, order)


@pytest.mark.parametrize("kind", ["chain", "random", "layered", "lowered"])
@pytest.mark.parametrize("nodes", [1, 7, 1000])
def test_generated_graphs_match_reference(kind, nodes):
    check_all_executors(*recorded_generate(kind, nodes, seed=nodes))


@SETTINGS
@given(**GENERATED)
def test_property_every_executor_agrees(kind, nodes, seed, kernels):
    check_all_executors(*generated_case(kind, nodes, seed, kernels))


@SETTINGS
@given(data=st.data(), nodes=st.integers(2, 60))
def test_property_random_priorities(data, nodes):
    """Arbitrary priorities and edges (added in any order, repeats included): sequential runs
    the (priority, ready time) Kahn order, priority the (priority, id) one, topological the
    FIFO one, each exactly as the reference computes it from the description. Catches:
    priorities ignored by `priority_order` (sequential.py) or by the priority executor's keys;
    ties broken by id instead of ready time in the sequential order; successors visited in
    another order than the edges were added."""
    check_all_executors(*random_priority_graph(data, nodes))


def test_sequential_and_priority_follow_priority_topological_is_fifo():
    builder = GraphBuilder()
    for priority in (2, 0, 1, 0):
        builder.add_node("Checksum0", priority=priority)
    graph = builder.finalize()
    orders = {name: run_recorded(prepare_executor(graph, name))[1] for name in EXECUTORS}
    assert orders["sequential"].tolist() == [1, 3, 2, 0]
    assert orders["priority"].tolist() == [1, 3, 2, 0]
    assert orders["topological"].tolist() == [0, 1, 2, 3]


def test_loaded_graph_runs_like_built(tmp_path):
    graph = generate("random", 500, seed=3, edges_per_node=5, window=50)
    loaded = load_graph(save_graph(graph, tmp_path / "g.rtsoa"))
    for name in EXECUTORS:
        built = prepare_executor(graph, name).run()
        from_disk = prepare_executor(loaded, name)
        assert from_disk.run() == built
        # One compiled signature serves read-only (memory-mapped) and in-memory graphs (the
        # other signature of the same loop, with a record array, serves subscribed runs).
        plain = [sig for sig in from_disk._loop.signatures if sig[-1] == types.none]
        assert len(plain) == 1


def test_repeated_runs_are_identical():
    graph = generate("lowered", 2000, seed=1)
    executor = prepare_executor(graph, "priority")
    first = executor.run()
    assert all(executor.run() == first for _ in range(3))
    assert first.checksum == expected_checksum(graph)


def test_auto_without_control_flow_is_sequential():
    assert prepare_executor(generate("random", 50), "auto").name == "sequential"


def test_unknown_kernel_is_named():
    builder = GraphBuilder()
    builder.add_node("Checksum1")
    builder.add_node("NoSuchKernel")
    builder.add_node("AlsoMissing")
    with pytest.raises(UnknownKernelError, match="NoSuchKernel.*AlsoMissing"):
        prepare_executor(builder.finalize())


def test_unknown_executor_and_sequential_control_flow_rejected():
    """Catches: an unknown name accepted, or the sequential executor (which cannot skip an
    untaken branch) accepting a graph with control flow (resolve_executor's check dropped)."""
    graph = generate("chain", 5)
    with pytest.raises(ValueError, match="unknown executor"):
        prepare_executor(graph, "fastest")
    builder = GraphBuilder()
    const, condition = add_const_int(builder, 1)
    add_if(builder, condition, [None, None], after=[const])
    with pytest.raises(ValueError, match="sequential executor cannot run control flow"):
        prepare_executor(builder.finalize(), "sequential")


def test_missing_kernel_inputs_rejected_before_running():
    builder = GraphBuilder()
    builder.add_node("Checksum0")
    builder.add_node("InferShape", attributes=[8])  # no output value
    with pytest.raises(GraphFormatError, match="InferShape.*outputs"):
        prepare_executor(builder.finalize())


def test_other_roots_and_empty_main():
    builder = GraphBuilder()
    builder.add_node("Checksum0", graph=GraphKind.INIT)
    builder.add_node("Checksum1", graph=GraphKind.INIT)
    builder.add_node("Checksum2", graph=GraphKind.DEINIT)
    graph = builder.finalize()
    assert prepare_executor(graph).run().nodes_executed == 0
    init = prepare_executor(graph, "topological", root=GraphKind.INIT).run()
    assert init.nodes_executed == 2
    assert init.checksum == expected_checksum(graph, nodes=[0, 1])


# -- errors and end of sequence ---------------------------------------------------------------


def _fail_graph():
    """Chain Checksum0 x 10 with a FailWhen at node 5 whose status is an INT graph input."""
    builder = RecordingBuilder()
    status_value = builder.add_value(kind=ValueKind.INT)
    for node in range(10):
        if node == 5:
            builder.add_node("FailWhen", inputs=[status_value], compute_node=42)
        else:
            builder.add_node("Checksum0")
        if node:
            builder.add_edge(node - 1, node)
    return builder.finalize(), status_value, builder.description


@pytest.mark.parametrize("name", SINGLE_THREAD)
def test_kernel_failure_is_typed_and_recoverable(name):
    graph, status_value, description = _fail_graph()
    executor = prepare_executor(graph, name)
    executor.runtime.values.slots[status_value] = 7
    with pytest.raises(KernelError) as caught:
        executor.run()
    error = caught.value
    assert isinstance(error, RtsoaError)
    assert (error.status, error.node, error.kernel, error.compute_node) == (7, 5, "FailWhen", 42)
    assert error.nodes_executed == 6
    reference = simulate(description, name, slots={status_value: 7})
    assert (reference.kind, reference.status, reference.node) == ("fail", 7, 5)
    assert len(reference.order) == error.nodes_executed
    executor.runtime.values.slots[status_value] = 0
    result = executor.run()
    assert result == RunResult(0, 10, expected_checksum(graph), False)
    # the profiled variant reports the same failure
    executor.runtime.values.slots[status_value] = -3
    with pytest.raises(KernelError, match="status -3"):
        executor.run(subscriber=Profiler())
    executor.runtime.values.slots[status_value] = 0
    assert executor.run() == result


def test_fail_kernel_first_failure_wins():
    builder = GraphBuilder()
    builder.add_node("Checksum0")
    builder.add_node("Fail", attributes=[11], priority=1)
    builder.add_node("Fail", attributes=[12], priority=2)
    builder.add_edge(0, 1)
    builder.add_edge(0, 2)
    graph = builder.finalize()
    for name in SINGLE_THREAD:
        with pytest.raises(KernelError) as caught:
            prepare_executor(graph, name).run()
        assert (caught.value.status, caught.value.node) == (11, 1)


@pytest.mark.parametrize("name", SINGLE_THREAD)
def test_end_of_sequence_is_not_an_error(name):
    builder = RecordingBuilder()
    for node in range(6):
        builder.add_node("EndOfSequence" if node == 3 else "Checksum2")
        if node:
            builder.add_edge(node - 1, node)
    graph = builder.finalize()
    result = prepare_executor(graph, name).run()
    assert result.end_of_sequence and result.status == STATUS_END_OF_SEQUENCE
    assert result.nodes_executed == 4
    assert result.checksum == expected_checksum(graph, nodes=[0, 1, 2])
    reference = simulate(builder.description, name)
    assert (reference.kind, reference.node, reference.checksum) == ("end", 3, result.checksum)


def test_busy_kernel_folds_like_checksum():
    builder = GraphBuilder()
    builder.add_node("Busy", attributes=[1000])
    builder.add_node("Busy", attributes=[0])
    builder.add_edge(0, 1)
    graph = builder.finalize()
    assert prepare_executor(graph).run().checksum == expected_checksum(graph)


def test_executor_checksum_independent_of_numpy_reference_on_large_graph():
    graph = generate("random", 20_000, seed=9)
    for name in EXECUTORS:
        assert prepare_executor(graph, name).run().checksum == expected_checksum(graph)


def test_kernel_error_pickles():
    import pickle

    error = KernelError(3, 4, "Fail", -1, 5)
    again = pickle.loads(pickle.dumps(error))
    assert (again.status, again.node, again.kernel) == (3, 4, "Fail")


def test_nodes_array_matches_reference_order_for_topological():
    graph, description = recorded_generate("layered", 300, seed=5, width=10)
    _, order = run_recorded(prepare_executor(graph, "topological"))
    assert order.tolist() == simulate(description, "topological").order
