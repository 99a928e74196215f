"""Wait-anyone joins: a node whose in-degree template is below its edge count must be sound.

A queue executor runs a node when its counter reaches 0 and re-arms it to the template, so a
node with template 1 and several predecessors runs once per predecessor that finishes. That is
what If / Case joins and While heads want, because exactly one predecessor fires per
activation; anywhere else it makes a node run twice, exponentially often along a chain, and
executors disagree. So validation admits such a "clamped" node only in the two shapes the
control-flow builders emit (rtsoa.kernels.control_flow):

- If / Case join: template 1; every predecessor is in its own BRANCH subgraph whose parent is
  the join's graph, and all those branches are entered from one and the same node (the switch,
  which continues on one branch only).
- While head: template 1; exactly one predecessor in the join's own graph or elsewhere (the
  loop entry) and the others each in their own LOOP_BODY subgraph child of the join's graph
  (the back edge).
"""

import numpy as np

from rtsoa._jit import jit
from rtsoa.graph.schema import GraphKind

_BRANCH = int(GraphKind.BRANCH)
_LOOP_BODY = int(GraphKind.LOOP_BODY)

JOIN_OK = 0
JOIN_TEMPLATE = 1  # a clamped template other than 1
JOIN_PLAIN = 2  # no predecessor in a branch or loop body: nothing makes them exclusive
JOIN_TWO_FROM_ONE = 3  # two edges into joins from one branch / loop body subgraph
JOIN_SWITCHES = 4  # branches entered from different nodes (or a branch from several)
JOIN_MIXED = 5  # branch predecessors mixed with others
JOIN_LOOP_ENTRY = 6  # a loop head without exactly one entry predecessor

REASONS = {
    JOIN_TEMPLATE: "a wait-anyone join must have in-degree template 1",
    JOIN_PLAIN: (
        "its predecessors are not in branch or loop-body subgraphs, so nothing makes them "
        "exclusive and it would run once per predecessor"
    ),
    JOIN_TWO_FROM_ONE: "two of its predecessors are in the same branch or loop-body subgraph",
    JOIN_SWITCHES: "its branches are not all entered from one switch node",
    JOIN_MIXED: "it joins branches and other predecessors",
    JOIN_LOOP_ENTRY: "a loop head needs exactly one entry predecessor besides its loop bodies",
}


@jit
def first_unsound_join(offsets, targets, node_graph, graph_parent, graph_kind, in_degree):
    """(node, reason) of the first clamped node breaking the rules above, or (-1, JOIN_OK).
    Two passes over the edges; called only when some node is clamped."""
    n = node_graph.shape[0]
    graphs = graph_kind.shape[0]
    actual = np.zeros(n, dtype=np.int64)
    entered_from = np.full(graphs, -1, dtype=np.int64)  # -2: entered from several nodes
    for u in range(n):
        owner = node_graph[u]
        for i in range(offsets[u], offsets[u + 1]):
            w = targets[i]
            actual[w] += 1
            child = node_graph[w]
            if child != owner and graph_kind[child] == _BRANCH and graph_parent[child] == owner:
                if entered_from[child] == -1:
                    entered_from[child] = u
                elif entered_from[child] != u:
                    entered_from[child] = -2
    entries = np.zeros(n, dtype=np.int64)
    seen = np.zeros(n, dtype=np.int8)  # bit 1: a branch predecessor, bit 2: a loop body one
    switch = np.full(n, -1, dtype=np.int64)
    from_child = np.zeros(graphs, dtype=np.int64)
    for u in range(n):
        owner = node_graph[u]
        for i in range(offsets[u], offsets[u + 1]):
            v = targets[i]
            if in_degree[v] >= actual[v]:
                continue
            kind = graph_kind[owner]
            if (
                owner != node_graph[v]
                and graph_parent[owner] == node_graph[v]
                and (kind == _BRANCH or kind == _LOOP_BODY)
            ):
                from_child[owner] += 1
                if from_child[owner] > 1:
                    return v, JOIN_TWO_FROM_ONE
                if kind == _BRANCH:
                    seen[v] |= 1
                    if entered_from[owner] < 0:
                        return v, JOIN_SWITCHES
                    if switch[v] == -1:
                        switch[v] = entered_from[owner]
                    elif switch[v] != entered_from[owner]:
                        return v, JOIN_SWITCHES
                else:
                    seen[v] |= 2
            else:
                entries[v] += 1
    for v in range(n):
        if in_degree[v] >= actual[v]:
            continue
        if in_degree[v] != 1:
            return v, JOIN_TEMPLATE
        if seen[v] == 0:
            return v, JOIN_PLAIN
        if seen[v] & 1 and (seen[v] & 2 or entries[v] > 0):
            return v, JOIN_MIXED
        if seen[v] == 2 and entries[v] != 1:
            return v, JOIN_LOOP_ENTRY
    return -1, JOIN_OK
