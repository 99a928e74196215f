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
  ready queue: a binary min-heap on (priority, node id) guarded by a spin lock on an int64
  (cmpxchg; `rtsoa.executors.atomics`), so ready tasks are released in priority order and no
  Python lock or GIL is on the per-node path.
- Device. The simulated device is one unsynchronised state, so every kernel with a critical
  section (all kernels that call the device API: AllocMemory, FreeMemory, LaunchKernel, the
  event kernels) runs holding one device spin lock: memory and launch kernels never run
  concurrently with each other. This is stricter than the reference (one lock per section
  key), because here both sections write the same allocator / stream / hazard state.
- Readiness. In-degrees are copied from the template at the start of a run; a finished node
  decrements its successors with `atomic_sub`, and the worker that takes one to zero pushes it,
  except the first one of a class this worker serves, which it runs next itself without a
  queue round trip (the reference's speculative successor chains; the rest are released in
  priority order through the queues). A node whose predecessors are all run by one worker
  (each of their class queues served by that worker alone) has a single writer of its
  in-degree, which is then decremented with a plain store instead of an atomic (a random DAG
  of normal kernels on two threads: every node).
- Termination. `outstanding` counts nodes queued or running: a push adds one before the node
  becomes visible, a finished node subtracts one after pushing its successors, so it reaches
  zero only when no work is left, and every worker then returns. Every queue has a worker
  serving it, so while work is outstanding some worker can take it: no run waits forever
  unless a kernel does. A step limit applies per worker (the node count: each node runs at
  most once; a shared step counter is kept only for subscribed runs, whose record rows it
  numbers, and for graphs with relations, whose no-progress detector watches it).
- Errors. The first non-zero status (failure or end-of-sequence) wins a compare-and-swap on
  the abort flag and is kept with its node; every worker stops at its next pop; the executor
  reports it like the single-thread ones (KernelError, or an end-of-sequence result).
- Checksums. Each worker folds into its own `WorkerState`; the run's checksum is their sum.

