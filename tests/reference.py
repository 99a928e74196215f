"""A slow, obviously correct model of the executors that works from the user's description of a
graph, not from what the builder made of it.

`RecordingBuilder` is a GraphBuilder that also writes down every call a user (or a generator, or
the control-flow helpers) makes: nodes with their kernel name, owning graph, priority,
attributes and inputs, wait-anyone flags, values and their producers, edges in the order they
were added. `simulate(description, policy)` then runs that description in plain Python: its own
successor lists (insertion order, a repeated edge kept at its first occurrence), its own
in-degree templates (a wait-anyone node waits for one predecessor), its own root membership,
and kernel models with their own constants: the checksum salts and mixer below are written out
from the kernels' documented formula, not imported, and outcomes are words ("ok", "end",
"fail"), not the package's status codes. So a builder bug (successor rows reversed, a wrong
in-degree or clamp, an edge lost) makes the executors disagree with this model instead of
hiding in both.

Policies, as the executors document them:
  * "topological": FIFO queue, starts in id order; a node whose in-degree reaches 0 is queued
    and its in-degree re-armed from the template (loops run again);
  * "priority": the same with the ready node of smallest (priority, id) first;
  * "sequential": Kahn order computed before the run, ready set ordered by (priority, the time
    a node became ready); no control flow.
A switch kernel continues on one successor only: SwitchNotify on successor clamp(value, 0,
count - 1), CondSwitchNotify on successor 0 while its condition is non-zero, else 1.
"""

import heapq
from collections import deque
from typing import NamedTuple

import numpy as np

from rtsoa.graph import generators
from rtsoa.graph.builder import GraphBuilder, float_bits

MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # salt k is (k + 1) * golden (mod 2**64)
_MULTIPLIER = 0xBF58476D1CE4E5B9  # the fold mixer: x = (node + salt) * m; x ^ (x >> 31)


def _salt(index):
    return ((index + 1) * _GOLDEN) & MASK64


# Kernels that fold their node into the checksum, and their salt numbers (see kernels/*.py).
SALTS = {f"Checksum{k}": _salt(k) for k in range(16)}
SALTS.update(
    {
        "Busy": _salt(100),
        "InferShape": _salt(101),
        "AllocMemory": _salt(102),
        "LaunchKernel": _salt(103),
        "FreeMemory": _salt(104),
        "OpInferShape": _salt(105),
        "OpLaunch": _salt(106),
        "ConstTensor": _salt(107),
        "UploadConstant": _salt(108),
    }
)
ROOTS = (0, 1, 2)  # Init, Main, DeInit: the graph ids every graph starts with
MAIN = 1


def mix(node, salt):
    """One node's fold (uint64 arithmetic)."""
    x = ((node + salt) * _MULTIPLIER) & MASK64
    return x ^ (x >> 31)


class Node(NamedTuple):
    kernel: str
    graph: int
    priority: int
    attributes: list
    inputs: list
    wait_anyone: bool


class Description:
    """What the user asked for: nodes, values (producers), edges in the order added, the
    parent of every owning graph."""

    def __init__(self):
        self.nodes = []
        self.value_producers = []
        self.edges = []
        self.graph_parents = [-1, -1, -1]

    def outputs(self, node):
        """Values `node` produces, in the order they were created."""
        return [v for v, producer in enumerate(self.value_producers) if producer == node]

    def root_of(self, node):
        graph = self.nodes[node].graph
        while self.graph_parents[graph] >= 0:
            graph = self.graph_parents[graph]
        return graph

    def successors(self):
        """Per node, its successors in the order the edges were added, repeats dropped."""
        successors = [[] for _ in self.nodes]
        for source, target in self.edges:
            if target not in successors[source]:
                successors[source].append(target)
        return successors

    def in_degree_templates(self, successors):
        """Distinct predecessors per node; a wait-anyone node waits for one of them."""
        degree = [0] * len(self.nodes)
        for targets in successors:
            for target in targets:
                degree[target] += 1
        return [
            min(count, 1) if node.wait_anyone else count
            for node, count in zip(self.nodes, degree, strict=True)
        ]


def _attribute_bits(attribute):
    """The int64 slot of an attribute (a float is stored as its bits)."""
    if isinstance(attribute, float | np.floating):
        return float_bits(attribute)
    return int(attribute)


