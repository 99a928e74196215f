"""GraphBuilder: create an ExecuteGraph node by node (lowering) or in bulk (generators).

Everything added is kept as flat columns and pair lists; `finalize()` turns them into CSR with
jitted counting sorts (no per-edge Python work) and validates the result.
"""

import numpy as np

from rtsoa.errors import GraphFormatError
from rtsoa.graph.csr import build_csr, in_degrees
from rtsoa.graph.graph import ExecuteGraph, GraphMeta
from rtsoa.graph.schema import (
    MAX_RANK,
    RANK_UNKNOWN,
    SIZE_UNKNOWN,
    DType,
    GraphKind,
    Placement,
    ValueKind,
    WorkerClass,
)
from rtsoa.graph.validate import validate_graph


class _Column:
    """An append-only column: scalars go to a list, arrays to chunks, in id order."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.chunks = []
        self.pending = []
        self.length = 0

    def append(self, value):
        self.pending.append(value)
        self.length += 1

    def extend(self, values):
        values = np.asarray(values)
        self._flush()
        self.chunks.append(np.ascontiguousarray(values, dtype=self.dtype))
        self.length += values.shape[0]

    def _flush(self):
        if self.pending:
            self.chunks.append(np.asarray(self.pending, dtype=self.dtype))
            self.pending = []

    def to_array(self):
        self._flush()
        if not self.chunks:
            return np.empty(0, dtype=self.dtype)
        if len(self.chunks) > 1:
            self.chunks = [np.concatenate(self.chunks)]
        return self.chunks[0]


class _Pairs:
    """(node, item) pairs that become a CSR over nodes, in insertion order per node."""

    def __init__(self, dtype):
        self.nodes = _Column(np.int32)
        self.items = _Column(dtype)

    def append(self, node, item):
        self.nodes.append(node)
        self.items.append(item)

    def extend(self, nodes, items):
        nodes = np.asarray(nodes)
        items = np.asarray(items)
        if nodes.shape != items.shape:
            raise ValueError("node and item arrays differ in length")
        self.nodes.extend(nodes)
        self.items.extend(items)


def _dim_size(tensor, dim):
    """dims.size of one entry of add_tensor_info's `dims`: the size, or -1 (symbol, unknown)."""
    if dim is None or isinstance(dim, str):
        return SIZE_UNKNOWN
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or not 0 <= dim < 2**63:
        raise ValueError(f"tensor {tensor!r}: a dim is an int >= 0, a str or None, got {dim!r}")
    return int(dim)


def float_bits(value):
    """The int64 attribute slot holding a float64 (kernels read it through a float64 view)."""
    return int(np.array([value], dtype=np.float64).view(np.int64)[0])


