"""What every executor shares: binding a graph to the registry, the checks before any jitted
code runs, the runtime tuple, running the compiled loop and turning its status into a result.

An executor is a subclass in its own file (`sequential.py`, `topological.py`, `priority.py`)
holding its preparation (`_prepare`, which sizes all run state once) and its loop (a plain
Python function compiled against the registry's dispatch by `rtsoa.kernels.dispatch.specialise`).
Subclasses register themselves in `EXECUTORS` with `@register_executor`.

A loop takes `(rt, *arguments, record)` and returns (status, failing or last node, nodes
executed). `record` is None for plain runs, which Numba prunes at compile time, or a
(capacity, 3) int64 array the loop fills with (node, start ns, end ns) per step (subscribers).
The last of `arguments` is the executor's cancellation words, which every loop polls
(`rtsoa.executors.cancel`: `cancel()`, `run(timeout=...)`, Ctrl-C).
"""

import abc
import threading
import time
from typing import NamedTuple

import numpy as np

from rtsoa._jit import EntryCache, jit_out_of_line
from rtsoa.abi.operands import POOL_COLUMN, RESULT_ROW
from rtsoa.abi.registry import Registry
from rtsoa.abi.status import (
    STATUS_CANCELLED,
    STATUS_END_OF_SEQUENCE,
    STATUS_OK,
    STATUS_RESERVED_NOT_REGISTERED,
)
from rtsoa.device import Device, check_state, device_free
from rtsoa.device.layout import CNT_LEAKED_BLOCKS
from rtsoa.errors import ExecutorBusyError, GraphFormatError, KernelError, RunCancelled
from rtsoa.executors.calibration import CALIBRATION_LIMIT, calibrate_with
from rtsoa.executors.cancel import CancelFlag
from rtsoa.executors.steps import kernel_stop
from rtsoa.graph.op_table import op_name_of
from rtsoa.graph.schema import GraphKind, ValueKind, WorkerClass
from rtsoa.kernels import REGISTRY
from rtsoa.kernels.abi import make_runtime, reset_worker
from rtsoa.kernels.dispatch import load_dispatch, specialise
from rtsoa.kernels.lowered import NO_BLOCK
from rtsoa.kernels.relations import relations_without_edges

EXECUTORS = Registry("executor", ValueError)  # name -> Executor subclass (@register_executor)
# The reference's automatic choice: control flow with this many launch nodes -> priority.
AUTO_PRIORITY_MIN_LAUNCHES = 5
# Default step limit of a run of a graph with loops: a loop that never exits then fails with
# STATUS_STEP_LIMIT instead of hanging. A graph without loops runs each node at most once, so
# its limit is its node count: a node that runs twice (a join re-armed by more predecessors
# than its in-degree template admits) is an error, never an exponential blow-up.
DEFAULT_MAX_STEPS = 1_000_000_000
_REQUIREMENT_NAMES = ("inputs", "outputs", "attributes", "successors")  # registry columns
_REQUIREMENT_OFFSETS = ("input_offsets", "output_offsets", "attr_offsets", "succ_offsets")
_LAUNCH = int(WorkerClass.LAUNCH)


def register_executor(cls):
    """Class decorator: make an executor available under `cls.name`."""
    EXECUTORS.add(cls.name, cls, replace=True)
    return cls


class RunResult(NamedTuple):
    """Outcome of one successful run (failures raise KernelError instead)."""

    status: int  # 0, or STATUS_END_OF_SEQUENCE when a kernel ended the run early
    nodes_executed: int
    checksum: int  # the order-independent fold of the executed nodes (uint64 as int)
    end_of_sequence: bool


def default_device(graph):
    """A simulated device sized for `graph` (`Device.for_graph`)."""
    return Device.for_graph(graph)


def _one_thread(threads):
    """Is `threads` the int 1 (not True, not 1.0)?"""
    return not isinstance(threads, bool) and isinstance(threads, int | np.integer) and threads == 1


