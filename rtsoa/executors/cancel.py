"""Stopping a run: the cancellation words compiled loops poll, and the three ways to set them.

The words (`CancelFlag.words`, int64 on a cache line of their own, written by other threads
and read by the loops): REASON, why the run must stop (0: it need not; CANCEL_CALL from
`cancel()`, CANCEL_INTERRUPT from Ctrl-C), and DEADLINE, the CLOCK_MONOTONIC nanosecond a
`timeout=` run stops at (0: none). Every executor loop polls them (`cancel_requested`) once
every POLL_STEPS steps, at no measured cost per node: the sequential loop tests its
position masked by POLL_STEPS - 1 (POLL_STEPS is a power of two; chunks of POLL_STEPS with a
poll between them cost it more per node: asv ExecutorSpeed); the queue loops and the
multithread workers fold the poll into the step-limit test they already made at every step
(`step_poll`). A switch
kernel's `notify(k)` (each If, each iteration of a loop) also reads REASON, so a loop whose
body runs long kernels stops at its next iteration. A loop that sees a stop returns
STATUS_CANCELLED; the executor then frees the run's blocks as after any failed
run and raises the error `CancelFlag.error` names. A kernel that runs long is not
interrupted inside: the run stops after it.

Who sets them, while a run is in progress (`CancelFlag.scope`):
- `cancel()`, from any thread: REASON = CANCEL_CALL; the run raises `RunCancelled`. With no
  run in progress it does nothing (a run that starts later is not affected).
- `timeout=` seconds: DEADLINE; the run raises `RunTimeout`. Nothing is started for it.
- Ctrl-C, for runs started from the main thread while Python's default SIGINT handler is in
  place: for the run, the handler is one that only records the interrupt, and Python's
  wakeup file descriptor (`signal.set_wakeup_fd`) a pipe that one idle thread per process
  reads, so the byte CPython's C handler writes sets REASON at once, while the main thread
  is inside compiled code, which holds no GIL (no Python handler runs until it returns).
  Both are restored after the run, which then raises `RunInterrupted`, a KeyboardInterrupt
  (an `except Exception` does not swallow it), once the device is consistent again; a
  Ctrl-C that came while the run's Python part ran raises it too, after the run. A run
  started from another thread cannot install a signal handler: only `cancel()` and
  `timeout=` stop it.
"""

import os
import threading
import time

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_out_of_line
from rtsoa.abi.status import STATUS_CANCELLED, STATUS_OK, STATUS_STEP_LIMIT
from rtsoa.device.atomics import atomic_load
from rtsoa.errors import RunCancelled, RunInterrupted, RunTimeout
from rtsoa.kernels.abi import line_zeros
from rtsoa.kernels.clock import monotonic_ns

try:  # the C module: its getsignal / signal skip the enum conversions (most of a call's cost)
    import _signal as _signals
except ImportError:  # pragma: no cover  (an interpreter without it)
    import signal as _signals
import signal

REASON = 0  # word: why the run must stop (0: it need not)
DEADLINE = 1  # word: CLOCK_MONOTONIC ns the run stops at (0: no timeout)
NUM_WORDS = 2
CANCEL_CALL = 1  # cancel() was called
CANCEL_INTERRUPT = 2  # Ctrl-C (SIGINT)
# Steps between polls: a poll is a load (and a clock read with a deadline), a few ns, so
# every 1024 steps costs nothing measurable while a run of ~10-100 ns nodes stops within
# ~0.1 ms. POLL_STEPS * the longest kernel bounds how late a stop can be.
POLL_STEPS = 1024


@jit_inline_ir
def cancel_requested(cancel):
    """Must the run stop? REASON set, or DEADLINE passed."""
    if atomic_load(cancel, REASON) != 0:
        return True
    deadline = atomic_load(cancel, DEADLINE)
    return deadline != 0 and monotonic_ns() >= deadline


