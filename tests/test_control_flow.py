"""If / Case / While inside one flat graph, on the topological and priority executors."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import check_edges_ordered, counts_array, reference_run

from rtsoa import GraphBuilder
from rtsoa.executors import KernelError, Profiler, prepare_executor
from rtsoa.graph.schema import GraphKind
from rtsoa.kernels.checksum import expected_checksum
from rtsoa.kernels.control_flow import add_const_int, add_if, add_while

QUEUE_EXECUTORS = ("topological", "priority")


def work(name="Checksum0"):
    """A branch / body callable adding one node after the pivot; returns it as the leaf."""

    def body(builder, subgraph, pivot, *counter):
        node = builder.add_node(name, graph=subgraph)
        builder.add_edge(pivot, node)
        return [node]

    return body


def runs_of(graph, counts, name):
    """Total executions of nodes running kernel `name`."""
    index = graph.kernel_names.index(name) if name in graph.kernel_names else -1
    return int(counts[graph.node_kernel == index].sum())


def run_and_compare(graph, executors=QUEUE_EXECUTORS):
    """Every executor matches the reference's counts and checksum; returns the counts."""
    reference = reference_run(graph)
    expected_counts = counts_array(graph, reference.order)
    expected = expected_checksum(graph, nodes=range(graph.num_nodes), counts=expected_counts)
    assert reference.checksum == expected
    for name in executors:
        executor = prepare_executor(graph, name)
        result = executor.run()
        assert result.checksum == reference.checksum, name
        assert result.nodes_executed == len(reference.order), name
        profiler = Profiler()
        assert executor.run(subscriber=profiler) == result
        assert (counts_array(graph, profiler.nodes) == expected_counts).all(), name
        if not graph.meta.has_loops:
            check_edges_ordered(graph, profiler.nodes)
    return expected_counts


@pytest.mark.parametrize("iterations", [0, 1, 5, 100])
def test_while_runs_body_n_times(iterations):
    builder = GraphBuilder()
    first = builder.add_node("Checksum1")
    loop = add_while(builder, iterations, body=work("Checksum2"), after=[first])
    last = builder.add_node("Checksum3")
    builder.add_edge(loop.exit, last)
    graph = builder.finalize()
    counts = run_and_compare(graph)
    assert runs_of(graph, counts, "Checksum2") == iterations
    assert counts[loop.cond] == iterations + 1
    assert counts[first] == counts[last] == counts[loop.exit] == 1


@pytest.mark.parametrize("taken", [0, 1, 2, 7, -1])
def test_case_runs_only_the_taken_branch(taken):
    builder = GraphBuilder()
    const, condition = add_const_int(builder, taken)
    branches = [work(f"Checksum{k}") for k in range(3)]
    cf = add_if(builder, condition, branches, after=[const])
    tail = builder.add_node("Checksum9")
    builder.add_edge(cf.join, tail)
    graph = builder.finalize()
    counts = run_and_compare(graph)
    chosen = min(max(taken, 0), 2)
    for branch, pivot in enumerate(cf.pivots):
        assert counts[pivot] == (branch == chosen)
        assert runs_of(graph, counts, f"Checksum{branch}") == (branch == chosen)
    branch_nodes = [n for n in range(graph.num_nodes) if graph.node_graph[n] >= 3]
    ran = {int(graph.node_graph[n]) for n in branch_nodes if counts[n]}
    assert ran == {cf.subgraphs[chosen]}
    assert counts[tail] == counts[cf.join] == 1


def test_if_inside_while_follows_the_counter():
    builder = GraphBuilder()

    def body(builder, subgraph, pivot, counter):
        cf = add_if(builder, counter, [work("Checksum4"), work("Checksum5")], subgraph, [pivot])
        return [cf.join]

    loop = add_while(builder, 4, body=body)
    graph = builder.finalize()
    counts = run_and_compare(graph)
    # iteration 0 takes branch 0; iterations 1, 2, 3 take branch 1 (index clamped)
    assert runs_of(graph, counts, "Checksum4") == 1
    assert runs_of(graph, counts, "Checksum5") == 3
    assert counts[loop.exit] == 1


