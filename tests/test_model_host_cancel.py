"""Host steps stop like device runs: `timeout=`, `cancel()` and Ctrl-C are polled before each
host step (the prologue before the device graph and the epilogue after it), so a model with
string values or host-only ops is stopped between steps with RunTimeout / RunCancelled /
RunInterrupted, and the next run is normal.

A host op that stops its own run (it calls `cancel()` or raises SIGINT in this process) makes
the stop land at a known step; the steps that ran are counted through the op's run function.
"""

import os
import pickle
import signal

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.errors import RunCancelled, RunInterrupted, RunTimeout
from rtsoa.host import ops as host_ops
from rtsoa.host.kinds import HostOp
from rtsoa.lowering import lower
from rtsoa.runtime.model import ModelExecutor
from rtsoa.testing.models import model

STRING, FLOAT = TensorProto.STRING, TensorProto.FLOAT
STEPS = 6


def _texts(*values):
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def _chain(with_device):
    """x (strings) -> StringConcat with itself, STEPS times -> y; with `with_device`, a
    device part too: f (float) -> Relu -> r, and the Equal of y and x after it reading r's
    Cast to string (an epilogue step)."""
    nodes, source = [], "x"
    for step in range(STEPS):
        nodes.append(helper.make_node("StringConcat", [source, "x"], [f"s{step}"]))
        source = f"s{step}"
    nodes.append(helper.make_node("Identity", [source], ["y"]))
    inputs, outputs = [("x", STRING, [2])], [("y", STRING, [2])]
    if with_device:
        nodes += [
            helper.make_node("Relu", ["f"], ["r"]),
            helper.make_node("Cast", ["r"], ["rs"], to=STRING),
            helper.make_node("StringConcat", ["rs", "y"], ["z"]),
        ]
        inputs.append(("f", FLOAT, [2]))
        outputs.append(("z", STRING, [2]))
    return model(nodes, inputs, outputs, opset=20)


def _feeds(with_device):
    feeds = {"x": _texts("a", "b")}
    if with_device:
        feeds["f"] = np.array([-1.0, 2.0], np.float32)
    return feeds


@pytest.fixture
def counted(monkeypatch):
    """StringConcat's host op, counting its runs and calling `hook(count)` before each."""
    original = host_ops.HOST_OPS[("", "StringConcat")]
    state = {"count": 0, "hook": None}

    def run(parameters, inputs):
        state["count"] += 1
        if state["hook"] is not None:
            state["hook"](state["count"])
        return original.run(parameters, inputs)

    monkeypatch.setitem(host_ops.HOST_OPS, ("", "StringConcat"), HostOp(original.prepare, run))
    return state


@pytest.mark.parametrize("with_device", [False, True], ids=["host-only", "around-device"])
def test_cancel_stops_at_the_next_step_and_the_model_runs_again(counted, with_device):
    with ModelExecutor(lower(_chain(with_device))) as executor:
        counted["hook"] = lambda count: executor.cancel() if count == 2 else None
        with pytest.raises(RunCancelled):
            executor.execute_sync(_feeds(with_device))
        assert counted["count"] == 2  # step 3 never ran
        counted["hook"], counted["count"] = None, 0
        outputs = executor.execute_sync(_feeds(with_device))
    assert list(outputs["y"]) == ["a" * (STEPS + 1), "b" * (STEPS + 1)]
    if with_device:
        assert list(outputs["z"]) == ["0" + "a" * (STEPS + 1), "2" + "b" * (STEPS + 1)]


def test_a_cancel_in_the_epilogue_stops_after_the_device_run(counted):
    """The epilogue's StringConcat is the last of STEPS + 1 runs: cancelled before it."""
    with ModelExecutor(lower(_chain(True))) as executor:
        counted["hook"] = lambda count: executor.cancel() if count == STEPS else None
        with pytest.raises(RunCancelled):
            executor.execute_sync(_feeds(True))
        assert counted["count"] == STEPS
        counted["hook"] = None
        assert "z" in executor.execute_sync(_feeds(True))


def test_a_timeout_stops_the_host_steps(counted):
    def slow(count):
        if count == 3:
            import time

            time.sleep(0.05)

    counted["hook"] = slow
    with ModelExecutor(lower(_chain(False))) as executor:
        with pytest.raises(RunTimeout):
            executor.execute_sync(_feeds(False), timeout=0.02)
        assert counted["count"] == 3
        counted["hook"] = None
        executor.execute_sync(_feeds(False), timeout=10)


def test_ctrl_c_during_host_steps_raises_run_interrupted(counted):
    def interrupt(count):
        if count == 2:
            os.kill(os.getpid(), signal.SIGINT)

    counted["hook"] = interrupt
    with ModelExecutor(lower(_chain(False))) as executor:
        with pytest.raises(RunInterrupted):
            executor.execute_sync(_feeds(False))
        assert counted["count"] == 2
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        counted["hook"] = None
        executor.execute_sync(_feeds(False))


@pytest.mark.parametrize(
    "error",
    [
        RunCancelled(0, "run cancelled before StringConcat node (#3)"),
        RunCancelled(7),
        RunTimeout(0, 0.5, "run stopped by its timeout of 0.5 s before Identity node (#1)"),
        RunTimeout(12, 2.0),
    ],
)
def test_stops_keep_their_message_when_pickled(error):
    """Batch workers send a job's error to the parent pickled."""
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error)
    assert again.nodes_executed == error.nodes_executed
    assert getattr(again, "timeout", None) == getattr(error, "timeout", None)
