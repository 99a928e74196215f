"""Stream / event / notify allocators of a model (the reference's OccupyStreamResource), and
the helper threads of its intra-op parts (`intra_op_threads`, `parts_pool`, `PartsChoice`).

A resource allocator hands out indices of one kind on one `Device`: `acquire(count) -> list of
int` and `release(indices)`. The built-in `IndexPool` takes free indices in order; a user may
pass their own objects with the same two methods (external allocators). As in the reference,
the stream, event and notify allocators are given all or none.

The simulated device has streams and events but no notify objects: a model's notify count is 0,
so a notify allocator is asked for nothing (it is still checked, to keep the all-or-none rule).
"""

import contextlib
import threading
import time

from rtsoa.errors import ModelResourceError
from rtsoa.graph.inspect import op_counts
from rtsoa.ops.parts import PartsPool, auto_threads, threads_problem

KINDS = ("stream", "event", "notify")


class IndexPool:
    """Built-in allocator of `capacity` indices of one kind (thread-safe)."""

    def __init__(self, kind, capacity):
        self.kind = kind
        self.capacity = int(capacity)
        self._free = list(range(self.capacity))
        self._lock = threading.Lock()

    def acquire(self, count):
        with self._lock:
            if count > len(self._free):
                raise ModelResourceError(
                    f"out of {self.kind}s: {count} wanted, {len(self._free)} of "
                    f"{self.capacity} free on the device"
                )
            taken, self._free = self._free[:count], self._free[count:]
            return taken

    def release(self, indices):
        with self._lock:
            self._free = sorted(set(self._free) | set(indices))

    def available(self):
        return len(self._free)


def check_all_or_none(stream_allocator, event_allocator, notify_allocator):
    """True when external allocators are given (all three), False when none; else an error
    naming the missing ones."""
    given = {
        "stream_allocator": stream_allocator,
        "event_allocator": event_allocator,
        "notify_allocator": notify_allocator,
    }
    missing = [name for name, value in given.items() if value is None]
    if len(missing) == len(given):
        return False
    if missing:
        present = [name for name in given if name not in missing]
        raise ModelResourceError(
            f"external allocators are given all or none: got {present} but not {missing}"
        )
    for name, value in given.items():
        if not (
            callable(getattr(value, "acquire", None)) and callable(getattr(value, "release", None))
        ):
            raise ModelResourceError(
                f"{name} must have acquire(count) and release(indices), got {type(value).__name__}"
            )
    return True


def acquire(allocator, kind, count, limit):
    """`count` distinct indices in 0..limit-1 from `allocator` (checked: an external allocator
    may return anything)."""
    try:
        got = [int(index) for index in allocator.acquire(count)]
    except ModelResourceError:
        raise
    except (TypeError, ValueError) as error:
        raise ModelResourceError(
            f"the {kind} allocator's acquire({count}) failed: {error}"
        ) from None
    if len(got) != count or len(set(got)) != count:
        raise ModelResourceError(
            f"the {kind} allocator returned {got} for acquire({count}); {count} distinct "
            f"{kind}s are needed"
        )
    bad = [index for index in got if not 0 <= index < limit]
    if bad:
        allocator.release(got)
        raise ModelResourceError(
            f"the {kind} allocator returned {bad}, not {kind}s of the device (0..{limit - 1})"
        )
    return got


# -- the helper threads of intra-op parts (rtsoa.ops.parts) ------------------------------------


# Plain runs with the pool and without it that an automatic pool (intra_op_threads None) times
# before it keeps the faster (the fastest run of each counts: the least disturbed by other work)
CALIBRATION_RUNS = 2
# The pool is stopped only for runs without it this much faster or more (a fraction of the
# pooled time): a noisy tie keeps the pool, the default before any measurement
NO_POOL_MARGIN = 0.95


