"""ExecuteGraph, GraphBuilder and CSR construction."""

import numpy as np
import pytest

from rtsoa import GraphBuilder, GraphFormatError, GraphKind, ValueKind, WorkerClass, float_bits
from rtsoa.graph.csr import build_csr, first_node_on_cycle, kahn_levels


def reference_csr(sources, targets, n, dedupe):
    rows = [[] for _ in range(n)]
    for s, t in zip(sources, targets, strict=True):
        if dedupe and t in rows[s]:
            continue
        rows[s].append(t)
    offsets = np.cumsum([0] + [len(r) for r in rows])
    flat = [t for r in rows for t in r]
    return offsets, np.array(flat, dtype=np.int32)


@pytest.mark.parametrize("dedupe", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_build_csr_matches_reference(seed, dedupe):
    rng = np.random.default_rng(seed)
    n = 50
    sources = rng.integers(0, n, 400)
    targets = rng.integers(0, n, 400)
    offsets, flat = build_csr(sources, targets, n, dedupe=dedupe)
    want_offsets, want_flat = reference_csr(sources, targets, n, dedupe)
    np.testing.assert_array_equal(offsets, want_offsets)
    np.testing.assert_array_equal(flat, want_flat)
    assert offsets.dtype == np.int64 and flat.dtype == np.int32


def test_builder_nodes_values_attributes_and_edges():
    b = GraphBuilder(name="small", stream_count=2)
    a = b.add_node("Producer", attributes=[7, 2.5], worker=WorkerClass.MEMORY, stream=1)
    c = b.add_node("Consumer", priority=3, compute_node=11)
    v = b.add_value(ValueKind.TENSOR, producer=a)
    b.add_input(c, v)
    b.add_edge(a, c)
    b.add_edge(a, c)  # a duplicate data + control edge is merged
    g = b.finalize()
    assert g.num_nodes == 2 and g.num_edges == 1
    assert list(g.successors(a)) == [c]
    assert list(g.in_degree) == [0, 1]
    assert list(g.outputs(a)) == [v] and list(g.inputs(c)) == [v]
    assert g.attributes(a)[0] == 7
    assert g.attr_float_pool[g.attr_offsets[a] + 1] == 2.5
    assert g.attributes(a)[1] == float_bits(2.5)
    assert g.kernel_name(c) == "Consumer"
    assert g.node_worker[a] == WorkerClass.MEMORY and g.node_stream[a] == 1
    assert g.node_compute[c] == 11 and g.node_priority[c] == 3
    assert g.value_producer[v] == a


def test_wait_anyone_in_degree_is_clamped_to_one():
    b = GraphBuilder()
    x = b.add_node("A")
    y = b.add_node("B")
    w = b.add_node("WaitAnyone", wait_anyone=True)
    b.add_edge(x, w)
    b.add_edge(y, w)
    # the builder clamps; validation then refuses this join, whose predecessors are not
    # exclusive branches (tests/test_executor_guarantees.py)
    g = b.finalize(validate=False)
    assert g.in_degree[w] == 1
    with pytest.raises(GraphFormatError, match="nothing makes them exclusive"):
        b.finalize()


def test_subgraphs_and_roots():
    b = GraphBuilder()
    branch = b.add_subgraph(GraphKind.BRANCH, parent=GraphKind.MAIN)
    inner = b.add_subgraph(GraphKind.LOOP_BODY, parent=branch)
    init = b.add_node("Init", graph=GraphKind.INIT)
    main = b.add_node("M")
    body = b.add_node("Body", graph=inner)
    b.add_edge(main, body)
    g = b.finalize()
    assert g.meta.has_loops
    assert list(g.root_of_graph()) == [0, 1, 2, 1, 1]
    assert list(g.nodes_of(GraphKind.MAIN)) == [main, body]
    assert list(g.nodes_of(GraphKind.INIT)) == [init]


def test_edge_across_root_graphs_is_rejected():
    b = GraphBuilder()
    x = b.add_node("A", graph=GraphKind.INIT)
    y = b.add_node("B", graph=GraphKind.MAIN)
    b.add_edge(x, y)
    with pytest.raises(GraphFormatError, match="crosses"):
        b.finalize()


def test_cycle_without_loop_construct_is_rejected_and_named():
    b = GraphBuilder()
    nodes = [b.add_node("A") for _ in range(4)]
    b.add_edge(nodes[0], nodes[1])
    b.add_edge(nodes[1], nodes[2])
    b.add_edge(nodes[2], nodes[1])
    b.add_edge(nodes[2], nodes[3])
    with pytest.raises(GraphFormatError, match=r"cycle through node [12]") as info:
        b.finalize()
    assert info.value.table == "edges"


def test_self_loop_and_bad_endpoints_are_rejected():
    b = GraphBuilder()
    x = b.add_node("A")
    b.add_edge(x, x)
    with pytest.raises(GraphFormatError, match="self-loop"):
        b.finalize()
    b = GraphBuilder()
    b.add_node("A")
    b.add_edge(0, 5)
    with pytest.raises(GraphFormatError, match="does not exist"):
        b.finalize()


def test_cycle_finder_finds_a_node_on_the_cycle():
    # 0 -> 1 -> 2 -> 3 -> 1, and 3 -> 4 (4 is after the cycle, not on it)
    offsets, targets = build_csr([0, 1, 2, 3, 3], [1, 2, 3, 1, 4], 5)
    assert first_node_on_cycle(offsets, targets, 5) in (1, 2, 3)
    offsets, targets = build_csr([0, 1], [1, 2], 3)
    assert first_node_on_cycle(offsets, targets, 3) == -1


def test_kahn_levels_give_longest_path():
    offsets, targets = build_csr([0, 0, 1, 2], [1, 2, 3, 3], 4)
    levels, visited = kahn_levels(offsets, targets, 4)
    assert visited == 4 and list(levels) == [0, 1, 1, 2]


def test_bulk_and_single_adds_mix_in_id_order():
    b = GraphBuilder()
    first = b.add_node("A")
    bulk = b.add_nodes(["B", "C", "B"])
    last = b.add_node("C")
    g = b.finalize()
    assert (first, bulk, last) == (0, 1, 4)
    assert [g.kernel_name(i) for i in range(5)] == ["A", "B", "C", "B", "C"]


def test_nbytes_counts_every_array():
    b = GraphBuilder()
    b.add_nodes(["A"] * 10)
    b.add_edges(np.arange(9), np.arange(1, 10))
    g = b.finalize()
    expected = sum(v.nbytes for v in g if isinstance(v, np.ndarray))
    assert g.nbytes() == expected > 0


def test_bulk_columns_are_contiguous_arrays_not_broadcast_views():
    b = GraphBuilder()
    b.add_nodes(["A"] * 5, stream=0, worker=0)
    g = b.finalize()
    for name in ("node_stream", "node_worker", "node_graph", "node_compute", "node_kernel"):
        array = getattr(g, name)
        assert array.flags.c_contiguous and array.strides == (array.itemsize,), name