class RecordingBuilder(GraphBuilder):
    """A GraphBuilder that writes every call into `self.description` too."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.description = Description()

    def add_subgraph(self, kind, parent=MAIN, name=""):
        graph = super().add_subgraph(kind, parent, name)
        self.description.graph_parents.append(int(parent))
        return graph

    def add_node(
        self,
        kernel,
        graph=MAIN,
        priority=0,
        stream=0,
        worker=0,
        compute_node=-1,
        attributes=(),
        inputs=(),
        wait_anyone=False,
    ):
        node = super().add_node(
            kernel, graph, priority, stream, worker, compute_node, attributes, inputs, wait_anyone
        )
        attrs = [
            float_bits(a) if isinstance(a, float | np.floating) else int(a) for a in attributes
        ]
        self.description.nodes.append(
            Node(
                str(kernel), int(graph), int(priority), attrs, [int(v) for v in inputs], wait_anyone
            )
        )
        return node

    def add_nodes(self, kernels, graph=MAIN, priority=None, stream=0, worker=0, compute_node=-1):
        first = super().add_nodes(kernels, graph, priority, stream, worker, compute_node)
        kernels = np.asarray(kernels)
        count = kernels.shape[0]
        names = [str(k) if kernels.dtype.kind in "USO" else self._kernel_names[k] for k in kernels]
        if priority is None:  # the documented default: a node's priority is its id
            priority = np.arange(first, first + count)
        priorities = np.broadcast_to(np.asarray(priority), (count,))
        graphs = np.broadcast_to(np.asarray(graph), (count,))
        for name, owner, level in zip(names, graphs, priorities, strict=True):
            self.description.nodes.append(Node(name, int(owner), int(level), [], [], False))
        return first

    def add_value(self, kind=0, dtype=1, placement=0, producer=-1):
        value = super().add_value(kind, dtype, placement, producer)
        self.description.value_producers.append(int(producer))
        return value

    def add_values(self, producers, kind, dtype=1, placement=0):
        first = super().add_values(producers, kind, dtype, placement)
        self.description.value_producers.extend(int(p) for p in np.asarray(producers))
        return first

    def add_edge(self, source, target):
        super().add_edge(source, target)
        self.description.edges.append((int(source), int(target)))

    def add_edges(self, sources, targets):
        super().add_edges(sources, targets)
        self.description.edges.extend(
            (int(s), int(t)) for s, t in zip(np.asarray(sources), np.asarray(targets), strict=True)
        )

    def add_input(self, node, value):
        super().add_input(node, value)
        self.description.nodes[int(node)].inputs.append(int(value))

    def add_inputs(self, nodes, values):
        super().add_inputs(nodes, values)
        for node, value in zip(np.asarray(nodes), np.asarray(values), strict=True):
            self.description.nodes[int(node)].inputs.append(int(value))

    def add_attributes(self, nodes, values):
        super().add_attributes(nodes, values)
        for node, value in zip(np.asarray(nodes), np.asarray(values), strict=True):
            self.description.nodes[int(node)].attributes.append(int(value))


def recorded_generate(kind, nodes, **options):
    """(graph, description) of `rtsoa.graph.generators.generate` with the calls recorded."""
    made = []

    class Recording(RecordingBuilder):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    original = generators.GraphBuilder
    generators.GraphBuilder = Recording
    try:
        graph = generators.generate(kind, nodes, **options)
    finally:
        generators.GraphBuilder = original
    (builder,) = made
    return graph, builder.description


class Outcome(NamedTuple):
    kind: str  # "ok", "end" (end of sequence), "fail", "bad_notify" or "step_limit"
    status: int  # the failing kernel's status ("fail"), else 0
    node: int  # the node that ended the run, -1 for "ok"
    order: list  # executed nodes, in order
    checksum: int

    def counts(self, num_nodes):
        """Executions per node id."""
        return np.bincount(np.asarray(self.order, dtype=np.int64), minlength=num_nodes)


def _kernel(name, node, attrs, inputs, outputs, slots):
    """Run one kernel on Python data: ("ok" | "end" | "fail", status) or ("notify", k)."""
    if name == "Fail":
        return ("fail", attrs[0]) if attrs[0] != 0 else ("ok", 0)
    if name == "FailWhen":
        return ("fail", slots[inputs[0]]) if slots[inputs[0]] != 0 else ("ok", 0)
    if name == "EndOfSequence":
        return "end", 0
    if name in ("ConstInt", "InferShape"):
        slots[outputs[0]] = attrs[0]
    elif name == "AllocMemory":
        slots[outputs[0]] = 1  # some live block
    elif name == "FreeMemory":
        slots[inputs[0]] = 0
    elif name == "Enter":
        slots[outputs[0]] = 0
    elif name == "LoopCond":
        slots[outputs[0]] = 1 if slots[inputs[0]] < attrs[0] else 0
    elif name == "LoopIncrement":
        slots[inputs[0]] += 1
    elif name == "SwitchNotify":
        return "notify", max(slots[inputs[0]], 0)  # clamped to the successors below
    elif name == "CondSwitchNotify":
        return "notify", 0 if slots[inputs[0]] != 0 else 1
    elif name not in _NO_EFFECT and name not in SALTS:
        raise ValueError(f"the reference has no model of kernel {name!r}")
    return "ok", 0


_NO_EFFECT = {
    "Noop",
    "BranchPivot",
    "BranchDone",
    "WaitAnyone",
    "Exit",
    "RecordEvent",
    "StreamWaitEvent",
}


def sequential_order(description, successors, template, nodes):
    """Kahn order of `nodes` with the ready set ordered by (priority, ready time)."""
    degree = list(template)
    ready = []
    ticket = 0
    for node in nodes:
        if template[node] == 0:
            heapq.heappush(ready, (description.nodes[node].priority, ticket, node))
            ticket += 1
    order = []
    while ready:
        _, _, node = heapq.heappop(ready)
        order.append(node)
        for target in successors[node]:
            degree[target] -= 1
            if degree[target] == 0:
                heapq.heappush(ready, (description.nodes[target].priority, ticket, target))
                ticket += 1
    return order


def simulate(description, policy="topological", root=MAIN, max_steps=None, slots=None):
    """Run `description`'s root graph `root` under `policy`; returns an Outcome.

    `slots`: initial value of some values ({value id: int}), e.g. a FailWhen's status input.
    """
    successors = description.successors()
    template = description.in_degree_templates(successors)
    nodes = [u for u in range(len(description.nodes)) if description.root_of(u) == root]
    values = [0] * max(len(description.value_producers), 1)
    for value, initial in (slots or {}).items():
        values[value] = initial
    outputs = {u: description.outputs(u) for u in nodes}
    degree = list(template)
    starts = [u for u in nodes if template[u] == 0]
    if policy == "sequential":
        ready = deque(sequential_order(description, successors, template, nodes))
    elif policy == "topological":
        ready = deque(starts)
    elif policy == "priority":
        ready = [(description.nodes[u].priority, u) for u in starts]
        heapq.heapify(ready)
    else:
        raise ValueError(policy)
    order = []
    checksum = 0
    while ready:
        if max_steps is not None and len(order) == max_steps:
            return Outcome("step_limit", 0, -1, order, checksum)
        node = heapq.heappop(ready)[1] if policy == "priority" else ready.popleft()
        order.append(node)
        spec = description.nodes[node]
        if spec.kernel in SALTS:
            checksum = (checksum + mix(node, SALTS[spec.kernel])) & MASK64
        effect, value = _kernel(
            spec.kernel, node, spec.attributes, spec.inputs, outputs[node], values
        )
        if effect in ("fail", "end"):
            return Outcome(effect, value, node, order, checksum)
        targets = successors[node]
        if effect == "notify":
            if spec.kernel == "SwitchNotify":
                value = min(value, len(targets) - 1)
            if not 0 <= value < len(targets):
                return Outcome("bad_notify", 0, node, order, checksum)
            targets = [targets[value]]
        if policy == "sequential":
            continue  # the order is fixed; no control flow here
        for target in targets:
            degree[target] -= 1
            if degree[target] == 0:
                degree[target] = template[target]
                if policy == "priority":
                    heapq.heappush(ready, (description.nodes[target].priority, target))
                else:
                    ready.append(target)
    return Outcome("ok", 0, -1, order, checksum)


# -- structural checks on a finalized graph (not a model: what any valid order must satisfy) ---


def check_dag_order(graph, order, root=MAIN):
    """Every root node exactly once, and every edge u -> v has u before v. Raises on failure."""
    order = np.asarray(order, dtype=np.int64)
    nodes = graph.nodes_of(root)
    assert order.shape[0] == nodes.shape[0], (order.shape[0], nodes.shape[0])
    assert np.array_equal(np.sort(order), nodes), "not every node exactly once"
    check_edges_ordered(graph, order)


def check_edges_ordered(graph, order):
    """For every edge u -> v between nodes that both ran (once), u ran before v."""
    order = np.asarray(order, dtype=np.int64)
    position = np.full(graph.num_nodes, -1, dtype=np.int64)
    position[order] = np.arange(order.shape[0])
    sources = np.repeat(np.arange(graph.num_nodes), np.diff(graph.succ_offsets))
    targets = graph.succ_targets.astype(np.int64)
    both = (position[sources] >= 0) & (position[targets] >= 0)
    late = both & (position[sources] >= position[targets])
    assert not late.any(), f"edge {sources[late][0]} -> {targets[late][0]} ran out of order"