Control flow (switch / pivot / loop kernels, subgraphs) is refused at prepare
(`runs_control_flow = False`), so `auto` never picks this executor for such graphs.
"""

import threading
from typing import NamedTuple

import numba
import numpy as np

from rtsoa._jit import jit, jit_out_of_line
from rtsoa.errors import GraphFormatError
from rtsoa.executors.atomics import (
    atomic_add,
    atomic_cas,
    atomic_load,
    atomic_store,
    atomic_store_release,
    atomic_sub,
    cpu_yield,
    spin_lock,
    spin_unlock,
)
from rtsoa.executors.base import Executor, register_executor
from rtsoa.executors.heap import TIE_MASK, heap_pop, heap_push, pack_keys
from rtsoa.executors.steps import record_step, released_edges
from rtsoa.graph.schema import WorkerClass
from rtsoa.kernels.clock import monotonic_ns
from rtsoa.kernels.dispatch import dispatch
from rtsoa.kernels.runtime import Runtime, new_worker, read_only, reset_worker
from rtsoa.kernels.status import STATUS_OK, STATUS_QUEUE_OVERFLOW, STATUS_STEP_LIMIT

MAX_THREADS = 64
QUEUES = 3  # one ready queue per WorkerClass (NORMAL, MEMORY, LAUNCH)
# Slots of the int64 `control` array, one cache line (8 int64) apart so that the counters
# different threads hammer do not share a line.
LINE = 8
ABORTED = 0 * LINE  # 0 running, 1 a status was kept
STATUS = 1 * LINE  # the kept status
NODE = 2 * LINE  # its node
STEPS = 3 * LINE  # steps claimed (the step limit and the record's row numbers)
OUTSTANDING = 4 * LINE  # nodes queued or running
DEVICE_LOCK = 5 * LINE  # held around every kernel with a critical section
QUEUE_LOCK = 6 * LINE  # + queue * LINE: the spin lock of each ready queue
QUEUE_SIZE = QUEUE_LOCK + QUEUES * LINE  # + queue * LINE: each heap's size
EPOCH = QUEUE_SIZE + QUEUES * LINE  # this run's generation (kept across runs, bumped by _arm)
PARKED = EPOCH + LINE  # Frees waiting for their related Launches' submission
LAST_PARKED = PARKED + LINE  # the last Free parked (named by the no-progress detector)
# 1 once outstanding reached 0: written once per run, so idle workers poll it instead of
# OUTSTANDING, whose cache line would otherwise bounce between the busy and the idle cores
DONE = LAST_PARKED + LINE
CONTROL_SIZE = DONE + LINE
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


class RelationState(NamedTuple):
    """Exact Free -> Launch relations and their per-run generation state (sized at prepare;
    a run bumps the epoch instead of clearing them)."""

    offsets: np.ndarray  # int64[n + 1]: CSR of relation entries by Free node
    launches: np.ndarray  # int32[entries]: the Launch of each entry
    waiter_offsets: np.ndarray  # int64[n + 1]: CSR by Launch node of the entries naming it
    waiter_entries: np.ndarray  # int64[entries]: entry ids
    entry_free: np.ndarray  # int32[entries]: the Free of each entry
    submitted: np.ndarray  # int64[n]: epoch of the Launch's last successful submission
    armed: np.ndarray  # int64[n]: epoch in which the Free started waiting
    cleared: np.ndarray  # int64[n]: epoch in which the Free's waits were all met
    unmet: np.ndarray  # int64[n]: related Launches the Free still waits for (+1 while arming)
    claimed: np.ndarray  # int64[entries]: epoch in which the entry was counted as met


def default_threads():
    """Threads when none are given: 2 (one NORMAL and one device worker). More threads add a
    separate MEMORY worker, whose allocations can outrun the launches on lowered graphs (see
    the README's known defect), so they are opt-in."""
    return 2


def queues_served(threads):
    """bool[threads, QUEUES]: which class queues each worker pops from (see module doc)."""
    serves = np.zeros((threads, QUEUES), dtype=np.bool_)
    serves[:, WorkerClass.NORMAL] = True
    serves[1, :] = False
    serves[1, WorkerClass.MEMORY] = True
    if threads > 2:
        serves[2, :] = False
        serves[2, WorkerClass.LAUNCH] = True
    else:
        serves[1, WorkerClass.LAUNCH] = True
    return serves


def node_classes(tables, node_dispatch):
    """int8 class per node: its kernel's critical section if it has one, else its worker."""
    section = tables.critical_section[node_dispatch]
    worker = tables.worker[node_dispatch]
    return np.where(section != 0, section, worker).astype(np.int8)


@jit_out_of_line
def _arm(starts, template, in_degree, keys, node_queue, heaps, control):
    """Per-run reset: in-degrees from the template, flags and counters cleared, the start
    nodes pushed; runs before the workers start (no allocation)."""
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


@jit
def _single_writer(succ_offsets, succ_targets, node_owner, nodes, plain):
    """plain[v] = every predecessor of v is run by the same single worker (node_owner >= 0)."""
    writer = np.full(plain.shape[0], -2, dtype=np.int64)  # -2: no predecessor seen yet
    for i in range(nodes.shape[0]):
        node = nodes[i]
        owner = node_owner[node]
        for e in range(succ_offsets[node], succ_offsets[node + 1]):
            target = succ_targets[e]
            if writer[target] == -2:
                writer[target] = owner
            elif writer[target] != owner:
                writer[target] = -1
    for i in range(plain.shape[0]):
        plain[i] = writer[i] >= 0


@jit_out_of_line
def abort_run(control, status, node):
    """Keep (status, node) if no status was kept yet; every worker stops at its next pop."""
    if atomic_cas(control, ABORTED, 0, 1) == 0:
        control[STATUS] = status
        control[NODE] = node
        atomic_store(control, ABORTED, 1)


@jit_out_of_line
def _pop(serves, heaps, control):
    """The smallest (priority, id) ready node of the first non-empty queue this worker
    serves, or -1."""
    for queue in range(serves.shape[0]):
        if not serves[queue] or atomic_load(control, QUEUE_SIZE + queue * LINE) == 0:
            continue
        spin_lock(control, QUEUE_LOCK + queue * LINE)
        size = control[QUEUE_SIZE + queue * LINE]
        node = np.int64(-1)
        if size > 0:
            key, size = heap_pop(heaps[queue], size)
            atomic_store_release(control, QUEUE_SIZE + queue * LINE, size)
            node = key & TIE_MASK
        spin_unlock(control, QUEUE_LOCK + queue * LINE)
        if node >= 0:
            return node
    return np.int64(-1)


@jit_out_of_line
def _push(node, keys, node_queue, heaps, control, counted):
    """Queue a ready node on its class queue; False if the queue is full (malformed graph).
    `counted`: the node is already outstanding (a parked Free released by its Launches)."""
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


@jit_out_of_line
def _meet(relations, entry, epoch):
    """Count relation `entry` as met, once per epoch (its Free and its Launch may both see it
    met: the compare-and-swap lets one of them count it). True for the one that counts it."""
    old = atomic_load(relations.claimed, entry)
    return old != epoch and atomic_cas(relations.claimed, entry, old, epoch) == old


@jit_out_of_line
def _park(node, relations, control, epoch):
    """A ready Free with relations: True if every related Launch was already submitted in
    this epoch (run it now), else it waits (parked, still outstanding) for `_submitted`."""
    first = relations.offsets[node]
    last = relations.offsets[node + 1]
    atomic_store(relations.unmet, node, last - first + 1)  # +1: no one releases it while arming
    atomic_store(relations.armed, node, epoch)
    for entry in range(first, last):
        launch = relations.launches[entry]
        if atomic_load(relations.submitted, launch) == epoch and _meet(relations, entry, epoch):
            atomic_sub(relations.unmet, node, 1)
    atomic_add(control, PARKED, 1)
    atomic_store(control, LAST_PARKED, node)
    if atomic_sub(relations.unmet, node, 1) == 1:
        atomic_sub(control, PARKED, 1)
        return True
    return False


@jit_out_of_line
def _submitted(launch, relations, keys, node_queue, heaps, control, epoch):
    """A related Launch succeeded: advance its generation and release the parked Frees whose
    last unmet Launch it was. False if a queue overflowed."""
    atomic_store(relations.submitted, launch, epoch)
    ok = True
    for w in range(relations.waiter_offsets[launch], relations.waiter_offsets[launch + 1]):
        entry = relations.waiter_entries[w]
        free = relations.entry_free[entry]
        if atomic_load(relations.armed, free) != epoch or not _meet(relations, entry, epoch):
            continue
        if atomic_sub(relations.unmet, free, 1) == 1:
            atomic_store(relations.cleared, free, epoch)
            atomic_sub(control, PARKED, 1)
            ok = _push(free, keys, node_queue, heaps, control, True) and ok
    return ok


def run_multithread(
    rt,
    serves,
    keys,
    node_queue,
    node_critical,
    in_degree,
    plain,
    heaps,
    control,
    relations,
    max_steps,
    record,
):
    """One worker: pop from the queues it `serves`, run, release successors, until no work is
    outstanding or the run aborted. Returns (status, node, nodes this worker ran); the run's
    status and node are in `control`."""
    targets = rt.graph.succ_targets
    node_dispatch = rt.graph.node_dispatch
    related = relations.offsets
    has_relations = relations.launches.shape[0] > 0
    epoch = control[EPOCH]
    ran = 0
    idle = 0
    stalled = 0
    steps_seen = np.int64(-1)
    node = np.int64(-1)  # the successor this worker continues with, or -1: pop one
    while atomic_load(control, ABORTED) == 0:
        if node < 0:
            node = _pop(serves, heaps, control)
        if node < 0:
            if atomic_load(control, DONE) != 0:
                break
            if has_relations and idle == 0:  # no-progress detector: only parked Frees
                outstanding = atomic_load(control, OUTSTANDING)
                steps = atomic_load(control, STEPS)
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
            and related[node + 1] > related[node]
            and atomic_load(relations.cleared, node) != epoch
            and not _park(node, relations, control, epoch)
        ):
            node = np.int64(-1)
            continue  # parked: its last related Launch queues it again
        if ran >= max_steps:
            abort_run(control, STATUS_STEP_LIMIT, node)
            break
        step = ran
        if record is not None or has_relations:
            step = atomic_add(control, STEPS, 1)
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
        first, last, stop = released_edges(rt, status, node)
        if stop != STATUS_OK:
            abort_run(control, stop, node)
            break
        waits = relations.waiter_offsets
        if has_relations and waits[node + 1] > waits[node]:
            if not _submitted(node, relations, keys, node_queue, heaps, control, epoch):
                abort_run(control, STATUS_QUEUE_OVERFLOW, node)
        node = np.int64(-1)
        for e in range(first, last):
            target = targets[e]
            if plain[target]:  # this worker is the only one that decrements it
                remaining = in_degree[target] - 1
                in_degree[target] = remaining
                if remaining != 0:
                    continue
            elif atomic_sub(in_degree, target, 1) != 1:
                continue
            queued = np.int64(target)
            if serves[node_queue[target]] and (node < 0 or keys[target] < keys[node]):
                queued = node  # the best ready successor this worker serves runs next, here
                node = np.int64(target)
            if queued >= 0 and not _push(queued, keys, node_queue, heaps, control, False):
                abort_run(control, STATUS_QUEUE_OVERFLOW, queued)
        if node < 0 and atomic_sub(control, OUTSTANDING, 1) == 1:
            atomic_store(control, DONE, 1)  # the last outstanding node: the run is over
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
        if self.graph.meta.has_loops:
            from rtsoa.executors.sequential import priority_order

            if priority_order(self.graph, self.nodes, self.starts) is None:
                raise GraphFormatError("the Main graph has a cycle", "edges", "target")
        graph = self.graph
        n = graph.num_nodes
        tables = self.registry.tables()
        node_dispatch = self.runtime.graph.node_dispatch
        classes = node_classes(tables, node_dispatch)
        section = tables.critical_section[node_dispatch] != 0
        serves = queues_served(self.threads)
        # with no LAUNCH worker the LAUNCH queue is served by worker 0: the class keeps its queue
        self._serves = serves
        root = np.zeros(n, dtype=np.bool_)
        root[self.nodes] = True
        counts = np.bincount(classes[root], minlength=QUEUES)
        self._starts = read_only(self.starts)
        self._template = read_only(np.ascontiguousarray(graph.in_degree, dtype=np.int32))
        self._control = np.zeros(CONTROL_SIZE, dtype=np.int64)
        in_degree = np.empty(n, dtype=np.int32)
        keys = read_only(pack_keys(graph.node_priority, np.arange(n)))
        heaps = np.empty((QUEUES, int(counts.max()) + 2), dtype=np.int64)
        self._runtimes = [self.runtime] + [
            Runtime(self.runtime.graph, self.runtime.values, new_worker(), self.runtime.device)
            for _ in range(self.threads - 1)
        ]
        self._compiled = {}
        relations = self._relation_state()
        owner = np.full(QUEUES, -1, dtype=np.int64)
        for queue in range(QUEUES):
            workers = np.flatnonzero(serves[:, queue])
            owner[queue] = workers[0] if workers.shape[0] == 1 else -1
        plain = np.zeros(n, dtype=np.bool_)
        nodes = np.ascontiguousarray(self.nodes, dtype=np.int32)
        _single_writer(graph.succ_offsets, graph.succ_targets, owner[classes], nodes, plain)
        shared = (read_only(classes), read_only(section), in_degree, read_only(plain), heaps)
        shared += (self._control,)
        self._shared = (keys,) + shared + (relations, np.int64(self.max_steps))
        return (serves[0],) + self._shared

    def _relation_state(self):
        """Relations of the root's Frees, checked (both ends in the root), with the reverse
        CSR by Launch and zeroed generation arrays."""
        graph = self.graph
        n = graph.num_nodes
        root = np.zeros(n, dtype=np.bool_)
        root[self.nodes] = True
        counts = np.diff(graph.relation_offsets) * root
        frees = np.repeat(np.arange(n, dtype=np.int32), counts)
        mask = np.repeat(root, np.diff(graph.relation_offsets))
        launches = np.ascontiguousarray(graph.relation_targets[mask], dtype=np.int32)
        outside = np.flatnonzero(~root[launches])
        if outside.shape[0]:
            free = int(frees[outside[0]])
            raise GraphFormatError(
                f"Free node {free} is related to Launch node {int(launches[outside[0]])}, "
                "which is not in the graph being run (relations must not cross owner graphs)",
                "relations",
                "launch",
                row=free,
            )
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        entries = launches.shape[0]
        order = np.argsort(launches, kind="stable").astype(np.int64)
        waiter_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(launches, minlength=n), out=waiter_offsets[1:])
        return RelationState(
            offsets=read_only(offsets),
            launches=read_only(launches),
            waiter_offsets=read_only(waiter_offsets),
            waiter_entries=read_only(order),
            entry_free=read_only(frees),
            submitted=np.zeros(n, dtype=np.int64),
            armed=np.zeros(n, dtype=np.int64),
            cleared=np.zeros(n, dtype=np.int64),
            unmet=np.zeros(n, dtype=np.int64),
            claimed=np.zeros(max(entries, 1), dtype=np.int64),
        )

    def _checksum(self):
        sums = np.array([int(rt.worker.checksum[0]) for rt in self._runtimes], dtype=np.uint64)
        return int(np.sum(sums, dtype=np.uint64))

    def _compile(self, record):
        """The loop's machine code for this record type, before any thread calls it (one
        compile, not a race of threads into Numba's compiler lock)."""
        kind = record is None
        if kind not in self._compiled:
            arguments = (self.runtime, *self._arguments, record)
            self._compiled[kind] = self._loop.compile(tuple(numba.typeof(a) for a in arguments))
        return self._compiled[kind]

    def _execute(self, record):
        """Run the workers; returns (status, node, nodes executed) like a loop."""
        self._compile(record)
        for rt in self._runtimes[1:]:
            reset_worker(rt.worker)
        keys, node_queue, _, in_degree, _, heaps, control = self._shared[:7]
        _arm(self._starts, self._template, in_degree, keys, node_queue, heaps, control)
        results = [None] * self.threads
        errors = []

        def work(index):
            try:
                results[index] = self._loop(
                    self._runtimes[index], self._serves[index], *self._shared, record
                )
            except BaseException as error:  # noqa: BLE001  (re-raised below, after the join)
                errors.append(error)
                self._control[ABORTED] = 1  # stop the other workers

        workers = [
            threading.Thread(target=work, args=(index,), name=f"rtsoa-worker-{index}", daemon=True)
            for index in range(1, self.threads)
        ]
        for thread in workers:
            thread.start()
        try:
            work(0)
        finally:
            for thread in workers:
                thread.join()
        if errors:
            raise errors[0]
        control = self._control
        executed = sum(int(result[2]) for result in results)
        if control[ABORTED]:
            return int(control[STATUS]), int(control[NODE]), executed
        return STATUS_OK, -1, executed
