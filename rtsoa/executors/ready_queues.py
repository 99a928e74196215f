"""The multithread executor's shared control words and ready queues: how a ready node reaches
a worker (`rtsoa.executors.multithread` runs the loop over them).

- `control`: one int64 array, each counter a cache line (LINE int64) apart, so the words
  different threads hammer do not share a line: the abort flag and the kept status and node,
  the step and outstanding-work counters, the device lock, each class queue's spin lock and
  heap size, the run epoch, the parked Frees, DONE, and each worker's progress.
- Class queues: a binary min-heap per class on the heap key (rank << RANK_SHIFT | node),
  under its spin lock (`push_ready`, `take_ready`).
- A worker's private batch: a bit per rank for the ready nodes of the queues it alone serves
  (`keep_private`, `private_head`), merged by rank with the shared heads (`take_ready`).
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_out_of_line
from rtsoa.device.atomics import (
    atomic_add,
    atomic_cas,
    atomic_load,
    atomic_store,
    atomic_store_release,
    spin_lock,
    spin_unlock,
)
from rtsoa.device.bits import lowest_bit
from rtsoa.executors.admission import admitted
from rtsoa.executors.heap import TIE_BITS, TIE_MASK, heap_pop, heap_push

QUEUES = 3  # one ready queue per WorkerClass (NORMAL, MEMORY, LAUNCH)
# Slots of the int64 `control` array, one cache line (8 int64) apart so that the counters
# different threads hammer do not share a line.
LINE = 8
ABORTED = 0 * LINE  # 0 running, 1 a status was kept
STATUS = 1 * LINE  # the kept status
NODE = 2 * LINE  # its node
STEPS = 3 * LINE  # steps claimed (the step limit and the record's row numbers)
OUTSTANDING = 4 * LINE  # units of work left (see run_multithread)
IDLE = 5 * LINE  # workers idling now (`WorkerState.hands_off`)
QUEUE_LOCK = 6 * LINE  # + queue * LINE: the spin lock of each ready queue
QUEUE_SIZE = QUEUE_LOCK + QUEUES * LINE  # + queue * LINE: each heap's size
EPOCH = QUEUE_SIZE + QUEUES * LINE  # this run's generation (kept across runs, bumped by arm_run)
PARKED = EPOCH + LINE  # Frees waiting for their related Launches' submission
LAST_PARKED = PARKED + LINE  # the last Free parked (named by the no-progress detector)
# 1 once outstanding reached 0: written once per run, so idle workers poll it instead of
# OUTSTANDING, whose cache line would otherwise bounce between the busy and the idle cores
DONE = LAST_PARKED + LINE
# + worker * LINE: the nodes each worker ran in this run (with relations: the no-progress
# detector sums them; each worker writes only its own line)
PROGRESS = DONE + LINE
MAX_WORKERS = 64
CONTROL_SIZE = PROGRESS + MAX_WORKERS * LINE
RANK_SHIFT = TIE_BITS  # a heap key is rank << RANK_SHIFT | node


@jit_out_of_line
def arm_run(starts, template, in_degree, keys, node_queue, heaps, control):
    """Per-run reset: in-degrees from the template, flags and counters cleared, the start
    nodes pushed; runs before the workers start (no allocation; the admission windows' `low`
    are reset by the caller)."""
    for i in range(template.shape[0]):
        in_degree[i] = template[i]
    epoch = control[EPOCH] + 1
    for i in range(control.shape[0]):
        control[i] = 0
    control[EPOCH] = epoch
    if starts.shape[0] == 0:
        control[DONE] = 1
    for i in range(starts.shape[0]):
        node = starts[i]
        queue = node_queue[node]
        size = control[QUEUE_SIZE + queue * LINE]
        control[QUEUE_SIZE + queue * LINE] = heap_push(heaps[queue], size, keys[node])
    control[OUTSTANDING] = starts.shape[0]


@jit_out_of_line
def abort_run(control, status, node):
    """Keep (status, node) if no status was kept yet; every worker stops at its next pop."""
    if atomic_cas(control, ABORTED, 0, 1) == 0:
        control[STATUS] = status
        control[NODE] = node
        atomic_store(control, ABORTED, 1)


@jit_inline_ir
def private_head(bits, order, cursor):
    """(cursor, heap key) of the smallest rank in a non-empty private batch: the cursor moved
    to the word holding it (a set bit lies at or after the cursor, so the scan stops)."""
    while bits[cursor] == 0:
        cursor += 1
    rank = (cursor << 6) + lowest_bit(bits[cursor])
    return cursor, (rank << RANK_SHIFT) | np.int64(order[rank])


@jit_inline_ir
def shared_waiting(serves, control):
    """Does a shared queue this worker serves hold a node? (racy reads: a hint)"""
    for queue in range(serves.shape[0]):
        if serves[queue] and atomic_load(control, QUEUE_SIZE + queue * LINE) != 0:
            return True
    return False


@jit_out_of_line
def take_ready(serves, sole, heaps, control, admission, bits, order, cursor, mine):
    """The ready node of smallest rank among this worker's private batch (`mine` ranks set in
    the bitmap `bits`, none below word `cursor`) and the heads of the shared queues it
    serves, if the admission window lets it start. Returns (node or -1, cursor, mine, the
    outstanding units brought from shared queues).

    A shared queue this worker alone serves (`sole`; other workers push to it, e.g. the
    MEMORY queue the NORMAL worker's shape inferences release with two threads) is drained
    whole into the private batch under one lock when its head is the best: its nodes are
    ranked like the batch's, each then costs a bit test instead of a lock and a heap pop, and
    the heap's lines stop moving between the cores per node. The drained nodes' outstanding
    units come with them (returned, kept by the caller like any shared node's)."""
    width = heaps.shape[1]
    source = -1  # 0: private batch, 1 + q: shared queue q
    best = np.int64(0)
    if mine > 0:
        cursor, best = private_head(bits, order, cursor)
        source = 0
    for queue in range(serves.shape[0]):
        if not serves[queue] or atomic_load(control, QUEUE_SIZE + queue * LINE) == 0:
            continue
        head = atomic_load(heaps, queue * width + 1)  # a racy peek, re-read under the lock
        if source < 0 or head < best:
            source = 1 + queue
            best = head
    if source < 0 or not admitted(admission, best):
        return np.int64(-1), cursor, mine, np.int64(0)
    if source == 0:
        bits[cursor] &= bits[cursor] - 1  # the lowest set bit is the one taken
        return best & TIE_MASK, cursor, mine - 1, np.int64(0)
    queue = source - 1
    spin_lock(control, QUEUE_LOCK + queue * LINE)
    size = control[QUEUE_SIZE + queue * LINE]
    node = np.int64(-1)
    brought = np.int64(0)
    if sole[queue]:
        for i in range(1, size + 1):  # heap order does not matter: the batch orders by rank
            cursor, mine = keep_private(heaps[queue, i] >> RANK_SHIFT, bits, cursor, mine)
        atomic_store_release(control, QUEUE_SIZE + queue * LINE, 0)
        brought = size
    elif size > 0 and admitted(admission, heaps[queue, 1]):
        key, size = heap_pop(heaps[queue], size)
        atomic_store_release(control, QUEUE_SIZE + queue * LINE, size)
        node = key & TIE_MASK
        brought = np.int64(1)
    spin_unlock(control, QUEUE_LOCK + queue * LINE)
    if mine > 0 and node < 0:
        cursor, best = private_head(bits, order, cursor)
        if admitted(admission, best):
            bits[cursor] &= bits[cursor] - 1
            node = best & TIE_MASK
            mine -= 1
    return node, cursor, mine, brought


@jit_inline_ir
def keep_private(rank, bits, cursor, mine):
    """Add a ready node this worker alone serves to its private batch: its rank's bit in the
    bitmap (ranks are unique, so one bit per node), and the cursor back to its word if it
    lies below. One worker running alone takes ranks in increasing order (each successor
    ranks after the node that released it), so the cursor only moves forward and a take
    costs a word test and a trailing-zero count. Returns (cursor, mine)."""
    word = rank >> 6
    bits[word] |= np.int64(1) << (rank & 63)
    if word < cursor:
        cursor = word
    return cursor, mine + 1


@jit_out_of_line
def push_ready(node, keys, node_queue, heaps, control, counted):
    """Queue a ready node on its class queue; False if the queue is full (malformed graph).
    `counted`: the node already has its outstanding unit (a parked Free re-queued by its
    last Launch)."""
    queue = node_queue[node]
    if not counted:
        atomic_add(control, OUTSTANDING, 1)  # before it is visible: never dips to 0 early
    spin_lock(control, QUEUE_LOCK + queue * LINE)
    size = control[QUEUE_SIZE + queue * LINE]
    full = size >= heaps.shape[1] - 1
    if not full:
        size = heap_push(heaps[queue], size, keys[node])
        atomic_store_release(control, QUEUE_SIZE + queue * LINE, size)
    spin_unlock(control, QUEUE_LOCK + queue * LINE)
    return not full
