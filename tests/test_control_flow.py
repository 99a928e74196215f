"""If / Case / While inside one flat graph, on the topological and priority executors.

Two oracles, neither of which reads the finalized graph: the reference model (`reference.py`)
simulates the recorded description of the graph (its own successor order, in-degrees and
WaitAnyone clamp), and the expected counts of each test are computed by hand from the
documented lowering (If: SwitchNotify, one BranchPivot / BranchDone per branch, WaitAnyone;
While: Enter, then per check WaitAnyone + LoopCond + CondSwitchNotify, per iteration
BranchPivot + body + LoopIncrement + BranchDone, then Exit). The random programs of the
property test are interpreted from their own structure too.
"""

from collections import Counter
from typing import NamedTuple

import pytest
from figures import report
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import RecordingBuilder, check_edges_ordered, simulate

from rtsoa import GraphBuilder
from rtsoa.executors import KernelError, Profiler, prepare_executor
from rtsoa.graph.schema import GraphKind
from rtsoa.kernels.control_flow import add_const_int, add_if, add_while

QUEUE_EXECUTORS = ("topological", "priority")


def work(name="Checksum0"):
    """A branch / body callable adding one node after the pivot; returns it as the leaf."""

    def body(builder, subgraph, pivot, *counter):
        node = builder.add_node(name, graph=subgraph)
        builder.add_edge(pivot, node)
        return [node]

    return body


def runs_of(builder, counts, name):
    """Total executions of the nodes the user added with kernel `name`."""
    nodes = builder.description.nodes
    return int(sum(counts[u] for u in range(len(nodes)) if nodes[u].kernel == name))


def run_and_compare(builder, executors=QUEUE_EXECUTORS):
    """Finalize; every executor runs exactly the reference's order (simulated from the recorded
    description under its policy) with its checksum. Returns (graph, counts, nodes executed)."""
    graph = builder.finalize()
    counts = None
    for name in executors:
        reference = simulate(builder.description, name)
        assert reference.kind == "ok", (name, reference.kind)
        # room for every step: the default (8 * nodes + 1024) drops the rest of a deep loop nest
        executor = prepare_executor(graph, name, record_capacity=len(reference.order))
        result = executor.run()
        assert result.checksum == reference.checksum, name
        assert result.nodes_executed == len(reference.order), name
        profiler = Profiler()
        assert executor.run(subscriber=profiler) == result
        assert executor.dropped_steps == 0, name
        assert profiler.nodes.tolist() == reference.order, name
        if not graph.meta.has_loops:
            check_edges_ordered(graph, profiler.nodes)
        counts = reference.counts(graph.num_nodes)
    return graph, counts, int(counts.sum())


# first, Enter, Exit, last: 4; per check of the condition 3 (WaitAnyone, LoopCond,
# CondSwitchNotify), iterations + 1 checks; per iteration 4 (pivot, work, increment, done):
# 4 + 3 (n + 1) + 4 n = 7 + 7 n.
@pytest.mark.parametrize("iterations, executed", [(0, 7), (1, 14), (5, 42), (100, 707)])
def test_while_runs_body_n_times(iterations, executed):
    builder = RecordingBuilder()
    first = builder.add_node("Checksum1")
    loop = add_while(builder, iterations, body=work("Checksum2"), after=[first])
    last = builder.add_node("Checksum3")
    builder.add_edge(loop.exit, last)
    _, counts, total = run_and_compare(builder)
    assert runs_of(builder, counts, "Checksum2") == iterations
    assert counts[loop.cond] == counts[loop.switch] == counts[loop.join] == iterations + 1
    assert counts[loop.pivot] == counts[loop.done] == iterations
    assert counts[first] == counts[last] == counts[loop.exit] == counts[loop.enter] == 1
    assert total == executed


@pytest.mark.parametrize("taken", [0, 1, 2, 7, -1])
def test_case_runs_only_the_taken_branch(taken):
    """Branch k is the switch's k-th successor as the user added them. Catches: successor rows
    reordered by the CSR build (e.g. reversed in csr._dedupe_rows: the Case takes another
    branch); the choice not clamped to the branches."""
    builder = RecordingBuilder()
    const, condition = add_const_int(builder, taken)
    branches = [work(f"Checksum{k}") for k in range(3)]
    cf = add_if(builder, condition, branches, after=[const])
    tail = builder.add_node("Checksum9")
    builder.add_edge(cf.join, tail)
    graph, counts, total = run_and_compare(builder)
    chosen = {0: 0, 1: 1, 2: 2, 7: 2, -1: 0}[taken]  # clamped to 0 .. 2, by hand
    for branch, pivot in enumerate(cf.pivots):
        assert counts[pivot] == counts[cf.dones[branch]] == (branch == chosen)
        assert runs_of(builder, counts, f"Checksum{branch}") == (branch == chosen)
    branch_nodes = [n for n in range(graph.num_nodes) if graph.node_graph[n] >= 3]
    ran = {int(graph.node_graph[n]) for n in branch_nodes if counts[n]}
    assert ran == {cf.subgraphs[chosen]}
    assert counts[tail] == counts[cf.join] == counts[cf.switch] == counts[const] == 1
    assert total == 7  # ConstInt, SwitchNotify, pivot, work, BranchDone, WaitAnyone, tail


