"""Local worker processes: jobs handed out in chunks, crashes and hung runs recorded per job,
their workers replaced.

Workers are started with the `spawn` context (a fresh interpreter: never a fork of a process
that may hold Numba's threads or LLVM state). Each gets its jobs through its own pipe in
chunks (a list of jobs per message), two chunks ahead (the one it runs and the next, so it
never waits for the parent), and sends their rows back as one Arrow record batch per chunk (or
sooner, once rows wait longer than `chunk_seconds`). A chunk holds about `chunk_seconds` of
jobs by the job time measured so far (one job until a row has come back, and fewer toward the
end of the batch, so the workers finish together). The parent's work is then per chunk, not
per job: with ~0.5 ms jobs its CPU per job was a fifth of a worker's, which capped 2 workers
on 2 cores well below 2x.

Each worker also writes, in memory shared with the parent, how many jobs it has begun and
finished and when its current job's run started. So when a worker process dies (a segfault in
a user kernel, an out-of-memory kill) the pool knows which job it was running: that job is
recorded as "crashed" with the signal; the jobs of its chunks that it had not begun, and those
it had finished but whose rows had not been sent yet (at most `chunk_seconds` of them), go back
to the queue and are run again elsewhere; a new worker takes the dead one's place. A worker
that dies between jobs has no job to blame: its jobs go back to the queue. A job that goes past
`settings.timeout` seconds (lowering, loading, preparing and the run; not the warm-up of a
worker process, see `rtsoa.batch.worker`) has its worker killed and is recorded as "timeout".
Workers ignore SIGINT (Ctrl-C goes to the whole process group): the parent decides what an
interrupt means, and kills them.

Workers end with their parent, even one killed by SIGKILL (no chance to stop them): on Linux
the kernel sends them SIGKILL when the thread that started them ends (prctl
PR_SET_PDEATHSIG, armed when that thread is the main thread: another thread may end before
the pool does), and everywhere a thread of each worker checks every `_PARENT_POLL_SECONDS`
that its parent is still its parent. (That thread needs the GIL, which a kernel in a long
compiled loop holds: there the signal does it.)
"""

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from contextlib import contextmanager
from multiprocessing.connection import wait

from rtsoa.batch.jobs import BatchError
from rtsoa.batch.results import read_rows_message, rows_batch, rows_message
from rtsoa.batch.worker import import_modules, on_warm_up, run_job, worker_name

# Workers dying before they are ready (or while idle) more often than this in a row stop the
# batch: something kills every worker, nothing would get done. Their jobs are not blamed.
_STARTUP_DEATHS_ALLOWED = 4
_QUEUED = 2  # chunks sent ahead to each worker: the one it runs and the next
CHUNK_SECONDS = 0.05  # jobs per chunk: about this much work (and rows sent at least this often)
_MAX_CHUNK = 256
_SHARE = 2  # a chunk takes at most 1 / (_SHARE x workers) of the jobs left: an even finish
_POLL_SECONDS = 0.05  # with --timeout: how often jobs whose clock is paused are looked at
_PARENT_POLL_SECONDS = 0.5  # how often a worker checks that its parent is alive
_PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h)

# The progress a worker shares with the parent (a RawArray of doubles; times are
# time.monotonic, CLOCK_MONOTONIC: one clock for every process of the machine).
_BEGUN = 0  # jobs it has begun
_FINISHED = 1  # jobs it has finished (its row made)
_JOB_START = 2  # when its current (or last) job began
_CLOCK_START = 3  # when its current job's --timeout clock started, moved on by the warm-ups
# it was paused for (see _JobClock); 0 between jobs and while paused
_PROGRESS_SLOTS = 4


