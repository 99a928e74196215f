"""One multithread worker's loop, `run_multithread`: every worker thread runs it, without the
GIL, over the state its plan shares (`rtsoa.executors.plans`).

The executor around it (prepare, plans, per-run arming, the threads) is
`rtsoa.executors.multithread`, whose docstring maps the other files; the algorithm is in
docs/multithread.md. Like the other executors' loops it is plain Python here: the executor
compiles it with the graph's kernel dispatch (`Executor.loop`).
"""

import numpy as np

from rtsoa.abi.status import STATUS_CANCELLED, STATUS_NO_PROGRESS, STATUS_OK, STATUS_QUEUE_OVERFLOW
from rtsoa.device.atomics import (
    atomic_add,
    atomic_load,
    atomic_store,
    atomic_store_release,
    atomic_sub,
    cpu_yield,
)
from rtsoa.device.lock import lock_device, unlock_device
from rtsoa.executors.admission import admitted, advance_low, finish_rank
from rtsoa.executors.cancel import cancel_requested, step_poll
from rtsoa.executors.heap import TIE_MASK
from rtsoa.executors.ready_queues import (
    ABORTED,
    DONE,
    EPOCH,
    IDLE,
    LAST_PARKED,
    LINE,
    MAX_WORKERS,
    NODE,
    OUTSTANDING,
    PARKED,
    PROGRESS,
    STATUS,
    STEPS,
    abort_run,
    keep_private,
    private_head,
    push_ready,
    shared_waiting,
    take_ready,
)
from rtsoa.executors.relation_state import (
    is_related_free,
    is_related_launch,
    on_free_ready,
    on_launch_submitted,
)
from rtsoa.executors.steps import record_step, released_edges
from rtsoa.kernels.clock import monotonic_ns
from rtsoa.kernels.dispatch import dispatch

# Empty polls before an idle worker yields its core (tens of microseconds of polling: a yield
# on a loaded machine can cost a whole time slice, far more than the next kernel takes).
SPINS_BEFORE_YIELD = 4096
# Checks (one per SPINS_BEFORE_YIELD idle polls) in a row that saw nothing run and only parked
# Frees outstanding before a run is declared stuck (a relation whose Launch can never run in
# this run, e.g. one built by hand against the edges).
NO_PROGRESS_POLLS = 200


