"""Property tests of the multithread executor that reach its branches: 2 to 8 threads (a class
queue served by two or more workers from 4 threads on), a non-zero admission window (shared
from 3 threads on, the device worker's own with 2), graphs with relations, and the release
order itself, judged by the reference's sequential order (`reference.simulate`).

The window's contract (`rtsoa.executors.admission`): a node of rank r starts only once every
rank at or below r - window has finished, where a node's rank is its position in the
sequential executor's priority order. With a window of 1 the run is therefore the sequential
order exactly, on any number of threads. With two threads the window is the device worker's
own and covers its nodes alone. Each test records which branches its examples reached
(`figures.py` prints them at the end of the run).
"""

from collections import Counter

import numpy as np
from executor_checks import GENERATED, generated_case, property_settings, random_priority_graph
from figures import counted, report
from hypothesis import given
from hypothesis import strategies as st
from reference import RecordingBuilder, check_dag_order, recorded_generate, simulate
from test_multithread import run_and_check
from test_multithread_relations import _edge_pairs, _relation_pairs, run_and_check_relations

from rtsoa.executors import Profiler, RunResult, prepare_executor
from rtsoa.executors.multithread import MultithreadExecutor
from rtsoa.graph.generators import generate
from rtsoa.kernels import REGISTRY, expected_checksum
from rtsoa.kernels.relations import remove_launch_free_edges

THREADS = st.sampled_from((2, 3, 4, 8))
WINDOWS = st.sampled_from((1, 1, 2, 3, 7, 64))
# generated lowered graphs: the generator's options
LOWERED = {
    "nodes": st.integers(4, 600),
    "seed": st.integers(0, 2**31 - 1),
    "streams": st.integers(1, 3),
    "fan_in": st.integers(0, 3),
}
DEVICE_CLASSES = (1, 2)  # WorkerClass.MEMORY, WorkerClass.LAUNCH: the device worker's queues
_branches = {}  # test name -> Counter of the branches its examples reached


def _node_queues(executor):
    """The class queue of each node (the same in every plan of the executor)."""
    return np.asarray(executor.plans["classes"].run_state.node_queue)


def branches_reached(executor, graph):
    """The multithread branches a prepared executor's run takes on `graph`: the thread count,
    whether a worker runs the priority order straight or alone, whether some class queue
    holding a node is served by two or more workers (the shared-queue path and its
    speculative successor), the admission window (off, shared or the device worker's own)
    and the relation state."""
    nodes = graph.nodes_of()
    workers = executor.workers  # of the plan runs use now
    classes = _node_queues(executor)[nodes]
    serves = np.array([worker.serves for worker in workers])
    held = np.unique(classes)
    shared = bool((serves[:, held].sum(axis=0) >= 2).any())
    window = int(executor.admission.window)
    labels = [f"threads {executor.threads}"]
    if any(worker.straight for worker in workers):
        labels.append("straight")
    elif any(worker.alone for worker in workers):
        labels.append("alone")
    labels.append("shared queue" if shared else "private queues only")
    if window == 0:
        labels.append("no window")
    else:
        mode = "shared" if bool(executor.admission.shared) else "own"
        labels.append(f"window {'1' if window == 1 else '> 1'} ({mode})")
    labels.append("relations" if executor.relations.waiter_frees.shape[0] else "no relations")
    return labels


def tally(test, executor, graph):
    """Count the branches of one example and refresh the test's report."""
    counter = _branches.setdefault(test, Counter())
    counter["examples"] += 1
    counter.update(branches_reached(executor, graph))
    examples = counter["examples"]
    lines = [f"  {examples} examples reached:"]
    lines += counted(Counter({k: v for k, v in counter.items() if k != "examples"}))
    report(f"test_multithread_properties.py::{test}", lines)