class GraphBuilder:
    """Builds an ExecuteGraph. Graph ids 0, 1, 2 are Init, Main and DeInit."""

    def __init__(self, name="", stream_count=1, event_count=0, notify_count=0, is_dynamic=False):
        self.meta = GraphMeta(
            name=name,
            stream_count=stream_count,
            event_count=event_count,
            notify_count=notify_count,
            is_dynamic=is_dynamic,
        )
        self._kernel_ids = {}
        self._kernel_names = []
        self._graph_kind = [int(GraphKind.INIT), int(GraphKind.MAIN), int(GraphKind.DEINIT)]
        self._graph_parent = [-1, -1, -1]
        self._graph_names = ["Init", "Main", "DeInit"]
        self._nodes = {
            "kernel": _Column(np.int32),
            "graph": _Column(np.int32),
            "priority": _Column(np.int32),
            "stream": _Column(np.int32),
            "worker": _Column(np.int8),
            "compute_node": _Column(np.int32),
            "clamp": _Column(np.int32),
        }
        self._values = {
            "kind": _Column(np.int8),
            "dtype": _Column(np.int8),
            "placement": _Column(np.int8),
            "producer": _Column(np.int32),
        }
        self._edges = _Pairs(np.int32)
        self._inputs = _Pairs(np.int32)
        self._outputs = _Pairs(np.int32)
        self._attributes = _Pairs(np.int64)
        self._relations = _Pairs(np.int32)
        self._constants = []  # uint8 arrays, concatenated into the blob by finalize
        self._constant_bytes = 0
        self._graph_inputs = []
        self._graph_outputs = []
        self._tensors = {"value": [], "name": [], "rank": [], "dim_start": []}
        self._dims = {"size": [], "symbol": []}
        self._symbol_ids = {}
        self._op_ids = {}  # the ops table: op name -> row (format version 3)
        self.has_loops = False

    # -- small tables -------------------------------------------------------------------
    @property
    def num_nodes(self):
        return self._nodes["kernel"].length

    @property
    def num_values(self):
        return self._values["kind"].length

    def kernel_index(self, name):
        """Index of a kernel name in this graph's kernel table (added on first use)."""
        if name not in self._kernel_ids:
            self._kernel_ids[name] = len(self._kernel_names)
            self._kernel_names.append(str(name))
        return self._kernel_ids[name]

    def op_index(self, name):
        """Row of an op name in this graph's ops table (added on first use): the value of
        attribute 0 of an OpInferShape / OpLaunch node running that op."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"an op name is a non-empty str, got {name!r}")
        return self._op_ids.setdefault(name, len(self._op_ids))

    def set_op_names(self, names):
        """Replace the ops table by `names` (unique; row = position): what lowering uses to
        store op codes of an op registry directly (row = code)."""
        self._op_ids = {}
        for name in names:
            self.op_index(name)
        if len(self._op_ids) != len(names):
            raise ValueError(f"op names repeat: {list(names)}")

    def add_subgraph(self, kind, parent=GraphKind.MAIN, name=""):
        """A control-flow subgraph (branch, loop condition or body) owned by `parent`."""
        if not 0 <= int(parent) < len(self._graph_kind):
            raise ValueError(f"parent graph {parent} does not exist")
        if int(kind) in (GraphKind.LOOP_BODY, GraphKind.LOOP_COND):
            self.has_loops = True
        self._graph_kind.append(int(kind))
        self._graph_parent.append(int(parent))
        self._graph_names.append(name or f"subgraph{len(self._graph_kind) - 1}")
        return len(self._graph_kind) - 1

    def add_constant(self, data, copy=True):
        """Append bytes to the constant blob; returns (offset, length) to store as attributes.

        `data`: bytes-like, or a numpy array (its C-order bytes). `copy=False` keeps a view of
        an array and copies it into the blob only when the graph is finalized, so a model's
        weights are not held twice while it is built: the caller keeps `data` unchanged until
        then (the lowering does, for the constants of a model it owns)."""
        if isinstance(data, np.ndarray):
            chunk = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
            if copy:
                chunk = chunk.copy()
        else:
            chunk = np.frombuffer(bytes(data), dtype=np.uint8)  # bytes: no copy
        offset = self._constant_bytes
        self._constants.append(chunk)
        self._constant_bytes += chunk.shape[0]
        return offset, int(chunk.shape[0])

    def _constant_blob(self):
        """The constants as one array, written once; the builder keeps only that array."""
        blob = np.empty(self._constant_bytes, dtype=np.uint8)
        at = 0
        for chunk in self._constants:
            blob[at : at + chunk.shape[0]] = chunk
            at += chunk.shape[0]
        self._constants = [blob]
        return blob

    def symbol_index(self, name):
        """Row of a symbolic dimension's name (e.g. "batch") in the symbols table (interned)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a symbol is a non-empty str, got {name!r}")
        return self._symbol_ids.setdefault(name, len(self._symbol_ids))

    def add_tensor_info(self, value, name, dims):
        """Name value `value` and give its shape; returns its row in the tensors table.

        `dims` is a sequence with one entry per dimension: an int >= 0 (static size), a str
        (a symbol such as "batch", interned by name) or None (unknown size); `dims=None` means
        the rank itself is unknown. Each value and each name may be given once (validated).
        """
        if dims is None:
            sizes, symbols = [], []
        else:
            dims = list(dims)
            if len(dims) > MAX_RANK:
                raise ValueError(f"tensor {name!r}: rank {len(dims)} above {MAX_RANK}")
            sizes = [_dim_size(name, dim) for dim in dims]
            symbols = [self.symbol_index(dim) if isinstance(dim, str) else -1 for dim in dims]
        tensors = self._tensors
        tensors["value"].append(int(value))
        tensors["name"].append(str(name))
        tensors["rank"].append(RANK_UNKNOWN if dims is None else len(sizes))
        tensors["dim_start"].append(len(self._dims["size"]))
        self._dims["size"].extend(sizes)
        self._dims["symbol"].extend(symbols)
        return len(tensors["value"]) - 1

    def mark_graph_input(self, value):
        self._graph_inputs.append(int(value))

    def mark_graph_output(self, value):
        self._graph_outputs.append(int(value))

    # -- nodes and values, one at a time ------------------------------------------------
    def add_node(
        self,
        kernel,
        graph=GraphKind.MAIN,
        priority=0,
        stream=0,
        worker=WorkerClass.NORMAL,
        compute_node=-1,
        attributes=(),
        inputs=(),
        wait_anyone=False,
    ):
        """Add one node; `attributes` are ints or floats (floats stored as their bits)."""
        node = self.num_nodes
        columns = self._nodes
        columns["kernel"].append(self.kernel_index(kernel))
        columns["graph"].append(int(graph))
        columns["priority"].append(int(priority))
        columns["stream"].append(int(stream))
        columns["worker"].append(int(worker))
        columns["compute_node"].append(int(compute_node))
        columns["clamp"].append(1 if wait_anyone else -1)
        for attribute in attributes:
            if isinstance(attribute, float | np.floating):
                attribute = float_bits(attribute)
            self._attributes.append(node, int(attribute))
        for value in inputs:
            self._inputs.append(node, int(value))
        return node

    def add_value(
        self,
        kind=ValueKind.TENSOR,
        dtype=DType.FLOAT32,
        placement=Placement.DEVICE_HBM,
        producer=-1,
    ):
        """Add a value slot; when `producer` is a node, the value becomes its next output."""
        value = self.num_values
        self._values["kind"].append(int(kind))
        self._values["dtype"].append(int(dtype))
        self._values["placement"].append(int(placement))
        self._values["producer"].append(int(producer))
        if producer >= 0:
            self._outputs.append(int(producer), value)
        return value

    def add_edge(self, source, target):
        """A data or control edge: `target` runs after `source` (duplicates are merged)."""
        self._edges.append(int(source), int(target))

    def add_relation(self, free_node, launch_node):
        """An exact Free -> Launch relation (the Free waits for that Launch's submission)."""
        self._relations.append(int(free_node), int(launch_node))

    def add_input(self, node, value):
        self._inputs.append(int(node), int(value))

    # -- bulk ----------------------------------------------------------------------------
    def add_nodes(
        self,
        kernels,
        graph=GraphKind.MAIN,
        priority=None,
        stream=0,
        worker=WorkerClass.NORMAL,
        compute_node=-1,
    ):
        """Add len(kernels) nodes; `kernels` are names or this graph's kernel indices.

        Scalar arguments are broadcast. Returns the id of the first new node.
        """
        kernels = np.asarray(kernels)
        count = kernels.shape[0]
        if kernels.dtype.kind in "USO":
            names, inverse = np.unique(kernels, return_inverse=True)
            table = np.array([self.kernel_index(str(name)) for name in names], dtype=np.int32)
            kernels = table[inverse]
        elif count and (kernels.min() < 0 or kernels.max() >= len(self._kernel_names)):
            raise ValueError("kernel index out of range; register names with kernel_index()")
        first = self.num_nodes
        if priority is None:
            priority = np.arange(first, first + count, dtype=np.int64)

        def column(value, dtype):
            # A real array per column (a broadcast view would have stride 0).
            return np.ascontiguousarray(np.broadcast_to(np.asarray(value, dtype=dtype), (count,)))

        self._nodes["kernel"].extend(kernels.astype(np.int32))
        self._nodes["graph"].extend(column(graph, np.int32))
        self._nodes["priority"].extend(column(priority, np.int32))
        self._nodes["stream"].extend(column(stream, np.int32))
        self._nodes["worker"].extend(column(worker, np.int8))
        self._nodes["compute_node"].extend(column(compute_node, np.int32))
        self._nodes["clamp"].extend(column(-1, np.int32))
        return first

    def add_edges(self, sources, targets):
        self._edges.extend(sources, targets)

    def add_relations(self, free_nodes, launch_nodes):
        self._relations.extend(free_nodes, launch_nodes)

    def add_inputs(self, nodes, values):
        self._inputs.extend(nodes, values)

    def add_attributes(self, nodes, values):
        """Attribute slots in bulk, appended per node in the order given."""
        self._attributes.extend(nodes, np.asarray(values, dtype=np.int64))

    def add_values(self, producers, kind, dtype=DType.FLOAT32, placement=Placement.DEVICE_HBM):
        """One value per entry of `producers` (-1 for none); returns the first value id."""
        producers = np.asarray(producers, dtype=np.int32)
        count = producers.shape[0]
        first = self.num_values
        self._values["kind"].extend(np.full(count, int(kind), dtype=np.int8))
        self._values["dtype"].extend(np.full(count, int(dtype), dtype=np.int8))
        self._values["placement"].extend(np.full(count, int(placement), dtype=np.int8))
        self._values["producer"].extend(producers)
        produced = producers >= 0
        ids = np.arange(first, first + count, dtype=np.int32)
        self._outputs.extend(producers[produced], ids[produced])
        return first

    # -- finalize ------------------------------------------------------------------------
    def _csr(self, pairs, table, dedupe=False, dtype=np.int32):
        nodes = pairs.nodes.to_array()
        items = pairs.items.to_array()
        n = self.num_nodes
        if nodes.shape[0] and (nodes.min() < 0 or nodes.max() >= n):
            row = int(np.argmax((nodes < 0) | (nodes >= n)))
            raise GraphFormatError(f"source node {int(nodes[row])} does not exist", table, row=row)
        return build_csr(nodes, items, n, dedupe=dedupe, dtype=dtype)

    def finalize(self, validate=True):
        """The ExecuteGraph, with CSRs built, in-degree template computed and validated."""
        n = self.num_nodes
        edge_targets = self._edges.items.to_array()
        if edge_targets.shape[0] and (edge_targets.min() < 0 or edge_targets.max() >= n):
            row = int(np.argmax((edge_targets < 0) | (edge_targets >= n)))
            raise GraphFormatError(
                f"edge target {int(edge_targets[row])} does not exist", "edges", "target", row
            )
        succ_offsets, succ_targets = self._csr(self._edges, "edges", dedupe=True)
        degree = in_degrees(succ_offsets, succ_targets, n)
        clamp = self._nodes["clamp"].to_array()
        clamped = (clamp >= 0) & (degree > clamp)
        degree[clamped] = clamp[clamped]
        input_offsets, input_values = self._csr(self._inputs, "node_inputs")
        output_offsets, output_values = self._csr(self._outputs, "node_outputs")
        attr_offsets, attr_pool = self._csr(self._attributes, "attributes", dtype=np.int64)
        relation_offsets, relation_targets = self._csr(self._relations, "relations", dedupe=True)
        meta = self.meta._replace(has_loops=self.has_loops)
        graph = ExecuteGraph(
            node_kernel=self._nodes["kernel"].to_array(),
            node_graph=self._nodes["graph"].to_array(),
            node_priority=self._nodes["priority"].to_array(),
            node_stream=self._nodes["stream"].to_array(),
            node_worker=self._nodes["worker"].to_array(),
            node_compute=self._nodes["compute_node"].to_array(),
            in_degree=degree,
            succ_offsets=succ_offsets,
            succ_targets=succ_targets,
            input_offsets=input_offsets,
            input_values=input_values,
            output_offsets=output_offsets,
            output_values=output_values,
            attr_offsets=attr_offsets,
            attr_pool=attr_pool,
            relation_offsets=relation_offsets,
            relation_targets=relation_targets,
            constants=self._constant_blob(),
            value_kind=self._values["kind"].to_array(),
            value_dtype=self._values["dtype"].to_array(),
            value_placement=self._values["placement"].to_array(),
            value_producer=self._values["producer"].to_array(),
            kernel_names=tuple(self._kernel_names),
            graph_kind=np.asarray(self._graph_kind, dtype=np.int8),
            graph_parent=np.asarray(self._graph_parent, dtype=np.int32),
            graph_names=tuple(self._graph_names),
            graph_inputs=np.asarray(self._graph_inputs, dtype=np.int32),
            graph_outputs=np.asarray(self._graph_outputs, dtype=np.int32),
            tensor_value=np.asarray(self._tensors["value"], dtype=np.int32),
            tensor_name=tuple(self._tensors["name"]),
            tensor_rank=np.asarray(self._tensors["rank"], dtype=np.int8),
            tensor_dim_start=np.asarray(self._tensors["dim_start"], dtype=np.int64),
            dim_size=np.asarray(self._dims["size"], dtype=np.int64),
            dim_symbol=np.asarray(self._dims["symbol"], dtype=np.int32),
            symbol_names=tuple(self._symbol_ids),
            op_names=tuple(self._op_ids),
            meta=meta,
        )
        if validate:
            validate_graph(graph)
        return graph
