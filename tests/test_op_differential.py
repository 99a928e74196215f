"""Differential fuzzer: single-op ONNX models run by rtsoa and by onnxruntime (or
onnx.reference where that is the better oracle) on inputs drawn over edge values, compared.

The cases (`op_differential_cases.py`) cover the elementwise, comparison, logical, activation,
Cast, reduction, softmax, MatMul and data-movement ops over their dtypes, with NaN, +-inf, -0.0,
zero divisors, INT_MIN / INT_MAX, empty tensors and broadcasting shapes, from one seeded
generator (deterministic). Both runtimes run in one worker process (`op_differential_worker.py`)
reused for every case, so that a crash in either fails the test naming the op, the runtime and
the inputs, instead of killing pytest; a dead worker is restarted for the remaining cases.

Comparison: the same output names, shapes and dtypes; integers and bools exactly; floats with
NaN in the same places, infinities equal and finite values within the case's rtol / atol; the
sign of a zero where the op defines it (`Case.signed_zero`). A case both runtimes refuse
agrees; one the oracle has no kernel for (onnxruntime NOT_IMPLEMENTED) is counted as skipped.
"""

import os
import pickle
import select
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from op_differential_cases import SEED, Case, all_cases, single, values

import rtsoa

WORKER = Path(__file__).with_name("op_differential_worker.py")
FIRST_TIMEOUT_SECONDS = 1800  # the worker's first case may compile the op library
TIMEOUT_SECONDS = 120
MAX_REPORTED = 25


class WorkerDied(Exception):
    """The worker exited or hung; `step` is (runtime, feed index) it was in."""

    def __init__(self, step, detail):
        super().__init__(detail)
        self.step = step


class Worker:
    """One worker process, restarted after a crash."""

    def __init__(self):
        self.process = None
        self.cases_run = 0

    def _start(self):
        # the rtsoa this test imports, not whichever one is installed
        package_root = str(Path(rtsoa.__file__).resolve().parent.parent)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_root, *sys.path]))
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self.cases_run = 0

    def _read(self, size, deadline):
        fd = self.process.stdout.fileno()
        chunks = []
        while size > 0:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            if not ready:
                raise TimeoutError
            chunk = os.read(fd, size)
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def run(self, case):
        """[(rtsoa outcome, oracle outcome)] per feed of `case` (see the worker's docstring)."""
        if self.process is None or self.process.poll() is not None:
            self._start()
        timeout = FIRST_TIMEOUT_SECONDS if self.cases_run == 0 else TIMEOUT_SECONDS
        deadline = time.monotonic() + timeout
        options = getattr(case, "options", {})
        payload = pickle.dumps((case.model, case.feeds, case.oracle, options))
        step = ("sending", -1)
        try:
            self.process.stdin.write(struct.pack("<Q", len(payload)) + payload)
            self.process.stdin.flush()
            while True:
                (size,) = struct.unpack("<Q", self._read(8, deadline))
                message = pickle.loads(self._read(size, deadline))
                if message[0] == "done":
                    self.cases_run += 1
                    return message[1]
                step = message[1:]
        except (EOFError, BrokenPipeError, TimeoutError) as error:
            self.process.kill()
            code = self.process.wait()
            self.process = None
            what = "hung" if isinstance(error, TimeoutError) else f"died (exit code {code})"
            raise WorkerDied(step, what) from None

    def close(self):
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(timeout=60)
            self.process = None


def _describe_feed(feed):
    return "; ".join(
        f"{name}={np.array2string(a, threshold=24, precision=9)} ({a.dtype}{list(a.shape)})"
        for name, a in feed.items()
    )