def random_device_graph(data, units):
    """(graph, description): `units` drawn units, each a Checksum3 node or an AllocMemory ->
    LaunchKernel -> FreeMemory chain (memory and launch classes: the window is on), every
    node with a drawn priority in -5 .. 5, plus up to 60 drawn forward edges between nodes."""
    builder = RecordingBuilder()
    draw = data.draw
    for _ in range(units):
        if draw(st.booleans()):
            builder.add_node("Checksum3", priority=draw(st.integers(-5, 5)))
            continue
        size = draw(st.integers(1, 1 << 16))
        alloc, (block,) = REGISTRY.add_node(
            builder, "AllocMemory", attributes=[size], priority=draw(st.integers(-5, 5))
        )
        launch, _ = REGISTRY.add_node(
            builder,
            "LaunchKernel",
            attributes=[size, draw(st.integers(0, 1000))],
            inputs=[block],
            priority=draw(st.integers(-5, 5)),
        )
        free, _ = REGISTRY.add_node(
            builder, "FreeMemory", inputs=[block], priority=draw(st.integers(-5, 5))
        )
        builder.add_edge(alloc, launch)
        builder.add_edge(launch, free)
    count = len(builder.description.nodes)
    pairs = draw(
        st.lists(st.tuples(st.integers(0, count - 1), st.integers(0, count - 1)), max_size=60)
    )
    for a, b in pairs:
        if a != b:
            builder.add_edge(min(a, b), max(a, b))
    return builder.finalize(), builder.description


def check_window(graph, description, executor, window):
    """Profiled run: the reference's sequential order ranks the nodes; each node started only
    after every node ranked `window` or more below it ended (with two threads: the device
    worker's nodes among themselves). A window of 1 with 3+ threads runs that order exactly.
    Window 0 (none): the answer and the edge order only."""
    count = graph.nodes_of().shape[0]
    profiler = Profiler()
    assert executor.run(subscriber=profiler) == RunResult(0, count, expected_checksum(graph), False)
    steps = executor.record()[:count]
    check_dag_order(graph, steps[:, 0])
    if window == 0:
        return
    order = simulate(description, "sequential").order
    rank = np.full(graph.num_nodes, -1, dtype=np.int64)
    rank[order] = np.arange(len(order))
    start = np.zeros(graph.num_nodes, dtype=np.int64)
    end = np.zeros(graph.num_nodes, dtype=np.int64)
    start[steps[:, 0]] = steps[:, 1]
    end[steps[:, 0]] = steps[:, 2]
    covered = np.ones(graph.num_nodes, dtype=np.bool_)
    if executor.threads == 2:
        classes = _node_queues(executor)
        covered = np.isin(classes, DEVICE_CLASSES)
    by_rank = np.asarray(order, dtype=np.int64)
    for node in by_rank[covered[by_rank]]:
        earlier = by_rank[: max(rank[node] - window + 1, 0)]
        earlier = earlier[covered[earlier]]
        late = earlier[end[earlier] > start[node]]
        assert late.shape[0] == 0, (
            f"node {node} (rank {rank[node]}) started before node {late[0]} "
            f"(rank {rank[late[0]]}) ended, window {window}"
        )
    if window == 1 and executor.threads > 2:
        assert steps[:, 0].tolist() == order


def _windowed(graph, threads, window):
    """A multithread executor prepared with admission window `window`."""
    original = MultithreadExecutor.window
    MultithreadExecutor.window = window
    try:
        return prepare_executor(graph, "multithread", threads=threads)
    finally:
        MultithreadExecutor.window = original


@property_settings(40)
@given(**GENERATED, threads=THREADS)
def test_property_generated_graphs_on_2_to_8_threads(kind, nodes, seed, kernels, threads):
    """The reference's answer and edge order on every generated kind and thread count."""
    graph, description = generated_case(kind, nodes, seed, kernels)
    executor = run_and_check(graph, description, threads, repeats=2)
    tally("test_property_generated_graphs_on_2_to_8_threads", executor, graph)


@property_settings(40)
@given(data=st.data(), nodes=st.integers(2, 60), threads=THREADS)
def test_property_random_priorities_on_2_to_8_threads(data, nodes, threads):
    """Drawn priorities and edges: from 4 threads the NORMAL queue has several workers, and
    a finished node's best successor runs next on the worker that released it."""
    graph, description = random_priority_graph(data, nodes)
    executor = run_and_check(graph, description, threads, repeats=2)
    tally("test_property_random_priorities_on_2_to_8_threads", executor, graph)


