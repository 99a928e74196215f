"""prepare_executor: bind a graph to the registry, size all state once, and run it many times.

The loops themselves live in the generated dispatch module (see `rtsoa.kernels.dispatch` and
`loops.py`); this file validates, allocates and calls them. A run copies the in-degree template
inside the loop and resets two small arrays; it allocates nothing.
"""

import time
from typing import NamedTuple

import numpy as np

from rtsoa.errors import GraphFormatError
from rtsoa.executors.errors import KernelError
from rtsoa.executors.heap import pack_keys
from rtsoa.executors.order import priority_order
from rtsoa.graph.schema import GraphKind, ValueKind, WorkerClass
from rtsoa.kernels import REGISTRY
from rtsoa.kernels.dispatch import load_dispatch
from rtsoa.kernels.lowered import NO_BLOCK
from rtsoa.kernels.runtime import STATE_STEP_LIMIT, make_runtime, read_only, reset_runtime
from rtsoa.kernels.status import STATUS_END_OF_SEQUENCE, STATUS_OK

EXECUTORS = ("sequential", "topological", "priority")
# The reference's automatic choice: control flow with this many launch nodes -> priority.
AUTO_PRIORITY_MIN_LAUNCHES = 5
# Default step limit of a run with control flow (an acyclic graph runs each node once and needs
# none): a loop that never exits then fails with STATUS_STEP_LIMIT instead of hanging.
DEFAULT_MAX_STEPS = 1_000_000_000
_REQUIREMENT_CSRS = {
    "inputs": "input_offsets",
    "outputs": "output_offsets",
    "attributes": "attr_offsets",
    "successors": "succ_offsets",
}


class RunResult(NamedTuple):
    """Outcome of one successful run (failures raise KernelError instead)."""

    status: int  # 0, or STATUS_END_OF_SEQUENCE when a kernel ended the run early
    nodes_executed: int
    checksum: int  # the order-independent fold of the executed nodes (uint64 as int)
    end_of_sequence: bool


def default_device(graph):
    """A simulated device sized for `graph` (see `rtsoa.device.device_for_graph`)."""
    from rtsoa.device import device_for_graph

    return device_for_graph(graph)


def resolve_executor(executor, control_flow, launch_count):
    """The executor name `auto` stands for, or `executor` itself after checking it."""
    if executor == "auto":
        if not control_flow:
            return "sequential"
        return "priority" if launch_count >= AUTO_PRIORITY_MIN_LAUNCHES else "topological"
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; choose auto or one of {EXECUTORS}")
    if executor == "sequential" and control_flow:
        raise ValueError("the sequential executor cannot run control flow; use topological")
    return executor


def _check_requirements(graph, nodes, dispatch_ids, entries):
    """Every node has the inputs / outputs / attributes / successors its kernel reads."""
    node_dispatch = dispatch_ids[nodes]
    for requirement, offsets_field in _REQUIREMENT_CSRS.items():
        minimum = np.array([info.requires[requirement] for info in entries], dtype=np.int64)
        if not minimum.any():
            continue
        offsets = getattr(graph, offsets_field)
        counts = offsets[nodes + 1] - offsets[nodes]
        bad = counts < minimum[node_dispatch]
        if bad.any():
            row = int(np.argmax(bad))
            node = int(nodes[row])
            info = entries[int(node_dispatch[row])]
            raise GraphFormatError(
                f"node {node} runs kernel {info.name!r}, which needs at least "
                f"{info.requires[requirement]} {requirement}; it has {int(counts[row])}",
                table="nodes",
                column="kernel",
                row=node,
            )


