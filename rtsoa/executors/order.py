"""The sequential executor's order: Kahn with a ready set ordered by (priority, then FIFO)."""

import numpy as np

from rtsoa._jit import jit
from rtsoa.executors.heap import TIE_MASK, heap_pop, heap_push


@jit
def _kahn_priority_order(succ_offsets, succ_targets, in_degree, priority, starts, count):
    """Up to `count` nodes in (priority, then ready time) order; shorter on a cycle."""
    degree = in_degree.copy()
    heap = np.empty(count + 1, dtype=np.int64)
    ready_node = np.empty(count, dtype=np.int32)  # FIFO ticket -> node
    order = np.empty(count, dtype=np.int32)
    tickets = 0
    size = 0
    for i in range(starts.shape[0]):
        node = starts[i]
        ready_node[tickets] = node
        size = heap_push(heap, size, (np.int64(priority[node]) << 32) | tickets)
        tickets += 1
    done = 0
    while size > 0:
        key, size = heap_pop(heap, size)
        node = ready_node[key & TIE_MASK]
        order[done] = node
        done += 1
        for e in range(succ_offsets[node], succ_offsets[node + 1]):
            target = succ_targets[e]
            degree[target] -= 1
            if degree[target] == 0:
                ready_node[tickets] = target
                size = heap_push(heap, size, (np.int64(priority[target]) << 32) | tickets)
                tickets += 1
    return order[:done].copy()


def priority_order(graph, nodes, starts):
    """Kahn order of `nodes` (one root graph) from `starts`; None if they contain a cycle."""
    order = _kahn_priority_order(
        graph.succ_offsets,
        graph.succ_targets,
        graph.in_degree,
        graph.node_priority,
        np.ascontiguousarray(starts, dtype=np.int32),
        int(nodes.shape[0]),
    )
    if order.shape[0] != nodes.shape[0]:
        return None
    return order
