"""The multithread executor: same answers as the single-thread executors and the
reference model with 2, 3 and 4 threads (repeated to shake out races), worker classes and
critical sections, errors, end of sequence, refusals (its atomics: tests/test_atomics.py)."""

from unittest import mock

import numpy as np
import pytest
from executor_checks import GENERATED, generated_case, property_settings, random_priority_graph
from hypothesis import given
from hypothesis import strategies as st
from multithread_kernels import (
    MT_REGISTRY,
    SCRATCH_LAUNCH,
    SCRATCH_MEMORY,
    SCRATCH_NORMAL,
)
from reference import check_dag_order, recorded_generate, simulate

from rtsoa import GraphBuilder
from rtsoa.executors import KernelError, Profiler, RunResult, prepare_executor
from rtsoa.executors.multithread import MultithreadExecutor
from rtsoa.graph.generators import generate
from rtsoa.graph.schema import ValueKind
from rtsoa.kernels import STATUS_END_OF_SEQUENCE, expected_checksum
from rtsoa.kernels.control_flow import add_const_int, add_if

THREADS = (2, 3, 4)
LIVENESS_THREADS = (2, 3, 4, 8)  # liveness and hazards: also more workers than cores
SHARINGS = ("classes", "host", "launches")
REPEATS = 3
SETTINGS = property_settings(20)


# -- same answers -----------------------------------------------------------------------------


def run_and_check(graph, description, threads, repeats=REPEATS, sharing="auto"):
    """Every Main node once, the reference's checksum, predecessors finished before each
    node started (profiled run), on every repeat."""
    expected = expected_checksum(graph)
    reference = simulate(description, "topological")
    assert reference.kind == "ok" and reference.checksum == expected
    executor = prepare_executor(graph, "multithread", threads=threads)
    executor.sharing = sharing
    count = graph.nodes_of().shape[0]
    for _ in range(repeats):
        assert executor.run() == RunResult(0, count, expected, False)
    profiler = Profiler()
    assert executor.run(subscriber=profiler) == RunResult(0, count, expected, False)
    steps = executor.record()[:count]
    check_dag_order(graph, steps[:, 0])  # steps are claimed after every predecessor finished
    start = np.zeros(graph.num_nodes, dtype=np.int64)
    end = np.zeros(graph.num_nodes, dtype=np.int64)
    start[steps[:, 0]] = steps[:, 1]
    end[steps[:, 0]] = steps[:, 2]
    sources = np.repeat(np.arange(graph.num_nodes), np.diff(graph.succ_offsets))
    assert np.all(start[graph.succ_targets] >= end[sources])
    return executor


@pytest.mark.parametrize("sharing", SHARINGS)
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("kind", ["chain", "random", "layered", "lowered"])
def test_generated_graphs(kind, threads, sharing):
    run_and_check(*recorded_generate(kind, 1000, seed=threads), threads, sharing=sharing)


@SETTINGS
@given(**GENERATED, threads=st.sampled_from(THREADS), sharing=st.sampled_from(SHARINGS))
def test_property_same_answers_as_the_reference(kind, nodes, seed, kernels, threads, sharing):
    run_and_check(*generated_case(kind, nodes, seed, kernels), threads, 2, sharing)


@SETTINGS
@given(data=st.data(), nodes=st.integers(2, 60), threads=st.sampled_from(THREADS))
def test_property_random_priorities_and_edges(data, nodes, threads):
    run_and_check(*random_priority_graph(data, nodes), threads)