class Executor:
    """A graph's root (Main by default) prepared for one executor. Create with prepare_executor."""

    def __init__(
        self,
        graph,
        executor="auto",
        root=GraphKind.MAIN,
        registry=None,
        record_capacity=None,
        max_steps=None,
        device=None,
    ):
        registry = registry if registry is not None else REGISTRY
        entries = registry.entries()
        table = registry.bind(graph.kernel_names)
        if graph.num_nodes:
            dispatch_ids = table[graph.node_kernel].astype(np.int32)
        else:
            dispatch_ids = np.zeros(0, dtype=np.int32)
        nodes = graph.nodes_of(root)
        _check_requirements(graph, nodes, dispatch_ids, entries)

        control_kernels = np.array([info.control_flow for info in entries], dtype=bool)
        node_dispatch = dispatch_ids[nodes]
        in_subgraph = graph.graph_kind[graph.node_graph[nodes]] >= GraphKind.BRANCH
        self.control_flow = bool(control_kernels[node_dispatch].any() or in_subgraph.any())
        launch_kernels = np.array([info.worker == WorkerClass.LAUNCH for info in entries], bool)
        is_launch = launch_kernels[node_dispatch] | (graph.node_worker[nodes] == WorkerClass.LAUNCH)
        self.launch_count = int(is_launch.sum())
        self.name = resolve_executor(executor, self.control_flow, self.launch_count)

        self.graph = graph
        self.root = GraphKind(root)
        self.registry = registry
        self.nodes = nodes
        starts = nodes[graph.in_degree[nodes] == 0].astype(np.int32)
        inside = graph.graph_kind[graph.node_graph[starts]] >= GraphKind.BRANCH
        if inside.any():
            node = int(starts[np.argmax(inside)])
            raise GraphFormatError(
                f"node {node} inside a branch or loop subgraph has no predecessor, so it would "
                "run unconditionally; connect it after its pivot",
                table="nodes",
                column="in_degree",
                row=node,
            )
        self.device = device if device is not None else default_device(graph)
        self.runtime = make_runtime(graph, dispatch_ids, self.device.state)
        self._memory_values = np.flatnonzero(graph.value_kind == ValueKind.MEMORY_BLOCK)
        self.runtime.value_slots[self._memory_values] = NO_BLOCK
        module = load_dispatch(registry, used=np.unique(node_dispatch).tolist())
        self._loop = getattr(module, f"run_{self.name}")
        self._loop_profiled = getattr(module, f"run_{self.name}_profiled")
        n = graph.num_nodes
        if self.name == "sequential":
            order = priority_order(graph, nodes, starts)
            if order is None:
                raise GraphFormatError("the Main graph has a cycle", "edges", "target")
            self._arguments = (order,)
        else:
            template = read_only(np.ascontiguousarray(graph.in_degree, dtype=np.int32))
            in_degree = np.empty(n, dtype=np.int32)
            if self.name == "topological":
                queue = np.empty(n + 1, dtype=np.int32)
                self._arguments = (read_only(starts), template, in_degree, queue)
            else:
                keys = pack_keys(graph.node_priority, np.arange(n))
                heap = np.empty(n + 2, dtype=np.int64)
                self._arguments = (read_only(starts), template, in_degree, keys, heap)
        if record_capacity is None:
            record_capacity = nodes.shape[0] if not self.control_flow else 8 * n + 1024
        self.record_capacity = int(record_capacity)
        if max_steps is None:
            max_steps = DEFAULT_MAX_STEPS if self.control_flow else -1
        if max_steps != -1 and max_steps < 1:
            raise ValueError("max_steps must be >= 1 (or -1 for no limit)")
        self.max_steps = int(max_steps)
        self._empty_record = np.zeros((0, 3), dtype=np.int64)
        self._record = None  # (capacity, 3) int64: node, start ns, end ns; made on first use
        self.dropped_steps = 0

    def __repr__(self):
        return (
            f"<Executor {self.name} root={self.root.name} nodes={self.nodes.shape[0]} "
            f"control_flow={self.control_flow}>"
        )

    def kernel_name(self, node):
        return self.graph.kernel_names[int(self.graph.node_kernel[node])]

    def _finish(self, status, node, executed):
        if status == STATUS_OK or status == STATUS_END_OF_SEQUENCE:
            return RunResult(
                status=int(status),
                nodes_executed=int(executed),
                checksum=int(self.runtime.checksum[0]),
                end_of_sequence=status == STATUS_END_OF_SEQUENCE,
            )
        self.release_blocks()
        raise KernelError(
            status, node, self.kernel_name(node), self.graph.node_compute[node], executed
        )

    def release_blocks(self):
        """Free the device blocks a failed run left allocated (so the next run starts clean).

        Returns how many were freed. Blocks are freed on the stream of the node that allocated
        them; stale handles are skipped.
        """
        from rtsoa.device.allocator import device_free

        slots = self.runtime.value_slots
        live = self._memory_values[slots[self._memory_values] != NO_BLOCK]
        freed = 0
        for value in live.tolist():
            producer = int(self.graph.value_producer[value])
            stream = int(self.graph.node_stream[producer]) if producer >= 0 else 0
            if device_free(self.device.state, int(slots[value]), stream) == 0:
                freed += 1
            slots[value] = NO_BLOCK
        return freed

    def run(self, subscriber=None):
        """Run once. Returns RunResult; raises KernelError on a kernel failure.

        With `subscriber` (one or a list of `rtsoa.executors.Subscriber`) the profiled loop
        runs instead, recording every step, and the subscribers get the events (see
        subscribers.py). The executor stays usable after a failure.
        """
        reset_runtime(self.runtime)
        self.runtime.state[STATE_STEP_LIMIT] = self.max_steps
        if subscriber is None:
            status, node, executed = self._loop(self.runtime, *self._arguments, self._empty_record)
            return self._finish(status, node, executed)
        return self._run_subscribed(subscriber)

    def record(self):
        """The step record of the profiled loop (allocated on first use, then reused)."""
        if self._record is None:
            self._record = np.zeros((max(self.record_capacity, 1), 3), dtype=np.int64)
        return self._record

    def _run_subscribed(self, subscriber):
        subscribers = list(subscriber) if isinstance(subscriber, list | tuple) else [subscriber]
        record = self.record()
        start = time.monotonic_ns()
        for each in subscribers:
            each.on_model_start(self, start)
        status, node, executed = self._loop_profiled(self.runtime, *self._arguments, record)
        end = time.monotonic_ns()
        kept = min(int(executed), record.shape[0])
        self.dropped_steps = int(executed) - kept
        steps = record[:kept]
        result = RunResult(
            status=int(status),
            nodes_executed=int(executed),
            checksum=int(self.runtime.checksum[0]),
            end_of_sequence=status == STATUS_END_OF_SEQUENCE,
        )
        for each in subscribers:
            each.replay_nodes(self, steps)
            each.on_model_end(self, result, steps, end)
        return self._finish(status, node, executed)


def prepare_executor(
    graph,
    executor="auto",
    root=GraphKind.MAIN,
    registry=None,
    record_capacity=None,
    max_steps=None,
    device=None,
):
    """Prepare `graph`'s root `root` for `executor` (auto / sequential / topological / priority).

    Binds kernel names to `registry` (default: the global one; UnknownKernelError if a name is
    missing), checks every node has what its kernel reads, allocates all run state, and loads the
    compiled loop. `record_capacity`: steps the profiled loop can record (default: the node count,
    or 8 n + 1024 with control flow). `max_steps`: the topological / priority loops stop with a
    KernelError (STATUS_STEP_LIMIT) after this many steps; default DEFAULT_MAX_STEPS with
    control flow, none (-1) without, where every node runs at most once. `device`: the
    `rtsoa.device.Device` the kernels run against (default: `default_device(graph)`).
    """
    return Executor(graph, executor, root, registry, record_capacity, max_steps, device)
