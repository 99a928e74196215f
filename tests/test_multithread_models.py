"""A lowered CNN on the multithread executor: the same bits as the sequential executor for
every thread count and every sharing of the work, with no hazard.

No kernel is split across threads, so whichever worker runs a node computes the same bits:
the outputs compare exactly, with no float tolerance. "launches" runs op launches on several
workers at once, each holding the device lock only around its device calls.
"""

import numpy as np
import pytest

from rtsoa.executors import multithread
from rtsoa.graph.schema import WorkerClass
from rtsoa.lowering import lower
from rtsoa.runtime import load_model
from rtsoa.testing.cnn import inception

RUNS = 4  # Main once, then the kept-shapes Main
SHARINGS = ("classes", "host", "launches")


@pytest.fixture(scope="module")
def inception_case():
    """(lowered Inception-v1, small: four parallel branches per block; input; sequential y)."""
    graph = lower(inception(width=0.125, size=32, classes=10, blocks=3))
    x = np.random.default_rng(3).standard_normal((2, 3, 32, 32)).astype(np.float32)
    with load_model(graph, executor="sequential") as model:
        want = model.execute_sync({"x": x})["y"]
    return graph, x, want


@pytest.mark.parametrize("threads", [2, 3, 4, 8])
def test_inception_gives_the_sequential_bits_on_any_thread_count(inception_case, threads):
    graph, x, want = inception_case
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(multithread, "default_threads", lambda: threads)
        model = load_model(graph, executor="multithread")
    assert model._main.threads == threads  # prepared at load, with the patched default
    with model:
        executors = model.executors
        assert all(set(executor.plans) == set(SHARINGS) for executor in executors)
        for sharing in (*SHARINGS, "auto"):
            for executor in executors:
                executor.sharing = sharing
            for _ in range(RUNS):
                got = model.execute_sync({"x": x})["y"]
                assert got.dtype == want.dtype and np.array_equal(got, want), sharing
            assert model.device.hazard_count == 0, sharing


def test_shared_launches_lock_the_device_and_leave_it_unshared(inception_case):
    """Sharing the launches, any worker may run op launches (by classes only the device
    worker does; which one runs them when shared depends on timing: the test of launches
    computing at once is in tests/test_multithread.py); only then is the device lock in use,
    and the device is unshared again after the run, for the next executor on it."""
    graph, x, want = inception_case
    with load_model(graph, executor="multithread") as model:
        model.execute_sync({"x": x})  # Main; the reruns below keep its shapes
        assert len(model.executors) == 2  # Main, and the reruns keeping its shapes
        executor = model.executors[-1]
        launches = executor.plans["launches"]
        assert launches.shares_device and not executor.plans["classes"].shares_device
        # the executor holds the lock around allocations and frees, not around op launches
        critical = np.asarray(launches.run_state.node_critical)[executor.nodes]
        names = np.array(executor.graph.kernel_names)[np.asarray(executor.graph.node_kernel)]
        assert set(names[executor.nodes][critical]) == {"AllocMemory", "FreeMemory"}
        executor.sharing = "launches"
        launches = int(np.count_nonzero(names[executor.nodes] == "OpLaunch"))
        for _ in range(5):
            assert np.array_equal(model.execute_sync({"x": x})["y"], want)
            assert executor.nodes_per_class[:, WorkerClass.LAUNCH].sum() == launches
            assert model.device.state.lock.tolist() == [0] * len(model.device.state.lock)
        executor.sharing = "classes"
        model.execute_sync({"x": x})
        assert executor.nodes_per_class[:, WorkerClass.LAUNCH].tolist() == [0, launches]
