"""A slow, obviously correct pure-Python scheduler and kernel model, to check the executors.

Plain lists and a deque; no numba, no numpy in the loop. It follows the reference runtime's
topological executor literally: pop a node, run it, decrement its successors (only the selected
one after a switch), push at zero and re-arm the in-degree from the template.
"""

from collections import deque
from typing import NamedTuple

import numpy as np

from rtsoa.graph.schema import GraphKind
from rtsoa.kernels.checksum import FOLD_SALTS
from rtsoa.kernels.status import STATUS_END_OF_SEQUENCE

MASK64 = (1 << 64) - 1
_MULTIPLIER = 0xBF58476D1CE4E5B9


class ReferenceResult(NamedTuple):
    status: int  # 0, STATUS_END_OF_SEQUENCE or the failing kernel's status
    failed_node: int  # -1 unless a kernel failed
    order: list  # executed nodes, in order
    counts: dict  # node -> times executed
    checksum: int


def mix(node, salt):
    x = ((node + salt) * _MULTIPLIER) & MASK64
    return x ^ (x >> 31)


def _kernel_model(name, node, attrs, inputs, outputs, slots, successor_count):
    """Run one kernel on Python data; returns (status, selected successor index or None)."""
    if name == "Fail":
        return attrs[0], None
    if name == "FailWhen":
        return slots[inputs[0]], None
    if name == "EndOfSequence":
        return STATUS_END_OF_SEQUENCE, None
    if name in ("ConstInt", "InferShape"):
        slots[outputs[0]] = attrs[0]
    elif name == "AllocMemory":
        slots[outputs[0]] = node + 1
    elif name == "FreeMemory":
        slots[inputs[0]] = 0
    elif name == "Enter":
        slots[outputs[0]] = 0
    elif name == "LoopCond":
        slots[outputs[0]] = 1 if slots[inputs[0]] < attrs[0] else 0
    elif name == "LoopIncrement":
        slots[inputs[0]] += 1
    elif name == "SwitchNotify":
        return 0, min(max(slots[inputs[0]], 0), successor_count - 1)
    elif name == "CondSwitchNotify":
        return 0, (0 if slots[inputs[0]] != 0 else 1)
    return 0, None


def reference_run(graph, root=GraphKind.MAIN, max_steps=10_000_000):
    """Execute `graph`'s root like the topological executor, in plain Python."""
    nodes = [int(u) for u in graph.nodes_of(root)]
    template = [int(d) for d in graph.in_degree]
    degree = list(template)
    slots = [0] * max(graph.num_values, 1)
    names = list(graph.kernel_names)
    queue = deque(u for u in nodes if template[u] == 0)
    order = []
    status = 0
    failed = -1
    while queue and len(order) < max_steps:
        node = queue.popleft()
        order.append(node)
        successors = [int(t) for t in graph.successors(node)]
        status, selected = _kernel_model(
            names[int(graph.node_kernel[node])],
            node,
            [int(a) for a in graph.attributes(node)],
            [int(v) for v in graph.inputs(node)],
            [int(v) for v in graph.outputs(node)],
            slots,
            len(successors),
        )
        if status != 0:
            if status != STATUS_END_OF_SEQUENCE:
                failed = node
            break
        if selected is not None:
            successors = [successors[selected]]
        for target in successors:
            degree[target] -= 1
            if degree[target] == 0:
                queue.append(target)
                degree[target] = template[target]
    counts = {}
    checksum = 0
    for node in order:
        counts[node] = counts.get(node, 0) + 1
        name = names[int(graph.node_kernel[node])]
        if name in FOLD_SALTS:
            checksum = (checksum + mix(node, FOLD_SALTS[name])) & MASK64
    return ReferenceResult(status, failed, order, counts, checksum)


def counts_array(graph, order):
    """Executions per node id, as an int64 array of length num_nodes."""
    return np.bincount(np.asarray(order, dtype=np.int64), minlength=graph.num_nodes)


def check_dag_order(graph, order, root=GraphKind.MAIN):
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
