"""The multithread executor's ready-queue helpers (`rtsoa/executors/ready_queues.py`) driven
from small jitted functions, without the executor loop, against models of what they hold: the
private batch's bitmap (`keep_private`, `take_ready`), the class queues' heaps (`push_ready`,
`take_ready`), a full queue, and a take that loses the race for a shared queue's last node.
`mutation/atomics.toml` runs these (they compile little per mutant)."""

from collections import Counter

import numpy as np
import pytest
from executor_checks import property_settings
from figures import counted, report
from hypothesis import given
from hypothesis import strategies as st
from numba import njit

from rtsoa.executors.ready_queues import (
    CONTROL_SIZE,
    LINE,
    OUTSTANDING,
    QUEUE_SIZE,
    QUEUES,
    keep_private,
    push_ready,
    take_ready,
)


@njit
def _bits_set(bits):
    """How many bits of the int64 words `bits` are set."""
    count = 0
    for word in bits:
        w = np.uint64(word)
        while w != 0:
            w &= w - np.uint64(1)
            count += 1
    return count


@njit
def _private_batch_ops(ops, bits, order, serves, heaps, control, admission):
    """Apply `ops` (rank >= 0: keep that rank; -1: take the smallest) to a private batch;
    returns the ranks taken (-1 where it was empty) and, after each op, the batch's count
    (`mine`) and the bits set in its bitmap."""
    taken = np.full(ops.shape[0], -2, dtype=np.int64)
    counts = np.empty((ops.shape[0], 2), dtype=np.int64)
    cursor = np.int64(0)
    mine = np.int64(0)
    for i in range(ops.shape[0]):
        if ops[i] >= 0:
            cursor, mine = keep_private(ops[i], bits, cursor, mine)
        else:
            node, cursor, mine, _ = take_ready(
                serves, serves, heaps, control, admission, bits, order, cursor, mine
            )
            taken[i] = node
        counts[i, 0] = mine
        counts[i, 1] = _bits_set(bits)
    return taken, counts


@property_settings(200)
@given(
    st.lists(st.just(-1) | st.integers(0, 199), max_size=300),  # about half are takes
    st.randoms(use_true_random=False),
)
def test_the_private_batch_bitmap_takes_the_smallest_rank_like_a_heap(ops, rng):
    """Keeps and takes in any order (the cursor moves back when a worker keeps a rank below
    it, which several workers make happen) give a heap's answers. Each rank is kept once.
    The batch's count stays the number of ranks kept and not taken, one bit each."""
    import heapq

    from rtsoa.executors.admission import Admission

    seen = set()
    ops = [op for op in ops if op < 0 or not (op in seen or seen.add(op))]
    n = 200
    order = np.array(rng.sample(range(n), n), dtype=np.int32)  # the node of each rank
    admission = Admission(np.int64(0), np.int64(n), np.zeros(n, np.int64), np.zeros(8, np.int64))
    taken, counts = _private_batch_ops(
        np.array(ops, dtype=np.int64),
        np.zeros((n >> 6) + 2, dtype=np.int64),
        order,
        np.zeros(QUEUES, dtype=np.bool_),
        np.zeros((QUEUES, 4), dtype=np.int64),
        np.zeros(CONTROL_SIZE, dtype=np.int64),
        admission,
    )
    heap = []
    for op, got, count in zip(ops, taken, counts.tolist(), strict=True):
        if op >= 0:
            heapq.heappush(heap, op)
        else:
            assert got == (order[heapq.heappop(heap)] if heap else -1)
        assert count == [len(heap), len(heap)]


@njit
def _shared_and_private_ops(ops, queue_of, bits, order, keys, serves, sole, heaps, control, adm):
    """Apply `ops` (>= 0: node `op` becomes ready: kept in the private batch when its queue is
    unserved by this worker (standing for its own releases), else pushed to its shared queue
    as another worker would; -1: take) and return (the nodes taken, -1 where none was; the
    outstanding units the takes brought; after each op the batch's count, the bits set in its
    bitmap and each class queue's size; whether every push was accepted)."""
    taken = np.full(ops.shape[0], -2, dtype=np.int64)
    counts = np.empty((ops.shape[0], 2 + QUEUES), dtype=np.int64)
    cursor = np.int64(0)
    mine = np.int64(0)
    units = np.int64(0)
    accepted = True
    for i in range(ops.shape[0]):
        node = ops[i]
        if node >= 0:
            if serves[queue_of[node]]:
                accepted &= push_ready(node, keys, queue_of, heaps, control, False)
            else:
                cursor, mine = keep_private(keys[node] >> 32, bits, cursor, mine)
        else:
            got, cursor, mine, brought = take_ready(
                serves, sole, heaps, control, adm, bits, order, cursor, mine
            )
            taken[i] = got
            units += brought
        counts[i, 0] = mine
        counts[i, 1] = _bits_set(bits)
        for queue in range(QUEUES):
            counts[i, 2 + queue] = control[QUEUE_SIZE + queue * LINE]
    return taken, units, counts, accepted


