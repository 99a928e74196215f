"""Fork safety of the model API: `os.fork()` waits until no model call is in flight.

A fork copies only the thread that calls it. With another thread inside a run at that moment,
fork hung in the parent (OpenBLAS's own fork handler waits for its worker threads, busy with
the run's products, and they never came back), and a child that got through inherited the
run's locks (the executor's, its home's, Numba's compiler lock) held by a thread that does
not exist there. So the model calls that run device or compiled code (load, unload, execute /
execute_sync, waits, lowering, session placement) are counted in `CALLS`, and an at-fork hook:
- before: blocks new calls and waits until the count is zero (a fork from inside a call, e.g.
  from a subscriber, waits for the other threads' calls only, and hangs if one of them waits
  for a lock the forking call holds, such as the same executor's); the gate's lock stays
  held through the fork, so nothing starts in between;
- after, in the parent: opens the gate again;
- after, in the child: a fresh gate (the parent's other threads are gone), so the child loads
  and runs models, new ones and the ones it inherited.
A call that never ends (a kernel that hangs) makes fork wait for it. Graph-level runs outside
the model API (`prepare_executor(...).run()`) are not counted; the multithread executor's
worker pool has its own hook (rtsoa/executors/worker_threads.py).
"""

import os
import threading


class CallGate:
    """Counts model calls in flight; `with CALLS:` around each (re-entrant per thread)."""

    def __init__(self):
        self._local = threading.local()  # .depth: this thread's nesting of calls
        self._fresh(running=0)

    def _fresh(self, running):
        self._lock = threading.Lock()  # taken directly when no fork waits (cheaper)
        self._condition = threading.Condition(self._lock)
        self._running = running  # calls in flight, counted once per thread at depth 1
        self._forking = False

    def __enter__(self):
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            with self._lock:
                while self._forking:
                    self._condition.wait()
                self._running += 1
        self._local.depth = depth + 1
        return self

    def __exit__(self, *exc):
        self._local.depth -= 1
        if self._local.depth == 0:
            with self._lock:
                self._running -= 1
                if self._forking:  # before_fork waits for the count to drop
                    self._condition.notify_all()
        return False

    @property
    def running(self):
        """Calls in flight now (threads inside a counted call)."""
        with self._condition:
            return self._running

    def before_fork(self):
        self._condition.acquire()  # held through the fork: released by the after hooks
        self._forking = True
        own = 1 if getattr(self._local, "depth", 0) else 0
        while self._running > own:
            self._condition.wait()

    def after_fork_in_parent(self):
        self._forking = False
        self._condition.notify_all()
        self._condition.release()

    def after_fork_in_child(self):
        # the forking thread keeps its thread-local depth: its own call, if any, goes on here
        self._fresh(running=1 if getattr(self._local, "depth", 0) else 0)


CALLS = CallGate()
if hasattr(os, "register_at_fork"):  # POSIX; without fork, nothing to guard
    os.register_at_fork(
        before=CALLS.before_fork,
        after_in_parent=CALLS.after_fork_in_parent,
        after_in_child=CALLS.after_fork_in_child,
    )
