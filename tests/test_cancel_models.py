"""Stopping model runs and `rtsoa run`: `timeout=` and `cancel()` on execute / execute_sync,
and Ctrl-C (SIGINT) sent to a process running `execute_sync` or `rtsoa run`.

The model is an ONNX Loop whose trip count M is an input (acc = sum of i * x for i < M,
count = M): M = 10^9 runs for hours, M = 5 is checked against that formula. Every wait on a
subprocess is bounded, so a run that does not stop fails the test instead of hanging it.
"""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from test_cancel import endless_loop
from test_models_control_flow import m_only_model

import rtsoa
from rtsoa.errors import RunCancelled, RunTimeout
from rtsoa.graph.io import save_graph

ENDLESS = np.array(10**9, np.int64)
X = np.array([1.0, -2.0, 0.5], np.float32)
STOP_WITHIN = 2.0  # seconds from Ctrl-C to the process's exit
SUBPROCESS_LIMIT = 300  # seconds any subprocess may take in all (a cold cache compiles)


def inputs(trips):
    return {"M": np.array(trips, np.int64), "x": X}


def check(outputs, trips):
    np.testing.assert_allclose(outputs["acc"], X * (trips * (trips - 1) / 2), rtol=1e-6)
    assert int(outputs["count"]) == trips


def allocated(model):
    return model.device.stats()["hbm"]["allocated_bytes.current"]


@pytest.fixture(scope="module", params=["topological", "priority"])
def loop_model(request):
    with rtsoa.load_executor(m_only_model(), executor=request.param) as model:
        check(model.execute_sync(inputs(5)), 5)
        yield model


def test_execute_sync_timeout_frees_the_run_and_the_next_run_is_right(loop_model):
    before = allocated(loop_model)
    start = time.perf_counter()
    with pytest.raises(RunTimeout) as caught:
        loop_model.execute_sync(inputs(10**9), timeout=0.1)
    assert time.perf_counter() - start < 0.1 + STOP_WITHIN
    assert caught.value.nodes_executed > 0
    assert allocated(loop_model) == before  # the run's blocks and its staging growth freed
    assert loop_model.device.leaked_blocks == 0
    check(loop_model.execute_sync(inputs(5)), 5)
    check(loop_model.execute(inputs(7), timeout=30).result(), 7)


def test_execute_timeout_and_cancel_from_another_thread(loop_model):
    before = allocated(loop_model)
    with pytest.raises(RunTimeout):
        loop_model.execute(inputs(10**9), timeout=0.05)
    timer = threading.Timer(0.1, loop_model.cancel)
    timer.start()
    start = time.perf_counter()
    try:
        with pytest.raises(RunCancelled) as caught:
            loop_model.execute_sync(inputs(10**9))
    finally:
        timer.cancel()
        timer.join()
    assert type(caught.value) is RunCancelled
    assert time.perf_counter() - start < 0.1 + STOP_WITHIN
    assert allocated(loop_model) == before
    check(loop_model.execute_sync(inputs(3)), 3)
    loop_model.cancel()  # no run in progress: nothing happens
    check(loop_model.execute_sync(inputs(4)), 4)


_SCRIPT = """
import sys
import time
import numpy as np
sys.path.insert(0, sys.argv[1])
from test_models_control_flow import m_only_model
import rtsoa
from rtsoa.errors import RunInterrupted

x = np.array([1.0, -2.0, 0.5], np.float32)
with rtsoa.load_executor(m_only_model(), executor="topological") as model:
    model.execute_sync({"M": np.array(2, np.int64), "x": x})  # loads what the run needs
    print("started", flush=True)
    try:
        model.execute_sync({"M": np.array(10**9, np.int64), "x": x})
    except RunInterrupted as interrupted:
        print("interrupted", interrupted.nodes_executed, time.monotonic(), flush=True)
    again = model.execute_sync({"M": np.array(5, np.int64), "x": x})
    print("again", int(again["count"]), float(again["acc"][0]), flush=True)
"""


def _environment():
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(rtsoa.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    return env


def _interrupt(process, delay):
    """SIGINT to `process` after `delay` s; returns (stdout, stderr, seconds to its exit).
    `_interrupt.sent`: time.monotonic() at the signal (the clock is system-wide)."""
    time.sleep(delay)
    sent = time.perf_counter()
    _interrupt.sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    try:
        out, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail("the process did not exit within 30 s of SIGINT")
    return out, err, time.perf_counter() - sent


def test_ctrl_c_stops_execute_sync_and_the_model_runs_again():
    tests = os.path.dirname(os.path.abspath(__file__))
    process = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, tests],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(),
    )
    deadline = time.monotonic() + SUBPROCESS_LIMIT
    line = ""
    while not line.startswith("started") and time.monotonic() < deadline:
        line = process.stdout.readline()  # a cold cache compiles first
        if not line and process.poll() is not None:
            pytest.fail(f"the script ended before its run:\n{process.stderr.read()}")
    out, err, _seconds = _interrupt(process, 0.5)
    assert process.returncode == 0, err
    lines = out.split("\n")
    word, executed, caught = lines[0].split()
    assert word == "interrupted" and int(executed) > 0, out
    assert float(caught) - _interrupt.sent < STOP_WITHIN  # from the signal to the exception
    assert lines[1] == "again 5 10.0", out  # 0 + 1 + 2 + 3 + 4, times x[0] = 1


def test_ctrl_c_stops_rtsoa_run_with_status_130(tmp_path):
    """`rtsoa run` of a saved graph with a 10^9-iteration loop: Ctrl-C ends it within a
    fraction of a second with one line on stderr and status 130. The same command on a
    3-iteration loop warms the disk cache first; if the interrupt lands before the run (a
    slow start: while Python imports, or before the first node), it is sent again later."""
    short, endless = tmp_path / "short.rtsoa", tmp_path / "endless.rtsoa"
    save_graph(endless_loop(3), short)
    save_graph(endless_loop(), endless)
    command = [sys.executable, "-m", "rtsoa.cli", "run", "--executor", "topological"]
    warm = subprocess.run(
        [*command, str(short)], capture_output=True, text=True, env=_environment(), timeout=600
    )
    assert warm.returncode == 0, warm.stderr
    for delay in (1.5, 4.0, 10.0, 20.0):
        process = subprocess.Popen(
            [*command, str(endless)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_environment(),
        )
        out, err, seconds = _interrupt(process, delay)
        if process.returncode != 130 and err.rstrip().endswith("KeyboardInterrupt"):
            continue  # it landed while Python was still importing, before rtsoa's handler
        assert process.returncode == 130, (out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rtsoa run: interrupted"), err
        if "the run stopped after" in lines[0]:
            break
    else:
        pytest.fail("SIGINT never reached the run (the command started too slowly)")
    executed = int(lines[0].split("after ")[1].split(" node")[0].replace(",", ""))
    assert executed > 0
    assert seconds < STOP_WITHIN
