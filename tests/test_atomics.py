"""The atomics the multithread executor is built on (rtsoa/device/atomics.py): adds,
compare-and-swap, exchange, loads and stores from several threads, and a spin lock test that
can fail (it catches a lock without an atomic test-and-set)."""

import threading

import numpy as np
import pytest
from figures import report
from numba import njit

from rtsoa.device.atomics import (
    atomic_add,
    atomic_cas,
    atomic_exchange,
    atomic_load,
    atomic_store,
    atomic_sub,
    cpu_yield,
    spin_lock,
    spin_unlock,
)


@njit(nogil=True)
def _add_many(counters, times):
    for _ in range(times):
        atomic_add(counters, 0, 1)
        atomic_sub(counters, 1, 2)
    return atomic_load(counters, 0)


# The spin lock's test: state words, each on a cache line of its own but the checked ones.
_LOCK, _ARRIVED, _TORN, _WORDS, _CHECKED_WORDS = 0, 8, 16, 24, 8


@njit(nogil=True)
def _lock_in_two_steps(state, index):
    """A broken spin lock: it tests the word, then sets it, two steps another thread can come
    between (no atomic test-and-set). The spin lock test must catch it. A few pauses between
    the two widen the window, so that it is also caught when the threads do not run at once
    (a loaded machine, where a thread taken off its core inside the window lets the other in)."""
    while atomic_load(state, index) != 0:
        cpu_yield()
    for _ in range(8):
        cpu_yield()
    atomic_store(state, index, 1)


def _lock_exerciser(lock, unlock, handoff=False):
    """A nogil function (state, threads, times) that waits until `threads` callers arrived (a
    barrier: every thread starts its loop at once), then `times` times takes the lock, checks
    that the checked words hold first, first + 1, ... (counting in state[_TORN] when they do
    not: another holder is half-way through its update), writes them one higher each, and
    releases it. With `handoff` a holder yields its core inside the section (the others
    gather spinning on the lock word) and again after its release (so the lock changes hands
    at each release instead of going back to the thread that just freed it)."""

    @njit(nogil=True)
    def exercise(state, threads, times):
        atomic_add(state, _ARRIVED, 1)
        while atomic_load(state, _ARRIVED) < threads:
            cpu_yield()
        for _ in range(times):
            lock(state, _LOCK)
            first = state[_WORDS]
            if handoff:
                cpu_yield()
            for k in range(1, _CHECKED_WORDS):
                if state[_WORDS + k] != first + k:
                    state[_TORN] += 1
                    break
            for k in range(_CHECKED_WORDS):
                state[_WORDS + k] = first + 1 + k
            unlock(state, _LOCK)
            if handoff:
                cpu_yield()

    return exercise


_real_lock_exercise = _lock_exerciser(spin_lock, spin_unlock)
_broken_lock_exercise = _lock_exerciser(_lock_in_two_steps, spin_unlock)
_handoff_exercise = _lock_exerciser(spin_lock, spin_unlock, handoff=True)


def _exercise_lock(exercise, threads, times):
    """(the count reached, torn sections seen, the lock word) after `threads` threads ran
    `exercise` `times` times each."""
    state = np.zeros(_WORDS + _CHECKED_WORDS, dtype=np.int64)
    state[_WORDS:] = np.arange(_CHECKED_WORDS)
    exercise(state, 1, 1)  # compile outside the threads
    state[:] = 0
    state[_WORDS:] = np.arange(_CHECKED_WORDS)
    _in_threads(exercise, (state, threads, times), threads=threads)
    return int(state[_WORDS]), int(state[_TORN]), int(state[_LOCK])


@njit
def _compare_and_swap(array):
    first = atomic_cas(array, 3, 0, 5)  # swaps: returns the old 0
    second = atomic_cas(array, 3, 0, 7)  # does not: returns the current 5
    old = atomic_exchange(array, 4, 11)
    atomic_store(array, 5, -9)
    return first, second, array[3], old, array[4], atomic_load(array, 5)


