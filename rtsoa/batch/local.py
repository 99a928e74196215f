"""Local worker processes: crashes and hung runs recorded, their workers replaced.

Workers are started with the `spawn` context (a fresh interpreter: never a fork of a process
that may hold Numba's threads or LLVM state). Each gets its jobs through its own pipe, the one
it runs and the next (so it never waits for the parent), and runs them in order, so when a
worker process dies (a segfault in a user kernel, an out-of-memory kill) the pool knows which
job it was running: that job is recorded as "crashed" with the signal, its queued job goes to
another worker, and a new worker takes the dead one's place. A job whose executor run goes past
`settings.timeout` seconds (loading, preparing and compiling are not counted: they always end)
has its worker killed and is recorded as "timeout". Workers ignore SIGINT (Ctrl-C goes to the
whole process group): the parent decides what an interrupt means, and kills them.
"""

import multiprocessing
import os
import signal
import sys
import time
from collections import deque
from contextlib import contextmanager
from multiprocessing.connection import wait

from rtsoa.batch.jobs import BatchError
from rtsoa.batch.worker import import_modules, on_run_start, run_job, worker_name

# Workers dying before they are ready (or while idle) more often than this in a row stop the
# batch: something kills every worker, nothing would get done. Their jobs are not blamed.
_STARTUP_DEATHS_ALLOWED = 4
_QUEUED = 2  # jobs sent ahead to each worker: the one it runs and the next


def _worker_main(connection, settings):
    """A worker process: import the user's modules, then run jobs until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import_modules(settings.imports)
    except Exception as error:
        connection.send(("fatal", f"--import: {type(error).__name__}: {error}"))
        return
    # the timeout counts from the run: loading, preparing, compiling always end
    if settings.timeout is not None:
        on_run_start(lambda: connection.send(("started", None)))
    connection.send(("ready", worker_name()))
    while True:
        try:
            job = connection.recv()
        except EOFError:  # the parent went away
            return
        if job is None:
            return
        connection.send(("row", run_job(job, settings)))


@contextmanager
def _sigint_blocked():
    """Start children with SIGINT blocked (the mask is inherited across exec), so Ctrl-C
    cannot kill a worker before it installs its handler; the parent gets it afterwards."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextmanager
def main_without_file():
    """Hide a `__main__.__file__` that is no file (`python - < script`): spawn would run it in
    the worker and fail; there is nothing in it a worker needs."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None or os.path.isfile(path) or getattr(main, "__spec__", None) is not None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


class _Worker:
    def __init__(self, context, settings, number):
        self.connection, child = context.Pipe()
        self.process = context.Process(
            target=_worker_main, args=(child, settings), name=f"rtsoa-batch-{number}", daemon=True
        )
        with _sigint_blocked(), main_without_file():
            self.process.start()
        child.close()
        self.ready = False  # said "ready": imports done, jobs may be blamed for its death
        self.jobs = deque()  # (job, time sent): the first is running, the others queued
        self.started = None  # when the worker said its first job's run started (None: not yet)

    @property
    def job(self):
        """The job it is running (or will run next), None when idle."""
        return self.jobs[0][0] if self.jobs else None

    def send(self, job):
        self.jobs.append((job, time.perf_counter()))
        self.connection.send(job)

    def kill(self):
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.connection.close()


def death_message(exitcode, pid):
    """What a worker's exit code says, in words."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        cause = {
            "SIGSEGV": " (a segmentation fault: a kernel touched memory it does not own)",
            "SIGKILL": " (killed: the out-of-memory killer, or kill -9)",
            "SIGABRT": " (aborted)",
            "SIGBUS": " (a bus error: a kernel touched memory it does not own)",
        }.get(name, "")
        return f"the worker process (pid {pid}) died of {name}{cause}; a new worker replaced it"
    return f"the worker process (pid {pid}) exited with status {exitcode}; a new worker replaced it"


