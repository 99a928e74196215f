"""The suite's compile profiler (`tests/compile_profile.py`): its report adds up the workers'
files, groups the executor loops specialised per kernel set, and says what each worker did;
its listener attributes a callee's compile to the callee alone."""

import json
import time

import compile_profile
import numpy as np
from numba import njit


def _write(path, functions, tests, timeline):
    path.write_text(json.dumps({"functions": functions, "tests": tests, "timeline": timeline}))


def test_the_report_adds_up_the_workers_files(tmp_path):
    loop = "rtsoa.executors.sequential.run_sequential"
    _write(
        tmp_path / "run.gw0.11.json",
        {f"{loop}_{'a' * 20}": [3.0, 1], "rtsoa.ops.conv.conv_run": [2.0, 2]},
        {"tests/test_a.py::test_one": 4.0, "tests/test_a.py::test_two": 1.0},
        [["tests/test_a.py::test_one", 100.0, 104.0], ["tests/test_a.py::test_two", 104.0, 105.0]],
    )
    _write(
        tmp_path / "run.gw1.12.json",
        {f"{loop}_{'b' * 20}": [1.5, 1], "rtsoa.ops.conv.conv_run": [0.5, 1]},
        {"tests/test_b.py::test_three": 2.0},
        [["tests/test_b.py::test_three", 101.0, 110.0]],
    )
    text = compile_profile.report(str(tmp_path / "run"))
    assert "run.gw0.11.json: 2 tests, 5 s in tests, 5 s compiling" in text
    assert "run.gw1.12.json: 1 tests, 9 s in tests, 2 s compiling" in text
    assert "workers finished at 5 s, 10 s" in text
    assert "compile self-time in the test processes: 7 s" in text
    assert "     5.0  tests/test_a.py" in text and "     2.0  tests/test_b.py" in text
    assert f"     4.5  {loop}_<key>" in text  # both kernel sets' loops, one line
    assert "     2.5    3  2  rtsoa.ops.conv.conv_run" in text  # seconds, compiles, processes
    assert compile_profile.report(str(tmp_path / "none")) == f"no profiles {tmp_path}/none.*.json"


def test_a_callers_time_leaves_out_its_callees_compiles(monkeypatch):
    from numba.core import event  # the profiler's own hook (tests/compile_profile.py)

    monkeypatch.setattr(compile_profile, "_functions", {})  # a profiled run's stay untouched
    listener = compile_profile._listener()

    @njit
    def callee(x):
        return np.sum(np.sort(x))

    @njit
    def caller(x):
        return callee(x) + 1.0

    start = time.perf_counter()
    try:
        caller(np.arange(5.0))  # compiles caller, and callee inside it
    finally:
        wall = time.perf_counter() - start
        event.unregister("numba:compile", listener)
    name = f"{__name__}.test_a_callers_time_leaves_out_its_callees_compiles.<locals>."
    caller_seconds, caller_compiles = compile_profile._functions[name + "caller"]
    callee_seconds, callee_compiles = compile_profile._functions[name + "callee"]
    assert caller_compiles == 1 and callee_compiles == 1
    assert callee_seconds > 0 and caller_seconds > 0
    assert caller_seconds + callee_seconds <= wall  # the callee's compile counted once
