"""validate_graph's rules that the schema tests (test_schema.py) do not reach one by one: the
metadata counts, the race check's scope, sound control-flow joins and cycles in loop graphs,
backward edges, array ranks, the kernels and graphs tables' corner cases.

Each test names the mutants of rtsoa/graph/validate.py it was written to kill (mutation testing,
mutation/validate.toml and validate-jit.toml; docs/mutation-report.md).
"""

import numpy as np
import pytest

from rtsoa import GraphFormatError, validate_graph
from rtsoa.graph.builder import GraphBuilder
from rtsoa.graph.schema import FIELDS_BY_NAME, GraphKind, ValueKind
from rtsoa.kernels.control_flow import add_const_int, add_if, add_while


def where(error):
    return error.table, error.column, error.row


def small_graph(nodes=3):
    """A chain of `nodes` nodes, validated."""
    b = GraphBuilder(stream_count=1)
    for index in range(nodes):
        b.add_node("A")
        if index:
            b.add_edge(index - 1, index)
    return b.finalize()


@pytest.mark.parametrize("column", ["stream_count", "event_count", "notify_count"])
def test_a_negative_count_names_its_metadata_column(column):
    """Caught mutants: the loop over the counts never run; `< 0` -> `< -1`; the error's row
    (the metadata table's only row, 0) replaced."""
    graph = small_graph()
    with pytest.raises(GraphFormatError, match="negative count") as info:
        validate_graph(graph._replace(meta=graph.meta._replace(**{column: -1})))
    assert where(info.value) == ("metadata", column, 0)


def test_a_graph_without_streams_is_refused():
    """Caught mutants: `stream_count < 1` -> `< 0` (zero streams accepted); the row replaced."""
    graph = small_graph()
    with pytest.raises(GraphFormatError, match="at least one stream") as info:
        validate_graph(graph._replace(meta=graph.meta._replace(stream_count=0)))
    assert where(info.value) == ("metadata", "stream_count", 0)


def racy_builder(has_loops):
    """Node 1 reads the value node 0 produces, with no edge between them."""
    b = GraphBuilder(stream_count=1)
    producer = b.add_node("A")
    reader = b.add_node("B")
    value = b.add_value(ValueKind.INT, producer=producer)
    b.add_input(reader, value)
    b.has_loops = has_loops
    return b


def test_the_race_check_runs_exactly_in_graphs_without_loops():
    """A use not ordered after its producer is refused in a graph without loops (the race check
    assumes an acyclic graph, so a graph with loops skips it). Caught mutants: `if not
    meta.has_loops: _check_races(...)` -> `if meta.has_loops` / `if not not ...`."""
    with pytest.raises(GraphFormatError, match="no path of successor edges") as info:
        racy_builder(has_loops=False).finalize()
    assert where(info.value)[:2] == ("node_inputs", "value")
    racy_builder(has_loops=True).finalize()  # not checked


def test_control_flow_graphs_validate():
    """If / Case joins and While heads are clamped (template 1, several predecessors) and
    sound; a While's back edge is a cycle in a graph with a loop construct. Caught mutants:
    `reason != JOIN_OK` -> `>=` (every clamped join refused); `not meta.has_loops and not
    forward` -> `or` (a loop's cycle refused)."""
    b = GraphBuilder(stream_count=1)
    const, condition = add_const_int(b, 1)
    branches = [None, lambda b, g, p: [add_while(b, 3, None, g, [p]).exit]]
    joined = add_if(b, condition, branches, after=[const])
    last = b.add_node("Checksum1")
    b.add_edge(joined.join, last)
    graph = b.finalize()
    assert graph.meta.has_loops
    incoming = np.bincount(graph.succ_targets, minlength=graph.num_nodes)
    assert (graph.in_degree < incoming).any()  # some node is clamped: the join check ran


def test_values_ordered_by_backward_edges_validate():
    """Every edge goes from a larger id to a smaller one, and each use is ordered after its
    producer by them: a valid graph. The race check takes the ids as the topological order only
    when every edge goes forward. Caught mutants (mutation testing, validate-jit):
    `_check_edges`' `forward and t > u` -> `t < u` / `t <= u`, which called an all-backward
    graph forward and so made the race check refuse these uses as unordered."""
    b = GraphBuilder(stream_count=1)
    nodes = [b.add_node("A") for _ in range(3)]
    for source, target in ((2, 1), (1, 0)):
        b.add_edge(nodes[source], nodes[target])
        value = b.add_value(ValueKind.INT, producer=nodes[source])
        b.add_input(nodes[target], value)
    graph = b.finalize()
    assert (graph.succ_targets < np.repeat(np.arange(3), np.diff(graph.succ_offsets))).all()


