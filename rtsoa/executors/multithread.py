"""The multithread executor: worker threads running one nogil loop over shared ready queues.

The algorithm (worker classes, ranks, queues and private batches, relations and their
generations, the admission window, termination, errors) is written up in
docs/multithread.md. This file is the executor; the map of the rest:

- `multithread.py` (this file): `MultithreadExecutor`: prepare (a plan per sharing), the
  choice of plan (`sharing`, "auto" timing each), the per-run arming, the threads, the result.
- `worker_loop.py`: `run_multithread`, one worker's loop (compiled per kernel set, like every
  executor's loop).
- `plans.py`: the loop's state (`WorkerState`, `RunState`) for one way of sharing the work
  (`make_plan`, `Plan`); `worker_classes.py`: who serves which class queue.
- `ready_queues.py`: the control words, the class heaps and the private batches;
  `admission.py`: ranks and the admission window; `relation_state.py`: Free -> Launch wait
  words; `worker_threads.py`: the thread pool kept between runs.
- Shared: `heap.py`, `steps.py`, `cancel.py`; from the device layer `rtsoa/device/atomics.py`
  and `rtsoa/device/lock.py` (the device lock: held around critical kernels, or by a launch
  itself around its device calls).

Control flow (switch / pivot / loop kernels, subgraphs) is refused at prepare
(`runs_control_flow = False`), so `auto` never picks this executor for such graphs.
"""

import functools
import operator
import time

import numba
import numpy as np

from rtsoa._jit import entry_point
from rtsoa.abi.status import STATUS_OK
from rtsoa.abi.views import read_only
from rtsoa.device.lock import share_device
from rtsoa.executors.admission import DEFAULT_WINDOW, LOW, release_keys, reset_epochs
from rtsoa.executors.base import Executor, register_executor
from rtsoa.executors.plans import RunState, make_plan, nodes_per_class
from rtsoa.executors.ready_queues import (
    ABORTED,
    CONTROL_SIZE,
    EPOCH,
    MAX_WORKERS,
    NODE,
    QUEUES,
    RANK_SHIFT,
    STATUS,
    arm_run,
)
from rtsoa.executors.relation_state import MAX_EPOCH, no_relations, relation_state
from rtsoa.executors.worker_classes import SHARINGS, default_threads
from rtsoa.executors.worker_loop import run_multithread
from rtsoa.executors.worker_threads import POOL
from rtsoa.graph.schema import WorkerClass
from rtsoa.kernels.abi import Runtime, line_zeros, new_worker, reset_worker
from rtsoa.kernels.relations import node_classes

MAX_THREADS = MAX_WORKERS
# Plain runs of each plan that sharing="auto" times before it keeps the faster (the fastest
# run of each counts: the least disturbed by other work on the machine)
CALIBRATION_RUNS = 2


