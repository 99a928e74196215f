"""ExecuteGraph: the in-memory form of a graph, a NamedTuple of flat numpy arrays.

Column naming follows the tables in `rtsoa.graph.schema`: `node_*` are the nodes table, `*_offsets`
are node_offsets columns (length n + 1) and `*_targets` / `*_values` their flat CSR targets.
A graph loaded from disk holds read-only views of the memory-mapped files; a graph built in
memory holds ordinary arrays. Either way nothing in it is a Python object per node.
"""

from typing import NamedTuple

import numpy as np

from rtsoa.graph.schema import FIELDS, FORMAT_VERSION, DType, GraphKind


class GraphMeta(NamedTuple):
    """The metadata table: one row per graph file."""

    format_version: int = FORMAT_VERSION
    name: str = ""
    stream_count: int = 1
    event_count: int = 0
    notify_count: int = 0
    is_dynamic: bool = False
    has_loops: bool = False


def _field_type(field):
    return np.ndarray if field.dtype is not None else tuple


def _field_line(field):
    kind = str(field.dtype) if field.dtype is not None else "tuple of str"
    ids = f"; {field.ids}" if field.ids is not None else ""
    role = f" ({field.role.name} rows)" if field.role is not None else ""
    doc = f": {field.doc}" if field.doc else ""
    return f"    {field.name}: {field.where}{role} ({kind}{ids}){doc}"


# The field list comes from the one table of fields in rtsoa.graph.schema, plus `meta`.
_ExecuteGraphFields = NamedTuple(
    "_ExecuteGraphFields",
    [(field.name, _field_type(field)) for field in FIELDS] + [("meta", GraphMeta)],
)


class ExecuteGraph(_ExecuteGraphFields):
    """A whole execute graph (Init, Main, DeInit and their control-flow subgraphs).

    One field per entry of `rtsoa.graph.schema.FIELDS` (listed below: stored column, dtype,
    what the ids refer to), then `meta`, the metadata table as a GraphMeta.
    """

    __slots__ = ()

    @property
    def num_nodes(self):
        return int(self.node_kernel.shape[0])

    @property
    def num_edges(self):
        return int(self.succ_targets.shape[0])

    @property
    def num_values(self):
        return int(self.value_kind.shape[0])

    @property
    def attr_float_pool(self):
        """The attribute pool viewed as float64 (zero-copy)."""
        return self.attr_pool.view(np.float64)

    def nbytes(self):
        """Bytes held by the graph's arrays (the structure an executor works on)."""
        total = 0
        for value in self:
            if isinstance(value, np.ndarray):
                total += value.nbytes
        return total

    def root_of_graph(self):
        """For each owning graph id, the root (Init / Main / DeInit) it belongs to."""
        return root_graphs(self.graph_parent)

    def nodes_of(self, root=GraphKind.MAIN):
        """Ids of the nodes whose owning graph belongs to root graph `root` (sorted)."""
        roots = self.root_of_graph()
        return np.flatnonzero(roots[self.node_graph] == int(root)).astype(np.int32)

    def successors(self, node):
        """Successor ids of one node (a view)."""
        return self.succ_targets[self.succ_offsets[node] : self.succ_offsets[node + 1]]

    def inputs(self, node):
        return self.input_values[self.input_offsets[node] : self.input_offsets[node + 1]]

    def outputs(self, node):
        return self.output_values[self.output_offsets[node] : self.output_offsets[node + 1]]

    def attributes(self, node):
        return self.attr_pool[self.attr_offsets[node] : self.attr_offsets[node + 1]]

    def relations(self, node):
        return self.relation_targets[self.relation_offsets[node] : self.relation_offsets[node + 1]]

    def kernel_name(self, node):
        return self.kernel_names[int(self.node_kernel[node])]

    # -- named tensors (models) ---------------------------------------------------------
    def tensor_info(self, value):
        """(name, dims) of a named value, or None. `dims` is a tuple with per dimension its
        size (int), its symbol's name (str) or None (unknown), or None if the rank is unknown."""
        rows = np.flatnonzero(self.tensor_value == int(value))
        if rows.shape[0] == 0:
            return None
        return self._tensor_row_info(int(rows[0]))

    def _tensor_row_info(self, row):
        rank = int(self.tensor_rank[row])
        if rank < 0:
            return self.tensor_name[row], None
        start = int(self.tensor_dim_start[row])
        dims = []
        for size, symbol in zip(
            self.dim_size[start : start + rank].tolist(),
            self.dim_symbol[start : start + rank].tolist(),
            strict=True,
        ):
            if symbol >= 0:
                dims.append(self.symbol_names[symbol])
            else:
                dims.append(size if size >= 0 else None)
        return self.tensor_name[row], tuple(dims)

    def io_description(self):
        """{"inputs": [(name, value, DType, dims)], "outputs": [...]} in graph_inputs /
        graph_outputs order; an unnamed value is called f"value{v}" and has dims None."""
        rows = {value: row for row, value in enumerate(self.tensor_value.tolist())}
        description = {}
        for key, values in (("inputs", self.graph_inputs), ("outputs", self.graph_outputs)):
            entries = []
            for value in values.tolist():
                name, dims = f"value{value}", None
                if value in rows:
                    name, dims = self._tensor_row_info(rows[value])
                entries.append((name, value, DType(int(self.value_dtype[value])), dims))
            description[key] = entries
        return description

    def symbols(self):
        """Names of the graph's symbolic dimensions (rows of the symbols table)."""
        return tuple(self.symbol_names)


ExecuteGraph.__doc__ += "\n" + "\n".join(_field_line(field) for field in FIELDS) + "\n"


def is_dynamic(graph):
    """Whether `graph` has dynamic shapes: some named tensor (graph inputs and outputs among
    them) has an unknown rank or a symbolic or unknown dim, or its metadata says so."""
    if graph.meta.is_dynamic or (graph.tensor_rank < 0).any():
        return True
    ranks = graph.tensor_rank.astype(np.int64)
    total = int(ranks.sum())
    if total == 0:
        return False
    # The dims rows of every tensor's window, concatenated: start + 0 .. rank - 1 per tensor.
    ends = np.cumsum(ranks)
    rows = np.repeat(graph.tensor_dim_start - (ends - ranks), ranks) + np.arange(total)
    return bool((graph.dim_size[rows] < 0).any())


def root_graphs(graph_parent):
    """Root graph of every owning graph; parents always have smaller ids (validated)."""
    roots = np.arange(graph_parent.shape[0], dtype=np.int32)
    for graph in range(graph_parent.shape[0]):
        parent = int(graph_parent[graph])
        if parent >= 0:
            roots[graph] = roots[parent]
    return roots