def test_backward_edges_without_a_cycle_validate_and_a_cycle_through_node_0_is_named():
    """Edges from larger to smaller ids: acyclic, but not provably so by the edge pass, so the
    Kahn pass runs and finds nothing. A cycle through node 0 is named at node 0's successor
    row. Caught mutants: the cycle check's `node >= 0` -> `> 0` / `>= -1`."""
    b = GraphBuilder(stream_count=1)
    for _ in range(4):
        b.add_node("A")
    for source, target in ((3, 2), (2, 1), (1, 0)):
        b.add_edge(source, target)
    b.finalize()
    b = GraphBuilder(stream_count=1)
    for _ in range(3):
        b.add_node("A")
    for source, target in ((0, 1), (1, 2), (2, 0)):
        b.add_edge(source, target)
    with pytest.raises(GraphFormatError, match="cycle through node") as info:
        b.finalize()
    error = info.value
    node = int(str(error).split("cycle through node ")[1].split()[0])
    graph = b.finalize(validate=False)
    assert where(error) == ("edges", "target", int(graph.succ_offsets[node]))


@pytest.mark.parametrize("shape", ["0-d", "2-d"])
def test_an_array_of_another_rank_is_refused(shape):
    """Caught mutants: `value.ndim != 1` -> `> 1` (a 0-d array accepted) / `< 1` (a 2-d one)."""
    graph = small_graph()
    column = graph.node_priority
    wrong = column[:1].reshape(()) if shape == "0-d" else column.reshape(1, -1)
    with pytest.raises(GraphFormatError, match="expected a 1-d") as info:
        validate_graph(graph._replace(node_priority=wrong))
    field = FIELDS_BY_NAME["node_priority"]
    assert where(info.value) == (field.table, field.column, None)


def test_a_string_column_must_hold_only_strings():
    """Caught mutant: the `all(isinstance(item, str) ...)` clause dropped or inverted."""
    graph = small_graph()
    with pytest.raises(GraphFormatError, match="tuple of str"):
        validate_graph(graph._replace(kernel_names=(1,)))


def test_a_short_offsets_column_names_the_expected_row_count():
    """An odd node count, so `n + 1` differs from `n | 1` and `n ^ 1`. Caught mutants: the
    expected length or its message computed otherwise than nodes + 1."""
    graph = small_graph(nodes=3)
    with pytest.raises(GraphFormatError) as info:
        validate_graph(graph._replace(succ_offsets=graph.succ_offsets[:-1]))
    assert "has 3 rows, expected nodes + 1 = 4" in str(info.value)
    assert where(info.value)[:2] == ("node_offsets", "successors")


def test_a_long_offsets_column_is_refused():
    """One offset too many, repeating the last (so the offsets alone look fine: monotone, from
    0 to the targets' length). Caught mutant (mutation testing): the offsets length
    check `length != n + 1` -> `<`, which accepted a longer column."""
    graph = small_graph(nodes=3)
    longer = np.append(graph.succ_offsets, graph.succ_offsets[-1])
    with pytest.raises(GraphFormatError) as info:
        validate_graph(graph._replace(succ_offsets=longer))
    assert "has 5 rows, expected nodes + 1 = 4" in str(info.value)
    assert where(info.value) == ("node_offsets", "successors", None)


def test_kernel_names_are_required_only_when_there_are_nodes():
    """One node and no kernel name is refused; no node and no kernel name is a valid empty
    graph. Caught mutants: `graph.num_nodes > 0` -> `> 1` / `>= 0`."""
    graph = small_graph(nodes=1)
    with pytest.raises(GraphFormatError, match="no kernel is named"):
        validate_graph(graph._replace(kernel_names=()))
    empty = GraphBuilder(stream_count=1).finalize()
    assert empty.num_nodes == 0 and empty.kernel_names == ()
    validate_graph(empty)


