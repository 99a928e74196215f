"""validate_graph: prove an ExecuteGraph safe for jitted code, or name the first bad place.

What is checked comes from the field table `rtsoa.graph.schema.FIELDS`: every field's dtype,
its length (its table's rows; nodes + 1 for CSR offsets), CSR offsets against their targets,
and every id column against what it refers to. The graphs and kernels tables add their own
rules (roots, parents, unique names), the ops table its own (unique names; every op node's
attribute 0 a row of it, `op_table.op_rows`). Checks run cheapest first: sizes, then
vectorized range checks (min / max, and the first bad row only when out of range), then one
jitted pass over the successor CSR (self-loops, duplicates, edges across root graphs,
in-degree template), a jitted Kahn pass for cycles, and in a graph without loops the race
check (`races.py`: every use ordered after its value's producer and relative to its free).
Errors name the table, column and row of the saved file.
"""

import numpy as np

from rtsoa._jit import jit
from rtsoa.abi.views import read_only
from rtsoa.errors import GraphFormatError
from rtsoa.graph.csr import first_node_on_cycle
from rtsoa.graph.graph import root_graphs
from rtsoa.graph.joins import JOIN_OK, REASONS, first_unsound_join
from rtsoa.graph.op_table import op_rows
from rtsoa.graph.races import RACE_BEFORE_PRODUCER, first_race
from rtsoa.graph.schema import (
    CSRS,
    FIELDS,
    FIELDS_BY_NAME,
    MAX_RANK,
    METADATA_TABLE,
    NODES_TABLE,
    RANK_UNKNOWN,
    ROOT_GRAPHS,
    SIZE_UNKNOWN,
    TABLE_FIELDS,
    GraphKind,
    Offsets,
    check_format_version,
    saved_row,
    table_rows,
)

# Fields whose ids have a [low, high) range (CSR offsets have their own check).
_RANGED = tuple(
    field for field in FIELDS if field.ids is not None and not isinstance(field.ids, Offsets)
)
_EDGES = FIELDS_BY_NAME["succ_targets"]
_IN_DEGREE = FIELDS_BY_NAME["in_degree"]
_INPUT_VALUES = FIELDS_BY_NAME["input_values"]
_KERNEL_NAMES = FIELDS_BY_NAME["kernel_names"]
_GRAPH_KIND = FIELDS_BY_NAME["graph_kind"]
_GRAPH_PARENT = FIELDS_BY_NAME["graph_parent"]

# Edge-pass failure codes returned by _check_edges.
_EDGE_OK = 0
_EDGE_SELF_LOOP = 1
_EDGE_DUPLICATE = 2
_EDGE_CROSS_ROOT = 3
_EDGE_IN_DEGREE = 4


def _fail(field, message, row=None):
    """Raise GraphFormatError at `field`'s table and column."""
    raise GraphFormatError(message, table=field.table, column=field.column, row=row)


def check_ids(array, low, high, table, column):
    """Raise GraphFormatError naming the first row of `array` outside [low, high)."""
    row = _first_out_of_range(array, low, high)
    if row >= 0:
        raise GraphFormatError(_out_of_range(array[row], low, high), table, column, row)


def _first_out_of_range(array, low, high):
    """Index of the first entry outside [low, high), or -1 (min / max first: the common case)."""
    if array.shape[0] == 0 or (array.min() >= low and array.max() < high):
        return -1
    return int(np.argmax((array < low) | (array >= high)))


def _out_of_range(value, low, high):
    return f"value {int(value)} out of range [{low}, {high})"


def _check_field_ids(graph, field, io_rows):
    """The ids of one field against what they refer to; the error names the saved row."""
    array = getattr(graph, field.name)
    low, high = field.ids.bounds(graph)
    index = _first_out_of_range(array, low, high)
    if index < 0:
        return
    row = saved_row(graph, field, index)
    if field.role is not None and io_rows is not None:
        row = int(io_rows[row])
    _fail(field, _out_of_range(array[index], low, high), row)