@jit_out_of_line
def step_poll(executed, max_steps, cancel):
    """(stop, next poll) of a queue loop whose step count reached its next poll: the step
    limit (STATUS_STEP_LIMIT), a stop requested (STATUS_CANCELLED), or STATUS_OK and the
    step count of the next poll, POLL_STEPS on and capped at the limit, so that one
    comparison per step serves both. Out of line: a cold call once every POLL_STEPS steps,
    where inlined, the clock read's stack slot made the caller keep a frame pointer (one
    register fewer) across its whole loop."""
    if executed >= max_steps:
        return np.int64(STATUS_STEP_LIMIT), executed
    if cancel_requested(cancel):
        return np.int64(STATUS_CANCELLED), executed
    return np.int64(STATUS_OK), min(executed + POLL_STEPS, max_steps)


class CancelFlag:
    """The cancellation words of one executor (or of the executors of one model's Main, which
    share one), the runs in progress on it, and the stop requested."""

    def __init__(self):
        self.words = line_zeros(NUM_WORDS, np.int64)
        self._lock = threading.Lock()
        self._depth = 0  # scopes open: a model's run holds one around its executor's
        self._timeout = None  # seconds of the outermost timeout in force
        self._generation = 0  # outermost scopes opened: a Ctrl-C is for the run it came in

    def cancel(self):
        """Stop the run in progress (RunCancelled); with none in progress, do nothing."""
        self._request(CANCEL_CALL)

    def _request(self, reason, generation=None):
        """Ask the run in progress to stop; with `generation`, only if it is still the run of
        that generation (a Ctrl-C read late must not stop the next run)."""
        with self._lock:
            if generation is not None and generation != self._generation:
                return
            if self._depth > 0 and self.words[REASON] == 0:
                self.words[REASON] = reason

    @property
    def running(self):
        """Is a run in progress on these words?"""
        return self._depth > 0

    def scope(self, timeout=None, interrupt=True):
        """A context manager around one run: clears the words (outermost scope), sets the
        deadline of `timeout` seconds from now, takes Ctrl-C (`interrupt`, main thread,
        Python's default handler in place) and restores all of it on exit. A scope inside
        another (a model's run around its executor's) only tightens the deadline."""
        return _Scope(self, _checked_timeout(timeout), interrupt)

    def error(self, nodes_executed):
        """The exception of a run that stopped on these words, or None if nothing asked it
        to stop (a loop returned STATUS_CANCELLED otherwise: a bug)."""
        reason = int(self.words[REASON])
        if reason == CANCEL_INTERRUPT:
            return RunInterrupted(nodes_executed)
        if reason == CANCEL_CALL:
            return RunCancelled(nodes_executed)
        deadline = int(self.words[DEADLINE])
        if deadline and time.monotonic_ns() >= deadline:
            return RunTimeout(nodes_executed, self._timeout)
        return None

    def stop_before(self, where):
        """Raise the stop asked for (cancel(), timeout=, Ctrl-C) before step `where` of a run's
        Python part (a model's host steps), naming it; nothing if none was asked for."""
        error = self.error(0)
        if error is None:
            return
        if isinstance(error, RunInterrupted):
            raise RunInterrupted(None)
        if isinstance(error, RunTimeout):
            message = f"run stopped by its timeout of {error.timeout} s before {where}"
            raise RunTimeout(0, error.timeout, message)
        raise RunCancelled(0, f"run cancelled before {where}")

    def interrupted(self):
        """Did Ctrl-C ask the run in progress to stop?"""
        return int(self.words[REASON]) == CANCEL_INTERRUPT


def _checked_timeout(timeout):
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float | np.integer | np.floating):
        raise TypeError(f"timeout must be a number of seconds or None, not {timeout!r}")
    if not timeout > 0:  # also refuses NaN
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
    return float(timeout)


