"""The multithread executor's relations (Free -> Launch pairs whose edge the relation pass
removed), their generations and wait words, and liveness: graphs that would deadlock a naive
sole memory worker complete, a relation that can never be met is reported, not hung."""

import threading

import numpy as np
import pytest

from rtsoa import GraphBuilder
from rtsoa.abi.status import STATUS_NO_PROGRESS
from rtsoa.errors import GraphFormatError
from rtsoa.executors import KernelError, Profiler, RunResult, prepare_executor
from rtsoa.executors.multithread import MultithreadExecutor
from rtsoa.graph.generators import generate
from rtsoa.graph.schema import GraphKind, Placement, ValueKind
from rtsoa.kernels import expected_checksum
from rtsoa.kernels.relations import remove_launch_free_edges

THREADS = (2, 3, 4)
LIVENESS_THREADS = (2, 3, 4, 8)  # liveness and hazards: also more workers than cores
SHARINGS = ("classes", "host", "launches")
REPEATS = 3


# -- the relation pass, generation tracking, liveness ------------------------------------------


def _relation_pairs(graph):
    frees = np.repeat(np.arange(graph.num_nodes), np.diff(graph.relation_offsets))
    return set(zip(frees.tolist(), graph.relation_targets.tolist(), strict=True))


def _edge_pairs(graph):
    sources = np.repeat(np.arange(graph.num_nodes), np.diff(graph.succ_offsets))
    return set(zip(sources.tolist(), graph.succ_targets.tolist(), strict=True))


@pytest.mark.parametrize("streams", [1, 2])
def test_relation_pass_on_lowered_graphs(streams):
    graph = generate("lowered", 2000, seed=7, streams=streams)
    result = remove_launch_free_edges(graph)
    after = result.graph
    names = graph.kernel_names
    kernel = [names[k] for k in graph.node_kernel]
    removed = {
        (u, v)
        for u, v in _edge_pairs(graph)
        if kernel[u] == "LaunchKernel" and kernel[v] == "FreeMemory"
    }
    assert removed and result.removed_edges == len(removed)
    edges = _edge_pairs(after)
    assert not removed & edges  # every Launch -> Free edge is gone ...
    relations = _relation_pairs(after)
    assert {(v, u) for u, v in removed} <= relations  # ... and is an exact relation
    assert relations == _relation_pairs(graph) | {(v, u) for u, v in removed}
    for free in range(after.num_nodes):  # CSR rows sorted and deduplicated
        row = after.relations(free)
        assert np.all(np.diff(row) > 0)
    # Cartesian ordering: each Free after the producers of its Launch's other Frees' blocks
    by_launch = {}
    for free, launch in relations:
        by_launch.setdefault(launch, []).append(free)
    for frees in by_launch.values():
        producers = {int(after.value_producer[after.inputs(free)[0]]) for free in frees}
        assert all((p, free) in edges for p in producers for free in frees)
    assert result.added_edges == len(edges - (_edge_pairs(graph) - removed))


@pytest.mark.parametrize("sharing", SHARINGS)
@pytest.mark.parametrize("threads", LIVENESS_THREADS)
def test_relation_graphs_run_on_multithread_only_with_zero_hazards(threads, sharing):
    graph = remove_launch_free_edges(generate("lowered", 3000, seed=threads, streams=2)).graph
    executor = prepare_executor(graph, "multithread", threads=threads)
    executor.sharing = sharing
    expected = RunResult(0, graph.num_nodes, expected_checksum(graph), False)
    for _ in range(REPEATS):
        assert executor.run() == expected
        run_and_check_relations(executor, graph)
    assert executor.device.hazard_count == 0, executor.device.hazards()[:3]
    assert executor.device.stats()["hbm"]["allocated_bytes.current"] == 0
    for name in ("sequential", "topological", "priority"):
        with pytest.raises(ValueError, match="does not honour relations"):
            prepare_executor(graph, name)
    assert prepare_executor(graph, "auto").name == "multithread"


def test_relations_are_waited_on_only_where_the_pass_removed_their_edge():
    """A relation whose Launch -> Free edge is still there is implied by the edge (the Free
    runs after the Launch ended), so the executor keeps no relation state for a graph whose
    every relation has its edge, and its loop skips the relation checks; after the relation
    pass it keeps every relation. Both give the sequential executor's answer."""
    original = generate("lowered", 2000, seed=9)
    assert original.relation_targets.shape[0] > 0
    with_edges = prepare_executor(original, "multithread", threads=2)
    assert with_edges.edgeless == 0 and with_edges.relations.waiter_frees.shape[0] == 0
    graph = remove_launch_free_edges(original).graph
    without = prepare_executor(graph, "multithread", threads=2)
    assert without.edgeless == graph.relation_targets.shape[0] > 0
    assert without.relations.waiter_frees.shape[0] == graph.relation_targets.shape[0]
    for executor, each in ((with_edges, original), (without, graph)):
        assert executor.run() == RunResult(0, each.num_nodes, expected_checksum(each), False)
        assert executor.device.hazard_count == 0


