"""Jitted CSR construction and graph passes shared by the builder, validation and inspect.

All functions here assume their inputs were range-checked by the Python caller.
"""

import numpy as np

from rtsoa._jit import jit


@jit
def _counting_sort_csr(sources, targets, num_nodes):
    """CSR by source from an unsorted edge list; stable, so row order is insertion order."""
    offsets = np.zeros(num_nodes + 1, dtype=np.int64)
    for i in range(sources.shape[0]):
        offsets[sources[i] + 1] += 1
    for u in range(num_nodes):
        offsets[u + 1] += offsets[u]
    cursor = offsets[:-1].copy()
    out = np.empty_like(targets)
    for i in range(sources.shape[0]):
        u = sources[i]
        out[cursor[u]] = targets[i]
        cursor[u] += 1
    return offsets, out


@jit
def _dedupe_rows(offsets, targets, num_nodes):
    """Drop repeated targets within each row, keeping first occurrences (in place, compacted)."""
    stamp = np.full(num_nodes, -1, dtype=np.int64)
    new_offsets = np.zeros(num_nodes + 1, dtype=np.int64)
    write = 0
    for u in range(num_nodes):
        for i in range(offsets[u], offsets[u + 1]):
            t = targets[i]
            if stamp[t] != u:
                stamp[t] = u
                targets[write] = t
                write += 1
        new_offsets[u + 1] = write
    return new_offsets, targets[:write].copy()


def build_csr(sources, targets, num_nodes, dedupe=True, dtype=np.int32):
    """(offsets int64[n+1], targets) from parallel source / target arrays (sources in range)."""
    sources = np.ascontiguousarray(sources, dtype=np.int32)
    targets = np.ascontiguousarray(targets, dtype=dtype)
    offsets, flat = _counting_sort_csr(sources, targets, num_nodes)
    if dedupe:
        offsets, flat = _dedupe_rows(offsets, flat, num_nodes)
    return offsets, flat


@jit
def in_degrees(offsets, targets, num_nodes):
    """Count of incoming edges per node."""
    degree = np.zeros(num_nodes, dtype=np.int32)
    for i in range(targets.shape[0]):
        degree[targets[i]] += 1
    return degree


@jit
def _kahn(offsets, targets, num_nodes):
    """Kahn's peeling from the sources. Returns (longest-path level per node, -1 where no
    predecessor was visited; remaining in-degree per node, positive exactly on and after
    cycles; visited count)."""
    degree = np.zeros(num_nodes, dtype=np.int32)
    for i in range(targets.shape[0]):
        degree[targets[i]] += 1
    levels = np.full(num_nodes, -1, dtype=np.int64)
    queue = np.empty(num_nodes, dtype=np.int32)
    head = 0
    tail = 0
    for u in range(num_nodes):
        if degree[u] == 0:
            queue[tail] = u
            tail += 1
            levels[u] = 0
    while head < tail:
        u = queue[head]
        head += 1
        next_level = levels[u] + 1
        for i in range(offsets[u], offsets[u + 1]):
            v = targets[i]
            levels[v] = max(levels[v], next_level)
            degree[v] -= 1
            if degree[v] == 0:
                queue[tail] = v
                tail += 1
    return levels, degree, tail


@jit
def kahn_levels(offsets, targets, num_nodes):
    """Longest-path level of every node (0 for sources) of an acyclic graph.

    Returns (levels, visited count). Visited < num_nodes means the graph has a cycle; the
    levels of nodes on or after it are then partial (-1 where no predecessor was visited).
    """
    levels, _, visited = _kahn(offsets, targets, num_nodes)
    return levels, visited


@jit
def first_node_on_cycle(offsets, targets, num_nodes):
    """A node that lies on a cycle, or -1 when the graph is acyclic."""
    _, degree, visited = _kahn(offsets, targets, num_nodes)
    if visited == num_nodes:
        return -1
    # Every remaining node has an unpeeled predecessor, so walking predecessors inside the
    # remainder never stops and must revisit a node: that node lies on a cycle.
    pred_offsets = np.zeros(num_nodes + 1, dtype=np.int64)
    for u in range(num_nodes):
        for i in range(offsets[u], offsets[u + 1]):
            pred_offsets[targets[i] + 1] += 1
    for u in range(num_nodes):
        pred_offsets[u + 1] += pred_offsets[u]
    cursor = pred_offsets[:-1].copy()
    preds = np.empty(targets.shape[0], dtype=np.int32)
    for u in range(num_nodes):
        for i in range(offsets[u], offsets[u + 1]):
            v = targets[i]
            preds[cursor[v]] = u
            cursor[v] += 1
    u = -1
    for w in range(num_nodes):
        if degree[w] > 0:
            u = w
            break
    seen = np.zeros(num_nodes, dtype=np.bool_)
    while not seen[u]:
        seen[u] = True
        for i in range(pred_offsets[u], pred_offsets[u + 1]):
            if degree[preds[i]] > 0:
                u = preds[i]
                break
    return u