def test_if_inside_while_follows_the_counter():
    builder = RecordingBuilder()

    def body(builder, subgraph, pivot, counter):
        cf = add_if(builder, counter, [work("Checksum4"), work("Checksum5")], subgraph, [pivot])
        return [cf.join]

    loop = add_while(builder, 4, body=body)
    _, counts, total = run_and_compare(builder)
    # iteration 0 takes branch 0; iterations 1, 2, 3 take branch 1 (index clamped)
    assert runs_of(builder, counts, "Checksum4") == 1
    assert runs_of(builder, counts, "Checksum5") == 3
    assert counts[loop.exit] == 1
    # per iteration: pivot, SwitchNotify, branch pivot, work, branch done, WaitAnyone,
    # increment, done = 8; Enter + 5 checks x 3 + 4 x 8 + Exit = 49
    assert total == 49


@pytest.mark.parametrize("taken, executed", [(0, 6), (1, 31)])
def test_while_inside_an_if_branch(taken, executed):
    builder = RecordingBuilder()
    const, condition = add_const_int(builder, taken)

    def looping(builder, subgraph, pivot):
        loop = add_while(builder, 3, work("Checksum6"), graph=subgraph, after=[pivot])
        return [loop.exit]

    cf = add_if(builder, condition, [work("Checksum7"), looping], after=[const])
    _, counts, total = run_and_compare(builder)
    body_runs = runs_of(builder, counts, "Checksum6")
    other_runs = runs_of(builder, counts, "Checksum7")
    assert (body_runs, other_runs) == ((0, 1) if taken == 0 else (3, 0))
    assert counts[cf.join] == 1
    # ConstInt, SwitchNotify, pivot, BranchDone, WaitAnyone = 5, plus the branch: Checksum7
    # (1) or the loop (Enter + 4 checks x 3 + 3 x 4 + Exit = 26)
    assert total == executed


def test_nested_loops_and_zero_iterations_inside():
    builder = RecordingBuilder()

    def outer(builder, subgraph, pivot, counter):
        inner = add_while(builder, 2, work("Checksum8"), graph=subgraph, after=[pivot])
        empty = add_while(builder, 0, work("Checksum9"), graph=subgraph, after=[inner.exit])
        return [empty.exit]

    add_while(builder, 3, outer)
    _, counts, total = run_and_compare(builder)
    assert runs_of(builder, counts, "Checksum8") == 6
    assert runs_of(builder, counts, "Checksum9") == 0
    # inner loop: 1 + 3 x 3 + 2 x 4 + 1 = 19; empty loop: 1 + 3 + 1 = 5; outer iteration:
    # pivot + 19 + 5 + increment + done = 27; outer loop: 1 + 4 x 3 + 3 x 27 + 1 = 95
    assert total == 95


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


class Work(NamedTuple):
    kernel: str


class If(NamedTuple):
    condition: object  # an int (a ConstInt before the switch) or "counter" (the loop's)
    branches: list  # one block per branch


class While(NamedTuple):
    iterations: int
    body: list  # a block


def programs(depth=0):
    """A block: 1-3 statements; below depth 3 they may be If / While with blocks inside."""
    work = st.builds(Work, st.integers(0, 15).map(lambda k: f"Checksum{k}"))
    if depth >= 3:
        return st.lists(work, min_size=1, max_size=3)
    inner = st.deferred(lambda: programs(depth + 1))
    condition = st.one_of(st.integers(-1, 3), st.just("counter"))
    statement = st.one_of(
        work,
        st.builds(If, condition, st.lists(inner, min_size=1, max_size=3)),
        st.builds(While, st.integers(0, 3), inner),
    )
    return st.lists(statement, min_size=1, max_size=3)


def has_control_flow(block):
    return any(not isinstance(statement, Work) for statement in block)


def inner_blocks(statement):
    if isinstance(statement, If):
        return statement.branches
    return [statement.body] if isinstance(statement, While) else []


def statement_kinds(block):
    """The statement types anywhere in `block`."""
    kinds = set()
    for statement in block:
        kinds.add(type(statement))
        for inner in inner_blocks(statement):
            kinds |= statement_kinds(inner)
    return kinds


