"""validate_graph: prove an ExecuteGraph safe for jitted code, or name the first bad place.

Checks run cheapest first: sizes, then vectorized range checks (min / max, and the first bad row
only when out of range), then one jitted pass over the successor CSR (self-loops, duplicates,
edges across root graphs, in-degree template) and a jitted Kahn pass for cycles.
"""

import numpy as np

from rtsoa._jit import jit
from rtsoa.errors import GraphFormatError
from rtsoa.graph.csr import first_node_on_cycle
from rtsoa.graph.graph import root_graphs
from rtsoa.graph.schema import (
    FORMAT_VERSION,
    ROOT_GRAPHS,
    DType,
    GraphKind,
    Placement,
    ValueKind,
    WorkerClass,
)

# ExecuteGraph field -> (table, column), for error messages.
_WHERE = {
    "node_kernel": ("nodes", "kernel"),
    "node_graph": ("nodes", "graph"),
    "node_priority": ("nodes", "priority"),
    "node_stream": ("nodes", "stream"),
    "node_worker": ("nodes", "worker"),
    "node_compute": ("nodes", "compute_node"),
    "in_degree": ("nodes", "in_degree"),
    "succ_offsets": ("node_offsets", "successors"),
    "input_offsets": ("node_offsets", "inputs"),
    "output_offsets": ("node_offsets", "outputs"),
    "attr_offsets": ("node_offsets", "attributes"),
    "relation_offsets": ("node_offsets", "relations"),
    "succ_targets": ("edges", "target"),
    "input_values": ("node_inputs", "value"),
    "output_values": ("node_outputs", "value"),
    "attr_pool": ("attributes", "value"),
    "relation_targets": ("relations", "launch"),
    "constants": ("constants", "byte"),
    "value_kind": ("values", "kind"),
    "value_dtype": ("values", "dtype"),
    "value_placement": ("values", "placement"),
    "value_producer": ("values", "producer"),
    "graph_kind": ("graphs", "kind"),
    "graph_parent": ("graphs", "parent"),
    "graph_inputs": ("graph_io", "value"),
    "graph_outputs": ("graph_io", "value"),
}

_DTYPES = {
    "node_kernel": np.int32,
    "node_graph": np.int32,
    "node_priority": np.int32,
    "node_stream": np.int32,
    "node_worker": np.int8,
    "node_compute": np.int32,
    "in_degree": np.int32,
    "succ_offsets": np.int64,
    "input_offsets": np.int64,
    "output_offsets": np.int64,
    "attr_offsets": np.int64,
    "relation_offsets": np.int64,
    "succ_targets": np.int32,
    "input_values": np.int32,
    "output_values": np.int32,
    "attr_pool": np.int64,
    "relation_targets": np.int32,
    "constants": np.uint8,
    "value_kind": np.int8,
    "value_dtype": np.int8,
    "value_placement": np.int8,
    "value_producer": np.int32,
    "graph_kind": np.int8,
    "graph_parent": np.int32,
    "graph_inputs": np.int32,
    "graph_outputs": np.int32,
}

_CSRS = (
    ("succ_offsets", "succ_targets"),
    ("input_offsets", "input_values"),
    ("output_offsets", "output_values"),
    ("attr_offsets", "attr_pool"),
    ("relation_offsets", "relation_targets"),
)

# Edge-pass failure codes returned by _check_edges.
_EDGE_OK = 0
_EDGE_SELF_LOOP = 1
_EDGE_DUPLICATE = 2
_EDGE_CROSS_ROOT = 3
_EDGE_IN_DEGREE = 4


def _fail(field, message, row=None):
    table, column = _WHERE[field]
    raise GraphFormatError(message, table=table, column=column, row=row)


def _check_range(graph, field, low, high):
    """Every entry of a column in [low, high)."""
    array = getattr(graph, field)
    if array.shape[0] == 0:
        return
    if array.min() >= low and array.max() < high:
        return
    bad = (array < low) | (array >= high)
    row = int(np.argmax(bad))
    _fail(field, f"value {int(array[row])} out of range [{low}, {high})", row)


@jit
def _check_edges(offsets, targets, node_root, in_degree):
    """One pass over the successor CSR. Returns (code, edge row, node, all edges go forward).

    When every edge goes from a smaller to a larger id the graph is acyclic without a Kahn pass.
    """
    n = node_root.shape[0]
    forward = True
    stamp = np.full(n, -1, dtype=np.int64)
    actual = np.zeros(n, dtype=np.int32)
    for u in range(n):
        for i in range(offsets[u], offsets[u + 1]):
            t = targets[i]
            if t == u:
                return _EDGE_SELF_LOOP, i, u, False
            forward = forward and t > u
            if stamp[t] == u:
                return _EDGE_DUPLICATE, i, u, False
            stamp[t] = u
            if node_root[t] != node_root[u]:
                return _EDGE_CROSS_ROOT, i, u, False
            actual[t] += 1
    for v in range(n):
        template = in_degree[v]
        if template < 0 or template > actual[v] or (actual[v] > 0 and template == 0):
            return _EDGE_IN_DEGREE, v, actual[v], False
    return _EDGE_OK, -1, -1, forward