def resolve_executor(executor, control_flow, launch_count, threads=None):
    """The executor name `auto` stands for, or `executor` itself after checking it.

    `auto` with `threads` (multi-thread on request, as in the reference) is the multithread
    executor for graphs without control flow."""
    if executor == "auto":
        if threads is not None:
            if control_flow:
                raise ValueError(
                    "threads applies to the multithread executor, which cannot run control "
                    "flow; leave threads unset for this graph"
                )
            return "multithread"
        if not control_flow:
            return "sequential"
        return "priority" if launch_count >= AUTO_PRIORITY_MIN_LAUNCHES else "topological"
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; choose auto or one of {tuple(EXECUTORS)}")
    if control_flow and not EXECUTORS[executor].runs_control_flow:
        raise ValueError(
            f"the {executor} executor cannot run control flow; use topological or priority"
        )
    if threads is not None and not EXECUTORS[executor].uses_threads:
        raise ValueError(f"threads applies to the multithread executor, not to {executor}")
    return executor


@jit_out_of_line
def _live_blocks(slots, values):
    """How many of `values` still hold a block: the leak check after every successful run,
    where numpy's gather, compare and test cost more than a small model's run (asv
    ModelLatency)."""
    live = 0
    for k in range(values.shape[0]):
        if slots[values[k]] != NO_BLOCK:
            live += 1
    return live


@jit_out_of_line
def _bind_nodes(columns, kernel_dispatch, graph_root, graph_in_subgraph, root, tables, out):
    """One pass over every node: dispatch ids of all nodes, and for the nodes of `root` their
    ids, starts, kernels used, control flow, launch count and the first node breaking a rule.

    Fills `out` = (node_dispatch, nodes, starts, used); returns (node count, start count,
    has control flow, launch count, first unmet requirement node, its requirement column,
    first start node inside a subgraph), -1 where nothing is wrong.
    """
    node_kernel, node_graph, node_worker, in_degree, inputs, outputs, attributes, successors = (
        columns
    )
    node_dispatch, nodes, starts, used = out
    requires = tables.requires
    count = 0
    start_count = 0
    control_flow = False
    launches = 0
    unmet = -1
    unmet_column = -1
    bad_start = -1
    for node in range(node_kernel.shape[0]):
        dispatch_id = kernel_dispatch[node_kernel[node]]
        node_dispatch[node] = dispatch_id
        owner = node_graph[node]
        if graph_root[owner] != root:
            continue
        nodes[count] = node
        count += 1
        used[dispatch_id] = True
        inside = graph_in_subgraph[owner]
        control_flow = control_flow or inside or tables.control_flow[dispatch_id]
        if tables.worker[dispatch_id] == _LAUNCH or node_worker[node] == _LAUNCH:
            launches += 1
        if in_degree[node] == 0:
            starts[start_count] = node
            start_count += 1
            if inside and bad_start < 0:
                bad_start = node
        if unmet < 0:
            minimum = requires[dispatch_id]
            if inputs[node + 1] - inputs[node] < minimum[0]:
                unmet, unmet_column = node, 0
            elif outputs[node + 1] - outputs[node] < minimum[1]:
                unmet, unmet_column = node, 1
            elif attributes[node + 1] - attributes[node] < minimum[2]:
                unmet, unmet_column = node, 2
            elif successors[node + 1] - successors[node] < minimum[3]:
                unmet, unmet_column = node, 3
    return count, start_count, control_flow, launches, unmet, unmet_column, bad_start


def _owned_blocks(graph, nodes, memory):
    """(blocks a failed run of the root of `nodes` frees, blocks a successful run must have
    freed): the MEMORY_BLOCK values its nodes produce that no other root reads (a model's Init
    uploads weights that Main reads and DeInit frees); graph outputs are left to the caller
    after a successful run."""
    if not memory.any():  # synthetic graphs without blocks: nothing to own
        none = np.zeros(0, dtype=np.int32)
        return none, none
    producer = graph.value_producer
    inside = np.zeros(graph.num_nodes, dtype=bool)
    inside[nodes] = True
    own = (producer >= 0) & inside[np.maximum(producer, 0)]  # a mask, not np.isin's sort
    read_outside = np.repeat(~inside, np.diff(graph.input_offsets))  # per node-input link
    elsewhere = np.zeros(graph.num_values, dtype=bool)
    elsewhere[graph.input_values[read_outside]] = True
    owned = memory & own & ~elsewhere
    outputs = np.zeros(graph.num_values, dtype=bool)
    outputs[graph.graph_outputs] = True
    # int32 ids: two index arrays cost what one int64 array did
    owned_ids = np.flatnonzero(owned).astype(np.int32)
    return owned_ids, np.flatnonzero(owned & ~outputs).astype(np.int32)


