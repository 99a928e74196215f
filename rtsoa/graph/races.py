"""Racy graphs: uses of a value that the successor edges do not order.

Executors may run two nodes in either order unless a path of successor edges joins them, so a
graph is refused at load (`validate_graph`) when
  * a node uses a value (an input) and no path leads from the value's producer to it: it may
    read the value before it is written;
  * a node uses a value that a `FreeMemory` node frees, and no path joins the two in either
    direction: it may touch the block before or after the free (a use ordered after the free
    is not a race: it fails the same way in every order).
Only producers and users in the same root graph (Init / Main / DeInit) count: values cross
roots only from one whole run to the next. Graphs with loops (`has_loops`) are not checked:
their successor edges are not a DAG and a value is written again on every iteration, so the
order of a use and a write there is not a question of reachability.

Cost: pairs whose topological positions forbid a path are refused at once; the others get a
depth-first search from the source through nodes positioned before the target, of at most
SEARCH_BUDGET edges (uses are usually an edge or a few away from their producer); pairs left
over go to bitsets over the topological order, 64 sources at a time, each sweep limited to
the positions between its sources and their targets. So the graphs rtsoa builds cost time
linear in their links; a hostile graph can cost O((nodes + edges) x pairs / 64).
"""

import numpy as np

from rtsoa._jit import jit
from rtsoa.abi.views import read_only
from rtsoa.graph.csr import build_csr, kahn_levels

# Kernels whose first input is a block they free (the lowered graphs' guarder).
FREE_KERNELS = ("FreeMemory",)
RACE_NONE = 0
RACE_BEFORE_PRODUCER = 1  # a use not ordered after the value's producer
RACE_AROUND_FREE = 2  # a use and a free of the same value in no order


def _topological_positions(offsets, targets, n, forward):
    """A topological order and each node's position in it: the ids themselves when every edge
    goes to a larger id (`forward`), else nodes sorted by Kahn level (every edge goes to a
    strictly higher level; the graph is acyclic, validation proved it)."""
    if forward:
        identity = np.arange(n, dtype=np.int64)
        return identity, identity
    levels, visited = kahn_levels(offsets, targets, n)
    if visited < n:  # only with relations merged in (validation proved the edges acyclic)
        return None
    return _by_level(levels)


@jit
def _by_level(levels):
    """Nodes in (level, id) order by a counting sort, and each node's position."""
    n = levels.shape[0]
    starts = np.zeros(levels.max() + 2, dtype=np.int64)
    for u in range(n):
        starts[levels[u] + 1] += 1
    for k in range(starts.shape[0] - 1):
        starts[k + 1] += starts[k]
    order = np.empty(n, dtype=np.int64)
    position = np.empty(n, dtype=np.int64)
    for u in range(n):
        k = starts[levels[u]]
        starts[levels[u]] = k + 1
        order[k] = u
        position[u] = k
    return order, position