@property_settings(40)
@given(data=st.data(), nodes=st.integers(2, 60), straight=st.booleans())
def test_a_worker_alone_runs_the_sequential_order(data, nodes, straight):
    """Two threads on a graph of NORMAL kernels: worker 0 runs every node, each in-degree
    with it as the single writer (`alone`: plain decrements, private batch only), in the
    sequential executor's order exactly (the release order is the ranks). This equivalence
    is what lets such a worker run that order straight (`straight`, the default), with no
    in-degree releases at all: both ways are checked. Worker 1 serves no queue holding a
    node, so it is not started."""
    graph, expected = random_priority_graph(data, nodes)
    with mock.patch.object(MultithreadExecutor, "straight", straight):
        executor = run_and_check(graph, expected, 2, sharing="classes")
    assert [bool(worker.alone) for worker in executor.workers] == [True, False]
    assert [bool(worker.straight) for worker in executor.workers] == [straight, False]
    assert executor.plans["classes"].working == [True, False]
    # counted as it goes, or (straight) from the ranks it ran: every node NORMAL, on worker 0
    assert executor.nodes_per_class.tolist() == [[graph.num_nodes, 0, 0], [0, 0, 0]]
    sequential = prepare_executor(graph, "sequential")
    sequential.run(subscriber=Profiler())
    order = sequential.record()[: graph.num_nodes, 0]
    assert np.array_equal(executor.record()[: graph.num_nodes, 0], order)


@pytest.mark.parametrize("sharing", SHARINGS)
@pytest.mark.parametrize("streams", [1, 2])
@pytest.mark.parametrize("threads", LIVENESS_THREADS)
def test_lowered_graphs_run_without_hazards_and_free_everything(threads, streams, sharing):
    graph = generate("lowered", 3000, seed=streams + 10 * threads, streams=streams)
    executor = prepare_executor(graph, "multithread", threads=threads)
    executor.sharing = sharing
    for _ in range(REPEATS):
        result = executor.run()
        assert result == RunResult(0, graph.nodes_of().shape[0], expected_checksum(graph), False)
    assert executor.device.hazard_count == 0, executor.device.hazards()[:3]
    assert executor.device.stats()["hbm"]["allocated_bytes.current"] == 0


# -- worker classes and critical sections -----------------------------------------------------


def _class_graph(nodes, seed, rounds):
    """Independent nodes (maximal concurrency) of the three counting kernels, each critical
    one incrementing the one shared slot."""
    rng = np.random.default_rng(seed)
    builder = GraphBuilder()
    shared = builder.add_value(kind=ValueKind.INT)
    kinds = rng.integers(0, 3, size=nodes)
    for kind in kinds:
        if kind == 0:
            builder.add_node("MemoryCount", inputs=[shared], attributes=[rounds])
        elif kind == 1:
            builder.add_node("LaunchCount", inputs=[shared], attributes=[rounds])
        else:
            builder.add_node("NormalCount", attributes=[rounds])
    return builder.finalize(), shared, np.bincount(kinds, minlength=3)


@pytest.mark.parametrize("threads", THREADS)
def test_workers_by_class_and_critical_sections_exclusive(threads):
    graph, shared, counts = _class_graph(600, threads, rounds=2000)
    executor = prepare_executor(graph, "multithread", threads=threads, registry=MT_REGISTRY)
    executor.sharing = "classes"
    for _ in range(REPEATS):
        executor.runtime.values.slots[shared] = 0
        assert executor.run().nodes_executed == 600
        # memory and launch kernels never overlapped: no lost update
        assert executor.runtime.values.slots[shared] == counts[0] + counts[1]
        ran = np.array([rt.worker.scratch[1:4] for rt in executor._runtimes])
        memory, launch, normal = ran[:, 0], ran[:, 1], ran[:, 2]
        assert memory[1] == counts[0] and memory.sum() == counts[0]  # the one MEMORY worker
        launch_worker = 2 if threads > 2 else 1  # two threads: one device worker
        assert launch[launch_worker] == counts[1] and launch.sum() == counts[1]
        assert normal[1] == 0 and normal.sum() == counts[2]
        if threads > 2:
            assert normal[2] == 0
    # the device lock is taken only where two workers run critical sections (the shared
    # counter above is the check that they never overlapped)
    assert executor.run_state.node_critical.any() == (threads > 2)
    assert (SCRATCH_MEMORY, SCRATCH_LAUNCH, SCRATCH_NORMAL) == (1, 2, 3)