def test_graph_parents_of_roots_and_subgraphs():
    """A root's parent must be exactly -1 (-2 too is refused as a root rule, before the range
    check); a subgraph's parent is any earlier graph, Init (0) included, never -1. Caught
    mutants: `parents[graph_id] != -1` -> `> -1`; `0 <= parents[graph_id]` -> `0 <` / `-1 <=`."""
    b = GraphBuilder(stream_count=1)
    branch = b.add_subgraph(GraphKind.BRANCH, parent=GraphKind.INIT)
    b.add_node("A", graph=GraphKind.INIT)
    b.add_node("B", graph=branch)
    b.add_edge(0, 1)
    graph = b.finalize()  # a subgraph of Init is valid
    parents = graph.graph_parent.copy()
    parents[1] = -2
    with pytest.raises(GraphFormatError, match="root MAIN") as info:
        validate_graph(graph._replace(graph_parent=parents))
    assert where(info.value) == ("graphs", "parent", 1)
    parents = graph.graph_parent.copy()
    parents[3] = -1
    with pytest.raises(GraphFormatError, match="earlier graph") as info:
        validate_graph(graph._replace(graph_parent=parents))
    assert where(info.value) == ("graphs", "parent", 3)


@pytest.mark.parametrize(("graph_id", "kind"), [(1, GraphKind.INIT), (2, GraphKind.MAIN)])
def test_a_root_graph_of_an_earlier_root_kind_is_refused(graph_id, kind):
    """Main marked Init, DeInit marked Main: kinds below the root's own. Caught mutant
    (mutation testing): `kinds[graph_id] != root` -> `>`, which refused only kinds
    above the root's (a branch in Main's place, the case test_schema.py checks)."""
    graph = small_graph()
    kinds = graph.graph_kind.copy()
    kinds[graph_id] = kind
    with pytest.raises(GraphFormatError) as info:
        validate_graph(graph._replace(graph_kind=kinds))
    root = GraphKind(graph_id).name
    assert str(info.value).endswith(f": graph {graph_id} must be the root {root}")
    assert where(info.value) == ("graphs", "kind", graph_id)


def test_a_subgraph_whose_parent_comes_later_is_refused():
    """Two branches of Init; the first given the second as its parent: no cycle (the second's
    parent is Init), but a parent with a larger id, which root_graphs cannot resolve in one
    pass. Caught mutant (mutation testing): `0 <= parents[graph_id] < graph_id` ->
    `!= graph_id`, which refused a graph as its own parent only."""
    b = GraphBuilder(stream_count=1)
    first = b.add_subgraph(GraphKind.BRANCH, parent=GraphKind.INIT)
    second = b.add_subgraph(GraphKind.BRANCH, parent=GraphKind.INIT)
    b.add_node("A", graph=first)
    b.add_node("B", graph=second)
    graph = b.finalize()
    parents = graph.graph_parent.copy()
    parents[first] = second
    with pytest.raises(GraphFormatError) as info:
        validate_graph(graph._replace(graph_parent=parents))
    assert str(info.value).endswith(": a subgraph's parent must be an earlier graph")
    assert where(info.value) == ("graphs", "parent", first)


def test_an_unsound_join_is_refused_when_every_node_is_clamped():
    """Three wait-anyone nodes, each fed by the other two (template 1 of 2 edges): every node is
    clamped, none is a start node, and no join is sound (no branch or loop body makes the
    predecessors exclusive). Caught mutant (mutation testing, validate-jit):
    `_check_edges`' `clamped = clamped or template < actual[v]` -> `template == actual[v]`, which
    ran the join check only in graphs with some unclamped node (every other graph has one: a
    start node's 0 of 0 edges)."""
    b = GraphBuilder(stream_count=1)
    nodes = [b.add_node("A", wait_anyone=True) for _ in range(3)]
    for source in nodes:
        for target in nodes:
            if source != target:
                b.add_edge(source, target)
    b.has_loops = True  # the cycles are allowed; the joins are not
    with pytest.raises(GraphFormatError) as info:
        b.finalize()
    assert str(info.value).endswith(
        ": node 0 has in-degree template 1 below its edge count (a wait-anyone join), but its "
        "predecessors are not in branch or loop-body subgraphs, so nothing makes them exclusive "
        "and it would run once per predecessor"
    )
    assert where(info.value) == ("nodes", "in_degree", 0)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (GraphKind.INIT, GraphKind.MAIN),
        (GraphKind.MAIN, GraphKind.INIT),
        (GraphKind.DEINIT, GraphKind.MAIN),
    ],
)
def test_an_edge_between_root_graphs_is_refused_in_either_direction(source, target):
    """Caught mutant (mutation testing, validate-jit): `_check_edges`'
    `node_root[t] != node_root[u]` -> `>`, which refused only edges into a later root graph
    (test_graph.py tries Init -> Main alone)."""
    b = GraphBuilder(stream_count=1)
    b.add_node("A", graph=target)
    b.add_node("B", graph=source)
    b.add_edge(1, 0)
    with pytest.raises(GraphFormatError) as info:
        b.finalize()
    message = "edge from node 1 crosses from one root graph (Init/Main/DeInit) to another"
    assert str(info.value).endswith(": " + message)
    assert where(info.value) == ("edges", "target", 0)