@jit
def _queries(input_offsets, input_values, producer, node_root, frees, n, num_values):
    """Every pair that must be ordered: (source, target, link row, kind) rows, source before
    target where either order is fine (frees). `link row` is the node_inputs row of the use."""
    # users of each value (CSR by value), to pair every use with every free of its value
    counts = np.zeros(num_values + 1, dtype=np.int64)
    for i in range(input_values.shape[0]):
        counts[input_values[i] + 1] += 1
    for v in range(num_values):
        counts[v + 1] += counts[v]
    users = np.empty(input_values.shape[0], dtype=np.int64)  # link rows, grouped by value
    cursor = counts[:-1].copy()
    owner = np.empty(input_values.shape[0], dtype=np.int64)  # node of each link row
    for c in range(n):
        for i in range(input_offsets[c], input_offsets[c + 1]):
            owner[i] = c
            v = input_values[i]
            users[cursor[v]] = i
            cursor[v] += 1
    queries = np.empty((0, 4), dtype=np.int64)
    count = 0
    capacity = 0
    for c in range(n):
        for i in range(input_offsets[c], input_offsets[c + 1]):
            v = input_values[i]
            p = producer[v]
            pairs = 0
            if p >= 0 and p != c and node_root[p] == node_root[c]:
                pairs += 1
            if frees[c] and i == input_offsets[c]:
                pairs += counts[v + 1] - counts[v]
            if count + pairs > capacity:
                capacity = max(2 * capacity, count + pairs, 64)
                grown = np.empty((capacity, 4), dtype=np.int64)
                # Not `grown[:count] = queries[:count]`: Numba's array-to-slice assignment
                # compiles a shape-mismatch message built with f-strings and str.join: seconds
                # of Unicode code in a cold load of a lowered graph (asv ColdStart), its only
                # use there.
                for row in range(count):
                    for column in range(4):
                        grown[row, column] = queries[row, column]
                queries = grown
            if p >= 0 and p != c and node_root[p] == node_root[c]:
                queries[count, 0] = p
                queries[count, 1] = c
                queries[count, 2] = i
                queries[count, 3] = RACE_BEFORE_PRODUCER
                count += 1
            if frees[c] and i == input_offsets[c]:
                for k in range(counts[v], counts[v + 1]):
                    u = owner[users[k]]
                    if u != c and node_root[u] == node_root[c]:
                        queries[count, 0] = u
                        queries[count, 1] = c
                        queries[count, 2] = users[k]
                        queries[count, 3] = RACE_AROUND_FREE
                        count += 1
    return queries[:count]


# Edges a bounded search from one source may visit before the pair goes to the bitset sweep.
SEARCH_BUDGET = 256


@jit
def _bounded_search(offsets, targets, position, source, target, stamp, mark, stack):
    """Depth-first search from `source` to `target` through nodes positioned before it,
    visiting at most SEARCH_BUDGET edges: 1 found, 0 proved unreachable, -1 over budget."""
    stamp[source] = mark
    stack[0] = source
    top = 1
    visits = 0
    limit = position[target]
    while top > 0:
        top -= 1
        u = stack[top]
        for e in range(offsets[u], offsets[u + 1]):
            w = targets[e]
            if w == target:
                return 1
            visits += 1
            if visits > SEARCH_BUDGET:
                return -1
            if position[w] < limit and stamp[w] != mark:
                stamp[w] = mark
                stack[top] = w
                top += 1
    return 0


@jit
def _first_unordered(offsets, targets, order, position, queries):
    """Index of the first query (in query order) whose pair no path joins, or -1."""
    n = position.shape[0]
    count = queries.shape[0]
    unanswered = np.empty(count, dtype=np.int64)  # queries that need the bitset sweep
    pending = 0
    first_bad = count
    stamp = np.full(n, -1, dtype=np.int64)
    stack = np.empty(SEARCH_BUDGET + 1, dtype=np.int64)
    for q in range(count):
        source = queries[q, 0]
        target = queries[q, 1]
        if queries[q, 3] == RACE_AROUND_FREE and position[source] > position[target]:
            source, target = target, source  # a use after the free is ordered too
            queries[q, 0] = source
            queries[q, 1] = target
        if position[source] > position[target]:
            first_bad = min(first_bad, q)
            continue
        found = _bounded_search(offsets, targets, position, source, target, stamp, q, stack)
        if found == 0:
            first_bad = min(first_bad, q)
        elif found < 0:
            unanswered[pending] = q
            pending += 1
    if pending > 0:
        # searches, 64 distinct sources at a time in topological order
        # a stable counting sort by the source's position (positions are 0..n-1); not
        # np.argsort(kind="mergesort"), whose compile is a large share of a cold load (asv
        # ColdStart)
        starts = np.zeros(n + 1, dtype=np.int64)
        for k in range(pending):
            starts[position[queries[unanswered[k], 0]] + 1] += 1
        for i in range(n):
            starts[i + 1] += starts[i]
        by_source = np.empty(pending, dtype=np.int64)
        for k in range(pending):
            key = position[queries[unanswered[k], 0]]
            by_source[starts[key]] = unanswered[k]
            starts[key] += 1
        bits = np.zeros(n, dtype=np.uint64)
        start = 0
        while start < pending:
            # the chunk: queries of up to 64 distinct sources
            sources = 0
            end = start
            last_source = -1
            low = n
            high = 0
            while end < pending:
                s = queries[by_source[end], 0]
                if s != last_source:
                    if sources == 64:
                        break
                    sources += 1
                    last_source = s
                low = min(low, position[s])
                high = max(high, position[queries[by_source[end], 1]])
                end += 1
            for k in range(low, high + 1):
                bits[order[k]] = 0
            bit = -1
            last_source = -1
            for k in range(start, end):
                s = queries[by_source[k], 0]
                if s != last_source:
                    bit += 1
                    last_source = s
                bits[s] |= np.uint64(1) << np.uint64(bit)
            for k in range(low, high + 1):
                u = order[k]
                mask = bits[u]
                if mask == 0:
                    continue
                for e in range(offsets[u], offsets[u + 1]):
                    w = targets[e]
                    if position[w] <= high:
                        bits[w] |= mask
            bit = -1
            last_source = -1
            for k in range(start, end):
                q = by_source[k]
                s = queries[q, 0]
                if s != last_source:
                    bit += 1
                    last_source = s
                if bits[queries[q, 1]] & (np.uint64(1) << np.uint64(bit)) == 0:
                    first_bad = min(first_bad, q)
            start = end
    return first_bad if first_bad < count else -1


