"""A pool of worker processes running conformance cases, where a case that kills its worker or
hangs is that case's failure (a crash or a timeout), not the end of the run.

Each worker (`rtsoa.testing.conformance_worker`) runs one case at a time; the pool hands the
next case to whichever worker is free, waits on all of them at once, and replaces a worker
that died, did not answer within the time limit (it is killed), or has run
`CASES_PER_WORKER` cases (so that nothing one case leaves behind reaches many others).
"""

import os
import subprocess
import sys
import time
from multiprocessing.connection import Connection, wait
from pathlib import Path

from rtsoa.testing.conformance_worker import CRASH, TIMEOUT

CASES_PER_WORKER = 200
# A fresh worker's first case also waits for its warm-up (`conformance_worker.warm_up`), which
# loads (on a cold cache: compiles) the op library; the compile holds a lock that the other
# workers wait on.
FIRST_CASE_SECONDS = 900.0
CASE_SECONDS = 180.0  # the slowest cases (large expanded functions) take ~20 s when idle


class _Worker:
    """One worker process and the case it is running."""

    def __init__(self):
        package_root = str(Path(__file__).resolve().parents[2])
        path = os.environ.get("PYTHONPATH", "")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (package_root, path) if p))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rtsoa.testing.conformance_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self.requests = Connection(os.dup(self.process.stdin.fileno()), readable=False)
        self.replies = Connection(os.dup(self.process.stdout.fileno()), writable=False)
        self.cases_run = 0
        self.task = None  # (index, deadline) of the case it runs

    def start(self, index, request):
        limit = FIRST_CASE_SECONDS if self.cases_run == 0 else CASE_SECONDS
        self.task = (index, time.monotonic() + limit)
        self.requests.send(request)

    def close(self, kill=False):
        for connection in (self.requests, self.replies):
            connection.close()
        self.process.stdin.close()
        self.process.stdout.close()
        if kill:
            self.process.kill()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def run_requests(requests, jobs=2, progress=None):
    """[(status, reason)] of each request (runtime, model bytes, data sets, rtol, atol), in
    order, run by `jobs` worker processes. `progress(index, result)` is called as each ends."""
    results = [None] * len(requests)
    pending = list(range(len(requests)))[::-1]
    idle = []
    busy = []

    def finish(worker, result, kill=False):
        index = worker.task[0]
        results[index] = result
        worker.task = None
        worker.cases_run += 1
        busy.remove(worker)
        if kill or worker.cases_run >= CASES_PER_WORKER:
            worker.close(kill=kill)
        else:
            idle.append(worker)
        if progress is not None:
            progress(index, result)

    try:
        while pending or busy:
            while pending and len(busy) < jobs:
                worker = idle.pop() if idle else _Worker()
                index = pending.pop()
                busy.append(worker)
                try:
                    worker.start(index, requests[index])
                except (BrokenPipeError, OSError):
                    finish(worker, (CRASH, "the worker process died"), kill=True)
            if not busy:
                continue
            nearest = min(worker.task[1] for worker in busy)
            ready = wait([worker.replies for worker in busy], max(nearest - time.monotonic(), 0))
            for worker in list(busy):
                if worker.replies in ready:
                    try:
                        finish(worker, worker.replies.recv())
                    except (EOFError, OSError):
                        code = worker.process.wait()
                        finish(worker, (CRASH, f"the worker process died (exit code {code})"), True)
                elif time.monotonic() >= worker.task[1]:
                    limit = FIRST_CASE_SECONDS if worker.cases_run == 0 else CASE_SECONDS
                    finish(worker, (TIMEOUT, f"no answer within {limit:.0f} s"), kill=True)
    finally:
        for worker in idle + busy:
            worker.close(kill=worker in busy)
    return results