def _compare_arrays(case, got, want):
    """None if `got` matches `want` under the case's rules, else why not."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape / dtype {got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"
    if got.dtype.kind not in "fc":
        bad = got != want
    else:
        nan_got, nan_want = np.isnan(got), np.isnan(want)
        with np.errstate(invalid="ignore", over="ignore"):
            close = np.isclose(got, want, rtol=case.rtol, atol=case.atol, equal_nan=True)
        bad = ~close | (nan_got != nan_want)
        if case.signed_zero:
            bad |= (want == 0) & (got == 0) & (np.signbit(got) != np.signbit(want))
    if not bad.any():
        return None
    where = np.argwhere(bad)[:4].tolist() if bad.ndim else [[]]
    return f"differs at {where}: rtsoa {got[bad][:4]} vs oracle {want[bad][:4]}"


def compare(case, mine, oracle):
    """(verdict, detail): "ok", "skip" (the oracle has no kernel) or "mismatch"."""
    if mine[0] == "refused":  # at lowering or load: an error like any other here
        mine = ("error", *mine[1:])
    if oracle[0] == "error" and "NOT_IMPLEMENTED" in oracle[2]:
        return "skip", oracle[2]
    if mine[0] == "error" and oracle[0] == "error":
        return "ok", "both refuse"
    if oracle[0] == "error":
        return "mismatch", f"the oracle refuses ({oracle[1]}: {oracle[2]}), rtsoa runs it"
    if mine[0] == "error":
        return "mismatch", f"rtsoa refuses ({mine[1]}: {mine[2]})"
    got, want = mine[1], oracle[1]
    if sorted(got) != sorted(want):
        return "mismatch", f"outputs {sorted(got)} vs {sorted(want)}"
    for name in want:
        why = _compare_arrays(case, np.asarray(got[name]), np.asarray(want[name]))
        if why is not None:
            return "mismatch", f"output {name}: {why}"
    return "ok", ""


def run_cases(cases, worker):
    """Counts per verdict and the failure reports (mismatches and crashes)."""
    counts = {"ok": 0, "skip": 0, "mismatch": 0, "crash": 0}
    failures = []
    for case in cases:
        try:
            results = worker.run(case)
        except WorkerDied as died:
            runtime, index = died.step
            feed = _describe_feed(case.feeds[index]) if index >= 0 else "(before any feed)"
            counts["crash"] += 1
            failures.append(f"{case.label}: the worker {died} in {runtime} on {feed}")
            continue
        for feed, (mine, oracle) in zip(case.feeds, results, strict=True):
            verdict, detail = compare(case, mine, oracle)
            counts[verdict] += 1
            if verdict == "mismatch":
                failures.append(
                    f"{case.label} vs {case.oracle}: {detail}; inputs {_describe_feed(feed)}"
                )
    return counts, failures


@pytest.fixture(scope="module")
def worker():
    worker = Worker()
    yield worker
    worker.close()


def test_single_ops_agree_with_onnxruntime(worker):
    cases = all_cases(SEED)
    start = time.monotonic()
    counts, failures = run_cases(cases, worker)
    elapsed = time.monotonic() - start
    ops = sorted({case.label.split("[")[0] for case in cases})
    summary = (
        f"{len(cases)} models of {len(ops)} ops, {sum(counts.values())} feeds in {elapsed:.1f} s: "
        f"{counts}"
    )
    print(summary)
    shown = "\n".join(failures[:MAX_REPORTED])
    assert not failures, f"{summary}\n{len(failures)} failures, first ones:\n{shown}"
    assert counts["ok"] > 0.9 * sum(counts.values()), summary


def test_a_crash_in_the_worker_names_the_op_runtime_and_inputs(worker):
    """int64 INT_MIN / -1 traps (SIGFPE) in onnxruntime: the fuzzer leaves it out of its cases,
    here it stands for any crash. rtsoa's answer comes first and the worker is restarted."""
    low = np.iinfo(np.int64).min

    def draw():
        return [np.array([low, 6]), np.array([-1, 3])]

    crash = single("Div", draw)
    crash = Case(*crash[:2], crash.feeds[:1], *crash[3:])
    counts, failures = run_cases([crash], worker)
    if counts["crash"] == 0:
        pytest.skip("this onnxruntime does not trap on INT64_MIN / -1")
    assert len(failures) == 1
    report = failures[0]
    assert report.startswith("Div[int64/int64]") and "in onnxruntime on x0=" in report
    assert str(low) in report
    after = single("Add", lambda: [values(np.random.default_rng(0), np.float32, (3,))] * 2)
    assert run_cases([after], worker)[0]["ok"] == len(after.feeds)  # a new worker took over