def _in_threads(function, arguments, threads=2):
    workers = [threading.Thread(target=function, args=arguments) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_atomic_adds_from_two_threads_give_the_exact_total(dtype):
    counters = np.zeros(16, dtype=dtype)
    _add_many(counters, 10)  # compile outside the threads
    counters[:] = 0
    _in_threads(_add_many, (counters, 300_000))
    assert counters[0] == 600_000 and counters[1] == -1_200_000


def test_compare_and_swap_exchange_load_store():
    for dtype in (np.int64, np.int32):
        array = np.zeros(8, dtype=dtype)
        array[4] = 2
        assert _compare_and_swap(array) == (0, 5, 5, 2, 11, -9)


@njit
def _held_word(array):
    """The lock word while held and after the release (its documented states, 1 and 0)."""
    spin_lock(array, 2)
    held = array[2]
    spin_unlock(array, 2)
    return held, array[2]


def test_a_held_lock_word_is_1_and_a_released_one_0():
    for dtype in (np.int64, np.int32):
        assert _held_word(np.zeros(4, dtype=dtype)) == (1, 0)


def test_spin_lock_excludes_threads():
    """Three threads, released together by a barrier, take the lock 100,000 times each and
    update eight words inside it, checking that no other holder is half-way through: every
    update counted, no torn section, the lock free at the end.

    The test can fail: with a lock that tests and then sets in two steps
    (`_lock_in_two_steps`) it counts fewer than 300,000 or sees torn sections
    (test_a_lock_without_an_atomic_test_and_set_fails_the_lock_test runs it and reports what
    it caught)."""
    assert _exercise_lock(_real_lock_exercise, 3, 100_000) == (300_000, 0, 0)


def test_spin_lock_excludes_threads_at_each_handoff():
    """Four threads take the lock 10,000 times each, yielding inside the section and after
    each release: a release finds the others spinning on the lock word, reading it free at
    once, so only the compare-and-swap's answer decides who enters. Ten runs, each exact. A
    lock that takes a word it read free as won, the swap's result ignored, lets two in: lost
    updates and torn sections in about half of such runs on a 2-core machine (ten runs miss
    it about once in a thousand), where test_spin_lock_excludes_threads, whose holder takes
    the lock back at once, caught it in none of three."""
    for _ in range(10):
        assert _exercise_lock(_handoff_exercise, 4, 10_000) == (40_000, 0, 0)


def test_a_lock_without_an_atomic_test_and_set_fails_the_lock_test():
    """The broken lock lets two threads into the section: lost updates and torn sections. It
    needs the threads to overlap inside the window between the test and the set, so it is
    tried up to 40 times; with the window widened by a few pauses it was caught at the first
    attempt on a 2-core machine at load 7-15."""
    for attempt in range(1, 41):
        count, torn, _ = _exercise_lock(_broken_lock_exercise, 3, 100_000)
        if count < 300_000 or torn > 0:
            report(
                "test_atomics.py::test_a_lock_without_an_atomic_test_and_set_fails_the_lock_test",
                [f"  caught at attempt {attempt}: {count:,} of 300,000 counted, {torn:,} torn"],
            )
            return
    pytest.fail("40 runs of the broken lock all passed the lock test: it cannot fail")


def test_atomics_refuse_read_only_and_float_arrays():
    read_only = np.zeros(4, dtype=np.int64)
    read_only.flags.writeable = False
    with pytest.raises(Exception, match="read-only"):
        _add_many(read_only, 1)
    with pytest.raises(Exception, match="int32 or int64"):
        _add_many(np.zeros(4), 1)


def test_atomics_refuse_arrays_that_are_not_c_contiguous():
    """A strided view (Numba layout "A") and a Fortran-ordered array (layout "F") are refused:
    the intrinsics address element `index` as `data + index`, right only for a C array."""
    strided = np.zeros(8, dtype=np.int64)[::2]
    fortran = np.zeros((4, 4), dtype=np.int64, order="F")
    for array in (strided, fortran):
        with pytest.raises(Exception, match="C-contiguous"):
            _add_many(array, 1)
        assert not array.any()
