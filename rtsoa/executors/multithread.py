"""The multithread executor: worker threads running one nogil loop over shared ready queues.

The algorithm (worker classes, ranks, queues and private batches, relations and their
generations, the admission window, termination, errors) is written up in
docs/multithread.md. This file is the loop and the executor; the map of the rest:

- `multithread.py` (this file): the loop's state as two bundles, `WorkerState` (one per
  worker) and `RunState` (shared); `run_multithread`, one worker's loop; and
  `MultithreadExecutor`: prepare, the per-run arming, the threads, the result.
- `worker_classes.py`: which class queues each worker serves, the default thread count, the
  nodes whose in-degree one worker alone decrements. Read at prepare.
- `ready_queues.py`: the control words (a cache line each), the class heaps under spin
  locks and the private batch (a bitmap of ranks): `arm_run` (per run), `push_ready`,
  `take_ready`, `keep_private`, `private_head`, `shared_waiting`, `abort_run` (the loop).
- `admission.py`: the ranks (the release order) and the admission window: `release_keys`,
  `private_admissions` (prepare), `admitted`, `finish_rank`, `advance_low` (the loop).
- `relation_state.py`: exact Free -> Launch relations, one wait word per Free tagged with
  the run's generation: `relation_state` (prepare), `on_free_ready`, `on_launch_submitted`.
- `worker_threads.py`: the process-wide pool of worker threads kept between runs.
- Shared with the other loops: `atomics.py` (CPU atomics, spin locks), `heap.py` (the binary
  heap), `steps.py` (released edges, the step record), `cancel.py` (the cancellation poll).

Control flow (switch / pivot / loop kernels, subgraphs) is refused at prepare
(`runs_control_flow = False`), so `auto` never picks this executor for such graphs.
"""

import functools
import operator
from typing import NamedTuple

import numba
import numpy as np

from rtsoa._jit import entry_point
from rtsoa.executors.admission import (
    DEFAULT_WINDOW,
    LOW,
    Admission,
    admitted,
    advance_low,
    finish_rank,
    private_admissions,
    release_keys,
    reset_epochs,
)
from rtsoa.executors.atomics import (
    atomic_add,
    atomic_load,
    atomic_store,
    atomic_store_release,
    atomic_sub,
    cpu_yield,
    spin_lock,
    spin_unlock,
)
from rtsoa.executors.base import Executor, register_executor
from rtsoa.executors.cancel import cancel_requested, step_poll
from rtsoa.executors.heap import TIE_MASK
from rtsoa.executors.ready_queues import (
    ABORTED,
    CONTROL_SIZE,
    DEVICE_LOCK,
    DONE,
    EPOCH,
    LAST_PARKED,
    LINE,
    MAX_WORKERS,
    NODE,
    OUTSTANDING,
    PARKED,
    PROGRESS,
    QUEUES,
    RANK_SHIFT,
    STATUS,
    STEPS,
    abort_run,
    arm_run,
    keep_private,
    private_head,
    push_ready,
    shared_waiting,
    take_ready,
)
from rtsoa.executors.relation_state import (
    MAX_EPOCH,
    RelationState,
    is_related_free,
    is_related_launch,
    largest_waiter_row,
    no_relations,
    on_free_ready,
    on_launch_submitted,
    relation_state,
)
from rtsoa.executors.steps import record_step, released_edges
from rtsoa.executors.worker_classes import default_threads, queues_served, single_writer
from rtsoa.executors.worker_threads import POOL
from rtsoa.graph.relations import node_classes
from rtsoa.graph.schema import WorkerClass
from rtsoa.kernels.clock import monotonic_ns
from rtsoa.kernels.dispatch import dispatch
from rtsoa.kernels.runtime import Runtime, line_zeros, new_worker, read_only, reset_worker
from rtsoa.kernels.status import STATUS_CANCELLED, STATUS_OK, STATUS_QUEUE_OVERFLOW

MAX_THREADS = MAX_WORKERS
# Empty polls before an idle worker yields its core (tens of microseconds of polling: a yield
# on a loaded machine can cost a whole time slice, far more than the next kernel takes).
SPINS_BEFORE_YIELD = 4096
# Checks (one per SPINS_BEFORE_YIELD idle polls) in a row that saw nothing run and only parked
# Frees outstanding before a run is declared stuck (a relation whose Launch can never run in
# this run, e.g. one built by hand against the edges).
NO_PROGRESS_POLLS = 200
# The run made no progress: every outstanding node is a Free waiting for a Launch that cannot
# be submitted. Reserved range, far above the codes rtsoa.kernels.status names.
STATUS_NO_PROGRESS = 1_000_000_100