class PartsChoice:
    """Whether a model's runs share their large ops' parts with its pool: `threads` (the pool's
    size), or 1 (every op whole on the launching thread, the BLAS as the process has it).

    With `auto` (intra_op_threads left to rtsoa) and a pool of 2 or more, the model measures:
    after its first plain run (a warm-up, not timed), plain runs at the input shapes of that
    first run alternate between the pool and no pool, CALIBRATION_RUNS of each, timed; the
    faster is `chosen` from then on (no pool only if its fastest run took at most
    NO_POOL_MARGIN of the pool's). Runs at other shapes, and runs with subscribers, take the
    pool and are not timed. Splitting an op changes its sums' order, so the calibration's runs
    may differ from later ones in the last bits (within `rtsoa.ops.parts`' stated tolerance).
    Otherwise `chosen` is `threads` from the start."""

    def __init__(self, threads, auto):
        self.threads = int(threads)
        self.auto = bool(auto) and self.threads > 1
        self.trials = {self.threads: [], 1: []} if self.auto else {}
        self.chosen = None if self.auto else self.threads
        self._shapes = None  # the input shapes the calibration times

    @property
    def calibrating(self):
        """Whether plain runs are still timed to choose (`chosen` is None)."""
        return self.chosen is None

    @property
    def calibration_runs(self):
        """How many runs the choice has seen: the first (untimed) and the timed ones."""
        return (self._shapes is not None) + sum(len(runs) for runs in self.trials.values())

    def next_run(self, shapes, plain):
        """(threads of the next run, whether to time it): `shapes` its inputs' shapes and
        dtypes, `plain` a run without subscribers."""
        if self.chosen is not None:
            return self.chosen, False
        if not plain:
            return self.threads, False
        if self._shapes is None:
            self._shapes = shapes
            return self.threads, False
        if shapes != self._shapes:
            return self.threads, False
        return min(self.trials, key=lambda threads: len(self.trials[threads])), True

    def timed(self, threads, seconds):
        """A timed run with `threads` took `seconds`; choose once each has its runs."""
        self.trials[threads].append(float(seconds))
        if all(len(runs) >= CALIBRATION_RUNS for runs in self.trials.values()):
            pooled, whole = min(self.trials[self.threads]), min(self.trials[1])
            self.chosen = 1 if whole <= NO_POOL_MARGIN * pooled else self.threads


def pooled_run(choice, pool, executors, shapes, run, plain):
    """`run()` with the `executors`' ops sharing their parts with `pool` or computing whole, as
    `choice` (a PartsChoice) says for a run at input `shapes` (`plain`: without subscribers),
    timed for it when it calibrates. Returns the pool to keep: None once no pool was chosen
    (its helpers stopped), else `pool`."""
    threads, timed = choice.next_run(shapes, plain)
    used = pool if threads > 1 else None
    if any(executor.parts_pool is not used for executor in executors):
        for executor in executors:
            executor.use_parts_pool(used)
    start = time.perf_counter()
    with used.running() if used is not None else contextlib.nullcontext():
        run()
    if timed:
        choice.timed(threads, time.perf_counter() - start)
        if choice.chosen == 1:
            return release_parts_pool(pool, executors)
    return pool


def intra_op_threads(threads, graph):
    """`intra_op_threads` checked (`threads_problem`; None: `auto_threads` of the ops `graph`
    launches)."""
    if threads is None:
        return auto_threads(op_counts(graph))
    problem = threads_problem(threads)
    if problem is not None:
        raise ModelResourceError(f"intra_op_threads: {problem}")
    return int(threads)


def parts_pool(threads, executors):
    """A pool of `threads` the `executors`' ops share their parts with (None for 1 thread)."""
    if threads < 2:
        return None
    pool = PartsPool(threads)
    for executor in executors:
        executor.use_parts_pool(pool)
    return pool


def release_parts_pool(pool, executors):
    """The `executors` without their pool, its helpers stopped; returns None."""
    if pool is not None:
        for executor in executors:
            executor.use_parts_pool(None)
        pool.close()
    return None
