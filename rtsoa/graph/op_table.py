"""The ops table: which compute op each op node of a lowered model runs (format version 3).

Attribute slot OP_SLOT (0) of an OpInferShape / OpLaunch node (`schema.OP_KERNELS`) is a row of
the graph's ops table (`ExecuteGraph.op_names`), as nodes.kernel is a row of the kernels table.
The op kernels read that slot as the op's code in the compiled op switch
(`rtsoa.ops.registry.compiled_op_names()`), so a graph is *bound* when the row each op node
names holds, at that position of the switch, the same op. Where each form comes from:

- lowering writes bound graphs (the op codes and the whole op table of the rtsoa lowering);
- `save_graph` writes only the ops the op nodes use (`compact_op_names`), so a file names
  exactly its model's ops, and its bytes do not change when rtsoa gains an op;
- `load_graph` binds the file's names to the running rtsoa's switch (`bind_op_names` with
  `op_switch()`, which the op registry provides when it is imported): the op
  slots are rewritten (one copy of the attribute pool) unless they already are the codes, and
  an op the switch does not have is refused, naming the op and the node.

Files of format versions 1 and 2 have no ops table: their op codes were positions in the op set
of the rtsoa that wrote them, which the file does not record, so a version 1 or 2 file holding
op nodes is refused (`refuse_unnamed_ops`); one without op nodes loads as before.
"""

import numpy as np

from rtsoa.errors import GraphFormatError
from rtsoa.graph.schema import (
    FIELDS_BY_NAME,
    METADATA_TABLE,
    NODES_TABLE,
    OP_KERNELS,
    OP_SLOT,
    TABLES_SINCE,
)

_ATTRIBUTES = FIELDS_BY_NAME["attr_pool"]
_OP_NAMES = FIELDS_BY_NAME["op_names"]
_NODE_KERNEL = FIELDS_BY_NAME["node_kernel"]
OPS_SINCE = TABLES_SINCE[_OP_NAMES.table]  # the format version that added the ops table
_switch = [None]  # fn() -> the op names by code of this process (`provide_op_switch`)


def provide_op_switch(names):
    """Set where `op_switch()` reads the running rtsoa's op names by code: `names()`, the op
    registry's `compiled_op_names` (which sets it when imported: the graph layer sits below
    the ops and does not import them)."""
    _switch[0] = names


def op_switch():
    """The op names by code this process binds graphs to (`bind_op_names`)."""
    if _switch[0] is None:
        raise GraphFormatError(
            "the graph has op nodes, and no op registry is loaded to bind them to "
            "(import rtsoa.ops first)"
        )
    return _switch[0]()


def op_nodes(graph):
    """Ids (int64, ascending) of the nodes running one of `OP_KERNELS`. Safe on unvalidated
    graphs: a kernel id outside the kernels table is no op node."""
    kernels = [row for row, name in enumerate(graph.kernel_names) if name in OP_KERNELS]
    if not kernels:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.isin(graph.node_kernel, kernels)).astype(np.int64)


def op_name_of(graph, node):
    """The op that node `node` runs (its ops-table row's name), or None for a node of another
    kernel or one whose op slot is missing or out of range (error messages)."""
    if _kernel_of(graph, node) not in OP_KERNELS:
        return None
    start, end = int(graph.attr_offsets[node]), int(graph.attr_offsets[node + 1])
    if end - start <= OP_SLOT or start + OP_SLOT >= graph.attr_pool.shape[0]:
        return None
    row = int(graph.attr_pool[start + OP_SLOT])
    return graph.op_names[row] if 0 <= row < len(graph.op_names) else None


def _kernel_of(graph, node):
    return graph.kernel_names[int(graph.node_kernel[node])]