@pytest.mark.parametrize("threads", LIVENESS_THREADS)
def test_host_sharing_keeps_device_work_on_its_workers(threads):
    """Sharing the host work: every worker serves the NORMAL queue beside its own class's, the
    memory and launch nodes still run on their workers only and never overlap (the shared
    counter), and every node runs once."""
    graph, shared, counts = _class_graph(600, threads, rounds=2000)
    executor = prepare_executor(graph, "multithread", threads=threads, registry=MT_REGISTRY)
    executor.sharing = "host"
    assert all(bool(worker.serves[0]) for worker in executor.workers)
    assert all(executor.plans["host"].working)
    for _ in range(REPEATS):
        executor.runtime.values.slots[shared] = 0
        assert executor.run().nodes_executed == 600
        assert executor.runtime.values.slots[shared] == counts[0] + counts[1]
        ran = np.array([rt.worker.scratch[1:4] for rt in executor._runtimes])
        memory, launch, normal = ran[:, 0], ran[:, 1], ran[:, 2]
        assert memory[1] == counts[0] and memory.sum() == counts[0]
        launch_worker = 2 if threads > 2 else 1
        assert launch[launch_worker] == counts[1] and launch.sum() == counts[1]
        assert normal.sum() == counts[2]


def test_host_sharing_runs_a_host_graph_on_both_workers():
    """Two threads on a graph of NORMAL kernels: by classes one worker runs every node (the
    other is not started); sharing the host work, both serve the NORMAL queue, neither is
    alone, in-degrees are decremented atomically, and the answer is the same."""
    graph, description = recorded_generate("random", 2000, seed=5)
    executor = run_and_check(graph, description, 2, sharing="host")
    assert sum(executor.nodes_per_worker) == graph.num_nodes  # who ran how many: timing
    host, classes = executor.plans["host"], executor.plans["classes"]
    assert host.working == [True, True] and classes.working == [True, False]
    assert not any(bool(worker.alone) for worker in host.workers)
    assert not host.run_state.plain.any() and classes.run_state.plain.any()
    # the plans share every array but the two that follow from who serves what
    assert host.run_state.in_degree is classes.run_state.in_degree
    assert host.run_state.control is classes.run_state.control


def test_auto_sharing_times_both_plans_then_keeps_the_faster(monkeypatch):
    """ "auto" alternates the plans over its first plain runs (by classes first), times them,
    then keeps the one whose fastest run was faster; subscribed and failed runs are not
    timed. Every run gives the same answer."""
    from rtsoa.executors import multithread

    graph = generate("random", 500, seed=4)
    executor = prepare_executor(graph, "multithread", threads=2)
    assert executor.sharing == "auto" and executor.chosen_sharing == "classes"
    expected = RunResult(0, graph.num_nodes, expected_checksum(graph), False)
    seconds = iter([0.5, 0.2, 0.4, 0.3])  # classes, host, classes, host: host is faster
    used = []
    real = executor._timed

    def timed(plan, measured):
        used.append(plan)
        real(plan, next(seconds))

    monkeypatch.setattr(executor, "_timed", timed)
    assert executor.run(subscriber=Profiler()) == expected  # not timed
    assert executor.calibrating and executor.calibration_runs == 0
    for runs in range(1, multithread.CALIBRATION_RUNS * 2 + 1):
        assert executor.run() == expected and executor.calibration_runs == runs
    assert used == ["classes", "host", "classes", "host"] and not executor.calibrating
    assert executor.chosen_sharing == "host" and executor.workers is executor.plans["host"].workers
    assert executor.run() == expected and len(used) == 4  # chosen: no more timing
    executor.sharing = "classes"
    assert executor.chosen_sharing == "classes" and executor.run() == expected


def test_sharing_values_and_a_root_without_host_work():
    executor = prepare_executor(generate("random", 50, seed=1), "multithread", threads=2)
    with pytest.raises(ValueError, match="sharing must be one of"):
        executor.sharing = "everything"
    assert set(executor.plans) == {"classes", "host"}  # no launch that locks the device
    builder = GraphBuilder()  # device work only: sharing the host work would change nothing
    alloc = builder.add_node("AllocMemory", attributes=[64])
    block = builder.add_value(kind=ValueKind.MEMORY_BLOCK, producer=alloc)
    free = builder.add_node("FreeMemory", inputs=[block])
    builder.add_edge(alloc, free)
    executor = prepare_executor(builder.finalize(), "multithread", threads=2)
    executor.sharing = "host"
    assert set(executor.plans) == {"classes"} and executor.chosen_sharing == "classes"
    assert executor.run().nodes_executed == 2


