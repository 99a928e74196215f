"""Every run can be stopped: `cancel()` from another thread, `timeout=`, on each executor.

The graphs: a chain of Busy nodes (each ~tens of microseconds of LCG rounds, so a whole run
takes a good part of a second and a stop lands in its middle) for every executor, and a While
loop of 10^9 iterations for the executors that run control flow. Each stop must come within
a bounded time, report how far the run got, and leave the executor giving the same result as
a run that was never stopped. Ctrl-C is tested in subprocesses (tests/test_cancel_models.py).
"""

import math
import signal
import threading
import time
import warnings

import numpy as np
import pytest
from test_executor_loops import Run

from rtsoa.abi.status import STATUS_CANCELLED, describe
from rtsoa.errors import RunCancelled, RunInterrupted, RunTimeout
from rtsoa.executors import EXECUTORS, prepare_executor
from rtsoa.executors.cancel import CANCEL_CALL, POLL_STEPS, REASON
from rtsoa.graph.builder import GraphBuilder
from rtsoa.kernels.control_flow import add_while

BUSY_NODES = 6000
BUSY_ROUNDS = 400_000  # LCG rounds per node: ~60 us each, a run of ~0.35 s
STOP_WITHIN = 2.0  # seconds from the request to the exception
CONTROL_FLOW = [name for name, cls in EXECUTORS.items() if cls.runs_control_flow]


def busy_chain(nodes=BUSY_NODES, rounds=BUSY_ROUNDS):
    builder = GraphBuilder(name="busy-chain")
    previous = None
    for _ in range(nodes):
        node = builder.add_node("Busy", attributes=[rounds])
        if previous is not None:
            builder.add_edge(previous, node)
        previous = node
    return builder.finalize()


def endless_loop(iterations=10**9):
    """A While loop whose body is one checksum node: 10^9 iterations run for minutes."""
    builder = GraphBuilder(name="endless-loop")

    def body(builder, subgraph, pivot, counter):
        node = builder.add_node("Checksum1", graph=subgraph)
        builder.add_edge(pivot, node)
        return [node]

    add_while(builder, iterations, body)
    return builder.finalize()


def prepare(graph, name):
    threads = 2 if EXECUTORS[name].uses_threads else None
    return prepare_executor(graph, executor=name, threads=threads)


@pytest.fixture(scope="module")
def chain():
    return busy_chain()


@pytest.fixture(scope="module")
def expected(chain):
    """The result of a run never stopped, per executor (all equal: the checksum folds)."""
    results = {name: prepare(chain, name).run() for name in EXECUTORS}
    assert len({(r.nodes_executed, r.checksum) for r in results.values()}) == 1
    return results["sequential"]


def stopped(run, request):
    """Run `run()` while `request()` fires 0.05 s later from another thread; returns (the
    exception, seconds from the request to the exception)."""
    fired = []

    def fire():
        fired.append(time.perf_counter())
        request()

    timer = threading.Timer(0.05, fire)
    timer.start()
    try:
        with pytest.raises(RunCancelled) as caught:
            run()
        return caught.value, time.perf_counter() - fired[0]
    finally:
        timer.cancel()
        timer.join()


@pytest.mark.parametrize("name", list(EXECUTORS))
def test_cancel_from_another_thread_stops_each_executor(chain, expected, name):
    executor = prepare(chain, name)
    error, seconds = stopped(executor.run, executor.cancel)
    assert type(error) is RunCancelled
    assert seconds < STOP_WITHIN
    assert 0 < error.nodes_executed < BUSY_NODES  # stopped in the middle
    assert f"{error.nodes_executed:,} node(s)" in str(error)
    result = executor.run()  # the next run is whole and right
    assert (result.nodes_executed, result.checksum) == (expected.nodes_executed, expected.checksum)


@pytest.mark.parametrize("name", list(EXECUTORS))
def test_timeout_stops_each_executor(chain, expected, name):
    executor = prepare(chain, name)
    start = time.perf_counter()
    with pytest.raises(RunTimeout) as caught:
        executor.run(timeout=0.05)
    assert time.perf_counter() - start < 0.05 + STOP_WITHIN
    assert 0 < caught.value.nodes_executed < BUSY_NODES
    assert caught.value.timeout == 0.05
    assert "timeout of 0.05 s" in str(caught.value)
    result = executor.run(timeout=60)  # a timeout that does not pass changes nothing
    assert (result.nodes_executed, result.checksum) == (expected.nodes_executed, expected.checksum)


@pytest.mark.parametrize("name", CONTROL_FLOW)
def test_a_loop_of_a_billion_iterations_stops(name):
    assert prepare(endless_loop(3), name).run().nodes_executed > 3  # compiles the loop first
    executor = prepare(endless_loop(), name)
    error, seconds = stopped(executor.run, executor.cancel)
    assert seconds < STOP_WITHIN and error.nodes_executed > POLL_STEPS
    start = time.perf_counter()
    with pytest.raises(RunTimeout):
        executor.run(timeout=0.1)
    assert time.perf_counter() - start < 0.1 + STOP_WITHIN