def _kernel_selection(registry, binding, kernels):
    """Dispatch ids the compiled dispatch holds: the root's ("used"), None for the whole
    registry ("all"), or the root's plus the named kernels (a collection of names: graphs
    that share one such set share one compiled loop, e.g. a model's Init, Main and DeInit)."""
    if isinstance(kernels, str):
        if kernels not in ("used", "all"):
            raise ValueError(f"kernels must be 'used', 'all' or kernel names, not {kernels!r}")
        return binding.used if kernels == "used" else None
    ids = registry.bind(tuple(kernels))
    return sorted(set(binding.used) | {int(i) for i in ids})


class Executor(abc.ABC):
    """A graph's root (Main by default) prepared for one executor. Create with
    `prepare_executor`; subclasses define `name`, `runs_control_flow`, `loop` and `_prepare`."""

    name = None  # registry name
    runs_control_flow = False  # can it run switch / loop kernels?
    # does the loop map kernels' reserved statuses itself (`steps.kernel_stop`)? If not, every
    # status it returns must be a kernel's, and `_obeyed` maps it after the loop
    loop_maps_reserved = True
    uses_threads = False  # does it take `threads`?
    runs_relations = False  # does it honour exact Free -> Launch relations without edges?
    loop = None  # the plain Python loop function `specialise` compiles
    # does the executor still time its plain runs to choose how it runs (a multithread
    # executor's sharing="auto")? `calibration_runs`: how many such runs it has timed so far
    calibrating = False
    calibration_runs = 0

    def __init__(
        self,
        graph,
        binding,
        record_capacity=None,
        max_steps=None,
        device=None,
        kernels="used",
        values=None,
        threads=None,
        cancel=None,
    ):
        self.graph = graph
        self.threads = threads
        self.root = binding.root
        self.registry = binding.registry
        self.nodes = binding.nodes
        self.starts = binding.starts
        self.control_flow = binding.control_flow
        self.launch_count = binding.launch_count
        self.edgeless = binding.edgeless
        if device is not None:
            check_state(device.state)  # jitted code assumes its layout: check a given device
        self.device = device if device is not None else default_device(graph)
        control_flow_kernels = self.registry.tables().control_flow
        self.runtime = make_runtime(
            graph, binding.node_dispatch, control_flow_kernels, self.device.state, values=values
        )
        self._ends_sequence = self.registry.tables().ends_sequence
        self.leaked_blocks = 0  # blocks the last run left allocated (reclaimed after it)
        self._calls = EntryCache()  # the loop's entry points (see _execute)
        self._leak_check = EntryCache()  # _live_blocks's (its owner: the value slots)
        memory = graph.value_kind == ValueKind.MEMORY_BLOCK
        if values is None:  # fresh slots: no block anywhere yet
            self.runtime.values.slots[np.flatnonzero(memory)] = NO_BLOCK
        self._memory_values, self._leak_values = _owned_blocks(graph, self.nodes, memory)
        used = _kernel_selection(self.registry, binding, kernels)
        self.registry.check_kernels(self.runtime, used)  # named errors, not Numba's
        module = load_dispatch(self.registry, used=used)
        self._dispatch = module.dispatch
        self._loop = specialise(type(self).loop, module)
        if record_capacity is None:
            n = graph.num_nodes
            record_capacity = self.nodes.shape[0] if not self.control_flow else 8 * n + 1024
        self.record_capacity = int(record_capacity)
        if max_steps is None:
            max_steps = DEFAULT_MAX_STEPS if graph.meta.has_loops else self.nodes.shape[0]
        if max_steps < 1 and not (max_steps == 0 and self.nodes.shape[0] == 0):
            raise ValueError("max_steps must be >= 1: every run has a step limit")
        self.max_steps = int(max_steps)
        self._busy = threading.Lock()  # one run at a time: the run state is the executor's
        # the words its loop polls (`rtsoa.executors.cancel`; shared by a model's Main runs)
        self.cancellation = cancel if cancel is not None else CancelFlag()
        self.cancel_words = self.cancellation.words
        self.parts_pool = None  # helper threads its ops share their parts with (use_parts_pool)
        self._arguments = self._prepare()
        self._record = None  # (capacity, 3) int64: node, start ns, end ns; made on first use
        self.dropped_steps = 0

    @abc.abstractmethod
    def _prepare(self):
        """Allocate this executor's run state; returns the loop's arguments after `rt`, the
        last of them `self.cancel_words`."""

    def __repr__(self):
        return (
            f"<Executor {self.name} root={self.root.name} nodes={self.nodes.shape[0]} "
            f"control_flow={self.control_flow}>"
        )

    def use_parts_pool(self, pool):
        """Let the ops this executor launches share their parts with `pool`'s helper threads
        (a `rtsoa.ops.parts.PartsPool`, kept alive with the executor; None: ops run whole)."""
        self.parts_pool = pool
        address = 0 if pool is None else pool.address
        for runtime in getattr(self, "_runtimes", [self.runtime]):
            runtime.worker.table[RESULT_ROW, POOL_COLUMN] = address

    def kernel_name(self, node):
        """Name of the kernel `node` runs."""
        return self.graph.kernel_names[int(self.graph.node_kernel[node])]

    def _checksum(self):
        return int(self.runtime.worker.checksum[0])

    def _obeyed(self, status, node):
        """End-of-sequence is obeyed only from a kernel registered with `ends_sequence`. The
        sequential loop's own stop (STATUS_CANCELLED, node -1) is not a kernel's to map."""
        if not self.loop_maps_reserved and status != STATUS_OK and node >= 0:
            status = int(kernel_stop.py_func(status))
        if status == STATUS_END_OF_SEQUENCE:
            if not self._ends_sequence[self.runtime.graph.node_dispatch[node]]:
                return STATUS_RESERVED_NOT_REGISTERED
        return status

    def _reclaim_leaks(self):
        """Blocks a successful run left allocated leak (their value slots are overwritten by
        the next run): count them (`leaked_blocks`, the device's `num_leaked_blocks`) and free
        them, so they do not pile up run after run."""
        if self._leak_values.shape[0] == 0:
            return
        slots = self.runtime.values.slots
        arguments = (slots, self._leak_values)
        if self._leak_check.entry((slots,), None, _live_blocks, arguments)(*arguments) == 0:
            self.leaked_blocks = 0
            return
        self.leaked_blocks = self.release_blocks(self._leak_values)
        if self.leaked_blocks:
            self.device.state.counters[CNT_LEAKED_BLOCKS] += self.leaked_blocks

    def _finish(self, status, node, executed):
        status = self._obeyed(status, node)
        if status == STATUS_CANCELLED:
            self.release_blocks()  # as after any failed run: the next run starts clean
            error = self.cancellation.error(executed)
            raise error if error is not None else RunCancelled(executed)
        if status == STATUS_OK or status == STATUS_END_OF_SEQUENCE:
            self._reclaim_leaks()
            return RunResult(
                status=int(status),
                nodes_executed=int(executed),
                checksum=self._checksum(),
                end_of_sequence=status == STATUS_END_OF_SEQUENCE,
            )
        self.release_blocks()
        raise KernelError(
            status,
            node,
            self.kernel_name(node),
            self.graph.node_compute[node],
            executed,
            op=op_name_of(self.graph, node),
        )

    def release_blocks(self, values=None):
        """Free the device blocks a failed run left allocated (so the next run starts clean):
        those of `values`, by default every block value this root allocates and no other root
        reads. Returns how many were freed. Blocks are freed on the stream of the node that
        allocated them; stale handles are skipped.
        """
        slots = self.runtime.values.slots
        values = self._memory_values if values is None else values
        live = values[slots[values] != NO_BLOCK]
        freed = 0
        for value in live.tolist():
            producer = int(self.graph.value_producer[value])
            stream = int(self.graph.node_stream[producer]) if producer >= 0 else 0
            if device_free(self.device.state, int(slots[value]), stream) == 0:
                freed += 1
            slots[value] = NO_BLOCK
        return freed

    def calibrate(self, limit=CALIBRATION_LIMIT):
        """Run the graph until the executor has nothing left to choose by timing its plain
        runs (`calibrating`: a multithread executor's plan under sharing="auto"), so that
        runs timed afterwards count no trial (`rtsoa run --repeat`); returns how many runs it
        made (`calibrate_with`)."""
        return calibrate_with(
            self.run, lambda: self.calibrating, lambda: self.calibration_runs, limit
        )

    def run(self, subscriber=None, timeout=None):
        """Run once. Returns RunResult; raises KernelError on a kernel failure.

        With `subscriber` (one or a list of `rtsoa.executors.Subscriber`) the loop records
        every step and the subscribers get the events (see subscribers.py). The executor stays
        usable after a failure. The run stops (its blocks freed) on `cancel()` from another
        thread (RunCancelled), after `timeout` seconds (RunTimeout) and, started from the main
        thread, on Ctrl-C (RunInterrupted, a KeyboardInterrupt); see rtsoa.executors.cancel.
        """
        if not self._busy.acquire(blocking=False):
            raise ExecutorBusyError(
                f"{self!r} is already running in another thread; an executor's run state "
                "serves one run at a time (prepare one executor per thread)"
            )
        try:
            if not self.device.run_lock.acquire(blocking=False):
                raise ExecutorBusyError(
                    f"the device of {self!r} is in use by another executor's run; the "
                    "simulated device serves one run at a time (give each thread its own device)"
                )
            try:
                reset_worker(self.runtime.worker)
                with self.cancellation.scope(timeout):
                    if subscriber is None:
                        return self._finish(*self._execute(None))
                    return self._run_subscribed(subscriber)
            finally:
                self.device.run_lock.release()
        finally:
            self._busy.release()

    def cancel(self):
        """Stop the run in progress, from any thread: it raises RunCancelled, its blocks freed
        as after a failed run. With no run in progress, nothing happens."""
        self.cancellation.cancel()

    def _execute(self, record):
        """Run the compiled loop once: (status, failing or last node, nodes executed).

        Through the loop's entry point (`rtsoa._jit.entry_point`): resolving the types of
        the runtime tuple and the arguments on every call cost more than a small graph's
        run. The entry is made for this runtime and these arguments (and a record or
        none) and dropped if either object is replaced."""
        arguments = (self.runtime, *self._arguments, record)
        owners = (self.runtime, self._arguments)
        return self._calls.entry(owners, record is None, self._loop, arguments)(*arguments)

    def record(self):
        """The step record of subscribed runs (allocated on first use, then reused)."""
        if self._record is None:
            self._record = np.zeros((max(self.record_capacity, 1), 3), dtype=np.int64)
        return self._record

    def _run_subscribed(self, subscriber):
        subscribers = list(subscriber) if isinstance(subscriber, list | tuple) else [subscriber]
        record = self.record()
        start = time.monotonic_ns()
        for each in subscribers:
            each.on_model_start(self, start)
        status, node, executed = self._execute(record)
        status = self._obeyed(status, node)
        end = time.monotonic_ns()
        kept = min(int(executed), record.shape[0])
        self.dropped_steps = int(executed) - kept
        steps = record[:kept]
        result = RunResult(
            status=int(status),
            nodes_executed=int(executed),
            checksum=self._checksum(),
            end_of_sequence=status == STATUS_END_OF_SEQUENCE,
        )
        for each in subscribers:
            each.replay_nodes(self, steps)
            each.on_model_end(self, result, steps, end)
        return self._finish(status, node, executed)