@jit
def _check_edges(offsets, targets, node_root, in_degree):
    """One pass over the successor CSR. Returns (code, edge row, node, all edges go forward,
    some node is clamped: its template is below its edge count).

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
                return _EDGE_SELF_LOOP, i, u, False, False
            forward = forward and t > u
            if stamp[t] == u:
                return _EDGE_DUPLICATE, i, u, False, False
            stamp[t] = u
            if node_root[t] != node_root[u]:
                return _EDGE_CROSS_ROOT, i, u, False, False
            actual[t] += 1
    clamped = False
    for v in range(n):
        template = in_degree[v]
        if template < 0 or template > actual[v] or (actual[v] > 0 and template == 0):
            return _EDGE_IN_DEGREE, v, actual[v], False, False
        clamped = clamped or template < actual[v]
    return _EDGE_OK, -1, -1, forward, clamped


def validate_graph(graph, io_rows=None):
    """Raise GraphFormatError naming table, column and first bad row; return the graph if ok.

    `io_rows` (load_graph passes it) maps each graph_io row as save_graph lays it out (inputs,
    then outputs) to its row in the file the graph was read from, so errors name the file's row.
    """
    meta = graph.meta
    check_format_version(meta.format_version)
    for column in ("stream_count", "event_count", "notify_count"):
        if getattr(meta, column) < 0:
            raise GraphFormatError("negative count", METADATA_TABLE, column, 0)
    if meta.stream_count < 1:
        raise GraphFormatError(
            "a graph needs at least one stream", METADATA_TABLE, "stream_count", 0
        )
    _check_types(graph)
    _check_lengths(graph)
    for offsets, targets in CSRS:
        _check_offsets(graph, offsets, targets)
    _check_graphs_table(graph)
    _check_kernels_table(graph)
    for field in _RANGED:
        _check_field_ids(graph, field, io_rows)
    _check_tensor_tables(graph, io_rows)
    _check_unique(_OP_NAMES, graph.op_names, "op name")
    op_rows(graph)  # raises at the first op node whose op is not a row of the ops table

    n = graph.num_nodes
    roots = root_graphs(graph.graph_parent)
    node_root = roots[graph.node_graph]
    code, row, other, forward, clamped = _check_edges(  # read-only views: one compile for
        read_only(graph.succ_offsets),  # a mapped graph's arrays and a built one's
        read_only(graph.succ_targets),
        read_only(node_root),
        read_only(graph.in_degree),
    )
    if code == _EDGE_SELF_LOOP:
        _fail(_EDGES, f"self-loop on node {other}", row)
    if code == _EDGE_DUPLICATE:
        _fail(_EDGES, f"duplicate successor of node {other}", row)
    if code == _EDGE_CROSS_ROOT:
        message = (
            f"edge from node {other} crosses from one root graph (Init/Main/DeInit) to another"
        )
        _fail(_EDGES, message, row)
    if code != _EDGE_OK:
        _fail(
            _IN_DEGREE,
            f"in-degree template {int(graph.in_degree[row])} does not fit the {other} incoming "
            "edge(s) (must be 0 for start nodes, else between 1 and the edge count)",
            row,
        )
    if clamped:
        node, reason = first_unsound_join(
            graph.succ_offsets,
            graph.succ_targets,
            graph.node_graph,
            graph.graph_parent,
            graph.graph_kind,
            graph.in_degree,
        )
        if reason != JOIN_OK:
            template = int(graph.in_degree[node])
            message = f"node {node} has in-degree template {template} below its edge count (a "
            _fail(_IN_DEGREE, message + f"wait-anyone join), but {REASONS[reason]}", node)
    if not meta.has_loops and not forward:
        node = first_node_on_cycle(graph.succ_offsets, graph.succ_targets, n)
        if node >= 0:
            message = f"cycle through node {node} in a graph without a loop construct"
            _fail(_EDGES, message, int(graph.succ_offsets[node]))
    if not meta.has_loops:
        _check_races(graph, node_root, forward)
    return graph


def _check_races(graph, node_root, forward):
    """Refuse a use of a value that the successor edges do not order (see `graph/races.py`)."""
    race = first_race(graph, node_root, forward)
    if race is None:
        return
    kind, value, first, second, row = race
    if kind == RACE_BEFORE_PRODUCER:
        message = (
            f"node {second} uses value {value}, but no path of successor edges leads from its "
            f"producer, node {first}, to it: executors may run them in either order"
        )
    else:
        message = (
            f"value {value} is used and freed by nodes {first} and {second} with no path of "
            "successor edges between them: executors may run them in either order"
        )
    _fail(_INPUT_VALUES, message, row)


def _check_types(graph):
    """Every field a 1-d array of its dtype; string columns a tuple of str."""
    for field in FIELDS:
        value = getattr(graph, field.name)
        dtype = field.dtype
        if dtype is None:
            if not isinstance(value, tuple) or not all(isinstance(item, str) for item in value):
                _fail(field, "expected a tuple of str")
        elif not isinstance(value, np.ndarray) or value.dtype != dtype or value.ndim != 1:
            _fail(field, f"expected a 1-d {dtype} array")


def _check_lengths(graph):
    """Every field as long as its table's first field; CSR offsets nodes + 1 rows."""
    n = table_rows(graph, NODES_TABLE)
    for fields in TABLE_FIELDS.values():
        first = fields[0]
        for field in fields:
            length = len(getattr(graph, field.name))
            if isinstance(field.ids, Offsets):
                if length != n + 1:
                    _fail(field, f"has {length} rows, expected {NODES_TABLE} + 1 = {n + 1}")
            elif field.role is None and length != len(getattr(graph, first.name)):
                # graph_inputs / graph_outputs share their table, not a row count.
                _fail(
                    field, f"has {length} rows, {first.where} has {len(getattr(graph, first.name))}"
                )