def first_race(graph, node_root, forward=False):
    """(kind, value, first node, second node, node_inputs row) of the first unordered use in
    an acyclic graph, or None. `node_root` is each node's root graph; `forward` says every
    edge goes to a larger id (validation knows it)."""
    n = graph.num_nodes
    if n == 0 or graph.input_values.shape[0] == 0:
        return None
    names = np.asarray(graph.kernel_names, dtype=object)
    free_kernels = np.isin(names, FREE_KERNELS) if names.size else np.zeros(0, dtype=bool)
    frees = free_kernels[graph.node_kernel] if names.size else np.zeros(n, dtype=bool)
    # read-only views: a mapped graph's arrays are, a built one's are not; one compile for both
    queries = _queries(
        read_only(graph.input_offsets),
        read_only(graph.input_values),
        read_only(graph.value_producer),
        read_only(np.ascontiguousarray(node_root)),
        read_only(np.ascontiguousarray(frees)),
        n,
        graph.value_kind.shape[0],
    )
    if queries.shape[0] == 0:
        return None
    offsets, targets = graph.succ_offsets, graph.succ_targets
    ordered = None
    if graph.relation_targets.shape[0]:
        # an exact (Free, Launch) relation orders the Launch before the Free, like the
        # Launch -> Free edge the relation pass replaced (rtsoa.kernels.relations)
        sources = np.repeat(np.arange(n, dtype=np.int32), np.diff(graph.succ_offsets))
        frees_of = np.repeat(np.arange(n, dtype=np.int32), np.diff(graph.relation_offsets))
        merged = build_csr(
            np.concatenate([sources, graph.relation_targets.astype(np.int32)]),
            np.concatenate([graph.succ_targets, frees_of]),
            n,
        )
        # None for relations no order satisfies (a Launch that runs only after its Free):
        # the multithread executor reports them as no progress, and the others refuse a
        # graph with relations; the race check then goes by the successor edges alone
        ordered = _topological_positions(*merged, n, False)
        if ordered is not None:
            offsets, targets = merged
    if ordered is None:
        ordered = _topological_positions(offsets, targets, n, forward)
    order, position = ordered
    bad = _first_unordered(read_only(offsets), read_only(targets), order, position, queries)
    if bad < 0:
        return None
    first, second, row, kind = (int(x) for x in queries[bad])
    return kind, int(graph.input_values[row]), first, second, row