@property_settings(60)
@given(data=st.data(), units=st.integers(1, 30), threads=THREADS, window=WINDOWS)
def test_property_admission_window_keeps_the_priority_order(data, units, threads, window):
    """Drawn priorities with device nodes (the window is on where one is drawn), any window:
    the reference's answer, each node started within `window` ranks of the oldest unfinished
    one, and with a window of 1 on 3+ threads the reference's sequential order exactly."""
    graph, description = random_device_graph(data, units)
    executor = _windowed(graph, threads, window)
    device = any(node.kernel == "AllocMemory" for node in description.nodes)
    assert int(executor.admission.window) == (window if device else 0)
    # no device node: no window, so host nodes may overlap (three Checksum3 nodes, two of them
    # independent, did on 4 threads): only the answer and the edge order hold
    check_window(graph, description, executor, window if device else 0)
    assert executor.device.hazard_count == 0
    assert executor.device.stats()["hbm"]["allocated_bytes.current"] == 0
    tally("test_property_admission_window_keeps_the_priority_order", executor, graph)


@property_settings(30)
@given(**LOWERED, threads=THREADS, window=WINDOWS)
def test_property_admission_window_on_lowered_graphs(nodes, seed, streams, fan_in, threads, window):
    """Lowered graphs (the reference's priorities, events across streams), any window."""
    options = {"seed": seed, "streams": streams, "fan_in": fan_in}
    graph, description = recorded_generate("lowered", nodes, **options)
    executor = _windowed(graph, threads, window)
    check_window(graph, description, executor, window)
    assert executor.device.hazard_count == 0
    tally("test_property_admission_window_on_lowered_graphs", executor, graph)


@property_settings(30)
@given(**LOWERED, threads=THREADS, window=st.sampled_from((0, 1, 3, 64)))
def test_property_relation_graphs(nodes, seed, streams, fan_in, threads, window):
    """Generated lowered graphs after the relation pass (Frees parked until their related
    Launches were submitted), with or without a window: every node once, the checksum, every
    Free after its related Launches, no hazard, every block freed. The release order ranks
    every node after its predecessors by edge and by relation (a Free after its Launches),
    and the window is on where the graph allocates: a release order that missed the
    relations would rank a Free early, or fall back to the order of the edges alone with the
    window off, and still give the same answers."""
    graph = generate("lowered", nodes, seed=seed, streams=streams, fan_in=fan_in)
    graph = remove_launch_free_edges(graph).graph
    executor = _windowed(graph, threads, window)
    ranks = np.asarray(executor.plans["classes"].run_state.ranks)
    for before, after in _edge_pairs(graph) | {(b, a) for a, b in _relation_pairs(graph)}:
        assert ranks[before] < ranks[after], (before, after)
    memory = bool(np.any(_node_queues(executor) == 1))  # WorkerClass.MEMORY
    assert int(executor.admission.window) == (window if memory else 0)
    expected = RunResult(0, graph.num_nodes, expected_checksum(graph), False)
    assert executor.run() == expected
    run_and_check_relations(executor, graph)
    assert executor.run() == expected
    assert executor.device.hazard_count == 0, executor.device.hazards()[:3]
    assert executor.device.stats()["hbm"]["allocated_bytes.current"] == 0
    tally("test_property_relation_graphs", executor, graph)


def test_a_free_ranks_after_its_launch_whatever_their_priorities():
    """A Free of higher priority than the Launch that reads its block: once the relation pass
    replaced their edge by a relation, only the relation keeps the Free after the Launch in
    the release order. Ranked by the edges alone the Free would come first, and with a
    window of 1 it would hold back the Launch that its release waits for."""
    builder = RecordingBuilder()
    alloc, (block,) = REGISTRY.add_node(builder, "AllocMemory", attributes=[64], priority=0)
    launch, _ = REGISTRY.add_node(
        builder, "LaunchKernel", attributes=[64, 1], inputs=[block], priority=5
    )
    free, _ = REGISTRY.add_node(builder, "FreeMemory", inputs=[block], priority=1)
    builder.add_edge(alloc, launch)
    builder.add_edge(launch, free)
    graph = remove_launch_free_edges(builder.finalize()).graph
    assert _relation_pairs(graph) == {(free, launch)} and (launch, free) not in _edge_pairs(graph)
    expected = RunResult(0, graph.num_nodes, expected_checksum(graph), False)
    for threads in (2, 3):
        executor = _windowed(graph, threads, 1)
        ranks = np.asarray(executor.plans["classes"].run_state.ranks)
        assert ranks[alloc] < ranks[launch] < ranks[free]
        assert int(executor.admission.window) == 1
        assert executor.run() == expected
        run_and_check_relations(executor, graph)