@njit
def _pushes(nodes, keys, queue_of, heaps, control):
    """push_ready each of `nodes` (not counted before); what each returned."""
    accepted = np.zeros(nodes.shape[0], dtype=np.bool_)
    for i in range(nodes.shape[0]):
        accepted[i] = push_ready(nodes[i], keys, queue_of, heaps, control, False)
    return accepted


@pytest.mark.parametrize("width", [4, 5])
def test_a_full_class_queue_refuses_the_push(width):
    """A class queue's heap holds width - 1 nodes (slot 0 unused): the push past them returns
    False (the run then fails as a malformed graph) and leaves the heap, its size and the
    other queues as they were; each push still counts its outstanding unit first."""

    n = width + 1
    keys = (np.arange(n, dtype=np.int64)[::-1].copy() << 32) | np.arange(n)
    queue_of = np.full(n, QUEUES - 1, dtype=np.int8)  # the last queue: its row ends the array
    heaps = np.zeros((QUEUES, width), dtype=np.int64)
    control = np.zeros(CONTROL_SIZE, dtype=np.int64)
    accepted = _pushes(np.arange(width, dtype=np.int64), keys, queue_of, heaps, control)
    assert accepted.tolist() == [True] * (width - 1) + [False]
    assert control[QUEUE_SIZE + (QUEUES - 1) * LINE] == width - 1
    assert control[OUTSTANDING] == width
    assert heaps[QUEUES - 1, 1] == keys[width - 2]  # the smallest key pushed heads the heap
    assert sorted(heaps[QUEUES - 1, 1:].tolist()) == sorted(keys[: width - 1].tolist())
    assert not heaps[: QUEUES - 1].any()


@njit(nogil=True)
def _take_into(serves, sole, heaps, control, admission, bits, order, out):
    """One take_ready from a private batch of the bits set in `bits` (word 0 the cursor's),
    its answers into `out` (node, cursor, mine, brought): run on a thread of its own, without
    the GIL (while the test holds a queue lock, or to catch a spin)."""
    node, cursor, mine, brought = take_ready(
        serves, sole, heaps, control, admission, bits, order, np.int64(0), np.int64(_bits_set(bits))
    )
    out[0], out[1], out[2], out[3] = node, cursor, mine, brought


@pytest.mark.parametrize("sole", [False, True])
def test_node_0_taken_from_a_shared_queue_leaves_the_private_batch_alone(sole):
    """Node 0 is a node like any other, not a "none taken": a take whose best head is node 0 on
    a shared queue pops it, brings its outstanding unit and leaves the private batch's node
    where it was (a take that mistook it for no node would also take the batch's head and
    lose node 0). A queue this worker alone serves (`sole`) is drained into the batch first,
    and rank 0 then taken from it: the lowest set bit of its word cleared, rank 2's kept."""
    from rtsoa.executors.admission import Admission

    n, queue = 4, 1
    keys = (np.arange(n, dtype=np.int64) << 32) | np.arange(n)  # node i has rank i
    heaps = np.zeros((QUEUES, n + 2), dtype=np.int64)
    control = np.zeros(CONTROL_SIZE, dtype=np.int64)
    queue_of = np.full(n, queue, dtype=np.int8)
    assert _pushes(np.array([0], dtype=np.int64), keys, queue_of, heaps, control).all()
    serves = np.array([False, True, False])
    sole = np.array([False, sole, False])  # other workers push to it either way
    bits = np.array([1 << 2, 0], dtype=np.int64)  # the private batch: rank 2 (node 2)
    admission = Admission(np.int64(0), np.int64(n), np.zeros(n, np.int64), np.zeros(8, np.int64))
    out = np.full(4, -9, dtype=np.int64)
    _take_into(serves, sole, heaps, control, admission, bits, np.arange(n), out)
    assert out.tolist() == [0, 0, 1, 1]  # node 0, cursor 0, one node kept, one unit brought
    assert bits.tolist() == [1 << 2, 0]
    assert control[QUEUE_SIZE + queue * LINE] == 0