def test_workers_call_the_entry_checked_against_their_run_state():
    """Each worker calls the loop's compiled entry (no type resolution per run), made once
    for the executor's run state; replacing a runtime makes `_compile` check the types
    again (the entry unboxes without checking them), and the run still gives the answer."""
    graph = generate("lowered", 400, seed=2)
    executor = prepare_executor(graph, "multithread", threads=2)
    expected = RunResult(0, graph.num_nodes, expected_checksum(graph), False)
    assert executor.run() == expected
    entry = executor._compile(None)
    assert entry is not executor._loop and executor._compile(None) is entry
    checked = executor._owners
    executor._runtimes[1] = executor._runtimes[1]._replace()  # the same types, a new object
    assert executor._compile(None) is entry and executor._owners is not checked
    assert executor.run() == expected


def run_and_check_relations(executor, graph):
    """Profiled run: every Free starts after each related Launch ended (submitted)."""
    executor.run(subscriber=Profiler())
    steps = executor.record()[: graph.num_nodes]
    start = np.zeros(graph.num_nodes, dtype=np.int64)
    end = np.zeros(graph.num_nodes, dtype=np.int64)
    start[steps[:, 0]] = steps[:, 1]
    end[steps[:, 0]] = steps[:, 2]
    for free, launch in _relation_pairs(graph):
        assert start[free] >= end[launch]


def test_relation_pass_keeps_edges_of_ineligible_frees():
    """Host blocks, normal / launch / missing producers keep their Launch -> Free edges."""
    builder = GraphBuilder()
    frees = {}

    def chain(label, producer_kernel, placement=Placement.DEVICE_HBM, producer=True):
        if producer_kernel == "AllocMemory":
            node = builder.add_node(producer_kernel, attributes=[64])
        else:
            node = builder.add_node(producer_kernel, attributes=[64, 64])
        block = builder.add_value(
            kind=ValueKind.MEMORY_BLOCK, placement=placement, producer=node if producer else -1
        )
        launch = builder.add_node("LaunchKernel", attributes=[64, 64], inputs=[block])
        free = builder.add_node("FreeMemory", inputs=[block])
        builder.add_edge(node, launch)
        builder.add_edge(launch, free)
        frees[label] = (launch, free)

    chain("eligible", "AllocMemory")
    chain("host block", "AllocMemory", placement=Placement.HOST)
    chain("launch producer", "LaunchKernel")
    chain("normal producer", "Busy")
    chain("no producer", "AllocMemory", producer=False)
    graph = builder.finalize()
    result = remove_launch_free_edges(graph)
    edges = _edge_pairs(result.graph)
    assert result.removed_edges == 1
    assert _relation_pairs(result.graph) == {tuple(reversed(frees["eligible"]))}
    assert frees["eligible"] not in edges
    for label, pair in frees.items():
        if label != "eligible":
            assert pair in edges, label


def _liveness_graph():
    """The graph that deadlocks a sole memory worker which blocks inside a Free until its
    related Launch is submitted (reference section 5.10):

        A (Alloc b0, priority 0) -> L (Launch, writes b1, reads b0) <- M (Alloc b1 on the
        host, priority 5); A -> F (Free b0, priority 1; exact relation (F, L), no L -> F
        edge); L -> G (Free b1, a host block: not eligible, keeps its edge)

    The memory worker runs A; F (priority 1) is now ahead of M (priority 5) in its queue. A
    blocking F waits for L, L waits for M, M waits behind F: a cycle.
    """
    builder = GraphBuilder()
    a = builder.add_node("AllocMemory", attributes=[256], priority=0)
    b0 = builder.add_value(kind=ValueKind.MEMORY_BLOCK, producer=a)
    m = builder.add_node("AllocMemory", attributes=[256], priority=5)
    # a host block: its Free keeps the L -> G edge, so M is not ordered before F
    b1 = builder.add_value(kind=ValueKind.MEMORY_BLOCK, placement=Placement.HOST, producer=m)
    launch = builder.add_node("LaunchKernel", attributes=[256, 256], inputs=[b1, b0], priority=2)
    free = builder.add_node("FreeMemory", inputs=[b0], priority=1)
    last = builder.add_node("FreeMemory", inputs=[b1], priority=3)
    for source, target in ((a, launch), (m, launch), (launch, free), (launch, last)):
        builder.add_edge(source, target)
    return builder.finalize(), (a, m, launch, free, last)


def _naive_sole_memory_worker(graph, nodes):
    """A model of the naive design: the memory worker pops its queue in priority order and
    blocks inside a Free until the related Launch ran; the launch worker runs what is ready.
    Returns the nodes run, or None when neither worker can move (deadlock)."""
    a, m, launch, free, last = nodes
    memory_queue = sorted([a, m], key=lambda u: graph.node_priority[u])
    done, blocked_on = [], None
    while len(done) < 5:
        moved = False
        if blocked_on is None and memory_queue:
            node = memory_queue.pop(0)
            if node == free and launch not in done:
                blocked_on = node  # the naive Free waits here, holding the memory worker
            else:
                done.append(node)
            if node == a:
                memory_queue = sorted(memory_queue + [free], key=lambda u: graph.node_priority[u])
            moved = True
        elif blocked_on is not None and launch in done:
            done.append(blocked_on)
            blocked_on, moved = None, True
        if launch not in done and a in done and m in done:
            done.append(launch)
            memory_queue.append(last)
            moved = True
        if not moved:
            return None
    return done