def _held_back_chain():
    """(graph, description): a device chain of low rank behind a NORMAL node of 0.1-0.2 s,
    and an independent device chain ranked after it, which a window of 1 holds back."""
    builder = RecordingBuilder()
    busy = builder.add_node("Busy", attributes=[300_000_000], priority=0)
    for priority, after in ((0, busy), (5, None)):
        alloc, (block,) = REGISTRY.add_node(
            builder, "AllocMemory", attributes=[64], priority=priority
        )
        launch, _ = REGISTRY.add_node(
            builder, "LaunchKernel", attributes=[64, 1], inputs=[block], priority=priority
        )
        free, _ = REGISTRY.add_node(builder, "FreeMemory", inputs=[block], priority=priority)
        for source, target in ((after, alloc), (alloc, launch), (launch, free)):
            if source is not None:
                builder.add_edge(source, target)
    return builder.finalize(), builder.description


def test_the_first_run_of_an_executor_keeps_the_window():
    """The window holds from an executor's first run on (the device worker's own window with
    two threads starts with every one of its ranks unfinished): the later chain of
    `_held_back_chain` must not start first. Marking the ranks finished in epoch 1 instead of
    0 (the first run's epoch) let that chain run first, on the first run only, which the
    properties above (a few ready nodes at a time, and repeated runs) did not see."""
    graph, description = _held_back_chain()
    for threads in (2, 3):
        check_window(graph, description, _windowed(graph, threads, 1), 1)


def test_the_first_run_after_the_epoch_wraps_keeps_the_window():
    """When the run epoch wraps (it starts again at 1), the marks of the runs before must be
    forgotten: a rank marked in epoch 1 or later would count as finished in the new epoch 1
    and open the window on that run (`test_multithread_memory.py` checks the answers and the
    NOT_MINE marks across a wrap, which an open window does not change)."""
    from rtsoa.executors.ready_queues import EPOCH
    from rtsoa.executors.relation_state import MAX_EPOCH

    graph, description = _held_back_chain()
    for threads in (2, 3):
        executor = _windowed(graph, threads, 1)
        check_window(graph, description, executor, 1)
        executor.run_state.control[EPOCH] = MAX_EPOCH
        check_window(graph, description, executor, 1)


def test_only_the_memory_worker_gets_a_private_window():
    """`private_admissions` (two threads: one server per class queue): the worker serving
    the MEMORY queue gets the window, over the ranks of its own nodes (the others' NOT_MINE);
    the NORMAL worker, which allocates nothing, gets none; with the window off, nobody does."""
    from rtsoa.executors.admission import NOT_MINE, Admission, private_admissions
    from rtsoa.graph.schema import WorkerClass
    from rtsoa.kernels.abi import line_zeros

    normal, memory, launch = (int(WorkerClass.NORMAL), int(WorkerClass.MEMORY),
                              int(WorkerClass.LAUNCH))  # fmt: skip
    classes = np.array([normal, memory, launch, normal, memory], dtype=np.int64)
    rank = np.array([0, 1, 2, 3, 4], dtype=np.int64)
    serves = np.zeros((2, 3), dtype=np.bool_)
    serves[0, normal] = True
    serves[1, memory] = serves[1, launch] = True
    for window in (3, 0):
        admission = Admission(
            window=np.int64(window),
            count=np.int64(5),
            finished=line_zeros(5, np.int64),
            low=line_zeros(8, np.int64),
        )
        host, device = private_admissions(admission, rank, classes, serves)
        assert int(host.window) == 0 and int(device.window) == window
        if window:
            assert list(device.finished) == [NOT_MINE, 0, 0, NOT_MINE, 0]