class Binding(NamedTuple):
    """A graph's root bound to a registry: what every executor's preparation starts from."""

    registry: object
    root: GraphKind
    node_dispatch: np.ndarray  # int32 dispatch id per node of the whole graph
    used: list  # distinct dispatch ids of the root's nodes
    nodes: np.ndarray  # int32 ids of the root's nodes (sorted)
    starts: np.ndarray  # int32 root nodes with in-degree 0
    control_flow: bool
    launch_count: int
    # the root's relations without their Launch -> Free edge (`relations_without_edges`):
    # only the multithread executor honours those (no default: a Binding made by hand must
    # say, or the multithread executor would skip relations it has to wait on)
    edgeless: int


def bind(graph, root=GraphKind.MAIN, registry=None):
    """Bind kernel names to `registry` (UnknownKernelError if one is missing) and check the
    root's nodes: each has what its kernel reads, none inside a subgraph runs unconditionally.
    One jitted pass over the nodes (prepare must stay well under the cost of a run)."""
    registry = registry if registry is not None else REGISTRY
    kernel_dispatch = registry.bind(graph.kernel_names)
    tables = registry.tables()
    n = graph.num_nodes
    out = (
        np.empty(n, dtype=np.int32),
        np.empty(n, dtype=np.int32),
        np.empty(n, dtype=np.int32),
        np.zeros(len(registry), dtype=np.bool_),
    )
    graph_root = graph.root_of_graph()
    in_subgraph = graph.graph_kind >= GraphKind.BRANCH
    columns = (
        graph.node_kernel,
        graph.node_graph,
        graph.node_worker,
        graph.in_degree,
        graph.input_offsets,
        graph.output_offsets,
        graph.attr_offsets,
        graph.succ_offsets,
    )
    count, start_count, control_flow, launches, unmet, column, bad_start = _bind_nodes(
        columns, kernel_dispatch, graph_root, in_subgraph, np.int32(root), tables, out
    )
    node_dispatch, nodes, starts, used = out
    if unmet >= 0:
        info = registry.entries()[int(node_dispatch[unmet])]
        requirement = _REQUIREMENT_NAMES[column]
        offsets = getattr(graph, _REQUIREMENT_OFFSETS[column])
        raise GraphFormatError(
            f"node {unmet} runs kernel {info.name!r}, which needs at least "
            f"{info.requires[requirement]} {requirement}; it has "
            f"{int(offsets[unmet + 1] - offsets[unmet])}",
            table="nodes",
            column="kernel",
            row=unmet,
        )
    if bad_start >= 0:
        raise GraphFormatError(
            f"node {bad_start} inside a branch or loop subgraph has no predecessor, so it "
            "would run unconditionally; connect it after its pivot",
            table="nodes",
            column="in_degree",
            row=bad_start,
        )
    return Binding(
        registry=registry,
        root=GraphKind(root),
        node_dispatch=node_dispatch,
        used=np.flatnonzero(used).tolist(),
        nodes=nodes[:count],
        starts=starts[:start_count],
        control_flow=bool(control_flow),
        launch_count=int(launches),
        edgeless=relations_without_edges(graph, nodes[:count]),
    )


