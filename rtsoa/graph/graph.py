"""ExecuteGraph: the in-memory form of a graph, a NamedTuple of flat numpy arrays.

Column naming follows the tables in `rtsoa.graph.schema`: `node_*` are the nodes table, `*_offsets`
are node_offsets columns (length n + 1) and `*_targets` / `*_values` their flat CSR targets.
A graph loaded from disk holds read-only views of the memory-mapped files; a graph built in
memory holds ordinary arrays. Either way nothing in it is a Python object per node.
"""

from typing import NamedTuple

import numpy as np

from rtsoa.graph.schema import FORMAT_VERSION, GraphKind


class GraphMeta(NamedTuple):
    """The metadata table: one row per graph file."""

    format_version: int = FORMAT_VERSION
    name: str = ""
    stream_count: int = 1
    event_count: int = 0
    notify_count: int = 0
    is_dynamic: bool = False
    has_loops: bool = False


class ExecuteGraph(NamedTuple):
    """A whole execute graph (Init, Main, DeInit and their control-flow subgraphs)."""

    # nodes table (n rows)
    node_kernel: np.ndarray  # int32, index into kernel_names
    node_graph: np.ndarray  # int32, index into graph_kind / graph_parent / graph_names
    node_priority: np.ndarray  # int32, smaller runs first
    node_stream: np.ndarray  # int32
    node_worker: np.ndarray  # int8, WorkerClass
    node_compute: np.ndarray  # int32, originating compute node or -1
    in_degree: np.ndarray  # int32 in-degree template (wait-anyone clamped to 1)
    # CSRs over nodes: offsets int64 (n + 1), targets int32 / int64
    succ_offsets: np.ndarray
    succ_targets: np.ndarray
    input_offsets: np.ndarray
    input_values: np.ndarray
    output_offsets: np.ndarray
    output_values: np.ndarray
    attr_offsets: np.ndarray
    attr_pool: np.ndarray  # int64; float attributes are the same bits viewed as float64
    relation_offsets: np.ndarray
    relation_targets: np.ndarray  # Free node -> Launch nodes
    constants: np.ndarray  # uint8 blob; constants are (offset, length) int attributes
    # values table
    value_kind: np.ndarray  # int8, ValueKind
    value_dtype: np.ndarray  # int8, DType
    value_placement: np.ndarray  # int8, Placement
    value_producer: np.ndarray  # int32, producing node or -1
    # small tables
    kernel_names: tuple
    graph_kind: np.ndarray  # int8, GraphKind
    graph_parent: np.ndarray  # int32, -1 for the roots Init / Main / DeInit
    graph_names: tuple
    graph_inputs: np.ndarray  # int32 value ids
    graph_outputs: np.ndarray  # int32 value ids
    meta: GraphMeta

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


def root_graphs(graph_parent):
    """Root graph of every owning graph; parents always have smaller ids (validated)."""
    roots = np.arange(graph_parent.shape[0], dtype=np.int32)
    for graph in range(graph_parent.shape[0]):
        parent = int(graph_parent[graph])
        if parent >= 0:
            roots[graph] = roots[parent]
    return roots
