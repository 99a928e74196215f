"""Racy graphs are refused at load: a use not ordered after its value's producer, or
a use and a free of the same block in no order, would give different answers per executor.
Checked against a slow reachability reference on random DAGs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtsoa import GraphBuilder, GraphFormatError, load_graph, prepare_executor, save_graph
from rtsoa.graph.generators import generate
from rtsoa.graph.graph import root_graphs
from rtsoa.graph.races import SEARCH_BUDGET, first_race
from rtsoa.graph.schema import DType, GraphKind, Placement, ValueKind
from rtsoa.kernels import REGISTRY

EXECUTORS = ("sequential", "topological", "priority")


def const(b, value=3, graph=GraphKind.MAIN):
    node, (out,) = REGISTRY.add_node(b, "ConstInt", attributes=[value], graph=graph)
    return node, out


def test_a_use_not_ordered_after_its_producer_is_refused():
    # before: loaded, and sequential / topological / priority could read the slot before it
    # was written (the answer depended on the order)
    b = GraphBuilder()
    first = b.add_node("Checksum0")
    producer, value = const(b)
    b.add_edge(first, producer)
    user, _ = REGISTRY.add_node(b, "AddInt", inputs=[value, value])
    b.add_edge(first, user)  # ordered after `first`, not after the producer
    with pytest.raises(GraphFormatError) as raised:
        b.finalize()
    error = raised.value
    assert (error.table, error.column, error.row) == ("node_inputs", "value", 0)
    assert f"node {user} uses value {value}" in str(error)
    assert f"producer, node {producer}" in str(error)


def test_a_use_through_a_longer_path_is_accepted_and_a_missing_one_refused():
    b = GraphBuilder()
    producer, value = const(b)
    middle = [b.add_node("Checksum1") for _ in range(3)]
    b.add_edge(producer, middle[0])
    b.add_edge(middle[0], middle[1])
    b.add_edge(middle[1], middle[2])
    user, _ = REGISTRY.add_node(b, "AddInt", inputs=[value, value])
    b.add_edge(middle[2], user)
    graph = b.finalize()
    for executor in EXECUTORS:
        prepare_executor(graph, executor).run()
    b2 = GraphBuilder()
    producer, value = const(b2)
    side = b2.add_node("Checksum1")  # positioned between them, but no path
    b2.add_edge(producer, side)
    lone = b2.add_node("Checksum2")
    user, _ = REGISTRY.add_node(b2, "AddInt", inputs=[value, value])
    b2.add_edge(lone, user)
    with pytest.raises(GraphFormatError, match=f"node {user} uses value {value}"):
        b2.finalize()


@pytest.mark.parametrize("joined", [True, False])
def test_pairs_beyond_the_search_budget_are_decided_by_the_bitset_sweep(joined):
    """The producer fans out to more nodes than a bounded search visits (races.SEARCH_BUDGET),
    so the pair goes to the bitset sweep, which must find the one path or prove there is none."""
    b = GraphBuilder()
    producer, value = const(b)
    fan = [b.add_node("Checksum0") for _ in range(2 * SEARCH_BUDGET)]
    for node in fan:
        b.add_edge(producer, node)
    second = [b.add_node("Checksum1") for _ in range(2 * SEARCH_BUDGET)]
    for a, c in zip(fan, second, strict=True):
        b.add_edge(a, c)
    user, _ = REGISTRY.add_node(b, "AddInt", inputs=[value, value])
    if joined:
        b.add_edge(second[-1], user)
        b.finalize()
    else:
        b.add_edge(b.add_node("Checksum2"), user)
        with pytest.raises(GraphFormatError, match=f"node {user} uses value {value}"):
            b.finalize()


@pytest.mark.parametrize("bad", [None, 3, 66])
def test_the_bitset_sweep_handles_more_than_64_sources(bad):
    """70 producers all fan out to more nodes than a bounded search visits, so every pair goes
    to the sweep, which takes 64 distinct sources at a time in topological order (a stable
    counting sort by position groups each source's pairs): two chunks. With `bad`, that
    producer's user is joined to nothing, in the first or the second chunk."""
    b = GraphBuilder()
    producers = [const(b) for _ in range(70)]
    fan = [b.add_node("Checksum0") for _ in range(2 * SEARCH_BUDGET)]
    for producer, _ in producers:
        for node in fan:
            b.add_edge(producer, node)
    last = b.add_node("Checksum1")
    b.add_edge(fan[-1], last)
    lone = b.add_node("Checksum2")
    users = []
    for index, (_, value) in enumerate(producers):
        user, _ = REGISTRY.add_node(b, "AddInt", inputs=[value, value])
        b.add_edge(lone if index == bad else last, user)
        users.append((user, value))
    if bad is None:
        b.finalize()
    else:
        user, value = users[bad]
        with pytest.raises(GraphFormatError, match=f"node {user} uses value {value}"):
            b.finalize()


def block_graph(order):
    """Alloc -> Launch (reads the block) and a Free of the block, ordered as `order` says."""
    b = GraphBuilder()
    alloc = b.add_node("AllocMemory", attributes=[4096])
    block = b.add_value(ValueKind.MEMORY_BLOCK, DType.UINT8, Placement.DEVICE_HBM, producer=alloc)
    launch = b.add_node("LaunchKernel", attributes=[64, 0], inputs=[block])
    free = b.add_node("FreeMemory", inputs=[block])
    b.add_edge(alloc, launch)
    b.add_edge(alloc, free)
    if order == "use, free":
        b.add_edge(launch, free)
    elif order == "free, use":
        b.add_edge(free, launch)
    return b, (alloc, launch, free, block)


def test_a_use_and_a_free_in_no_order_are_refused():
    b, (_, launch, free, block) = block_graph("none")
    with pytest.raises(GraphFormatError) as raised:
        b.finalize()
    assert f"value {block} is used and freed by nodes {launch} and {free}" in str(raised.value)


def test_ordered_uses_around_a_free_are_accepted():
    b, _ = block_graph("use, free")
    graph = b.finalize()
    for executor in EXECUTORS:
        prepare_executor(graph, executor).run()
    b, _ = block_graph("free, use")  # a use after the free: the same failure in every order
    graph = b.finalize()
    for executor in EXECUTORS:
        with pytest.raises(Exception, match="INVALID_BLOCK|failed with status 102"):
            prepare_executor(graph, executor).run()


def test_graphs_with_loops_and_values_across_roots_are_not_checked():
    b = GraphBuilder()
    producer, value = const(b, graph=GraphKind.INIT)
    user, _ = REGISTRY.add_node(b, "AddInt", inputs=[value, value])  # Main uses an Init value
    b.finalize()
    b = GraphBuilder()
    producer, value = const(b)
    user, _ = REGISTRY.add_node(b, "AddInt", inputs=[value, value])
    b.has_loops = True
    b.finalize()  # loops: not a DAG question (see races.py)


def test_saved_racy_graphs_are_refused_at_load(tmp_path):
    b = GraphBuilder()
    producer, value = const(b)
    REGISTRY.add_node(b, "AddInt", inputs=[value, value])
    path = save_graph(b.finalize(validate=False), tmp_path / "racy.rtsoa")
    with pytest.raises(GraphFormatError, match="node_inputs"):
        load_graph(path)


@pytest.mark.parametrize("name", ["lowered-4k", "random-10k", "layered-2k", "chain-1k"])
def test_the_committed_datasets_are_race_free(name):
    load_graph(f"datasets/{name}.rtsoa")


def test_generated_lowered_graphs_are_race_free():
    for streams in (1, 3):
        generate("lowered", 3000, seed=7, streams=streams)  # finalize validates


def reachable(graph, source, target):
    """Slow reference: depth-first search along successor edges."""
    stack, seen = [source], {source}
    while stack:
        u = stack.pop()
        if u == target:
            return True
        for v in graph.successors(u):
            if int(v) not in seen:
                seen.add(int(v))
                stack.append(int(v))
    return False


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_the_race_check_agrees_with_a_reachability_reference(data):
    n = data.draw(st.integers(2, 40))
    b = GraphBuilder()
    values = []
    for node in range(n):
        if data.draw(st.booleans()) and values:
            picked = data.draw(st.sampled_from(values))
            _, (out,) = REGISTRY.add_node(b, "AddInt", inputs=[picked, picked])
        else:
            _, (out,) = REGISTRY.add_node(b, "ConstInt", attributes=[node])
        values.append(out)
    for _ in range(data.draw(st.integers(0, 3 * n))):
        u, v = sorted(data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2)))
        if u != v:
            b.add_edge(u, v)
    graph = b.finalize(validate=False)
    expected = all(
        reachable(graph, int(graph.value_producer[value]), node)
        for node in range(n)
        for value in graph.inputs(node)
    )
    node_root = root_graphs(graph.graph_parent)[graph.node_graph]
    race = first_race(graph, node_root)
    assert (race is None) == expected
    if race is not None:
        _, value, producer, user, _ = race
        assert int(graph.value_producer[value]) == producer and not reachable(graph, producer, user)


