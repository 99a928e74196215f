"""Where a test run's time goes: Numba compile self-time per function and per test file, and
each worker's timeline. A pytest plugin and its report, for work on the suite's run time.

    PYTHONPATH=tests COMPILE_PROFILE=profile/run python -m pytest -p compile_profile -n auto ...
    python tests/compile_profile.py profile/run          # the report

Each process (an xdist worker, or the one process) writes `<prefix>.<worker>.<pid>.json`: the
compile self-time of every function it compiled (a caller's time excludes its callees'
compiles), by test, and when each test started and ended. Only compiles inside the test
processes are seen: op compile helpers, the background op-library compile and the
subprocesses of the docs, batch and prewarm tests are not. The report adds up the files, lists
the costliest functions and files, groups the executor loops specialised per kernel set, and
shows each worker's busy time and when it finished.
"""

import collections
import json
import os
import re
import sys
import time
from pathlib import Path

_stack = []  # [dispatcher, self seconds so far, since]
_functions = {}  # qualified name -> [seconds, compiles]
_tests = collections.Counter()  # nodeid -> seconds
_timeline = []  # (nodeid, start, end)
_current = [None, 0.0]  # nodeid, start


def _name(dispatcher):
    function = getattr(dispatcher, "py_func", None)
    if function is None:
        return str(dispatcher)
    return f"{function.__module__}.{function.__qualname__}"


def _listener():
    """Register (and return) the compile listener that fills `_functions` and `_tests`."""
    from numba.core import event

    class Listener(event.Listener):
        def on_start(self, ev):
            now = time.perf_counter()
            if _stack:
                _stack[-1][1] += now - _stack[-1][2]
            _stack.append([ev.data.get("dispatcher"), 0.0, now])

        def on_end(self, ev):
            now = time.perf_counter()
            dispatcher, seconds, since = _stack.pop()
            seconds += now - since
            entry = _functions.setdefault(_name(dispatcher), [0.0, 0])
            entry[0] += seconds
            entry[1] += 1
            if _current[0] is not None:
                _tests[_current[0]] += seconds
            if _stack:
                _stack[-1][2] = now

    listener = Listener()
    event.register("numba:compile", listener)
    return listener


def pytest_configure(config):
    _listener()


def pytest_runtest_logstart(nodeid, location):
    _current[0], _current[1] = nodeid, time.time()


def pytest_runtest_logfinish(nodeid, location):
    _timeline.append((nodeid, _current[1], time.time()))
    _current[0] = None


def pytest_unconfigure(config):
    prefix = os.environ.get("COMPILE_PROFILE")
    if not prefix:
        return
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        return  # the xdist controller (it sees the workers' tests too): the workers write
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    data = {"functions": _functions, "tests": dict(_tests), "timeline": _timeline}
    path = Path(f"{prefix}.{worker}.{os.getpid()}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def report(prefix, top=25):
    """The report of the files a run with COMPILE_PROFILE=`prefix` wrote, as text."""
    paths = sorted(Path(prefix).parent.glob(Path(prefix).name + ".*.json"))
    if not paths:
        return f"no profiles {prefix}.*.json"
    functions, compiles, processes, files, loops = (collections.Counter() for _ in range(5))
    lines = []
    starts, ends = [], []
    for path in paths:
        data = json.loads(path.read_text())
        for name, (seconds, count) in data["functions"].items():
            functions[name] += seconds
            compiles[name] += count
            processes[name] += 1
            match = re.match(r"(.*\.run_\w+?)_[0-9a-f]{20}$", name)
            if match:
                loops[match.group(1)] += seconds
        for nodeid, seconds in data["tests"].items():
            files[nodeid.split("::")[0]] += seconds
        timeline = data["timeline"]
        if timeline:
            busy = sum(end - start for _, start, end in timeline)
            starts.append(timeline[0][1])
            ends.append(timeline[-1][2])
            lines.append(
                f"{path.name}: {len(timeline)} tests, {busy:.0f} s in tests, "
                f"{sum(data['functions'][n][0] for n in data['functions']):.0f} s compiling"
            )
    if starts:
        zero = min(starts)
        lines.append("workers finished at " + ", ".join(f"{end - zero:.0f} s" for end in ends))
    lines.append(f"\ncompile self-time in the test processes: {sum(functions.values()):.0f} s")
    lines.append("\nby test file:")
    lines += [f"{seconds:8.1f}  {name}" for name, seconds in files.most_common(top)]
    lines.append("\nexecutor loops, all kernel sets:")
    lines += [f"{seconds:8.1f}  {name}_<key>" for name, seconds in loops.most_common()]
    lines.append("\nby function (seconds, compiles, processes):")
    lines += [
        f"{seconds:8.1f} {compiles[name]:4d} {processes[name]:2d}  {name}"
        for name, seconds in functions.most_common(top)
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(sys.argv[1]))