@pytest.mark.parametrize("sharing", SHARINGS)
@pytest.mark.parametrize("threads", LIVENESS_THREADS)
def test_the_naive_deadlock_graph_completes(threads, sharing):
    original, nodes = _liveness_graph()
    graph = remove_launch_free_edges(original).graph
    a, m, launch, free, last = nodes
    assert _relation_pairs(graph) == {(free, launch)} and (launch, free) not in _edge_pairs(graph)
    assert _naive_sole_memory_worker(graph, nodes) is None  # the naive design deadlocks
    executor = prepare_executor(graph, "multithread", threads=threads)
    executor.sharing = sharing
    for _ in range(20):
        assert executor.run() == RunResult(0, 5, expected_checksum(graph), False)
        run_and_check_relations(executor, graph)
    assert executor.device.hazard_count == 0
    assert executor.device.stats()["hbm"]["allocated_bytes.current"] == 0


def _unmeetable_relation():
    """A builder holding Alloc -> Free -> Launch and the relation (Free, Launch): the Launch
    runs only after the Free, which waits for it; and the Free."""
    builder = GraphBuilder()
    alloc = builder.add_node("AllocMemory", attributes=[64])
    block = builder.add_value(kind=ValueKind.MEMORY_BLOCK, producer=alloc)
    free = builder.add_node("FreeMemory", inputs=[block])
    launch = builder.add_node("Checksum0")
    builder.add_edge(alloc, free)
    builder.add_edge(free, launch)
    builder.add_relation(free, launch)
    return builder, free


def test_a_relation_that_can_never_be_met_is_reported_not_hung():
    """A hand-made relation (F, L) where L runs only after F: no order can satisfy it. The
    no-progress detector stops the run with STATUS_NO_PROGRESS at the waiting Free."""
    builder, free = _unmeetable_relation()
    graph = builder.finalize()
    executor = prepare_executor(graph, "multithread", threads=2)
    with pytest.raises(KernelError) as caught:
        executor.run()
    assert (caught.value.status, caught.value.node) == (STATUS_NO_PROGRESS, free)
    assert caught.value.nodes_executed == 1
    with pytest.raises(ValueError, match="does not honour relations"):
        prepare_executor(graph, "priority")


@pytest.mark.parametrize("threads", [2, 4])
@pytest.mark.parametrize("window", [1, 64])
def test_an_unmeetable_relation_beside_other_device_work_turns_the_window_off(
    monkeypatch, threads, window
):
    """The relation above that no order meets, beside three independent Alloc -> Free pairs.
    Its nodes are ranked by the edges alone (the relation goes against them), so the
    admission window, which relies on ranks that honour every wait, is off; the run stops
    with STATUS_NO_PROGRESS at the waiting Free once the pairs have run. With the window on
    anyway, window 1 held the pairs behind the Free and the run spun without end: the run
    goes on a thread of its own here, so that fails the test instead of hanging it."""
    monkeypatch.setattr(MultithreadExecutor, "window", window)
    builder, free = _unmeetable_relation()
    for _ in range(3):
        pair_alloc = builder.add_node("AllocMemory", attributes=[64])
        pair_block = builder.add_value(kind=ValueKind.MEMORY_BLOCK, producer=pair_alloc)
        builder.add_edge(pair_alloc, builder.add_node("FreeMemory", inputs=[pair_block]))
    executor = prepare_executor(builder.finalize(), "multithread", threads=threads)
    assert int(executor.admission.window) == 0
    outcome = []

    def run():
        try:
            executor.run()
            outcome.append(None)
        except KernelError as error:
            outcome.append(error)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    runner.join(timeout=60)
    assert not runner.is_alive(), "the run neither finished nor reported its stuck Free"
    error = outcome[0]
    assert error is not None
    assert (error.status, error.node, error.nodes_executed) == (STATUS_NO_PROGRESS, free, 7)


def test_relations_must_stay_in_the_graph_being_run():
    builder = GraphBuilder()
    init_launch = builder.add_node("Checksum0", graph=GraphKind.INIT)
    alloc = builder.add_node("AllocMemory", attributes=[64])
    block = builder.add_value(kind=ValueKind.MEMORY_BLOCK, producer=alloc)
    free = builder.add_node("FreeMemory", inputs=[block])
    builder.add_edge(alloc, free)
    builder.add_relation(free, init_launch)
    with pytest.raises(GraphFormatError, match="not in the graph being run"):
        prepare_executor(builder.finalize(), "multithread")
