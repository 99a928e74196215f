"""The multithread executor's worker threads, kept between runs (rtsoa/executors/worker_threads.py):
reused run after run, more started only when runs overlap, errors kept, and a forked child
that starts without the parent's threads."""

import multiprocessing
import threading

import numpy as np
import pytest

from rtsoa.executors import RunResult, prepare_executor
from rtsoa.executors.worker_threads import POOL, WorkerPool
from rtsoa.graph.generators import generate
from rtsoa.kernels import expected_checksum


def _pool_threads():
    return [thread for thread in threading.enumerate() if thread.name.startswith("rtsoa-worker")]


def test_runs_reuse_the_same_threads():
    graph = generate("lowered", 400, seed=3)
    expected = RunResult(0, graph.num_nodes, expected_checksum(graph), False)
    executors = [prepare_executor(graph, "multithread", threads=threads) for threads in (2, 4)]
    for executor in executors:
        assert executor.run() == expected  # the pool now holds enough idle threads
    before = {thread.ident for thread in _pool_threads()}
    for _ in range(20):
        for executor in executors:
            assert executor.run() == expected
    assert {thread.ident for thread in _pool_threads()} == before  # none started, none lost


def test_overlapping_runs_get_threads_of_their_own():
    """Two executors run at once from two Python threads: each run takes its own workers
    (a worker busy with one run is never handed to another), both give the answer, and
    every worker is idle again afterwards."""
    graph = generate("lowered", 4000, seed=5)
    expected = RunResult(0, graph.num_nodes, expected_checksum(graph), False)
    executors = [prepare_executor(graph, "multithread", threads=3) for _ in range(2)]
    results = [[] for _ in executors]
    start = threading.Barrier(len(executors))

    def runs(index):
        start.wait()
        for _ in range(5):
            results[index].append(executors[index].run())

    callers = [threading.Thread(target=runs, args=(i,)) for i in range(len(executors))]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert results == [[expected] * 5] * len(executors)
    assert POOL.idle() == len(_pool_threads())


def test_a_job_that_raises_is_done_with_its_error_and_the_thread_serves_again():
    pool = WorkerPool()
    (worker,) = pool.acquire(1)

    def fail():
        raise ValueError("from the job")

    worker.start(fail)
    error = worker.wait()
    assert isinstance(error, ValueError) and str(error) == "from the job"
    ran = []
    worker.start(lambda: ran.append(1))
    assert worker.wait() is None and ran == [1]
    pool.release([worker])
    assert pool.idle() == 1 and pool.acquire(1) == [worker]


def _child_run(queue):
    graph = generate("lowered", 400, seed=3)
    executor = prepare_executor(graph, "multithread", threads=2)
    result = executor.run()
    queue.put((result.nodes_executed, result.checksum, expected_checksum(graph)))


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method"
)
def test_a_forked_child_starts_its_own_threads():
    """A child forked after the parent's runs left idle threads in the pool has none of
    them: it must not hand a job to a thread that does not exist (it would wait forever)."""
    graph = generate("lowered", 400, seed=3)
    assert prepare_executor(graph, "multithread", threads=2).run().status == 0
    assert POOL.idle() > 0
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_run, args=(queue,))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0
    nodes, checksum, expected = queue.get(timeout=10)
    assert nodes == graph.num_nodes and np.uint64(checksum) == np.uint64(expected)
