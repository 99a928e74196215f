"""The multi-thread executor: worker classes in nogil threads, atomic in-degrees, spin-locked
priority queues per class.

Model (the reference's, see reference-implementation-notes.md "Multi-thread executor"):
- Workers. `threads` >= 2 Python threads (the calling thread is worker 0), each running the
  same nogil njit loop (`run_multithread`, compiled against the generated dispatch like every
  loop). Worker 0 is NORMAL, worker 1 is the one MEMORY worker, worker 2 the LAUNCH worker when
  there are more than two threads, the rest NORMAL. With two threads there is no LAUNCH worker
  (as in the reference) and the MEMORY worker also serves the LAUNCH queue: memory and launch
  kernels all hold the device lock anyway (below), so one device worker never contends for
  it, and the NORMAL worker stays free for host work (shape inference, tiling).
- Classes. A node's class is its kernel's critical section when it has one ("memory" ->
  MEMORY, "launch" -> LAUNCH), else its kernel's registered worker class. Each class has one
  ready queue: a binary min-heap on the node's rank (its position in the sequential
  executor's priority order, relations included; `rtsoa.executors.admission`) guarded by a
  spin lock on an int64 (cmpxchg; `rtsoa.executors.atomics`); a worker serving several
  queues takes the smallest rank among their heads, so ready tasks are released in one
  priority order across classes, and no Python lock or GIL is on the per-node path.
- Admission window. Where the root has memory-class nodes, a node starts only within
  `window` ranks of the oldest unfinished one, which keeps the allocations from running
  ahead of the launches and frees (`rtsoa.executors.admission`, the reference's "at most
  thread_num tasks per round"). With two threads, where the one device worker runs every
  memory and launch node, the window is that worker's own: its nodes start within `window`
  ranks of its oldest unfinished one, and the NORMAL worker, which allocates nothing, has
  none (`admission.private_admissions`: no rank marks or `low` shared between the cores).
- Device. The simulated device is one unsynchronised state, so every kernel with a critical
  section (all kernels that call the device API: AllocMemory, FreeMemory, LaunchKernel, the
  event kernels) runs holding one device spin lock: memory and launch kernels never run
  concurrently with each other. This is stricter than the reference (one lock per section
  key), because here both sections write the same allocator / stream / hazard state. With
  two threads one worker runs every such kernel, so none can overlap and the lock is not
  taken.
- Readiness. In-degrees are copied from the template at the start of a run; a finished node
  decrements its successors with `atomic_sub`, and the worker that takes one to zero
  releases it. A successor of a queue this worker alone serves goes to the worker's private
  batch (a bitmap of ranks with a forward cursor: ranks are unique and one worker alone
  takes them in increasing order; no lock, no atomic), which it merges with the shared
  queues' heads by rank when it takes its next node. Others go to their class queue, except
  the best one of a queue this worker shares with others, which it runs next itself (the
  reference's speculative successor chains). A node whose predecessors are all run by one
  worker (each of their class queues served by that worker alone) has a single writer of its
  in-degree, which is then decremented with a plain store instead of an atomic.
- A worker alone. Where one worker serves every queue holding a node of the root and is the
  single writer of every in-degree (two threads on a graph of NORMAL kernels), nothing can
  run, release or reorder a node but that worker, so its releases would give the priority
  order exactly: it runs that order straight (no in-degree, queue or bitmap traffic), unless
  the graph has relations. A worker that serves no queue holding a node of the root is not
  started at all.
- Termination. `outstanding` counts units of work: a shared push adds one before the node
  becomes visible, a parked Free one; a worker keeps the units of the shared nodes it took
  while it has work of its own (a node or a private batch) and gives them back when it has
  none, so the count reaches zero only when no work is left, and every worker then
  returns. Every queue has a worker serving it, so while work is outstanding some worker
  can take it: no run waits forever unless a kernel does. A step limit applies per worker
  (the node count: each node runs at most once; a shared step counter is kept only for
  subscribed runs, whose record rows it numbers; with relations each worker publishes the
  nodes it ran on a line of its own, which the no-progress detector sums).
- Errors. The first non-zero status (failure or end-of-sequence) wins a compare-and-swap on
  the abort flag and is kept with its node; every worker stops at its next pop; the executor
  reports it like the single-thread ones (KernelError, or an end-of-sequence result).
- Checksums. Each worker folds into its own `WorkerState`; the run's checksum is their sum.
- Relations. Exact Free -> Launch relations are honoured with per-node wait words
  (`rtsoa.executors.relation_state`): a Free whose related Launches of this run were not all
  submitted is parked (outstanding, no worker blocked) and re-queued by the last of them.
  Only graphs with a relation whose Launch -> Free edge was removed keep that state; where
  every relation keeps its edge, the edge implies it and the loop skips the checks.
- Calls. Each worker calls the loop's compiled entry directly (`_compile`), not the Numba
  dispatcher, whose type resolution of the ~30 arguments took ~150 us a worker a run.

The control words, the class queues and the private batches live in
`rtsoa.executors.ready_queues`; the release order and the admission window in
`rtsoa.executors.admission`.

Control flow (switch / pivot / loop kernels, subgraphs) is refused at prepare
(`runs_control_flow = False`), so `auto` never picks this executor for such graphs.
"""