@register_executor
class MultithreadExecutor(Executor):
    """Worker classes in nogil threads over lock-free-on-the-hot-path queues; no control flow.

    `threads` (>= 2, default `default_threads()`): worker threads, the calling one included.
    `sharing` (an attribute, settable after prepare): how the work is shared, "classes" (only
    the NORMAL workers run host work, one device worker the launches; the reference's
    design), "host" (every worker runs host work, by rank, beside its own class's work:
    independent host nodes use every core), "launches" (every worker runs host work and
    launches: independent op launches compute at once, each holding the device lock only
    around its device calls, `rtsoa.device.lock`) or "auto" (the default: the first
    CALIBRATION_RUNS plain runs of each plan alternate, timed, and the fastest is kept; the
    same answer, bit for bit, either way: no op is split). `workers` holds each worker's
    WorkerState and `run_state` the RunState they share, of the plan in use
    (docs/multithread.md); `nodes_per_worker`, how many nodes each worker ran in the last run,
    and `nodes_per_class` (int64[threads, 3]), how many of each class (NORMAL, MEMORY, LAUNCH).
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

    @property
    def sharing(self):
        """How the work is shared: "classes", "host", "launches" or "auto" (the class
        docstring)."""
        return self._sharing

    @sharing.setter
    def sharing(self, sharing):
        if sharing not in SHARINGS:
            raise ValueError(f"sharing must be one of {SHARINGS}, not {sharing!r}")
        self._sharing = sharing

    @property
    def calibrating(self):
        """Whether sharing="auto" still times plain runs to choose its plan."""
        return self._sharing == "auto" and self._chosen is None and len(self.plans) > 1

    @property
    def calibration_runs(self):
        """How many plain runs sharing="auto" has timed."""
        return sum(len(seconds) for seconds in self._trials.values())

    @property
    def chosen_sharing(self):
        """The plan runs use now: `sharing` (or "classes" where the executor has no such plan:
        "host" needs host work in the root, "launches" a launch that locks the device
        itself), or under "auto" the one calibration chose ("classes" until it has)."""
        return self._plan_name(calibrating=False)

    @property
    def nodes_per_class(self):
        """int64[threads, 3]: the nodes of each class (NORMAL, MEMORY, LAUNCH) each worker ran
        in the last run (zeros before one; `plans.nodes_per_class`)."""
        return nodes_per_class(self._last_plan, self.nodes_per_worker, self.threads)

    @property
    def workers(self):
        """The WorkerState of each worker, in the plan runs use now."""
        return self.plans[self.chosen_sharing].workers

    @property
    def run_state(self):
        """The RunState the workers share, in the plan runs use now."""
        return self.plans[self.chosen_sharing].run_state

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
        self._sharing = "auto"
        self._trials = {}  # plan -> seconds of its calibration runs
        self._chosen = None  # the plan "auto" settled on
        self.nodes_per_worker = []  # of the last run (see _execute)
        self._last_plan = None  # the plan of the last run
        graph = self.graph
        n = graph.num_nodes
        tables = self.registry.tables()
        node_dispatch = self.runtime.graph.node_dispatch
        classes = node_classes(tables, node_dispatch)
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
        self.relations = relations
        self._starts = read_only(self.starts)
        self._template = read_only(np.ascontiguousarray(graph.in_degree, dtype=np.int32))
        self._runtimes = [self.runtime] + [
            Runtime(self.runtime.graph, self.runtime.values, new_worker(), self.runtime.device)
            for _ in range(self.threads - 1)
        ]
        # the rank of each node as int32 (half the bytes of `keys` in the cache: the release
        # of a private successor reads it at random), and the node of each rank
        ranks = (keys >> RANK_SHIFT).astype(np.int32)
        order = np.zeros(max(int(admission.count), 1), dtype=np.int32)
        order[ranks[self.nodes]] = self.nodes
        shared = RunState(
            order=read_only(order),
            ranks=read_only(ranks),
            keys=read_only(keys),
            node_queue=read_only(classes),
            node_critical=read_only(np.zeros(n, dtype=np.bool_)),  # set per plan
            in_degree=np.empty(n, dtype=np.int32),
            plain=read_only(np.zeros(n, dtype=np.bool_)),  # set per plan
            heaps=line_zeros((QUEUES, int(counts.max()) + 2), np.int64),
            control=line_zeros(CONTROL_SIZE, np.int64),  # its slots a line apart (LINE)
            relations=relations,
            max_steps=np.int64(self.max_steps),
        )
        # per node: its kernel has a critical section; it takes the device lock itself
        section = tables.critical_section[node_dispatch] != 0
        locks = tables.locks_device[node_dispatch]
        sharings = ["classes"]
        if counts[WorkerClass.NORMAL]:  # host work to share: a plan where every worker runs it
            sharings.append("host")
        if locks[self.nodes].any():  # launches whose computations may run at once
            sharings.append("launches")
        self.plans = {
            sharing: make_plan(
                graph,
                self.nodes,
                self.threads,
                sharing,
                shared,
                admission,
                section,
                locks,
                self.straight,
            )
            for sharing in sharings
        }
        self.admission = self.plans["classes"].workers[1].admission  # the MEMORY worker's
        self._compiled = {}
        self._owners = ()  # the run state objects `_compiled` was checked against
        plan = self.plans["classes"]
        return (plan.workers[0], plan.run_state, self.cancel_words)

    def _plan_name(self, calibrating):
        """The plan of the next run (see `chosen_sharing`); `calibrating`: a plain run that
        may be timed for "auto"."""
        if len(self.plans) == 1:
            return "classes"
        if self._sharing != "auto":
            return self._sharing if self._sharing in self.plans else "classes"
        if self._chosen is not None:
            return self._chosen
        if not calibrating:
            return "classes"
        return min(self.plans, key=lambda name: len(self._trials.get(name, ())))

    def _timed(self, plan, seconds):
        """A plain run of `plan` under "auto" calibration took `seconds`: keep it, and choose
        once every plan has CALIBRATION_RUNS (the fastest run of each decides)."""
        self._trials.setdefault(plan, []).append(seconds)
        trials = [self._trials.get(name, ()) for name in self.plans]
        if all(len(each) >= CALIBRATION_RUNS for each in trials):
            self._chosen = min(self.plans, key=lambda name: min(self._trials[name]))

    def _checksum(self):
        sums = np.array([int(rt.worker.checksum[0]) for rt in self._runtimes], dtype=np.uint64)
        return int(np.sum(sums, dtype=np.uint64))

    def _worker_arguments(self, plan, index, record):
        """The loop's arguments for worker `index` of `plan`."""
        state = plan.workers[index]
        return (self._runtimes[index], state, plan.run_state, self.cancel_words, record)

    def _compile(self, record):
        """The loop's entry for this record type, before any thread calls it (one compile,
        not a race of threads into Numba's compiler lock).

        The workers call the compiled entry itself (`rtsoa._jit.entry_point`), not the
        dispatcher: resolving the types of the runtime tuple of ~60 arrays and the two state
        bundles costs each worker more per run than a small graph's whole run. The entry
        unboxes without checking types, so every worker's arguments, of every plan, are
        checked once here to have the types it was compiled for, and again whenever a
        runtime or a state bundle is replaced; where one differs (it cannot today), the
        workers go through the dispatcher."""
        kind = record is None
        plans = list(self.plans.values())
        owners = (
            *self._runtimes,
            *(p.run_state for p in plans),
            *(w for p in plans for w in p.workers),
        )
        if len(owners) != len(self._owners) or not all(map(operator.is_, owners, self._owners)):
            self._owners = owners  # a run state object was replaced: check the types again
            self._compiled = {}
        if kind not in self._compiled:
            signatures = {
                tuple(numba.typeof(a) for a in self._worker_arguments(plan, index, record))
                for plan in plans
                for index in range(self.threads)
            }
            entry = entry_point(self._loop, self._worker_arguments(plans[0], 0, record))
            self._compiled[kind] = entry if len(signatures) == 1 else self._loop
        return self._compiled[kind]

    def _arm(self, plan):
        """Per-run reset of the shared state before any worker starts."""
        for worker in plan.workers:  # an aborted run may leave nodes in a private batch
            worker.bits[:] = 0
            worker.by_class[:] = 0
        run = plan.run_state
        admissions = [worker.admission for each in self.plans.values() for worker in each.workers]
        if run.control[EPOCH] >= MAX_EPOCH:  # the wait words keep 32 bits of it: start again
            self.relations.waits[:] = 0
            for admission in admissions:
                reset_epochs(admission)
            run.control[EPOCH] = 0
        for admission in admissions:
            admission.low[LOW] = 0
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
        timed = record is None and self._sharing == "auto" and self._chosen is None
        plan = self.plans[self._plan_name(calibrating=timed)]
        for rt in self._runtimes[1:]:
            reset_worker(rt.worker)
        self._arm(plan)
        share_device(self.device.state, plan.shares_device)
        control = plan.run_state.control
        results = [None] * self.threads
        errors = []

        def work(index):
            try:
                results[index] = loop(*self._worker_arguments(plan, index, record))
            except BaseException as error:  # noqa: BLE001  (re-raised below, after the join)
                errors.append(error)
                control[ABORTED] = 1  # stop the other workers

        start = time.perf_counter()
        indices = [index for index in range(1, self.threads) if plan.working[index]]
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
            share_device(self.device.state, False)
        seconds = time.perf_counter() - start
        if errors:
            raise errors[0]
        # the nodes each worker ran (0 for a worker not started): how the work was shared
        self.nodes_per_worker = [0 if result is None else int(result[2]) for result in results]
        self._last_plan = plan
        executed = sum(self.nodes_per_worker)
        if record is not None:
            # A worker claims its row, then reads the clock: one preempted in between starts
            # later than the next row's. Sorted by start (stable: ties keep claim order), the
            # rows stay in an order the graph allows, since a node starts after its
            # predecessors ended; subscribers see starts that never go backwards.
            rows = record[: min(executed, record.shape[0])]
            rows[:] = rows[np.argsort(rows[:, 1], kind="stable")]
        if control[ABORTED]:
            return int(control[STATUS]), int(control[NODE]), executed
        if timed and len(self.plans) > 1:
            self._timed(plan.sharing, seconds)
        return STATUS_OK, -1, executed
