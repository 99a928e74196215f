"""The multi-thread executor: worker classes in nogil threads, atomic in-degrees, spin-locked
priority queues per class.

Model (the reference's, see reference-implementation-notes.md "Multi-thread executor"):
- Workers. `threads` >= 2 Python threads (the calling thread is worker 0), each running the
  same nogil njit loop (`run_multithread`, compiled against the generated dispatch like every
  loop). Worker 0 is NORMAL, worker 1 is the one MEMORY worker, worker 2 the LAUNCH worker when
  there are more than two threads, the rest NORMAL. With two threads there is no LAUNCH worker
  (as in the reference): launch-class nodes go to the NORMAL worker.
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
  decrements its successors with `atomic_sub`, and the worker that takes one to zero pushes it.
- Termination. `outstanding` counts nodes queued or running: a push adds one before the node
  becomes visible, a finished node subtracts one after pushing its successors, so it reaches
  zero only when no work is left, and every worker then returns. Every queue has a worker
  serving it, so while work is outstanding some worker can take it: no run waits forever
  unless a kernel does. A step limit (the node count: each node runs at most once) applies.
- Errors. The first non-zero status (failure or end-of-sequence) wins a compare-and-swap on
  the abort flag and is kept with its node; every worker stops at its next pop; the executor
  reports it like the single-thread ones (KernelError, or an end-of-sequence result).
- Checksums. Each worker folds into its own `WorkerState`; the run's checksum is their sum.

Control flow (switch / pivot / loop kernels, subgraphs) is refused at prepare
(`runs_control_flow = False`), so `auto` never picks this executor for such graphs.
"""

import os
import threading

import numba
import numpy as np

from rtsoa._jit import jit_out_of_line
from rtsoa.errors import GraphFormatError
from rtsoa.executors.atomics import (
    atomic_add,
    atomic_cas,
    atomic_load,
    atomic_store,
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
CONTROL_SIZE = QUEUE_SIZE + QUEUES * LINE
SPINS_BEFORE_YIELD = 32  # empty polls before an idle worker yields its core


def default_threads():
    """Threads when none are given: the machine's cores, at least 2, at most 8."""
    return max(2, min(os.cpu_count() or 2, 8))


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
        serves[0, WorkerClass.LAUNCH] = True
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
    for i in range(control.shape[0]):
        control[i] = 0
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
            atomic_store(control, QUEUE_SIZE + queue * LINE, size)
            node = key & TIE_MASK
        spin_unlock(control, QUEUE_LOCK + queue * LINE)
        if node >= 0:
            return node
    return np.int64(-1)


@jit_out_of_line
def _push(node, keys, node_queue, heaps, control):
    """Queue a ready node on its class queue; False if the queue is full (malformed graph)."""
    queue = node_queue[node]
    atomic_add(control, OUTSTANDING, 1)  # before it is visible: outstanding never dips to 0
    spin_lock(control, QUEUE_LOCK + queue * LINE)
    size = control[QUEUE_SIZE + queue * LINE]
    full = size >= heaps.shape[1] - 1
    if not full:
        atomic_store(control, QUEUE_SIZE + queue * LINE, heap_push(heaps[queue], size, keys[node]))
    spin_unlock(control, QUEUE_LOCK + queue * LINE)
    return not full


def run_multithread(
    rt, serves, keys, node_queue, node_critical, in_degree, heaps, control, max_steps, record
):
    """One worker: pop from the queues it `serves`, run, release successors, until no work is
    outstanding or the run aborted. Returns (status, node, nodes this worker ran); the run's
    status and node are in `control`."""
    targets = rt.graph.succ_targets
    node_dispatch = rt.graph.node_dispatch
    ran = 0
    idle = 0
    while atomic_load(control, ABORTED) == 0:
        node = _pop(serves, heaps, control)
        if node < 0:
            if atomic_load(control, OUTSTANDING) == 0:
                break
            idle += 1
            if idle >= SPINS_BEFORE_YIELD:
                cpu_yield()
                idle = 0
            continue
        idle = 0
        step = atomic_add(control, STEPS, 1)
        if step >= max_steps:
            abort_run(control, STATUS_STEP_LIMIT, node)
            break
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
        for e in range(first, last):
            target = targets[e]
            if atomic_sub(in_degree, target, 1) == 1:
                if not _push(target, keys, node_queue, heaps, control):
                    abort_run(control, STATUS_QUEUE_OVERFLOW, target)
        atomic_sub(control, OUTSTANDING, 1)
    return np.int64(atomic_load(control, STATUS)), np.int64(control[NODE]), np.int64(ran)


@register_executor
class MultithreadExecutor(Executor):
    """Worker classes in nogil threads over lock-free-on-the-hot-path queues; no control flow.

    `threads` (>= 2, default `default_threads()`): worker threads, the calling one included.
    """

    name = "multithread"
    runs_control_flow = False
    uses_threads = True
    loop = run_multithread

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
        shared = (read_only(classes), read_only(section), in_degree, heaps, self._control)
        self._shared = (keys,) + shared + (np.int64(self.max_steps),)
        return (serves[0],) + self._shared

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
        _arm(
            self._starts,
            self._template,
            self._shared[3],
            self._shared[0],
            self._shared[1],
            self._shared[4],
            self._control,
        )
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