def _worker_main(connection, settings, progress, chunk_seconds, parent, death_signal):
    """A worker process: import the user's modules, then run chunks of jobs until told to
    stop, sending each chunk's rows as one record batch (sooner when they have waited
    `chunk_seconds`). `parent`: the pid of the pool's process, whose death ends this one
    (`death_signal`: also by PR_SET_PDEATHSIG)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _end_with_parent(parent, death_signal)
    try:
        import_modules(settings.imports)
    except Exception as error:
        connection.send(("fatal", f"--import: {type(error).__name__}: {error}"))
        return

    clock = _JobClock(progress)
    on_warm_up(clock.pause, clock.resume)
    connection.send(("ready", worker_name()))
    chunks = deque()  # received, not run yet (None: stop)
    rows = []
    first = None  # when the first job of `rows` began
    try:
        while True:
            if not chunks:
                chunks.append(connection.recv())
            chunk = chunks.popleft()
            if chunk is None:
                return
            for job in chunk:
                now = time.monotonic()
                if rows and now - first >= chunk_seconds:  # a slow chunk: report what is done
                    _send_rows(connection, rows, first, chunks)
                    rows = []
                if not rows:
                    first = now
                progress[_JOB_START] = now
                progress[_BEGUN] += 1
                clock.begin()
                rows.append(run_job(job, settings))
                clock.end()
                progress[_FINISHED] += 1
            _send_rows(connection, rows, first, chunks)
            rows = []
    except EOFError:  # the parent went away
        return


class _JobClock:
    """The --timeout clock of a worker's current job, kept in its shared `progress`: started
    with the job, paused while the job warms the process up (nested pauses count once)."""

    def __init__(self, progress):
        self.progress = progress
        self.start = 0.0  # the clock's start, moved on by the pauses; 0.0: no job
        self.depth = 0  # pauses open
        self.paused_at = 0.0

    def begin(self):
        self.start = time.monotonic()
        self.depth = 0
        self.progress[_CLOCK_START] = self.start

    def end(self):
        self.start = 0.0
        self.progress[_CLOCK_START] = 0.0

    def pause(self):
        self.depth += 1
        if self.depth == 1 and self.start:
            self.paused_at = time.monotonic()
            self.progress[_CLOCK_START] = 0.0

    def resume(self):
        self.depth -= 1
        if self.depth == 0 and self.start:
            self.start += time.monotonic() - self.paused_at
            self.progress[_CLOCK_START] = self.start


def _end_with_parent(parent, death_signal):
    """Make this worker end when the process `parent` dies (see the module docstring)."""
    if death_signal and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watch below still ends it
    if os.getppid() != parent:  # it died before the signal was armed
        os._exit(1)
    threading.Thread(
        target=_watch_parent, args=(parent,), name="rtsoa-parent-watch", daemon=True
    ).start()


def _watch_parent(parent):
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL_SECONDS)
    os._exit(1)  # reparented: the pool's process is gone, nobody wants this job's row


def _send_rows(connection, rows, first, chunks):
    """Send `rows` and the mean time a job took since `first`, having first read every chunk
    waiting in the pipe: the parent may be blocked writing one into a full pipe, and must not
    wait for us while we wait for it."""
    seconds = (time.monotonic() - first) / len(rows)
    while connection.poll():
        chunks.append(connection.recv())
    connection.send(("rows", (rows_message(rows), seconds)))


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
    def __init__(self, context, settings, number, chunk_seconds):
        self.connection, child = context.Pipe()
        self.progress = context.RawArray("d", _PROGRESS_SLOTS)
        # PR_SET_PDEATHSIG follows the starting thread: armed only for the main thread
        death_signal = threading.current_thread() is threading.main_thread()
        self.process = context.Process(
            target=_worker_main,
            args=(child, settings, self.progress, chunk_seconds, os.getpid(), death_signal),
            name=f"rtsoa-batch-{number}",
            daemon=True,
        )
        with _sigint_blocked(), main_without_file():
            self.process.start()
        child.close()
        self.ready = False  # said "ready": imports done, jobs may be blamed for its death
        self.jobs = deque()  # jobs sent whose rows have not come back, in the order sent
        self.chunk_ends = deque()  # `sent` at the end of each chunk not wholly reported
        self.sent = 0  # jobs sent to it
        self.reported = 0  # rows it sent back

    def send(self, chunk):
        self.jobs.extend(chunk)
        self.sent += len(chunk)
        self.chunk_ends.append(self.sent)
        self.connection.send(chunk)

    def reported_rows(self, count):
        """`count` more rows came back: their jobs (the oldest sent) are done."""
        for _ in range(count):
            self.jobs.popleft()
        self.reported += count
        while self.chunk_ends and self.chunk_ends[0] <= self.reported:
            self.chunk_ends.popleft()

    def running(self):
        """The position in `jobs` of the job it is running, or None between jobs. Exact once
        the process has ended; while it runs, a snapshot."""
        begun = int(self.progress[_BEGUN])
        if begun == int(self.progress[_FINISHED]):
            return None
        return begun - 1 - self.reported

    def kill_process(self):
        if self.process.is_alive():
            self.process.kill()
        self.process.join()

    def kill(self):
        """Kill the process (if alive) and close the pipe."""
        self.kill_process()
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
    """`workers` local processes running jobs; `run(jobs)` yields record batches of rows.

    `chunk_seconds`: about how much work a chunk of jobs holds (see the module docstring).
    `retried` counts the jobs run again because the worker running their chunk died."""

    def __init__(self, workers, settings, chunk_seconds=CHUNK_SECONDS):
        self.settings = settings
        self.size = workers
        self.chunk_seconds = chunk_seconds
        self.retried = 0
        self._context = multiprocessing.get_context("spawn")
        self._workers = []
        self._started = 0
        self._job_seconds = None  # a job's wall time, smoothed over the rows so far

    def _start(self):
        self._started += 1
        worker = _Worker(self._context, self.settings, self._started, self.chunk_seconds)
        self._workers.append(worker)
        return worker

    def _retire(self, worker, pending, keep):
        """Remove a dead or killed worker; its jobs in `keep` go back to the front of
        `pending` in their order; start a new worker if jobs are waiting."""
        worker.kill()
        self._workers.remove(worker)
        pending.extendleft(reversed(keep))
        if pending:
            self._start()

    def _chunk(self, pending):
        """The next chunk: about `chunk_seconds` of jobs by the measured job time, one while
        none is measured, never more than a 1 / (_SHARE x workers) share of the jobs left."""
        size = 1
        if self._job_seconds is not None:
            size = int(self.chunk_seconds / max(self._job_seconds, 1e-6))
            size = min(size, _MAX_CHUNK, len(pending) // (_SHARE * len(self._workers)))
        return [pending.popleft() for _ in range(min(max(size, 1), len(pending)))]

    def _assign(self, pending):
        """Give each worker up to _QUEUED chunks, the least loaded first (a worker never waits
        for the parent to hand it its next chunk)."""
        for depth in range(1, _QUEUED + 1):
            for worker in self._workers:
                if pending and len(worker.chunk_ends) < depth:
                    worker.send(self._chunk(pending))

    def run(self, jobs):
        """Yield record batches (RESULT_SCHEMA) holding the row of every job in `jobs`, in
        completion order."""
        pending = deque(jobs)
        self._job_seconds = None
        while len(self._workers) < min(self.size, len(pending)):
            self._start()
        startup_deaths = 0
        while pending or any(worker.jobs for worker in self._workers):
            self._assign(pending)
            ready = wait(self._waitables(), timeout=self._next_deadline())
            for worker in list(self._workers):
                batches, died = self._collect(worker, ready)
                if batches:
                    startup_deaths = 0
                    yield from batches
                if died is None:
                    continue
                position = worker.running() if worker.ready else None
                if position is None:  # dead before it was ready, or between jobs
                    startup_deaths += 1
                    if startup_deaths > _STARTUP_DEATHS_ALLOWED:
                        raise BatchError(
                            f"worker processes keep dying outside jobs (at startup): {died}"
                        )
                    self._retire(worker, pending, list(worker.jobs))
                    continue
                yield self._lost_row(worker, position, "crashed", died)
                self._retire(worker, pending, self._others(worker, position))
            for worker, begun in self._overdue():
                yield from self._time_out(worker, begun, pending)

    def _others(self, worker, position):
        """The jobs of a dead worker but the one at `position`: those it finished (rows lost
        with it) are run again, the others were not begun."""
        jobs = list(worker.jobs)
        self.retried += position
        return jobs[:position] + jobs[position + 1 :]

    def _time_out(self, worker, begun, pending):
        """Kill an overdue worker and read what it sent; its job is "timeout" when the job it
        had begun (`begun`: its count of begun jobs then) is still unfinished (else the job
        ended just then and the next one began: nothing to blame)."""
        worker.kill_process()
        batches, _ = self._collect(worker, (worker.process.sentinel,))
        yield from batches
        position = worker.running()
        if position is None or int(worker.progress[_BEGUN]) != begun:
            self._retire(worker, pending, list(worker.jobs))
            return
        message = (
            f"no result after {self.settings.timeout:g} s; the worker (pid "
            f"{worker.process.pid}) was killed and replaced"
        )
        yield self._lost_row(worker, position, "timeout", message)
        self._retire(worker, pending, self._others(worker, position))

    def _waitables(self):
        return [w.connection for w in self._workers] + [w.process.sentinel for w in self._workers]

    def _next_deadline(self):
        """How long `wait` may sleep: until the first job's timeout, polling while a worker
        with jobs has no clock running (its next job, or its clock, may start any time)."""
        if self.settings.timeout is None:
            return None
        now = time.monotonic()
        deadline = None
        for worker in self._workers:
            if not worker.jobs:
                continue
            start = worker.progress[_CLOCK_START]
            left = start + self.settings.timeout - now if start else _POLL_SECONDS
            deadline = left if deadline is None else min(deadline, left)
        return None if deadline is None else max(0.0, min(deadline, self.settings.timeout))

    def _overdue(self):
        """(worker, its count of begun jobs) of each worker whose job is past the timeout."""
        if self.settings.timeout is None:
            return []
        now = time.monotonic()
        overdue = []
        for worker in self._workers:
            begun = int(worker.progress[_BEGUN])  # read first: the clock is then this job's
            start = worker.progress[_CLOCK_START]
            if worker.jobs and start and now - start > self.settings.timeout:
                overdue.append((worker, begun))
        return overdue

    def _collect(self, worker, ready):
        """(record batches, death message or None) of one worker after `wait`: one message if
        its pipe is readable (`wait` is level-triggered: the next call reports the rest),
        everything left in the pipe if its process ended."""
        batches = []
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
                elif kind == "rows":
                    data, seconds = payload
                    batch = read_rows_message(data)
                    worker.reported_rows(batch.num_rows)
                    self._measured(seconds)
                    batches.append(batch)
                if not died or not worker.connection.poll():
                    break
        if died:
            worker.process.join()
            return batches, death_message(worker.process.exitcode, worker.process.pid)
        return batches, None

    def _measured(self, seconds):
        """Smooth the job time with a worker's mean over the rows it just sent."""
        if self._job_seconds is None:
            self._job_seconds = seconds
        else:
            self._job_seconds = (self._job_seconds + seconds) / 2

    def _lost_row(self, worker, position, status, message):
        """The row of the job at `position` of a worker that died running it."""
        job = worker.jobs[position]
        row = {
            "job": job.name,
            "graph": job.path,
            "executor": job.executor or self.settings.executor,
            "status": status,
            "message": message,
            "wall_seconds": time.monotonic() - worker.progress[_JOB_START],
            "worker": f"{os.uname().nodename} pid {worker.process.pid}",
        }
        return rows_batch([row])

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