def test_a_duplicate_successor_is_named_at_its_edge_row():
    """The builder merges duplicate edges, so only a file or an in-memory graph has one: node 0
    listing node 1 twice (node 1's template 2 fits its two incoming edges). Caught mutants
    (mutation testing, validate-jit): `stamp[t] == u` -> `>` (never true: the
    stamp of a target is at most the current node), which accepted every duplicate."""
    graph = small_graph(nodes=3)  # 0 -> 1 -> 2
    duplicated = graph._replace(
        succ_offsets=np.array([0, 2, 3, 3], dtype=graph.succ_offsets.dtype),
        succ_targets=np.array([1, 1, 2], dtype=graph.succ_targets.dtype),
        in_degree=np.array([0, 2, 1], dtype=graph.in_degree.dtype),
    )
    with pytest.raises(GraphFormatError) as info:
        validate_graph(duplicated)
    assert str(info.value).endswith(": duplicate successor of node 0")
    assert where(info.value) == ("edges", "target", 1)


def spy_on(monkeypatch, name):
    """Wrap validate.py's `name` (a pass validate_graph calls) to count its calls."""
    from rtsoa.graph import validate

    original = getattr(validate, name)
    calls = []

    def spy(*args):
        calls.append(args)
        return original(*args)

    monkeypatch.setattr(validate, name, spy)
    return calls


def test_the_cycle_pass_runs_only_when_some_edge_goes_backward(monkeypatch):
    """Edges that all go to larger ids prove a graph acyclic (`_check_edges`' `forward`), so
    the Kahn cycle pass is skipped; one backward edge makes it run. Caught mutants (mutation
    testing, validate-jit): `forward = True` -> `False` and `forward and t > u` ->
    `t == u`, which ran the Kahn pass on every graph with edges: the same verdicts, only slower,
    so no verdict could show them."""
    calls = spy_on(monkeypatch, "first_node_on_cycle")
    small_graph(nodes=4)  # 0 -> 1 -> 2 -> 3
    assert calls == []
    b = GraphBuilder(stream_count=1)
    for _ in range(3):
        b.add_node("A")
    b.add_edge(0, 2)
    b.add_edge(2, 1)
    b.finalize()
    assert len(calls) == 1


def test_the_join_check_runs_only_when_some_node_is_clamped(monkeypatch):
    """A graph whose every template equals its edge count skips the join check; a wait-anyone
    join (template 1 of 2 edges) runs it. Caught mutants (mutation testing,
    validate-jit): `clamped = False` -> `True` and `clamped or template < actual[v]` -> `<=`,
    which ran the join check on every graph (it finds nothing on unclamped ones: the same
    verdicts, only slower)."""
    calls = spy_on(monkeypatch, "first_unsound_join")
    b = GraphBuilder(stream_count=1)
    for _ in range(3):
        b.add_node("A")
    b.add_edge(0, 2)
    b.add_edge(1, 2)  # node 2 waits for both: template 2 of 2
    graph = b.finalize()
    assert graph.in_degree.tolist() == [0, 0, 2]
    assert calls == []
    b = GraphBuilder(stream_count=1)
    const, condition = add_const_int(b, 1)
    joined = add_if(b, condition, [None, None], after=[const])
    b.add_edge(joined.join, b.add_node("Checksum1"))
    b.finalize()
    assert len(calls) == 1