class WorkerState(NamedTuple):
    """What one worker's loop reads and writes alone (one per worker, sized at prepare)."""

    index: np.int64  # the worker's number (0: the calling thread)
    serves: np.ndarray  # bool[QUEUES]: the class queues it pops
    sole: np.ndarray  # bool[QUEUES]: those it alone pops (their nodes go to its private batch)
    released: np.ndarray  # int32[largest waiter row]: the Frees one of its Launches re-queues
    bits: np.ndarray  # int64[ranks / 64 + 2]: the private batch, a bit per rank (no lock)
    admission: Admission  # its admission window: one all workers share, or its own
    alone: np.bool_  # it alone runs every root node, the single writer of every in-degree
    straight: np.bool_  # alone and no relations: it runs the rank order, rank by rank


class RunState(NamedTuple):
    """What the workers of one executor share (sized at prepare, re-armed by `arm_run`)."""

    order: np.ndarray  # int32[ranks]: the node of each rank (read-only)
    ranks: np.ndarray  # int32[n]: the rank of each node (read-only)
    keys: np.ndarray  # int64[n]: heap key rank << RANK_SHIFT | node (read-only)
    node_queue: np.ndarray  # int8[n]: the class queue of each node (read-only)
    node_critical: np.ndarray  # bool[n]: runs holding the device lock (read-only)
    in_degree: np.ndarray  # int32[n]: live in-degrees, from the template at each arming
    plain: np.ndarray  # bool[n]: one worker alone decrements it (a plain store, no atomic)
    heaps: np.ndarray  # int64[QUEUES, largest class + 2]: the class queues' heaps
    control: np.ndarray  # int64[CONTROL_SIZE]: the control words (ready_queues)
    relations: RelationState  # Free -> Launch relations without edges, and their wait words
    max_steps: np.int64  # the step limit per worker


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
            spin_lock(control, DEVICE_LOCK)
        status = dispatch(rt, node_dispatch[node], node)
        if critical:
            spin_unlock(control, DEVICE_LOCK)
        if record is not None:
            record_step(record, step, node, start, monotonic_ns())
        ran += 1
        if has_relations:  # progress the no-progress detector sees (this worker's own line)
            atomic_store_release(control, PROGRESS + worker.index * LINE, ran)
        first, last, stop = released_edges(rt, status, node, cancel)
        if stop != STATUS_OK:
            abort_run(control, stop, node)
            break
        if straight:
            node = np.int64(-1)
            continue
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
            if serves[queue] and (node < 0 or keys[target] < keys[node]):
                queued = node  # the best shared successor this worker serves runs next, here
                node = np.int64(target)
            if queued >= 0 and not push_ready(queued, keys, node_queue, heaps, control, False):
                abort_run(control, STATUS_QUEUE_OVERFLOW, queued)
        finish_rank(admission, keys[finished], epoch)  # after its successors are visible
    return np.int64(atomic_load(control, STATUS)), np.int64(control[NODE]), np.int64(ran)