@pytest.mark.parametrize("threads", [2, 3, 4, 5])
def test_queues_served_by_each_worker(threads):
    """Who pops which class queue, by the rule docs/multithread.md states, for each sharing:
    worker 1 the MEMORY queue, the LAUNCH queue worker 2 from three threads on (worker 1 with
    two), every other worker the NORMAL queue; "host" adds the NORMAL queue to every worker,
    "launches" the NORMAL and the LAUNCH queues."""
    from rtsoa.executors.worker_classes import queues_served
    from rtsoa.graph.schema import WorkerClass

    launch_worker = 2 if threads > 2 else 1
    for sharing in ("classes", "host", "launches"):
        for worker, served in enumerate(queues_served(threads, sharing).tolist()):
            expected = {WorkerClass.NORMAL} if worker not in (1, launch_worker) else set()
            if worker == 1:
                expected.add(WorkerClass.MEMORY)
            if worker == launch_worker:
                expected.add(WorkerClass.LAUNCH)
            if sharing in ("host", "launches"):
                expected.add(WorkerClass.NORMAL)
            if sharing == "launches":
                expected.add(WorkerClass.LAUNCH)
            assert served == [queue in expected for queue in range(3)], (sharing, worker)


# -- errors, end of sequence, refusals --------------------------------------------------------


@pytest.mark.parametrize("threads, runs", [(2, 1), (4, 30)])
def test_first_failure_in_priority_order(threads, runs):
    """Node 0 releases two failing nodes; the one of priority 1 fails first. With two threads
    one NORMAL worker takes both from its private batch in priority order. With four, the
    NORMAL queue has two workers: the one that finished node 0 runs the better successor
    itself at once (the speculative successor) and queues the other, so priority 1 still
    fails first, run after run (300 of 300 runs; continuing with the worse one instead
    reported status 12 in 300 of 300)."""
    builder = GraphBuilder()
    builder.add_node("Checksum0")
    builder.add_node("Fail", attributes=[11], priority=1)
    builder.add_node("Fail", attributes=[12], priority=2)
    builder.add_edge(0, 1)
    builder.add_edge(0, 2)
    executor = prepare_executor(builder.finalize(), "multithread", threads=threads)
    for _ in range(runs):
        with pytest.raises(KernelError) as caught:
            executor.run()
        assert (caught.value.status, caught.value.node) == (11, 1)


@pytest.mark.parametrize("threads", THREADS)
def test_a_failure_stops_all_workers_and_the_executor_stays_usable(threads):
    builder = GraphBuilder()
    status_value = builder.add_value(kind=ValueKind.INT)
    first = builder.add_node("Checksum0")
    failing = builder.add_node("FailWhen", inputs=[status_value], compute_node=42)
    builder.add_edge(first, failing)
    after = builder.add_node("Checksum1")  # only after the failing node: must never run
    builder.add_edge(failing, after)
    for _ in range(200):  # independent work the other workers are busy with
        builder.add_node("Busy", attributes=[200])
    graph = builder.finalize()
    executor = prepare_executor(graph, "multithread", threads=threads)
    for _ in range(REPEATS):
        executor.runtime.values.slots[status_value] = 7
        with pytest.raises(KernelError) as caught:
            executor.run()
        error = caught.value
        assert (error.status, error.node, error.kernel, error.compute_node) == (
            7,
            failing,
            "FailWhen",
            42,
        )
        assert 2 <= error.nodes_executed <= graph.num_nodes - 1
        executor.runtime.values.slots[status_value] = 0
        assert executor.run() == RunResult(0, graph.num_nodes, expected_checksum(graph), False)