@pytest.mark.parametrize("name", CONTROL_FLOW)
def test_a_switch_reads_the_reason_at_every_iteration(name):
    """The step poll comes every POLL_STEPS steps; a loop's switch also reads the reason, so
    a loop stops within one iteration of the request. The loop's source runs as Python
    (tests/test_executor_loops.py) with a dispatch that sets the reason at step 100."""
    cancel = np.zeros(2, dtype=np.int64)

    def on_step(steps):
        if steps == 100:
            cancel[REASON] = CANCEL_CALL  # as cancel() does from another thread

    with warnings.catch_warnings(), np.errstate(over="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # uint64 folds wrap on purpose
        run = Run(endless_loop(), name, cancel=cancel, on_step=on_step)
    assert run.status == STATUS_CANCELLED
    assert 100 <= run.executed < 100 + 8 < POLL_STEPS  # an iteration is 7 nodes
    assert "cancelled" in describe(STATUS_CANCELLED)


def test_cancel_with_no_run_in_progress_does_nothing(chain, expected):
    executor = prepare(chain, "sequential")
    executor.cancel()
    assert executor.run().checksum == expected.checksum


def test_a_run_from_another_thread_leaves_sigint_alone(chain):
    """Only the main thread may install a signal handler: a run in another thread stops by
    timeout (or cancel()) and the process's Ctrl-C handling is untouched while it runs."""
    executor = prepare(chain, "sequential")
    seen = {}

    def work():
        try:
            executor.run(timeout=0.2)
        except RunTimeout as error:
            seen["error"] = error

    thread = threading.Thread(target=work)
    thread.start()
    time.sleep(0.05)
    seen["handler"] = signal.getsignal(signal.SIGINT)
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert isinstance(seen["error"], RunTimeout)
    assert seen["handler"] is signal.default_int_handler


def _wakeup_fd():
    previous = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(previous)
    return previous


def test_nothing_lingers_after_a_run(chain):
    """No thread is left behind by a timeout, and the SIGINT handler and the wakeup file
    descriptor are the caller's again after every run, stopped or not."""
    executor = prepare(chain, "sequential")
    executor.run()  # the first main-thread run starts the one idle interrupt watcher
    handler, wakeup = signal.getsignal(signal.SIGINT), _wakeup_fd()
    threads = set(threading.enumerate())
    with pytest.raises(RunTimeout):
        executor.run(timeout=0.01)
    executor.run(timeout=30)
    stopped(executor.run, executor.cancel)
    assert set(threading.enumerate()) == threads
    assert signal.getsignal(signal.SIGINT) is handler is signal.default_int_handler
    assert _wakeup_fd() == wakeup


@pytest.mark.parametrize("timeout", [0, -1.0, math.nan, "1", True])
def test_bad_timeouts_are_refused_before_the_run(chain, timeout):
    executor = prepare(chain, "sequential")
    with pytest.raises((ValueError, TypeError), match="timeout"):
        executor.run(timeout=timeout)
    assert executor.run().nodes_executed == BUSY_NODES


def test_the_errors_say_what_stopped_the_run():
    assert issubclass(RunTimeout, RunCancelled)
    assert issubclass(RunInterrupted, KeyboardInterrupt)
    assert not issubclass(RunInterrupted, Exception)  # `except Exception` does not eat ^C
    assert "interrupted after 12 node(s)" in str(RunInterrupted(12))
    assert RunInterrupted(None).nodes_executed is None


def test_a_kept_words_array_is_polled_by_every_loop():
    """Every executor's loop takes the cancellation words as its last argument."""
    graph = busy_chain(nodes=3, rounds=1)
    for name in EXECUTORS:
        executor = prepare(graph, name)
        assert executor._arguments[-1] is executor.cancel_words
        assert executor.cancel_words.dtype == np.int64


def test_a_ctrl_c_read_late_does_not_stop_the_next_run():
    """Each Ctrl-C reaches a run twice: the scope's Python handler (at once, the main thread
    being in Python here) and the watcher thread reading the wakeup pipe, which may read it
    after that run has ended and the next begun. The next run must not see it: 200 runs,
    each interrupted, each followed at once by a run that must end untouched."""
    from rtsoa.executors.cancel import CANCEL_INTERRUPT, CancelFlag, _watcher

    flag = CancelFlag()
    stale = 0
    for _ in range(200):
        with pytest.raises(RunInterrupted):
            with flag.scope():
                signal.raise_signal(signal.SIGINT)
        try:
            with flag.scope():
                deadline = time.monotonic() + 0.002  # the watcher thread's chance to run
                while time.monotonic() < deadline:
                    time.sleep(0)
                stale += int(flag.words[REASON] == CANCEL_INTERRUPT)
        except RunInterrupted:  # the scope raises the interrupt it saw at its end
            pass
    assert stale == 0, f"{stale} of 200 runs were stopped by the run before's Ctrl-C"
    watcher = _watcher()
    assert watcher.read <= watcher.handled  # every byte read was one a handler took