def prepare_executor(
    graph,
    executor="auto",
    root=GraphKind.MAIN,
    registry=None,
    record_capacity=None,
    max_steps=None,
    device=None,
    kernels="used",
    values=None,
    threads=None,
    cancel=None,
):
    """Prepare `graph`'s root `root` for `executor` (auto, or a name in `EXECUTORS`).

    Binds kernel names to `registry` (default: the global one; UnknownKernelError if a name is
    missing), checks every node has what its kernel reads, allocates all run state, and loads the
    compiled loop. `record_capacity`: steps a subscribed run can record (default: the node
    count, or 8 n + 1024 with control flow). `max_steps`: the topological / priority loops stop
    with a KernelError (STATUS_STEP_LIMIT) after this many steps; default DEFAULT_MAX_STEPS for
    a graph with loops, else the root's node count (every node runs at most once). `device`: the
    `rtsoa.device.Device` the kernels run against (default: `default_device(graph)`).
    `kernels`: "used" compiles a dispatch holding the kernel modules the graph uses; a
    collection of kernel names adds those; "all" one holding the whole registry, which every
    graph then shares (one compile for a batch of graphs using different kernels). `values`:
    the `ValueState` to run on (default: fresh slots); the executors of one model's Init, Main
    and DeInit share one, so Main reads the weights Init uploaded
    (`rtsoa.kernels.abi.new_values`). `threads`: worker threads of the multithread
    executor (`auto` with threads picks it for a graph without control flow); threads=1 asks
    for a one-thread executor (`auto`'s choice without threads). `cancel`: the
    `rtsoa.executors.cancel.CancelFlag` its loop polls (default: its own; executors that
    share one stop together, e.g. a model's Main and its kept-shapes Main).
    """
    binding = bind(graph, root, registry)
    edgeless = binding.edgeless
    if _one_thread(threads) and executor != "multithread":
        if edgeless:
            raise ValueError(
                "threads=1: the graph has Free -> Launch relations without their edges, which "
                "only the multithread executor honours (threads >= 2)"
            )
        threads = None  # the one-thread executors
    if executor == "auto" and threads is None and edgeless:
        threads = EXECUTORS["multithread"].default_threads()  # only it honours the relations
    name = resolve_executor(executor, binding.control_flow, binding.launch_count, threads)
    if edgeless and not EXECUTORS[name].runs_relations:
        raise ValueError(
            f"the graph has exact Free -> Launch relations without their Launch -> Free edges "
            f"(the relation pass removed them); the {name} executor does not honour relations, "
            "use the multithread executor"
        )
    return EXECUTORS[name](
        graph, binding, record_capacity, max_steps, device, kernels, values, threads, cancel
    )
