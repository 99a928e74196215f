"""fork() while another thread runs models (`rtsoa.runtime.forks`): the fork waits for the run
in flight, and the child loads and runs models, new ones and the one it inherited.

Before, fork() hung in the parent: OpenBLAS's fork handler waited for its worker threads,
busy with the other thread's MatMul. The scenario runs in a subprocess bounded by a timeout,
so a hang fails the test instead of hanging pytest.
"""

import os
import textwrap
import threading

import pytest
from subprocess_json import run_json

from rtsoa.runtime.forks import CallGate

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

SCENARIO = textwrap.dedent(
    """
    import json, multiprocessing, os, threading, time
    import numpy as np
    from onnx import helper
    import rtsoa
    from rtsoa.testing.models import FLOAT, model

    n = 384  # large enough for OpenBLAS to run the products on its threads
    rng = np.random.default_rng(0)
    W = (rng.standard_normal((n, n)) / 20).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["m"]),
        helper.make_node("MatMul", ["m", "W"], ["y"]),
    ]
    proto = model(nodes, [("x", FLOAT, [n, n])], [("y", FLOAT, [n, n])], [("W", W)])
    data = proto.SerializeToString()
    x = rng.standard_normal((n, n)).astype(np.float32)
    executor = rtsoa.load_executor(data)
    want = executor.execute_sync({"x": x})["y"]

    def child():
        with rtsoa.load_executor(data) as fresh:
            got = fresh.execute_sync({"x": x})["y"]
        inherited = executor.execute_sync({"x": x})["y"]
        good = np.allclose(got, want, rtol=1e-4, atol=1e-4) and np.array_equal(inherited, want)
        os._exit(0 if good else 3)

    stop = threading.Event()
    runs = [0]

    def loop():
        while not stop.is_set():
            executor.execute_sync({"x": x})
            runs[0] += 1

    thread = threading.Thread(target=loop)
    thread.start()
    codes = []
    for i in range(3):
        while runs[0] < 2 * (i + 1):  # forks land while the thread is in its loop
            time.sleep(0.001)
        if i < 2:
            pid = os.fork()
            if pid == 0:
                child()
            codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        else:
            process = multiprocessing.get_context("fork").Process(target=child)
            process.start()
            process.join()
            codes.append(process.exitcode)
    stop.set()
    thread.join()
    executor.unload()
    print(json.dumps({"codes": codes, "runs": runs[0]}))
    """
)


def test_fork_while_another_thread_runs_execute_sync():
    result = run_json(SCENARIO, timeout=240)
    assert result["codes"] == [0, 0, 0]
    assert result["runs"] >= 6


def test_a_fork_from_inside_a_call_waits_for_the_other_threads_only():
    gate = CallGate()
    entered, leave, forked = threading.Event(), threading.Event(), threading.Event()

    def other():
        with gate:
            entered.set()
            leave.wait()

    def forking():  # fork() from inside a call of this thread (e.g. from a subscriber)
        with gate, gate:  # re-entrant: counted once
            gate.before_fork()
            forked.set()
            gate.after_fork_in_parent()

    threads = [threading.Thread(target=f, daemon=True) for f in (other, forking)]
    threads[0].start()
    entered.wait()
    threads[1].start()
    assert not forked.wait(0.3)  # the other thread's call is in flight
    leave.set()
    assert forked.wait(10)  # then the fork goes ahead: its own call is not waited for
    for thread in threads:
        thread.join()
    assert gate.running == 0


def test_the_child_gets_a_fresh_gate():
    gate = CallGate()
    gate.before_fork()
    gate.after_fork_in_child()
    with gate:
        assert gate.running == 1
    assert gate.running == 0