@pytest.mark.parametrize("taken", [0, 1])
def test_while_inside_an_if_branch(taken):
    builder = GraphBuilder()
    const, condition = add_const_int(builder, taken)

    def looping(builder, subgraph, pivot):
        loop = add_while(builder, 3, work("Checksum6"), graph=subgraph, after=[pivot])
        return [loop.exit]

    cf = add_if(builder, condition, [work("Checksum7"), looping], after=[const])
    graph = builder.finalize()
    counts = run_and_compare(graph)
    body_runs = runs_of(graph, counts, "Checksum6")
    other_runs = runs_of(graph, counts, "Checksum7")
    assert (body_runs, other_runs) == ((0, 1) if taken == 0 else (3, 0))
    assert counts[cf.join] == 1


def test_nested_loops_and_zero_iterations_inside():
    builder = GraphBuilder()

    def outer(builder, subgraph, pivot, counter):
        inner = add_while(builder, 2, work("Checksum8"), graph=subgraph, after=[pivot])
        empty = add_while(builder, 0, work("Checksum9"), graph=subgraph, after=[inner.exit])
        return [empty.exit]

    add_while(builder, 3, outer)
    graph = builder.finalize()
    counts = run_and_compare(graph)
    assert runs_of(graph, counts, "Checksum8") == 6
    assert runs_of(graph, counts, "Checksum9") == 0


def test_executor_choice_and_sequential_rejects_control_flow():
    builder = GraphBuilder()
    add_while(builder, 2, work())
    graph = builder.finalize()
    assert prepare_executor(graph).name == "topological"
    with pytest.raises(ValueError, match="sequential"):
        prepare_executor(graph, "sequential")
    builder = GraphBuilder()
    launches = [builder.add_node("LaunchKernel", attributes=[1, 1]) for _ in range(5)]
    loop = add_while(builder, 1, work(), after=launches)
    assert prepare_executor(builder.finalize()).name == "priority"
    assert loop.exit > 0


def test_branch_node_without_pivot_edge_is_rejected():
    builder = GraphBuilder()
    const, condition = add_const_int(builder, 0)

    def careless(builder, subgraph, pivot):
        return [builder.add_node("Checksum0", graph=subgraph)]  # forgot the pivot edge

    add_if(builder, condition, [careless], after=[const])
    with pytest.raises(Exception, match="unconditionally"):
        prepare_executor(builder.finalize())


# -- random nested control flow (property test) -------------------------------------------------


def _block(builder, draw, graph, frontier, depth, counter):
    """Append 1-3 random statements after `frontier`; returns the new frontier."""
    for _ in range(draw(st.integers(1, 3))):
        choice = draw(st.sampled_from(["work", "work", "if", "while"] if depth < 3 else ["work"]))
        if choice == "work":
            node = builder.add_node(f"Checksum{draw(st.integers(0, 15))}", graph=graph)
            for before in frontier:
                builder.add_edge(before, node)
            frontier = [node]
        elif choice == "if":
            if counter is not None and draw(st.booleans()):
                condition, after = counter, list(frontier)
            else:
                const, condition = add_const_int(builder, draw(st.integers(-1, 3)), graph, frontier)
                after = [const]

            def branch(builder, subgraph, pivot):
                return _block(builder, draw, subgraph, [pivot], depth + 1, counter)

            count = draw(st.integers(1, 3))
            frontier = [add_if(builder, condition, [branch] * count, graph, after).join]
        else:

            def body(builder, subgraph, pivot, loop_counter):
                return _block(builder, draw, subgraph, [pivot], depth + 1, loop_counter)

            loop = add_while(builder, draw(st.integers(0, 3)), body, graph, frontier)
            frontier = [loop.exit]
    return frontier


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_property_random_control_flow(data):
    builder = GraphBuilder()
    _block(builder, data.draw, GraphKind.MAIN, [], 0, None)
    graph = builder.finalize()
    run_and_compare(graph)


@pytest.mark.parametrize("executor", ["topological", "priority"])
def test_a_loop_that_never_ends_hits_the_step_limit_instead_of_hanging(executor):
    from rtsoa.kernels.status import STATUS_STEP_LIMIT

    builder = GraphBuilder()
    add_while(builder, iterations=10**15)
    graph = builder.finalize()
    ex = prepare_executor(graph, executor=executor, max_steps=5_000)
    for _ in range(2):  # the executor stays usable: the limit is re-armed per run
        with pytest.raises(KernelError) as info:
            ex.run()
        assert info.value.status == STATUS_STEP_LIMIT
        assert info.value.nodes_executed == 5_000
    assert prepare_executor(graph, executor=executor).max_steps == 1_000_000_000
    with pytest.raises(ValueError, match="max_steps"):
        prepare_executor(graph, executor=executor, max_steps=0)
