"""The multithread executor sharing the launches (`sharing="launches"`): every worker runs
launches, a launch that locks the device itself holds the device lock only around its device
calls, and its computation runs beside other launches (the kernels: multithread_kernels.py;
lowered models under every sharing: tests/test_multithread_models.py)."""

import numpy as np
import pytest
from multithread_kernels import MT_REGISTRY, SCRATCH_MET

from rtsoa import GraphBuilder
from rtsoa.executors import prepare_executor
from rtsoa.graph.schema import ValueKind, WorkerClass

LIVENESS_THREADS = (2, 3, 4, 8)
REPEATS = 3


def _meeting_graph(nodes, seed, rounds, waits):
    """`_class_graph`'s mix with LaunchMeet (a launch that locks the device itself) for the
    launches, all counting into one shared slot; returns (graph, shared, counts)."""
    rng = np.random.default_rng(seed)
    builder = GraphBuilder()
    shared = builder.add_value(kind=ValueKind.INT)
    meet = [builder.add_value(kind=ValueKind.INT) for _ in range(3)]
    kinds = rng.integers(0, 3, size=nodes)
    for kind in kinds:
        if kind == 0:
            builder.add_node("MemoryCount", inputs=[shared], attributes=[rounds])
        elif kind == 1:
            builder.add_node("LaunchMeet", inputs=[shared, *meet], attributes=[rounds, waits])
        else:
            builder.add_node("NormalCount", attributes=[rounds])
    return builder.finalize(), shared, np.bincount(kinds, minlength=3)


def _scratch(executor, word):
    return np.array([rt.worker.scratch[word] for rt in executor._runtimes])


@pytest.mark.parametrize("threads", LIVENESS_THREADS)
def test_shared_launches_hold_the_device_lock_only_around_device_calls(threads):
    """Sharing the launches: every worker runs launches, and the device calls of a launch that
    locks the device itself exclude those of the others and the executor-locked memory
    kernels (one shared slot, no lost update), while its computation does not hold the lock."""
    graph, shared, counts = _meeting_graph(600, threads, rounds=2000, waits=0)
    executor = prepare_executor(graph, "multithread", threads=threads, registry=MT_REGISTRY)
    assert set(executor.plans) == {"classes", "host", "launches"}
    executor.sharing = "launches"
    plan = executor.plans["launches"]
    assert plan.shares_device and all(bool(worker.hands_off) for worker in plan.workers)
    assert all(bool(worker.serves[WorkerClass.LAUNCH]) for worker in executor.workers)
    # the executor locks the memory kernels only; LaunchMeet locks the device itself
    critical = np.asarray(plan.run_state.node_critical)
    names = np.array(graph.kernel_names)[np.asarray(graph.node_kernel)]
    assert set(names[critical]) == {"MemoryCount"}
    for _ in range(REPEATS):
        executor.runtime.values.slots[shared] = 0
        assert executor.run().nodes_executed == 600
        assert executor.runtime.values.slots[shared] == counts[0] + counts[1]
        memory, launch, normal = counts.tolist()
        assert executor.nodes_per_class.sum(axis=0).tolist() == [normal, memory, launch]
        assert executor.nodes_per_class[1, WorkerClass.MEMORY] == memory  # the memory worker
        assert executor.device.state.lock[0] == 0  # released, and the device unshared again
        assert executor.device.state.lock[8] == 0


@pytest.mark.parametrize("sharing, met", [("launches", 2), ("classes", 0)])
def test_two_launches_compute_at_once_only_when_the_launches_are_shared(sharing, met):
    """One memory node releases two launches that each wait (outside the device lock) for the
    other to be computing too. Shared, two workers run them at once and both meet; by classes
    the one device worker runs them one after the other and neither meets."""
    builder = GraphBuilder()
    shared = builder.add_value(kind=ValueKind.INT)
    meet = [builder.add_value(kind=ValueKind.INT) for _ in range(3)]
    first = builder.add_node("MemoryCount", inputs=[shared], attributes=[10])
    waits = 200_000 if met else 2_000  # yields: seconds at most on a loaded machine
    for _ in range(2):
        launch = builder.add_node("LaunchMeet", inputs=[shared, *meet], attributes=[10, waits])
        builder.add_edge(first, launch)
    executor = prepare_executor(builder.finalize(), "multithread", threads=2, registry=MT_REGISTRY)
    executor.sharing = sharing
    assert executor.run().nodes_executed == 3
    assert _scratch(executor, SCRATCH_MET).sum() == met
    launches = executor.nodes_per_class[:, WorkerClass.LAUNCH].tolist()
    assert launches == ([1, 1] if met else [0, 2])