@pytest.mark.parametrize("straight", [True, False])
def test_a_worker_alone_stops_at_the_step_limit_with_the_sequential_answer(straight):
    """The step limit applies to a worker alone as to any (each node runs at most once, so a
    limit below the node count stops the run): the same status, node and count as the
    priority executor's, run after run, in the straight order and by in-degree releases."""
    from rtsoa.abi.status import STATUS_STEP_LIMIT

    builder = GraphBuilder()
    for node in range(12):
        builder.add_node(f"Checksum{node % 8}", priority=-node)
        if node >= 2:
            builder.add_edge(node - 2, node)
    graph = builder.finalize()
    with pytest.raises(KernelError) as sequential:
        prepare_executor(graph, "priority", max_steps=5).run()
    with mock.patch.object(MultithreadExecutor, "straight", straight):
        executor = prepare_executor(graph, "multithread", threads=2, max_steps=5)
    executor.sharing = "classes"
    assert bool(executor.workers[0].straight) == straight
    for _ in range(2):
        with pytest.raises(KernelError) as caught:
            executor.run()
        got = caught.value
        assert got.status == STATUS_STEP_LIMIT
        assert (got.node, got.nodes_executed) == (sequential.value.node, 5)


@pytest.mark.parametrize("threads", THREADS)
def test_end_of_sequence_is_not_an_error(threads):
    builder = GraphBuilder()
    for node in range(6):
        builder.add_node("EndOfSequence" if node == 3 else "Checksum2")
        if node:
            builder.add_edge(node - 1, node)
    graph = builder.finalize()
    result = prepare_executor(graph, "multithread", threads=threads).run()
    assert result == RunResult(
        STATUS_END_OF_SEQUENCE, 4, expected_checksum(graph, nodes=[0, 1, 2]), True
    )


def test_control_flow_is_refused_and_auto_never_picks_multithread_for_it():
    builder = GraphBuilder()
    const, condition = add_const_int(builder, 1)
    add_if(builder, condition, [None, None], after=[const])
    graph = builder.finalize()
    with pytest.raises(ValueError, match="multithread executor cannot run control flow"):
        prepare_executor(graph, "multithread")
    assert prepare_executor(graph, "auto").name in ("topological", "priority")
    with pytest.raises(ValueError, match="threads applies to the multithread executor"):
        prepare_executor(graph, "auto", threads=2)


def test_threads_option():
    graph = generate("random", 50)
    assert prepare_executor(graph, "auto", threads=3).name == "multithread"
    assert prepare_executor(graph, "auto").name == "sequential"
    assert prepare_executor(graph, "multithread", threads=3).threads == 3
    for bad in (0, 1, 65):
        with pytest.raises(ValueError, match="threads must be 2 .. 64"):
            prepare_executor(graph, "multithread", threads=bad)
    for bad in (2.0, "2", True):
        with pytest.raises(TypeError, match="threads must be an int"):
            prepare_executor(graph, "multithread", threads=bad)
    with pytest.raises(ValueError, match="threads applies to the multithread executor"):
        prepare_executor(graph, "sequential", threads=2)
    # one thread: the one-thread executors (auto's choice without threads), never multithread
    assert prepare_executor(graph, "auto", threads=1).name == "sequential"
    assert prepare_executor(graph, "topological", threads=np.int64(1)).name == "topological"


def test_empty_main_runs_nothing():
    builder = GraphBuilder()
    assert prepare_executor(builder.finalize(), "multithread").run() == RunResult(0, 0, 0, False)


@pytest.mark.parametrize(
    "kind, threads",
    [("random", 2), ("random", 4), ("layered", 2), ("layered", 4), ("lowered", 2)],
)
def test_100k_node_graphs(kind, threads):
    """The stress size of tests/test_stress.py: every node once, NumPy's checksum. (Lowered
    graphs with a separate MEMORY worker, 3 and 4 threads, are in
    tests/test_multithread_memory.py, with their device memory.)"""
    graph = generate(kind, 100_000, seed=threads)
    executor = prepare_executor(graph, "multithread", threads=threads)
    expected = RunResult(0, graph.num_nodes, expected_checksum(graph), False)
    assert executor.run() == expected and executor.run() == expected
