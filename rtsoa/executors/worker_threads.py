"""Worker threads kept between runs of the multithread executor.

Starting a Python thread and joining it (thread creation, the new thread's start-up
handshake, the join) costs more than a whole sequential run of a small graph. The threads are
therefore process-wide and reused: a run takes idle threads
from the pool (starting new ones only when every thread is busy, e.g. two executors
running at once in different threads), hands each its job, and gives them back when their
jobs are done. An idle thread blocks on its own event; nothing is spinning.

- Jobs never raise into the pool: the executor's job catches what its loop raises; the
  pool still marks a job done when it raises (and keeps the error for `ThreadJob.wait`).
- A fork leaves the child without the parent's threads: the pool forgets them in the child.
- Threads are daemons: an interpreter exiting does not wait for idle ones.
"""

import os
import threading


class _Worker:
    """One pooled thread: runs the job it is handed, then waits for the next."""

    def __init__(self, name):
        self._go = threading.Event()
        self._done = threading.Event()
        self._job = None
        self.error = None
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self):
        while True:
            self._go.wait()
            self._go.clear()
            job, self._job = self._job, None
            try:
                job()
            except BaseException as error:  # noqa: BLE001 - kept for `wait`, never lost
                self.error = error
            finally:
                job = None  # no reference to the executor while idle
                self._done.set()

    def start(self, job):
        self.error = None
        self._done.clear()
        self._job = job
        self._go.set()

    def wait(self):
        """Block until the job handed to `start` returned; returns what it raised, or None."""
        self._done.wait()
        return self.error


class WorkerPool:
    """Process-wide idle worker threads (see the module docstring)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._idle = []
        self._made = 0

    def _forget_after_fork(self):
        self._lock = threading.Lock()
        self._idle = []

    def acquire(self, count):
        """`count` idle workers (new threads where the pool has too few)."""
        with self._lock:
            taken = self._idle[-count:] if count else []
            del self._idle[len(self._idle) - len(taken) :]
            missing = count - len(taken)
            first = self._made
            self._made += missing
        return taken + [_Worker(f"rtsoa-worker-{first + i}") for i in range(missing)]

    def release(self, workers):
        """Give back workers whose jobs are done."""
        with self._lock:
            self._idle.extend(workers)

    def idle(self):
        with self._lock:
            return len(self._idle)


POOL = WorkerPool()
os.register_at_fork(after_in_child=POOL._forget_after_fork)  # POSIX; without fork, no forks