def run_multithread(rt, worker, run, cancel, record):
    """One worker: take the best ready node it serves (private batch or shared queues), run
    it, release its successors, until no work is outstanding or the run aborted. Returns
    (status, node, nodes this worker ran); the run's status and node are in `run.control`.

    `worker`: its WorkerState; `run`: the RunState all workers share. `straight` workers run
    `order` rank by rank, with no in-degree or queue traffic (they leave the start nodes
    queued for the next arming to clear); `alone` workers release successors with a plain
    decrement into their private batch; others take the general path.

    Outstanding units (termination): a shared push adds one, a parked Free adds one (its
    re-queue by its last Launch reuses it); a worker keeps the units of the shared nodes it
    took (`held`) while it has work of its own (a node, a private batch) and gives them all
    back when it has none, so the count reaches zero only when no work is left anywhere.

    Cancellation (`rtsoa.executors.cancel`): a worker polls `cancel` every POLL_STEPS nodes
    it runs, in its step-limit test, and when it starts idling; the first to see a stop
    aborts the run with STATUS_CANCELLED, and every worker stops at its next pop.
    """
    serves = worker.serves
    sole = worker.sole
    released = worker.released
    bits = worker.bits
    admission = worker.admission
    alone = worker.alone
    straight = worker.straight
    hands_off = worker.hands_off
    by_class = worker.by_class
    order = run.order
    ranks = run.ranks
    keys = run.keys
    node_queue = run.node_queue
    node_critical = run.node_critical
    in_degree = run.in_degree
    plain = run.plain
    heaps = run.heaps
    control = run.control
    relations = run.relations
    max_steps = run.max_steps
    targets = rt.graph.succ_targets
    node_dispatch = rt.graph.node_dispatch
    has_relations = relations.waiter_frees.shape[0] > 0
    next_rank = np.int64(0)  # `straight`: the rank this worker runs next
    windowed = admission.window != 0
    epoch = control[EPOCH]
    ran = 0
    poll = 0  # `ran` at this worker's next poll or at its step limit, whichever comes first
    idle = 0
    stalled = 0
    steps_seen = np.int64(-1)
    held = 0
    cursor = np.int64(0)  # the private batch: no rank below word `cursor` is set in `bits`
    mine = np.int64(0)  # nodes in it
    node = np.int64(-1)  # a shared-queue successor this worker continues with, or -1
    waiting = False  # counted in control[IDLE]
    while atomic_load(control, ABORTED) == 0:
        if straight:
            if next_rank >= admission.count:
                atomic_store(control, DONE, 1)
                break
            node = np.int64(order[next_rank])
            next_rank += 1
        else:
            if node >= 0 and windowed and not admitted(admission, keys[node]):
                if not push_ready(node, keys, node_queue, heaps, control, False):
                    abort_run(control, STATUS_QUEUE_OVERFLOW, node)
                    break
                node = np.int64(-1)
            if node < 0 and mine > 0 and not shared_waiting(serves, control):
                # the private batch alone (no call): the common case of a worker with work
                cursor, key = private_head(bits, order, cursor)
                if admitted(admission, key):
                    bits[cursor] &= bits[cursor] - 1  # the lowest set bit is the one taken
                    mine -= 1
                    node = key & TIE_MASK
            if node < 0:
                node, cursor, mine, brought = take_ready(
                    serves, sole, heaps, control, admission, bits, order, cursor, mine
                )
                held += brought
            if node < 0:
                if held > 0 and mine == 0:
                    if atomic_sub(control, OUTSTANDING, held) == held:
                        atomic_store(control, DONE, 1)  # the last outstanding work: run over
                    held = 0
                if atomic_load(control, DONE) != 0:
                    break
                if idle == 0:
                    if hands_off and not waiting:
                        atomic_add(control, IDLE, 1)
                        waiting = True
                    if cancel_requested(cancel):  # e.g. every other worker in a long kernel
                        abort_run(control, STATUS_CANCELLED, np.int64(-1))
                        break
                    if windowed:  # a finisher may have stopped short of a rank just marked
                        advance_low(admission, epoch)
                    if has_relations:  # no-progress detector: only parked Frees outstanding
                        outstanding = atomic_load(control, OUTSTANDING)
                        steps = np.int64(0)
                        for other in range(MAX_WORKERS):
                            steps += atomic_load(control, PROGRESS + other * LINE)
                        if outstanding == atomic_load(control, PARKED) and steps == steps_seen:
                            stalled += 1
                            if stalled >= NO_PROGRESS_POLLS:
                                abort_run(control, STATUS_NO_PROGRESS, control[LAST_PARKED])
                                break
                        else:
                            stalled = 0
                        steps_seen = steps
                idle += 1
                if idle >= SPINS_BEFORE_YIELD:
                    cpu_yield()
                    idle = 0
                continue
        idle = 0
        stalled = 0
        if waiting:
            atomic_sub(control, IDLE, 1)
            waiting = False
        if (
            has_relations
            and is_related_free(relations, node)
            and not on_free_ready(relations, node, epoch)
        ):
            atomic_add(control, OUTSTANDING, 1)  # the parked Free's own unit
            atomic_add(control, PARKED, 1)
            atomic_store(control, LAST_PARKED, node)
            node = np.int64(-1)
            continue  # parked: its last related Launch queues it again
        if ran >= poll:  # the step limit, or a cancellation poll (every POLL_STEPS)
            stop, poll = step_poll(np.int64(ran), max_steps, cancel)
            if stop != STATUS_OK:
                abort_run(control, stop, node)
                break
        step = ran
        if record is not None:
            step = atomic_add(control, STEPS, 1)  # the record's row
        if record is not None:
            start = monotonic_ns()
        critical = node_critical[node]
        if critical:
            lock_device(rt.device)
        status = dispatch(rt, node_dispatch[node], node)
        if critical:
            unlock_device(rt.device)
        if record is not None:
            record_step(record, step, node, start, monotonic_ns())
        ran += 1
        if has_relations:  # progress the no-progress detector sees (this worker's own line)
            atomic_store_release(control, PROGRESS + worker.index * LINE, ran)
        first, last, stop = released_edges(rt, status, node, cancel)
        if stop != STATUS_OK:
            abort_run(control, stop, node)
            break
        if straight:  # its classes are those of the ranks it ran (`nodes_per_class`)
            node = np.int64(-1)
            continue
        by_class[node_queue[node]] += 1
        if has_relations and is_related_launch(relations, node):
            count = on_launch_submitted(relations, node, epoch, released)
            for i in range(count):
                atomic_sub(control, PARKED, 1)
                if not push_ready(np.int64(released[i]), keys, node_queue, heaps, control, True):
                    abort_run(control, STATUS_QUEUE_OVERFLOW, node)
        finished = node
        node = np.int64(-1)
        if alone:  # every successor is this worker's, with a plain in-degree (see above)
            for e in range(np.uint64(first), np.uint64(last)):
                target = np.uint64(targets[e])
                remaining = in_degree[target] - 1
                in_degree[target] = remaining
                if remaining == 0:
                    cursor, mine = keep_private(np.int64(ranks[target]), bits, cursor, mine)
            first = last  # nothing left for the general loop below
        for e in range(np.uint64(first), np.uint64(last)):
            # unsigned: indexing skips Numba's negative-index wrap (validated ids, >= 0)
            target = np.uint64(targets[e])
            if plain[target]:  # this worker is the only one that decrements it
                remaining = in_degree[target] - 1
                in_degree[target] = remaining
                if remaining != 0:
                    continue
            elif atomic_sub(in_degree, target, 1) != 1:
                continue
            queue = node_queue[target]
            if sole[queue]:  # no other worker may run it: the private batch
                cursor, mine = keep_private(np.int64(ranks[target]), bits, cursor, mine)
                continue
            queued = np.int64(target)
            keep = serves[queue] and (node < 0 or keys[target] < keys[node])
            if keep and hands_off:
                keep = atomic_load(control, IDLE) == 0  # else an idle worker takes it
            if keep:
                queued = node  # the best shared successor this worker serves runs next, here
                node = np.int64(target)
            if queued >= 0 and not push_ready(queued, keys, node_queue, heaps, control, False):
                abort_run(control, STATUS_QUEUE_OVERFLOW, queued)
        finish_rank(admission, keys[finished], epoch)  # after its successors are visible
    return np.int64(atomic_load(control, STATUS)), np.int64(control[NODE]), np.int64(ran)