import functools
import operator

import numba
import numpy as np

from rtsoa._jit import entry_point
from rtsoa.abi.status import STATUS_CANCELLED, STATUS_NO_PROGRESS, STATUS_OK, STATUS_QUEUE_OVERFLOW
from rtsoa.executors.admission import (
    DEFAULT_WINDOW,
    LOW,
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
    _arm,
    _keep,
    _private_head,
    _push,
    _shared_waiting,
    _take,
    abort_run,
)
from rtsoa.executors.relation_state import (
    MAX_EPOCH,
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
from rtsoa.graph.schema import WorkerClass
from rtsoa.kernels.abi import Runtime, line_zeros, new_worker, read_only, reset_worker
from rtsoa.kernels.clock import monotonic_ns
from rtsoa.kernels.dispatch import dispatch
from rtsoa.kernels.relations import node_classes

MAX_THREADS = MAX_WORKERS
# Empty polls before an idle worker yields its core (tens of microseconds of polling: a yield
# on a loaded machine can cost a whole time slice, far more than the next kernel takes).
SPINS_BEFORE_YIELD = 4096
# Checks (one per SPINS_BEFORE_YIELD idle polls) in a row that saw nothing run and only parked
# Frees outstanding before a run is declared stuck (a relation whose Launch can never run in
# this run, e.g. one built by hand against the edges).
NO_PROGRESS_POLLS = 200


def run_multithread(
    rt,
    worker,
    serves,
    sole,
    released,
    bits,
    order,
    ranks,
    admission,
    alone,
    straight,
    keys,
    node_queue,
    node_critical,
    in_degree,
    plain,
    heaps,
    control,
    relations,
    max_steps,
    cancel,
    record,
):
    """One worker: take the best ready node it serves (private batch or shared queues), run
    it, release its successors, until no work is outstanding or the run aborted. Returns
    (status, node, nodes this worker ran); the run's status and node are in `control`.

    Per-worker arguments: `serves` / `sole` (bool per queue: pops it / is its only server),
    `released` (the Frees a Launch re-queues), `bits` (the private batch: a bit per rank for
    the ready nodes of the queues it alone serves, released by itself; no lock, no atomics)
    `order` (the node of each rank), `ranks` (the rank of each node), `admission` (its
    admission window: one shared by all workers, or its own; see `_prepare`) and `alone`
    (this worker alone runs every node of the root, each with a single writer of its
    in-degree: e.g. two threads on a graph of NORMAL kernels; its releases then take the
    shortest path, a plain decrement and its private batch) and `straight` (alone, and no
    relations: no other worker can run, release or reorder any node, so its releases by
    in-degree would give the priority order exactly, which tests/test_multithread.py checks;
    the worker runs that order, `order` rank by rank, with no in-degree or queue traffic,
    and leaves the start nodes queued for the next arming to clear).

    Outstanding units (termination): a shared push adds one, a parked Free adds one (its
    re-queue by its last Launch reuses it); a worker keeps the units of the shared nodes it
    took (`held`) while it has work of its own (a node, a private batch) and gives them all
    back when it has none, so the count reaches zero only when no work is left anywhere.

    Cancellation (`rtsoa.executors.cancel`): a worker polls `cancel` every POLL_STEPS nodes
    it runs, in its step-limit test, and when it starts idling; the first to see a stop
    aborts the run with STATUS_CANCELLED, and every worker stops at its next pop.
    """
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
                if not _push(node, keys, node_queue, heaps, control, False):
                    abort_run(control, STATUS_QUEUE_OVERFLOW, node)
                    break
                node = np.int64(-1)
            if node < 0 and mine > 0 and not _shared_waiting(serves, control):
                # the private batch alone (no call): the common case of a worker with work
                cursor, key = _private_head(bits, order, cursor)
                if admitted(admission, key):
                    bits[cursor] &= bits[cursor] - 1  # the lowest set bit is the one taken
                    mine -= 1
                    node = key & TIE_MASK
            if node < 0:
                node, cursor, mine, brought = _take(
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
            atomic_store_release(control, PROGRESS + worker * LINE, ran)
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
                if not _push(np.int64(released[i]), keys, node_queue, heaps, control, True):
                    abort_run(control, STATUS_QUEUE_OVERFLOW, node)
        finished = node
        node = np.int64(-1)
        if alone:  # every successor is this worker's, with a plain in-degree (see above)
            for e in range(np.uint64(first), np.uint64(last)):
                target = np.uint64(targets[e])
                remaining = in_degree[target] - 1
                in_degree[target] = remaining
                if remaining == 0:
                    cursor, mine = _keep(np.int64(ranks[target]), bits, cursor, mine)
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
                cursor, mine = _keep(np.int64(ranks[target]), bits, cursor, mine)
                continue
            queued = np.int64(target)
            if serves[queue] and (node < 0 or keys[target] < keys[node]):
                queued = node  # the best shared successor this worker serves runs next, here
                node = np.int64(target)
            if queued >= 0 and not _push(queued, keys, node_queue, heaps, control, False):
                abort_run(control, STATUS_QUEUE_OVERFLOW, queued)
        finish_rank(admission, keys[finished], epoch)  # after its successors are visible
    return np.int64(atomic_load(control, STATUS)), np.int64(control[NODE]), np.int64(ran)


@register_executor
class MultithreadExecutor(Executor):
    """Worker classes in nogil threads over lock-free-on-the-hot-path queues; no control flow.

    `threads` (>= 2, default `default_threads()`): worker threads, the calling one included.
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
        self._serves = serves
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
            self._admissions = private_admissions(admission, rank, classes, serves)
        else:
            self._admissions = [admission] * self.threads
        self.admission = self._admissions[1]  # the (first) MEMORY worker's
        self.relations = relations
        self._starts = read_only(self.starts)
        self._template = read_only(np.ascontiguousarray(graph.in_degree, dtype=np.int32))
        self._control = line_zeros(CONTROL_SIZE, np.int64)  # its slots a line apart (LINE)
        in_degree = np.empty(n, dtype=np.int32)
        heaps = line_zeros((QUEUES, int(counts.max()) + 2), np.int64)
        self._runtimes = [self.runtime] + [
            Runtime(self.runtime.graph, self.runtime.values, new_worker(), self.runtime.device)
            for _ in range(self.threads - 1)
        ]
        rows = max(largest_waiter_row(relations), 1)
        self._released = [line_zeros(rows, np.int32) for _ in range(self.threads)]
        # private batches: a worker that alone serves a queue keeps the nodes of it it
        # releases itself (each node is kept at most once per run)
        self._sole = serves & (serves.sum(axis=0) == 1)
        # a bit per rank, and a spare word (the take's scan stops at a set bit, so never
        # reads past the last rank's word; the spare only guards a miscount)
        words = (int(admission.count) >> 6) + 2
        self._bits = [line_zeros(words if sole.any() else 1, np.int64) for sole in self._sole]
        # the rank of each node as int32 (half the bytes of `keys` in the cache: the release
        # of a private successor reads it at random), and the node of each rank
        ranks = rank.astype(np.int32)
        self._ranks = read_only(ranks)
        order = np.zeros(max(int(admission.count), 1), dtype=np.int32)
        order[ranks[self.nodes]] = self.nodes
        self._order = read_only(order)
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
        self._alone = [
            np.bool_(bool(np.all(sole[root_queues])) and bool(np.all(single[nodes])))
            for sole in self._sole
        ]
        has_relations = relations.waiter_frees.shape[0] > 0
        self._straight = [
            np.bool_(bool(alone) and self.straight and not has_relations) for alone in self._alone
        ]
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
        shared = (read_only(keys), read_only(classes), read_only(section), in_degree)
        shared += (read_only(plain), heaps, self._control, relations)
        self._shared = shared + (np.int64(self.max_steps), self.cancel_words)
        return self._per_worker(0) + self._shared

    def _per_worker(self, index):
        """The loop's per-worker arguments (before the shared ones)."""
        return (
            np.int64(index),
            self._serves[index],
            self._sole[index],
            self._released[index],
            self._bits[index],
            self._order,
            self._ranks,
            self._admissions[index],
            self._alone[index],
            self._straight[index],
        )

    def _checksum(self):
        sums = np.array([int(rt.worker.checksum[0]) for rt in self._runtimes], dtype=np.uint64)
        return int(np.sum(sums, dtype=np.uint64))

    def _worker_arguments(self, index, record):
        return (self._runtimes[index], *self._per_worker(index), *self._shared, record)

    def _compile(self, record):
        """The loop's entry for this record type, before any thread calls it (one compile,
        not a race of threads into Numba's compiler lock).

        The workers call the compiled entry itself (`rtsoa._jit.entry_point`), not the
        dispatcher: resolving the types of ~30 arguments, the runtime tuple of ~60 arrays
        among them, cost ~150 us per worker per run, more than a small graph's run. The
        entry unboxes without checking types, so every worker's arguments are checked once
        here to have the types it was compiled for, and again whenever a runtime, the
        shared arguments or an admission window is replaced; where one differs (it cannot
        today), the workers go through the dispatcher."""
        kind = record is None
        owners = (*self._runtimes, self._shared, *self._admissions)
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

    def _execute(self, record):
        """Run the workers; returns (status, node, nodes executed) like a loop."""
        loop = self._compile(record)
        for rt in self._runtimes[1:]:
            reset_worker(rt.worker)
        for bits in self._bits:  # an aborted run may leave nodes in a private batch
            bits[:] = 0
        keys, node_queue, _, in_degree, _, heaps, control = self._shared[:7]
        if control[EPOCH] >= MAX_EPOCH:  # the wait words keep 32 bits of it: start again
            self.relations.waits[:] = 0
            for admission in self._admissions:
                reset_epochs(admission)
            control[EPOCH] = 0
        for admission in self._admissions:
            admission.low[LOW] = 0
        _arm(
            self._starts,
            self._template,
            in_degree,
            keys,
            node_queue,
            heaps,
            control,
        )
        results = [None] * self.threads
        errors = []

        def work(index):
            try:
                results[index] = loop(*self._worker_arguments(index, record))
            except BaseException as error:  # noqa: BLE001  (re-raised below, after the join)
                errors.append(error)
                self._control[ABORTED] = 1  # stop the other workers

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
        control = self._control
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