class _Scope:
    """One run on a CancelFlag (see `CancelFlag.scope`)."""

    __slots__ = ("flag", "timeout", "interrupt", "_deadline", "_handler", "_wakeup")

    def __init__(self, flag, timeout, interrupt):
        self.flag = flag
        self.timeout = timeout
        self.interrupt = interrupt
        self._handler = None  # the SIGINT handler replaced, restored on exit
        self._wakeup = None

    def __enter__(self):
        flag = self.flag
        words = flag.words
        deadline = 0
        if self.timeout is not None:
            deadline = time.monotonic_ns() + int(self.timeout * 1e9)
        with flag._lock:
            outer = flag._depth > 0
            flag._depth += 1
            self._deadline = int(words[DEADLINE])  # restored on exit
            if not outer:
                flag._generation += 1
                words[REASON] = 0
                words[DEADLINE] = 0
                self._deadline = 0
                flag._timeout = None
            if deadline and (words[DEADLINE] == 0 or deadline < words[DEADLINE]):
                words[DEADLINE] = deadline
                flag._timeout = self.timeout
        if self.interrupt:
            try:
                self._take_interrupts()
            except BaseException:
                self.__exit__(None, None, None)
                raise
        return self

    def _take_interrupts(self):
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may install a signal handler
        if _signals.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return  # ours already (an outer scope), or the caller's own: left alone
        watcher = _watcher()
        flag = self.flag
        generation = flag._generation

        def on_interrupt(signum, frame):  # runs once the main thread is back in Python
            with watcher.lock:
                watcher.handled += 1  # this SIGINT's byte needs no request from the watcher
            flag._request(CANCEL_INTERRUPT, generation)

        with watcher.lock:
            watcher.flags.add(flag)
        self._handler = _signals.signal(signal.SIGINT, on_interrupt)
        self._wakeup = _signals.set_wakeup_fd(watcher.write_fd, warn_on_full_buffer=False)

    def __exit__(self, kind, error, traceback):
        flag = self.flag
        if self._handler is not None:
            _signals.set_wakeup_fd(self._wakeup)
            _signals.signal(signal.SIGINT, self._handler)
            self._handler = None
            watcher = _watcher()
            with watcher.lock:
                watcher.flags.discard(flag)
        with flag._lock:
            flag._depth -= 1
            interrupted = flag.words[REASON] == CANCEL_INTERRUPT
            if flag._depth == 0:
                flag.words[DEADLINE] = 0
            else:
                flag.words[DEADLINE] = self._deadline
        # Ctrl-C during the run's Python part (the loop had ended or not begun): the run is
        # over and consistent now, so the interrupt the caller asked for is raised here
        if interrupted and kind is None and flag._depth == 0:
            raise RunInterrupted(None)
        return False


class _Watcher:
    """The read end of the wakeup pipe and the one idle thread that reads it: a SIGINT byte
    asks every flag in `flags` (runs in a scope taking Ctrl-C) to stop.

    The thread may read a byte late, after the run it came in has ended and the next one has
    begun; that Ctrl-C must not stop the next run. Each SIGINT is one byte read here and one
    call of the scope's Python handler (which runs as soon as the main thread is back in
    Python, so before that run's scope has ended): a byte beyond the handler's count is a
    Ctrl-C the main thread has not seen (it is inside compiled code) and is acted on; one
    within it was handled already. And a request carries the generation of the run it was
    taken for, so a run that began after it is not stopped by it."""

    def __init__(self):
        self.pid = os.getpid()
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)  # set_wakeup_fd's requirement
        self.lock = threading.Lock()
        self.flags = set()
        self.read = 0  # SIGINT bytes read from the pipe
        self.handled = 0  # SIGINTs the scopes' Python handlers took
        thread = threading.Thread(target=self._watch, name="rtsoa-interrupt-watcher", daemon=True)
        thread.start()

    def _watch(self):
        while True:
            try:
                data = os.read(self.read_fd, 256)
            except OSError:
                return
            if not data:
                return
            count = data.count(signal.SIGINT)
            if count:
                with self.lock:
                    self.read += count
                    unseen = self.read > self.handled
                    flags = [(flag, flag._generation) for flag in self.flags] if unseen else []
                for flag, generation in flags:
                    flag._request(CANCEL_INTERRUPT, generation)


_watchers = {}  # pid -> _Watcher (a forked child makes its own: threads do not survive fork)
_watchers_lock = threading.Lock()


def _watcher():
    pid = os.getpid()
    watcher = _watchers.get(pid)
    if watcher is None:
        with _watchers_lock:
            watcher = _watchers.get(pid)
            if watcher is None:
                watcher = _watchers[pid] = _Watcher()
    return watcher