def _check_offsets(graph, offsets_field, targets_field):
    """A CSR's offsets start at 0, never decrease and end at the length of its targets."""
    offsets = getattr(graph, offsets_field.name)
    length = len(getattr(graph, targets_field.name))
    n = offsets.shape[0] - 1
    if offsets[0] != 0:
        _fail(offsets_field, f"first offset is {int(offsets[0])}, expected 0", 0)
    steps = np.diff(offsets)
    if steps.shape[0] and steps.min() < 0:
        # The row whose offset exceeds the next one's (a too large value is reported at itself).
        row = int(np.argmax(steps < 0))
        _fail(
            offsets_field,
            f"offset {int(offsets[row])} is above the next row's {int(offsets[row + 1])} "
            "(offsets are not monotone)",
            row,
        )
    if offsets[n] != length:
        _fail(
            offsets_field,
            f"last offset {int(offsets[n])} does not match {targets_field.where} length {length}",
            n,
        )


def _check_graphs_table(graph):
    """Graphs 0-2 are the roots Init, Main, DeInit (parent -1); every other graph is a
    subgraph (branch or loop part) whose parent is an earlier graph."""
    kinds = graph.graph_kind
    parents = graph.graph_parent
    count = kinds.shape[0]
    if count < len(ROOT_GRAPHS):
        _fail(_GRAPH_KIND, f"{count} graphs; Init, Main and DeInit (ids 0-2) are required")
    for graph_id, root in enumerate(ROOT_GRAPHS):
        if kinds[graph_id] != root:
            _fail(_GRAPH_KIND, f"graph {graph_id} must be the root {root.name}", graph_id)
        if parents[graph_id] != -1:
            message = f"graph {graph_id} is the root {root.name} and has no parent (-1)"
            _fail(_GRAPH_PARENT, message, graph_id)
    for graph_id in range(len(ROOT_GRAPHS), count):
        if not 0 <= parents[graph_id] < graph_id:
            _fail(_GRAPH_PARENT, "a subgraph's parent must be an earlier graph", graph_id)
        if kinds[graph_id] < GraphKind.BRANCH:
            _fail(_GRAPH_KIND, "only graphs 0-2 may be roots", graph_id)


def _check_kernels_table(graph):
    """Kernel names are unique, and present when there are nodes."""
    names = graph.kernel_names
    if len(names) == 0 and graph.num_nodes > 0:
        _fail(_KERNEL_NAMES, "nodes exist but no kernel is named")
    if len(set(names)) != len(names):
        seen = set()
        for row, name in enumerate(names):
            if name in seen:
                _fail(_KERNEL_NAMES, f"kernel name {name!r} is not unique", row)
            seen.add(name)