class LocalPool:
    """`workers` local processes running jobs; `run(jobs)` yields one row per job."""

    def __init__(self, workers, settings):
        self.settings = settings
        self.size = workers
        self._context = multiprocessing.get_context("spawn")
        self._workers = []
        self._started = 0

    def _start(self):
        self._started += 1
        worker = _Worker(self._context, self.settings, self._started)
        self._workers.append(worker)
        return worker

    def _retire(self, worker, pending):
        """Remove a dead or killed worker, its queued jobs back in `pending` (the running one
        is the caller's); start a new worker if jobs are waiting."""
        worker.kill()
        self._workers.remove(worker)
        for job, _ in reversed(list(worker.jobs)[1:]):
            pending.appendleft(job)
        if pending:
            self._start()

    def _assign(self, pending):
        """Give each worker up to _QUEUED jobs, the least loaded first (a worker never waits
        for the parent to hand it its next job)."""
        for depth in range(1, _QUEUED + 1):
            for worker in self._workers:
                if pending and len(worker.jobs) < depth:
                    worker.send(pending.popleft())

    def run(self, jobs):
        """Yield the result row of every job in `jobs` (in completion order)."""
        pending = deque(jobs)
        while len(self._workers) < min(self.size, len(pending)):
            self._start()
        startup_deaths = 0
        while pending or any(worker.jobs for worker in self._workers):
            self._assign(pending)
            ready = wait(self._waitables(), timeout=self._next_deadline())
            for worker in list(self._workers):
                rows, died = self._collect(worker, ready)
                if rows:
                    startup_deaths = 0
                    yield from rows
                if died is None:
                    continue
                if worker.jobs and worker.ready:
                    yield self._lost_row(worker, "crashed", died)
                else:
                    if worker.jobs:
                        pending.appendleft(worker.job)  # not its fault: run it elsewhere
                    startup_deaths += 1
                    if startup_deaths > _STARTUP_DEATHS_ALLOWED:
                        raise BatchError(f"worker processes keep dying at startup: {died}")
                self._retire(worker, pending)
            for worker in self._overdue():
                message = (
                    f"no result after {self.settings.timeout:g} s; the worker (pid "
                    f"{worker.process.pid}) was killed and replaced"
                )
                yield self._lost_row(worker, "timeout", message)
                self._retire(worker, pending)

    def _waitables(self):
        return [w.connection for w in self._workers] + [w.process.sentinel for w in self._workers]

    def _next_deadline(self):
        if self.settings.timeout is None:
            return None
        starts = [w.started for w in self._workers if w.started is not None]
        if not starts:
            return None
        return max(0.0, min(starts) + self.settings.timeout - time.perf_counter())

    def _overdue(self):
        if self.settings.timeout is None:
            return []
        now = time.perf_counter()
        return [
            w
            for w in self._workers
            if w.started is not None and now - w.started > self.settings.timeout
        ]

    def _collect(self, worker, ready):
        """(rows, death message or None) of one worker after `wait`: one message if its pipe
        is readable (`wait` is level-triggered: the next call reports the rest), everything
        left in the pipe if its process ended."""
        rows = []
        died = worker.process.sentinel in ready
        if worker.connection in ready or died:
            while True:
                try:
                    kind, payload = worker.connection.recv()
                except (EOFError, OSError):
                    died = True
                    break
                if kind == "fatal":
                    raise BatchError(payload)
                if kind == "ready":
                    worker.ready = True
                elif kind == "started":
                    worker.started = time.perf_counter()
                elif kind == "row":
                    rows.append(payload)
                    worker.jobs.popleft()
                    worker.started = None
                if not died or not worker.connection.poll():
                    break
        if died:
            worker.process.join()
            return rows, death_message(worker.process.exitcode, worker.process.pid)
        return rows, None

    def _lost_row(self, worker, status, message):
        job, sent = worker.jobs[0]
        return {
            "job": job.name,
            "graph": job.path,
            "executor": job.executor or self.settings.executor,
            "status": status,
            "message": message,
            "wall_seconds": time.perf_counter() - (worker.started or sent),
            "worker": f"{os.uname().nodename} pid {worker.process.pid}",
        }

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        """Stop every worker (jobs still running are abandoned, not recorded)."""
        for worker in self._workers:
            if not worker.jobs and worker.process.is_alive():
                try:
                    worker.connection.send(None)
                except OSError:
                    pass
        deadline = time.monotonic() + 2.0
        for worker in self._workers:
            if not worker.jobs:
                worker.process.join(max(0.0, deadline - time.monotonic()))
            worker.kill()
        self._workers = []