@register_executor
class MultithreadExecutor(Executor):
    """Worker classes in nogil threads over lock-free-on-the-hot-path queues; no control flow.

    `threads` (>= 2, default `default_threads()`): worker threads, the calling one included.
    After prepare, `workers` holds each worker's WorkerState and `run_state` the RunState
    they share (docs/multithread.md).
    """

    name = "multithread"
    runs_control_flow = False
    uses_threads = True
    runs_relations = True
    loop = run_multithread
    default_threads = staticmethod(default_threads)

    window = DEFAULT_WINDOW  # ranks a node may start ahead of the oldest unfinished one
    # a worker alone with the root (no relations) runs the priority order straight, not by
    # in-degree releases (`run_multithread`'s `straight`); False only to test the equivalence
    straight = True

    def _prepare(self):
        threads = default_threads() if self.threads is None else self.threads
        if isinstance(threads, bool) or not isinstance(threads, int | np.integer):
            raise TypeError(f"threads must be an int, not {type(threads).__name__}")
        if not 2 <= threads <= MAX_THREADS:
            raise ValueError(
                f"threads must be 2 .. {MAX_THREADS} (one memory worker and at "
                f"least one normal worker), not {threads}"
            )
        self.threads = int(threads)
        graph = self.graph
        n = graph.num_nodes
        tables = self.registry.tables()
        node_dispatch = self.runtime.graph.node_dispatch
        classes = node_classes(tables, node_dispatch)
        section = tables.critical_section[node_dispatch] != 0
        serves = queues_served(self.threads)
        root = np.zeros(n, dtype=np.bool_)
        root[self.nodes] = True
        counts = np.bincount(classes[root], minlength=QUEUES)
        # relations whose edge the relation pass kept are implied by it: honoured only
        # where some edge was removed (a Free then parks until its Launches are submitted)
        relations = relation_state(graph, root) if self.edgeless else no_relations(n)
        # bound the run where a worker allocates device memory (see rtsoa.executors.admission)
        memory = bool(counts[WorkerClass.MEMORY])
        keys, admission = release_keys(
            graph, self.nodes, self.starts, relations, self.edgeless, memory, self.window
        )
        rank = keys >> RANK_SHIFT
        # Two threads: each class queue has one server, so each worker's window is its own,
        # with no mark or `low` shared between cores per node (admission.private_admissions)
        if self.threads == 2 and admission.window != 0:
            admissions = private_admissions(admission, rank, classes, serves)
        else:
            admissions = [admission] * self.threads
        self.admission = admissions[1]  # the (first) MEMORY worker's
        self.relations = relations
        self._starts = read_only(self.starts)
        self._template = read_only(np.ascontiguousarray(graph.in_degree, dtype=np.int32))
        self._runtimes = [self.runtime] + [
            Runtime(self.runtime.graph, self.runtime.values, new_worker(), self.runtime.device)
            for _ in range(self.threads - 1)
        ]
        rows = max(largest_waiter_row(relations), 1)
        # private batches: a worker that alone serves a queue keeps the nodes of it it
        # releases itself (each node is kept at most once per run)
        sole = serves & (serves.sum(axis=0) == 1)
        # a bit per rank, and a spare word (the take's scan stops at a set bit, so never
        # reads past the last rank's word; the spare only guards a miscount)
        words = (int(admission.count) >> 6) + 2
        # the rank of each node as int32 (half the bytes of `keys` in the cache: the release
        # of a private successor reads it at random), and the node of each rank
        ranks = rank.astype(np.int32)
        order = np.zeros(max(int(admission.count), 1), dtype=np.int32)
        order[ranks[self.nodes]] = self.nodes
        self._compiled = {}
        self._owners = ()  # the run state objects `_compiled` was checked against
        owner = np.full(QUEUES, -1, dtype=np.int64)
        for queue in range(QUEUES):
            workers = np.flatnonzero(serves[:, queue])
            owner[queue] = workers[0] if workers.shape[0] == 1 else -1
        plain = np.zeros(n, dtype=np.bool_)
        nodes = np.ascontiguousarray(self.nodes, dtype=np.int32)
        single_writer(graph.succ_offsets, graph.succ_targets, owner[classes], nodes, plain)
        # a worker that alone runs the whole root, every in-degree with it as single writer
        root_queues = np.unique(classes[nodes])
        single = plain | (np.asarray(graph.in_degree) == 0)  # start nodes have no writer
        has_relations = relations.waiter_frees.shape[0] > 0
        self.workers = []
        for index in range(self.threads):
            alone = bool(np.all(sole[index, root_queues])) and bool(np.all(single[nodes]))
            self.workers.append(
                WorkerState(
                    index=np.int64(index),
                    serves=serves[index],
                    sole=sole[index],
                    released=line_zeros(rows, np.int32),
                    bits=line_zeros(words if sole[index].any() else 1, np.int64),
                    admission=admissions[index],
                    alone=np.bool_(alone),
                    straight=np.bool_(alone and self.straight and not has_relations),
                )
            )
        # a worker that serves no queue holding a node of the root never has work: it is not
        # started (a spinning thread would only take its core, or its core's sibling, from
        # the others)
        self._working = [
            index == 0 or bool(serves[index, root_queues].any()) for index in range(self.threads)
        ]
        # The device lock orders critical sections run by different workers; where one worker
        # serves every class queue holding a critical node (two threads: the device worker),
        # they never overlap and the lock is not taken.
        critical_queues = np.unique(classes[nodes][section[nodes]])
        servers = serves[:, critical_queues].any(axis=1)
        if int(servers.sum()) <= 1:
            section = np.zeros_like(section)
        self.run_state = RunState(
            order=read_only(order),
            ranks=read_only(ranks),
            keys=read_only(keys),
            node_queue=read_only(classes),
            node_critical=read_only(section),
            in_degree=np.empty(n, dtype=np.int32),
            plain=read_only(plain),
            heaps=line_zeros((QUEUES, int(counts.max()) + 2), np.int64),
            control=line_zeros(CONTROL_SIZE, np.int64),  # its slots a line apart (LINE)
            relations=relations,
            max_steps=np.int64(self.max_steps),
        )
        return (self.workers[0], self.run_state, self.cancel_words)

    def _checksum(self):
        sums = np.array([int(rt.worker.checksum[0]) for rt in self._runtimes], dtype=np.uint64)
        return int(np.sum(sums, dtype=np.uint64))

    def _worker_arguments(self, index, record):
        """The loop's arguments for worker `index`."""
        state = self.workers[index]
        return (self._runtimes[index], state, self.run_state, self.cancel_words, record)

    def _compile(self, record):
        """The loop's entry for this record type, before any thread calls it (one compile,
        not a race of threads into Numba's compiler lock).

        The workers call the compiled entry itself (`rtsoa._jit.entry_point`), not the
        dispatcher: resolving the types of the runtime tuple of ~60 arrays and the two state
        bundles cost ~150 us per worker per run, more than a small graph's run. The entry
        unboxes without checking types, so every worker's arguments are checked once here to
        have the types it was compiled for, and again whenever a runtime or a state bundle is
        replaced; where one differs (it cannot today), the workers go through the
        dispatcher."""
        kind = record is None
        owners = (*self._runtimes, self.run_state, *self.workers)
        if len(owners) != len(self._owners) or not all(map(operator.is_, owners, self._owners)):
            self._owners = owners  # a run state object was replaced: check the types again
            self._compiled = {}
        if kind not in self._compiled:
            signatures = {
                tuple(numba.typeof(a) for a in self._worker_arguments(index, record))
                for index in range(self.threads)
            }
            entry = entry_point(self._loop, self._worker_arguments(0, record))
            self._compiled[kind] = entry if len(signatures) == 1 else self._loop
        return self._compiled[kind]

    def _arm(self):
        """Per-run reset of the shared state before any worker starts."""
        for worker in self.workers:  # an aborted run may leave nodes in a private batch
            worker.bits[:] = 0
        run = self.run_state
        if run.control[EPOCH] >= MAX_EPOCH:  # the wait words keep 32 bits of it: start again
            self.relations.waits[:] = 0
            for worker in self.workers:
                reset_epochs(worker.admission)
            run.control[EPOCH] = 0
        for worker in self.workers:
            worker.admission.low[LOW] = 0
        arm_run(
            self._starts,
            self._template,
            run.in_degree,
            run.keys,
            run.node_queue,
            run.heaps,
            run.control,
        )

    def _execute(self, record):
        """Run the workers; returns (status, node, nodes executed) like a loop."""
        loop = self._compile(record)
        for rt in self._runtimes[1:]:
            reset_worker(rt.worker)
        self._arm()
        control = self.run_state.control
        results = [None] * self.threads
        errors = []

        def work(index):
            try:
                results[index] = loop(*self._worker_arguments(index, record))
            except BaseException as error:  # noqa: BLE001  (re-raised below, after the join)
                errors.append(error)
                control[ABORTED] = 1  # stop the other workers

        indices = [index for index in range(1, self.threads) if self._working[index]]
        workers = POOL.acquire(len(indices))  # threads kept between runs (worker_threads)
        for worker, index in zip(workers, indices, strict=True):
            worker.start(functools.partial(work, index))
        try:
            work(0)
        finally:
            for worker in workers:
                lost = worker.wait()  # `work` catches what it raises: None unless it failed
                if lost is not None:
                    errors.append(lost)
            POOL.release(workers)
        if errors:
            raise errors[0]
        executed = sum(int(result[2]) for result in results if result is not None)
        if record is not None:
            # A worker claims its row, then reads the clock: one preempted in between starts
            # later than the next row's. Sorted by start (stable: ties keep claim order), the
            # rows stay in an order the graph allows, since a node starts after its
            # predecessors ended; subscribers see starts that never go backwards.
            rows = record[: min(executed, record.shape[0])]
            rows[:] = rows[np.argsort(rows[:, 1], kind="stable")]
        if control[ABORTED]:
            return int(control[STATUS]), int(control[NODE]), executed
        return STATUS_OK, -1, executed
