"""The multithread executor's relation state (rtsoa/executors/relation_state.py): the reverse
CSR against NumPy, the wait-word protocol step by step against hand-worked cases, and its
structural memory counted from the arrays."""

import threading

import numpy as np
import pytest
from numba import njit

from rtsoa import GraphBuilder
from rtsoa.errors import GraphFormatError
from rtsoa.executors.relation_state import (
    PARKED_BIT,
    is_related_free,
    is_related_launch,
    largest_waiter_row,
    on_free_ready,
    on_launch_submitted,
    relation_state,
    structural_bytes,
)


def _graph(nodes, pairs):
    builder = GraphBuilder()
    builder.add_nodes(np.full(nodes, "Checksum0"))
    frees, launches = zip(*pairs, strict=True) if pairs else ((), ())
    builder.add_relations(np.array(frees, dtype=np.int64), np.array(launches, dtype=np.int64))
    return builder.finalize()


def test_reverse_csr_matches_numpy_and_keeps_free_order():
    rng = np.random.default_rng(5)
    n = 300
    pairs = {(int(f), int(u)) for f, u in rng.integers(0, n, size=(2000, 2)) if f != u}
    graph = _graph(n, sorted(pairs))
    state = relation_state(graph, np.ones(n, dtype=np.bool_))
    for launch in range(n):
        row = state.waiter_frees[state.waiter_offsets[launch] : state.waiter_offsets[launch + 1]]
        assert row.tolist() == sorted(f for f, u in pairs if u == launch)
    assert largest_waiter_row(state) == int(np.diff(state.waiter_offsets).max())
    expected = 8 * (n + 1) + 4 * len(pairs) + 8 * n  # reverse offsets, reverse Frees, words
    assert structural_bytes(state, include_graph=False) == expected
    assert structural_bytes(state) == expected + 8 * (n + 1) + 4 * len(pairs)


def test_reverse_csr_of_a_partial_root_matches_numpy():
    """The general path (not every node in the root): only root Frees count, in order."""
    rng = np.random.default_rng(6)
    n = 300
    root = rng.random(n) < 0.6
    inside = np.flatnonzero(root)
    pairs = {(int(f), int(u)) for f, u in rng.choice(inside, size=(1500, 2)) if f != u}
    outside = np.flatnonzero(~root)
    pairs |= {(int(f), int(u)) for f, u in rng.choice(outside, size=(300, 2)) if f != u}
    graph = _graph(n, sorted(pairs))
    state = relation_state(graph, root)
    assert state.waiter_offsets.shape == (n + 1,) and state.waiter_offsets[0] == 0
    for launch in range(n):
        row = state.waiter_frees[state.waiter_offsets[launch] : state.waiter_offsets[launch + 1]]
        assert row.tolist() == sorted(f for f, u in pairs if u == launch and root[f])


def test_only_the_root_frees_count_and_launches_must_be_in_the_root():
    graph = _graph(4, [(0, 1), (2, 3)])
    root = np.array([True, True, False, False])
    state = relation_state(graph, root)  # Free 2 is outside the root: its relation is ignored
    assert np.diff(state.waiter_offsets).tolist() == [0, 1, 0, 0]
    with pytest.raises(GraphFormatError, match="Free node 0 is related to Launch node 1"):
        relation_state(graph, np.array([True, False, True, True]))


@njit
def _events(state, epoch, released):
    """Free 0 waits for Launches 1 and 2; Free 3 for Launch 2. Returns what each step saw."""
    seen = np.zeros(9, dtype=np.int64)
    seen[0] = is_related_free(state, 0) and not is_related_launch(state, 0)
    seen[1] = is_related_launch(state, 2) and not is_related_free(state, 2)
    seen[2] = on_free_ready(state, 0, epoch)  # nothing submitted: parks
    seen[3] = on_launch_submitted(state, 1, epoch, released)  # 1 of 2: releases nothing
    seen[4] = on_launch_submitted(state, 2, epoch, released)  # completes Free 0 (parked)
    seen[5] = released[0]
    seen[6] = on_free_ready(state, 0, epoch)  # re-queued: runs
    seen[7] = on_free_ready(state, 3, epoch)  # Launch 2 already submitted: runs at once
    seen[8] = state.waits[0] & PARKED_BIT != 0
    return seen


def test_wait_words_step_by_step_and_a_new_epoch_starts_clean():
    graph = _graph(4, [(0, 1), (0, 2), (3, 2)])
    state = relation_state(graph, np.ones(4, dtype=np.bool_))
    released = np.full(2, -1, dtype=np.int32)
    for epoch in (1, 2):  # the second run reuses the words without clearing them
        seen = _events(state, epoch, released)
        assert seen.tolist() == [1, 1, 0, 0, 1, 0, 1, 1, 1]


@njit(nogil=True)
def _race(state, epoch, released, side, pairs, ran):
    """Pairs (Free 2i, Launch 2i + 1) of one run: side 0 takes the Frees, side 1 submits the
    Launches, each in pair order, racing each other; ran[i] counts the runs of Free 2i this
    side started (side 0: it ran at once; side 1: the Launch re-queued it, so it runs once
    from the queue)."""
    for i in range(pairs):
        if side == 0:
            if on_free_ready(state, 2 * i, epoch):
                ran[i] += 1
        elif on_launch_submitted(state, 2 * i + 1, epoch, released) == 1:
            ran[i] += 1


def test_a_free_and_its_launch_racing_run_the_free_exactly_once():
    pairs = 50_000
    graph = _graph(2 * pairs, [(2 * i, 2 * i + 1) for i in range(pairs)])
    state = relation_state(graph, np.ones(2 * pairs, dtype=np.bool_))
    ran = np.zeros((2, pairs), dtype=np.int64)  # one row per side: no shared counter
    released = [np.zeros(1, dtype=np.int32) for _ in range(2)]
    _race(state, 1, released[0], 0, 1, ran[0])  # compile outside the threads
    _race(state, 1, released[1], 1, 1, ran[1])
    for epoch in (2, 3, 4):  # runs one after another, as the executor's are
        ran[:] = 0
        workers = [
            threading.Thread(
                target=_race, args=(state, epoch, released[side], side, pairs, ran[side])
            )
            for side in (0, 1)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert np.all(ran.sum(axis=0) == 1)  # every Free ran once: never lost, never twice