def validate_graph(graph):
    """Raise GraphFormatError naming table, column and first bad row; return the graph if ok."""
    meta = graph.meta
    if meta.format_version != FORMAT_VERSION:
        raise GraphFormatError(
            f"format version {meta.format_version} is not supported (this rtsoa reads "
            f"{FORMAT_VERSION})",
            table="metadata",
            column="format_version",
            row=0,
        )
    for column in ("stream_count", "event_count", "notify_count"):
        if getattr(meta, column) < 0:
            raise GraphFormatError("negative count", "metadata", column, 0)
    if meta.stream_count < 1:
        raise GraphFormatError("a graph needs at least one stream", "metadata", "stream_count", 0)
    for field, dtype in _DTYPES.items():
        array = getattr(graph, field)
        if not isinstance(array, np.ndarray) or array.dtype != dtype or array.ndim != 1:
            _fail(field, f"expected a 1-d {np.dtype(dtype)} array")

    n = graph.num_nodes
    for field in ("node_graph", "node_priority", "node_stream", "node_worker", "node_compute"):
        if getattr(graph, field).shape[0] != n:
            _fail(field, f"has {getattr(graph, field).shape[0]} rows, nodes has {n}")
    if graph.in_degree.shape[0] != n:
        _fail("in_degree", f"has {graph.in_degree.shape[0]} rows, nodes has {n}")
    for offsets_field, targets_field in _CSRS:
        _check_offsets(graph, offsets_field, targets_field, n)

    _check_graphs_table(graph)
    num_graphs = graph.graph_kind.shape[0]
    num_values = graph.num_values
    for field in ("value_dtype", "value_placement", "value_producer"):
        if getattr(graph, field).shape[0] != num_values:
            _fail(field, f"has {getattr(graph, field).shape[0]} rows, values has {num_values}")
    if len(graph.kernel_names) == 0 and n > 0:
        raise GraphFormatError("nodes exist but no kernel is named", "kernels", "name")
    if len(set(graph.kernel_names)) != len(graph.kernel_names):
        raise GraphFormatError("kernel names are not unique", "kernels", "name")

    _check_range(graph, "node_kernel", 0, len(graph.kernel_names))
    _check_range(graph, "node_graph", 0, num_graphs)
    _check_range(graph, "node_stream", 0, meta.stream_count)
    _check_range(graph, "node_worker", 0, len(WorkerClass))
    _check_range(graph, "node_compute", -1, np.iinfo(np.int32).max)
    _check_range(graph, "input_values", 0, num_values)
    _check_range(graph, "output_values", 0, num_values)
    _check_range(graph, "relation_targets", 0, n)
    _check_range(graph, "succ_targets", 0, n)
    _check_range(graph, "value_kind", 0, len(ValueKind))
    _check_range(graph, "value_dtype", 0, len(DType))
    _check_range(graph, "value_placement", 0, len(Placement))
    _check_range(graph, "value_producer", -1, n)
    _check_range(graph, "graph_inputs", 0, num_values)
    _check_range(graph, "graph_outputs", 0, num_values)

    roots = root_graphs(graph.graph_parent)
    node_root = roots[graph.node_graph]
    code, row, other, forward = _check_edges(
        graph.succ_offsets, graph.succ_targets, node_root, graph.in_degree
    )
    if code == _EDGE_SELF_LOOP:
        raise GraphFormatError(f"self-loop on node {other}", "edges", "target", row)
    if code == _EDGE_DUPLICATE:
        raise GraphFormatError(f"duplicate successor of node {other}", "edges", "target", row)
    if code == _EDGE_CROSS_ROOT:
        raise GraphFormatError(
            f"edge from node {other} crosses from one root graph (Init/Main/DeInit) to another",
            "edges",
            "target",
            row,
        )
    if code != _EDGE_OK:
        raise GraphFormatError(
            f"in-degree template {int(graph.in_degree[row])} does not fit the {other} incoming "
            "edge(s) (must be 0 for start nodes, else between 1 and the edge count)",
            "nodes",
            "in_degree",
            row,
        )
    if not meta.has_loops and not forward:
        node = first_node_on_cycle(graph.succ_offsets, graph.succ_targets, n)
        if node >= 0:
            raise GraphFormatError(
                f"cycle through node {node} in a graph without a loop construct",
                "edges",
                "target",
                int(graph.succ_offsets[node]),
            )
    return graph


def _check_offsets(graph, offsets_field, targets_field, n):
    offsets = getattr(graph, offsets_field)
    length = getattr(graph, targets_field).shape[0]
    if offsets.shape[0] != n + 1:
        _fail(offsets_field, f"has {offsets.shape[0]} rows, expected nodes + 1 = {n + 1}")
    if offsets[0] != 0:
        _fail(offsets_field, f"first offset is {int(offsets[0])}, expected 0", 0)
    steps = np.diff(offsets)
    if steps.shape[0] and steps.min() < 0:
        row = int(np.argmax(steps < 0)) + 1
        _fail(offsets_field, "offsets decrease (not monotone)", row)
    if offsets[n] != length:
        table, column = _WHERE[targets_field]
        _fail(
            offsets_field,
            f"last offset {int(offsets[n])} does not match {table}.{column} length {length}",
            n,
        )


def _check_graphs_table(graph):
    kinds = graph.graph_kind
    parents = graph.graph_parent
    count = kinds.shape[0]
    if parents.shape[0] != count or len(graph.graph_names) != count:
        _fail("graph_parent", "graphs table columns differ in length")
    if count < 3:
        _fail("graph_kind", f"{count} graphs; Init, Main and DeInit (ids 0-2) are required")
    for graph_id, root in enumerate(ROOT_GRAPHS):
        if kinds[graph_id] != root or parents[graph_id] != -1:
            _fail("graph_kind", f"graph {graph_id} must be the root {root.name}", graph_id)
    _check_range(graph, "graph_kind", 0, len(GraphKind))
    for graph_id in range(3, count):
        if not 0 <= parents[graph_id] < graph_id:
            _fail("graph_parent", "a subgraph's parent must be an earlier graph", graph_id)
        if kinds[graph_id] < GraphKind.BRANCH:
            _fail("graph_kind", "only graphs 0-2 may be roots", graph_id)