# -- the tensors, dims and symbols tables (format version 2) -------------------------------------
_TENSOR_VALUE = FIELDS_BY_NAME["tensor_value"]
_TENSOR_NAME = FIELDS_BY_NAME["tensor_name"]
_TENSOR_RANK = FIELDS_BY_NAME["tensor_rank"]
_TENSOR_DIM_START = FIELDS_BY_NAME["tensor_dim_start"]
_DIM_SIZE = FIELDS_BY_NAME["dim_size"]
_DIM_SYMBOL = FIELDS_BY_NAME["dim_symbol"]
_SYMBOL_NAMES = FIELDS_BY_NAME["symbol_names"]
_OP_NAMES = FIELDS_BY_NAME["op_names"]
_GRAPH_IO = (FIELDS_BY_NAME["graph_inputs"], FIELDS_BY_NAME["graph_outputs"])


def _check_tensor_tables(graph, io_rows):
    """Named tensors and their shapes: ranks in [-1, MAX_RANK]; each tensor's dims window
    [dim_start, dim_start + rank) inside dims; sizes >= -1, -1 for a dim with a symbol; one row
    per value; unique non-empty tensor and symbol names; and a graph that names any tensor
    names its inputs and outputs. Value and symbol ids are range-checked before (FIELDS)."""
    rank = graph.tensor_rank
    row = _first_out_of_range(rank, RANK_UNKNOWN, MAX_RANK + 1)
    if row >= 0:
        message = f"rank {int(rank[row])} out of range [{RANK_UNKNOWN}, {MAX_RANK}] (-1: unknown)"
        _fail(_TENSOR_RANK, message, row)
    start = graph.tensor_dim_start
    dims = graph.dim_size.shape[0]
    width = np.maximum(rank, 0).astype(np.int64)
    # start > dims - width, not start + width > dims: the sum may overflow int64.
    outside = (start < 0) | (start > dims - width)
    if outside.any():
        row = int(np.argmax(outside))
        first, count = int(start[row]), int(width[row])
        message = (
            f"dims rows [{first}, {first + count}) of a rank {count} tensor outside [0, {dims})"
        )
        _fail(_TENSOR_DIM_START, message, row)
    size = graph.dim_size
    below = size < SIZE_UNKNOWN
    if below.any():
        row = int(np.argmax(below))
        _fail(_DIM_SIZE, f"size {int(size[row])} below -1 (-1: symbolic or unknown)", row)
    sized_symbol = (graph.dim_symbol >= 0) & (size != SIZE_UNKNOWN)
    if sized_symbol.any():
        row = int(np.argmax(sized_symbol))
        symbol = graph.symbol_names[int(graph.dim_symbol[row])]
        message = f"size {int(size[row])} for symbolic dim {symbol!r}: a symbol's size is -1"
        _fail(_DIM_SIZE, message, row)
    _check_unique(_TENSOR_VALUE, graph.tensor_value.tolist(), "value")
    _check_unique(_TENSOR_NAME, graph.tensor_name, "tensor name")
    _check_unique(_SYMBOL_NAMES, graph.symbol_names, "symbol name")
    if graph.tensor_value.shape[0] == 0:
        return
    for field in _GRAPH_IO:
        array = getattr(graph, field.name)
        unnamed = ~np.isin(array, graph.tensor_value)
        if unnamed.any():
            index = int(np.argmax(unnamed))
            row = saved_row(graph, field, index)
            if io_rows is not None:
                row = int(io_rows[row])
            message = (
                f"graph {field.role.name.lower()} value {int(array[index])} has no tensors row "
                "(a graph that names tensors names its inputs and outputs)"
            )
            _fail(field, message, row)


def _check_unique(field, items, what):
    """GraphFormatError at the first item equal to an earlier one (or an empty name)."""
    first_row = {}
    for row, item in enumerate(items):
        if item == "":
            _fail(field, f"empty {what}", row)
        if item in first_row:
            _fail(field, f"{what} {item!r} repeats row {first_row[item]}", row)
        first_row[item] = row