@pytest.mark.parametrize("left, window", [(0, 0), (1, 0), (1, 1)])
def test_a_take_that_loses_the_race_for_a_shared_queue_brings_nothing(left, window):
    """Another worker pops a shared queue's head between this worker's racy peek and its lock:
    the take finds `left` nodes under the lock and brings exactly the outstanding units of
    the node it took (none when it took none), or the run's count of outstanding work would
    never reach 0 (or reach it early). With an admission window of one rank the peeked head
    (rank 0) was admitted but the new head (rank 1) is not: the take re-checks it under the
    lock and leaves it. The test holds the queue's lock while the take peeks and spins on
    it, then takes the head as the other worker would and lets go."""
    import threading
    import time

    from rtsoa.executors.admission import Admission
    from rtsoa.executors.ready_queues import QUEUE_LOCK

    n, queue = 4, 1
    keys = (np.arange(n, dtype=np.int64) << 32) | np.arange(n)
    queue_of = np.full(n, queue, dtype=np.int8)
    heaps = np.zeros((QUEUES, n + 2), dtype=np.int64)
    control = np.zeros(CONTROL_SIZE, dtype=np.int64)
    assert _pushes(np.arange(1 + left, dtype=np.int64), keys, queue_of, heaps, control).all()
    serves = np.array([False, True, False])
    admission = Admission(
        np.int64(window), np.int64(n), np.zeros(n, np.int64), np.zeros(8, np.int64)
    )  # low 0: with a window of 1, rank 0 alone may start
    out = np.full(4, -9, dtype=np.int64)
    control[QUEUE_LOCK + queue * LINE] = 1  # held by "the other worker"
    sole = np.zeros(QUEUES, dtype=np.bool_)  # shared with other workers
    bits = np.zeros(2, dtype=np.int64)  # an empty private batch
    args = (serves, sole, heaps, control, admission, bits, np.arange(n), out)
    empty = np.zeros(CONTROL_SIZE, dtype=np.int64)  # compiled first, on a queue it skips:
    _take_into(*args[:3], empty, *args[4:])  # the thread then peeks at once, not after a compile
    assert out.tolist() == [-1, 0, 0, 0]
    out[:] = -9
    taker = threading.Thread(target=_take_into, args=args)
    taker.start()
    time.sleep(0.3)  # the take has peeked (one node or two) and spins on the lock
    assert taker.is_alive() and out[0] == -9
    heaps[queue, 1] = heaps[queue, 2]  # the other worker pops the head ...
    control[QUEUE_SIZE + queue * LINE] = left
    control[QUEUE_LOCK + queue * LINE] = 0  # ... and lets go
    taker.join(timeout=30)
    assert not taker.is_alive()
    taken = left and not window
    assert out.tolist() == ([1, 0, 0, 1] if taken else [-1, 0, 0, 0])
    assert control[QUEUE_SIZE + queue * LINE] == left - taken
    if left - taken:
        assert heaps[queue, 1] == keys[1]  # refused, left where it was


_takes = Counter()  # what the takes of the property below did, over its examples