def nested(block):
    """True if control flow sits inside control flow somewhere in `block`."""
    return any(
        has_control_flow(inner) or nested(inner)
        for statement in block
        for inner in inner_blocks(statement)
    )


def build(builder, block, graph, frontier, counter, work_nodes):
    """Add `block` after `frontier` with the control-flow helpers; returns the new frontier.
    `work_nodes` gets the node of every Work statement, in the order they are added."""
    for statement in block:
        if isinstance(statement, Work):
            node = builder.add_node(statement.kernel, graph=graph)
            for before in frontier:
                builder.add_edge(before, node)
            work_nodes.append(node)
            frontier = [node]
        elif isinstance(statement, If):
            if statement.condition == "counter" and counter is not None:
                condition, after = counter, list(frontier)
            else:
                value = 0 if statement.condition == "counter" else statement.condition
                const, condition = add_const_int(builder, value, graph, frontier)
                after = [const]

            branches = [_branch(blk, counter, work_nodes) for blk in statement.branches]
            frontier = [add_if(builder, condition, branches, graph, after).join]
        else:

            def body(builder, subgraph, pivot, loop_counter, block=statement.body):
                return build(builder, block, subgraph, [pivot], loop_counter, work_nodes)

            frontier = [add_while(builder, statement.iterations, body, graph, frontier).exit]
    return frontier


def _branch(block, counter, work_nodes):
    """The add_if callable that builds `block` as one branch."""

    def branch(builder, subgraph, pivot):
        return build(builder, block, subgraph, [pivot], counter, work_nodes)

    return branch


def interpret(block, counter, runs, first=0):
    """Run `block` by its structure: appends to `runs` the index of every Work statement it
    executes (statements numbered in pre-order, which is the order `build` adds their nodes,
    from `first`) and returns the nodes executed, counting the documented control-flow nodes.
    `counter` is the innermost loop's iteration number, None outside loops."""
    executed = 0
    position = first
    for statement in block:
        if isinstance(statement, Work):
            runs.append(position)
            executed += 1
        elif isinstance(statement, If):
            if statement.condition == "counter" and counter is not None:
                value = counter
            else:
                value = 0 if statement.condition == "counter" else statement.condition
                executed += 1  # its ConstInt
            chosen = min(max(value, 0), len(statement.branches) - 1)
            executed += 2  # SwitchNotify, WaitAnyone
            branch_first = position
            for index, branch in enumerate(statement.branches):
                if index == chosen:  # + the branch's BranchPivot and BranchDone
                    executed += 2 + interpret(branch, counter, runs, branch_first)
                branch_first += work_count(branch)
        else:
            executed += 2 + 3 * (statement.iterations + 1)  # Enter, Exit; 3 per check
            for iteration in range(statement.iterations):  # + pivot, increment, done
                executed += 3 + interpret(statement.body, iteration, runs, position)
        position += work_count([statement])
    return executed


def work_count(block):
    """Work statements in `block` (each is one node, however often it runs)."""
    total = 0
    for statement in block:
        if isinstance(statement, Work):
            total += 1
        elif isinstance(statement, If):
            total += sum(work_count(branch) for branch in statement.branches)
        else:
            total += work_count(statement.body)
    return total


CONTROL_FLOW_EXAMPLES = 40
_figures = Counter()


@settings(
    max_examples=CONTROL_FLOW_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(program=programs().filter(has_control_flow))
def test_property_random_control_flow(program):
    """Random nested If / Case / While (every example has control flow at the top level).
    The executors match the reference's simulation of the recorded description exactly, and
    the work nodes run as often as the program's own structure says."""
    builder = RecordingBuilder()
    work_nodes = []
    build(builder, program, GraphKind.MAIN, [], None, work_nodes)
    graph, counts, total = run_and_compare(builder)
    runs = []
    expected_total = interpret(program, None, runs)
    expected = Counter(work_nodes[index] for index in runs)
    assert {u: int(counts[u]) for u in work_nodes} == {u: expected[u] for u in work_nodes}
    assert total == expected_total
    _figures["examples (all with control flow)"] += 1
    _figures["with a While"] += graph.meta.has_loops
    _figures["with an If / Case"] += If in statement_kinds(program)
    _figures["with nesting"] += nested(program)
    _figures["nodes executed"] += total
    report(
        "test_control_flow.py::test_property_random_control_flow",
        [f"  {key}: {value}" for key, value in _figures.items()],
    )


@pytest.mark.parametrize("executor", ["topological", "priority"])
def test_a_loop_that_never_ends_hits_the_step_limit_instead_of_hanging(executor):
    from rtsoa.abi.status import STATUS_STEP_LIMIT

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