def test_relations_against_the_edges_fall_back_to_the_edges_and_read_nothing_out_of_range():
    """Found by tests/test_fuzz_files.py (a relation offset set to 35): relations that form a
    cycle with the edges (Launch after its Free) left Kahn levels of -1, and the positions
    the race search indexes with were out of range: glibc aborted ("corrupted size vs.
    prev_size"). Such relations cannot order anything, so the check goes by the edges: a
    race-free graph loads (the multithread executor then reports no progress), a racy one
    is refused like without relations."""
    from rtsoa.graph.csr import build_csr
    from rtsoa.graph.races import _topological_positions

    offsets, targets = build_csr(
        np.array([0, 1], dtype=np.int32), np.array([1, 0], dtype=np.int32), 2
    )
    assert _topological_positions(offsets, targets, 2, False) is None
    for racy in (False, True):
        b = GraphBuilder()
        alloc = b.add_node("AllocMemory", attributes=[64])
        block = b.add_value(kind=ValueKind.MEMORY_BLOCK, producer=alloc)
        user = b.add_node("Checksum0", inputs=[block])
        free = b.add_node("FreeMemory", inputs=[block])
        launch = b.add_node("Checksum0")
        b.add_edge(alloc, user)
        b.add_edge(alloc, free)
        if not racy:
            b.add_edge(user, free)
        b.add_edge(free, launch)
        b.add_relation(free, launch)  # the Launch runs after the Free: no order meets it
        b.add_relation(free, user)
        if racy:
            with pytest.raises(GraphFormatError, match="no path of successor edges"):
                b.finalize()
        else:
            graph = b.finalize()  # validated: the race check ran with the relations in
            assert graph.relation_targets.shape[0] == 2