@property_settings(200)
@given(
    st.lists(st.just(-1) | st.integers(0, 149), max_size=300),  # about half are takes
    st.randoms(use_true_random=False),
    st.just(0) | st.integers(1, 40),
    st.integers(0, 150),
    st.permutations(range(3)),
    st.integers(0, 1),
)
def test_a_queue_served_alone_is_drained_into_the_private_batch_in_rank_order(
    ops, rng, window, low, roles, odd
):
    """Nodes another worker pushes to a queue this worker alone serves are drained whole into
    its private batch; takes still give a heap's answers across the private batch, that queue
    and a queue shared with other workers, and each shared node brings its outstanding unit
    (drained ones once, when drained). With an admission window (`low` the oldest unfinished
    rank) a take whose best rank is low + window or above is refused and leaves every node
    where it was. A model of the batch and of each queue follows every op: the batch's count
    (one bit a node) and each queue's size match it, whichever class queue plays which part
    (`roles`), with heaps of even and odd widths."""
    import heapq

    from rtsoa.executors.admission import LOW, Admission

    seen = set()
    ops = [op for op in ops if op < 0 or not (op in seen or seen.add(op))]
    n = 150
    order = np.array(rng.sample(range(n), n), dtype=np.int64)  # the node of each rank
    ranks = np.empty(n, dtype=np.int64)
    ranks[order] = np.arange(n)
    keys = (ranks << 32) | np.arange(n)
    queue_of = np.array([rng.randrange(QUEUES) for _ in range(n)], dtype=np.int8)
    # role 0: kept privately (own releases), 1: served by this worker alone, 2: shared
    serves = np.array([role != 0 for role in roles])
    sole = np.array([role == 1 for role in roles])
    marks = np.zeros(8, np.int64)
    marks[LOW] = low
    admission = Admission(np.int64(window), np.int64(n), np.zeros(n, np.int64), marks)
    control = np.zeros(CONTROL_SIZE, dtype=np.int64)
    taken, units, counts, accepted = _shared_and_private_ops(
        np.array(ops, dtype=np.int64),
        queue_of,
        np.zeros((n >> 6) + 2, dtype=np.int64),
        order,
        keys,
        serves,
        sole,
        np.zeros((QUEUES, n + 2 + odd), dtype=np.int64),
        control,
        admission,
    )
    private, queues = set(), [[] for _ in range(QUEUES)]  # ranks: the batch, each queue's heap
    pushed = 0
    for op, got, (mine, bits_set, *sizes) in zip(ops, taken, counts.tolist(), strict=True):
        if op >= 0:
            queue = queue_of[op]
            if serves[queue]:
                heapq.heappush(queues[queue], int(ranks[op]))
                pushed += 1
            else:
                private.add(int(ranks[op]))
        else:
            heads = [(queues[q][0], q) for q in range(QUEUES) if serves[q] and queues[q]]
            best = min(heads + ([(min(private), -1)] if private else []), default=None)
            if best is None or (window and best[0] >= low + window):
                assert got == -1, (best, low, window)
                _takes["refused by the window" if best else "empty"] += 1
            else:
                rank, source = best
                if source >= 0 and sole[source]:  # drained whole, then taken from the batch
                    private.update(queues[source])
                    queues[source] = []
                    _takes["drained"] += 1
                if source >= 0 and not sole[source]:
                    heapq.heappop(queues[source])
                else:
                    private.remove(rank)
                assert got == order[rank]
                _takes["taken" if window == 0 else "taken in the window"] += 1
        assert mine == bits_set == len(private)
        assert sizes == [len(heap) for heap in queues]
    assert accepted and control[OUTSTANDING] == pushed
    # each pushed node brought its unit once, when taken or drained, unless still queued
    queued = sum(int(control[QUEUE_SIZE + q * LINE]) for q in range(QUEUES))
    assert units + queued == pushed
    report(
        "test_ready_queues.py::test_a_queue_served_alone_is_drained_into_the_private_batch",
        ["  takes:"] + counted(_takes),
    )


def test_a_take_from_the_private_batch_touches_no_shared_word():
    """The batch's head beats a shared queue's: the take is a bit test, no lock is taken, and
    the control words other workers use stay as they were (here one worker counted idle,
    IDLE = 1; a take that took a lock at the wrong word would spin on it, or clear it). Run on
    a thread of its own, so such a spin fails the test instead of hanging the suite."""
    import threading

    from rtsoa.executors.admission import Admission
    from rtsoa.executors.ready_queues import IDLE

    n, queue = 4, 1
    keys = (np.arange(n, dtype=np.int64) << 32) | np.arange(n)
    heaps = np.zeros((QUEUES, n + 2), dtype=np.int64)
    control = np.zeros(CONTROL_SIZE, dtype=np.int64)
    assert _pushes(np.array([3]), keys, np.full(n, queue, dtype=np.int8), heaps, control).all()
    control[IDLE] = 1
    before = control.copy()
    bits = np.zeros(2, dtype=np.int64)
    bits[0] = 1 << 1  # rank 1 kept privately: it beats the queue's rank 3
    serves = np.array([False, True, False])
    sole = np.zeros(QUEUES, dtype=np.bool_)
    admission = Admission(np.int64(0), np.int64(n), np.zeros(n, np.int64), np.zeros(8, np.int64))
    out = np.full(4, -9, dtype=np.int64)
    args = (serves, sole, heaps, control, admission, bits, np.arange(n), out)
    _take_into(
        *args[:3], np.zeros(CONTROL_SIZE, dtype=np.int64), args[4], np.zeros(2, np.int64), *args[6:]
    )  # fmt: skip - compiled on this thread, on an empty batch and queues
    taker = threading.Thread(target=_take_into, args=args, daemon=True)
    taker.start()
    taker.join(timeout=30)
    assert not taker.is_alive(), "the take spins on a lock it should not take"
    assert out.tolist() == [1, 0, 0, 0]  # rank 1's node, from the batch, which is now empty
    np.testing.assert_array_equal(control, before)