def op_rows(graph):
    """(op nodes, the ops-table row each names in attribute OP_SLOT), both int64.

    GraphFormatError at the first op node with too few attributes (naming nodes.kernel and the
    node) or whose row lies outside the ops table (naming attributes.value and the slot's row).
    The attribute CSR is checked here too, so a graph loaded with `validate=False` cannot make
    this read past the attribute pool.
    """
    nodes = op_nodes(graph)
    rows = np.zeros(0, dtype=np.int64)
    if nodes.shape[0] == 0:
        return nodes, rows
    offsets = graph.attr_offsets
    pool = graph.attr_pool
    if offsets.shape[0] != graph.num_nodes + 1:
        raise GraphFormatError(
            f"has {offsets.shape[0]} rows, expected {NODES_TABLE} + 1 = {graph.num_nodes + 1}",
            table="node_offsets",
            column="attributes",
        )
    starts = offsets[nodes].astype(np.int64)
    ends = offsets[nodes + 1].astype(np.int64)
    short = (starts < 0) | (ends - starts <= OP_SLOT) | (starts + OP_SLOT >= pool.shape[0])
    if short.any():
        node = int(nodes[np.argmax(short)])
        raise GraphFormatError(
            f"node {node} runs {_kernel_of(graph, node)}, whose attribute {OP_SLOT} names its "
            f"op, but it has {max(int(offsets[node + 1] - offsets[node]), 0)} attribute(s)",
            table=_NODE_KERNEL.table,
            column=_NODE_KERNEL.column,
            row=node,
        )
    rows = pool[starts + OP_SLOT].astype(np.int64)
    count = len(graph.op_names)
    outside = (rows < 0) | (rows >= count)
    if outside.any():
        k = int(np.argmax(outside))
        node = int(nodes[k])
        raise GraphFormatError(
            f"node {node} runs {_kernel_of(graph, node)} of op row {int(rows[k])}, outside the "
            f"{count} row(s) of the {_OP_NAMES.table} table",
            table=_ATTRIBUTES.table,
            column=_ATTRIBUTES.column,
            row=int(starts[k] + OP_SLOT),
        )
    return nodes, rows


def _with_rows(graph, nodes, rows, names):
    """`graph` with attribute OP_SLOT of `nodes` set to `rows` and the ops table `names`."""
    pool = np.array(graph.attr_pool, dtype=np.int64)  # a copy: a loaded pool is read-only
    pool[graph.attr_offsets[nodes] + OP_SLOT] = rows
    return graph._replace(attr_pool=pool, op_names=tuple(names))


def compact_op_names(graph):
    """`graph` with an ops table of only the ops its op nodes run, in the table's order (what
    save_graph writes). A graph without op nodes, or using every row, is returned as it is."""
    nodes, rows = op_rows(graph)
    if nodes.shape[0] == 0:
        return graph
    used = np.unique(rows)
    if used.shape[0] == len(graph.op_names):
        return graph
    names = [graph.op_names[int(row)] for row in used]
    return _with_rows(graph, nodes, np.searchsorted(used, rows), names)


def bind_op_names(graph, table):
    """`graph` bound to the op switch `table` (op names, position = code): every op node's
    attribute OP_SLOT becomes the code of the op its row names, and the ops table `table`.
    Returned as it is when already bound (no copy). An op name `table` lacks is a
    GraphFormatError naming the op, the node and the ops row."""
    nodes, rows = op_rows(graph)
    if nodes.shape[0] == 0:
        return graph
    position = {name: code for code, name in enumerate(table)}
    codes = np.array([position.get(name, -1) for name in graph.op_names], dtype=np.int64)
    wanted = codes[rows]
    unknown = wanted < 0
    if unknown.any():
        k = int(np.argmax(unknown))
        node = int(nodes[k])
        row = int(rows[k])
        raise GraphFormatError(
            f"node {node} runs {_kernel_of(graph, node)} of op {graph.op_names[row]!r}, which "
            f"this rtsoa does not have (its {len(table)} ops are rtsoa.ops.OPS); lower the model "
            "with an rtsoa that has it",
            table=_OP_NAMES.table,
            column=_OP_NAMES.column,
            row=row,
        )
    if np.array_equal(wanted, rows):
        return graph
    return _with_rows(graph, nodes, wanted, table)


def refuse_unnamed_ops(graph, version):
    """GraphFormatError if a file of format `version` (before the ops table) holds op nodes:
    their codes cannot be checked against the op set that wrote them."""
    if version >= OPS_SINCE:
        return
    nodes = op_nodes(graph)
    if nodes.shape[0] == 0:
        return
    node = int(nodes[0])
    raise GraphFormatError(
        f"a format version {version} graph with op nodes (node {node} runs "
        f"{_kernel_of(graph, node)}): its op codes are positions in the op set of the rtsoa "
        f"that lowered it, which version {version} files do not record, so they cannot be "
        "checked; re-lower the model with this rtsoa (rtsoa lower MODEL.onnx -o OUT.rtsoa)",
        table=METADATA_TABLE,
        column="format_version",
        row=0,
    )


__all__ = ["bind_op_names", "compact_op_names", "op_nodes", "op_rows", "refuse_unnamed_ops"]
