"""ComputeGraph: a model as ops over named tensors, before lowering.

The ONNX importer (`rtsoa.lowering.onnx_import`) produces one; converters
(`rtsoa.lowering.converters`) read it; `rtsoa.lowering.lower` turns it into an ExecuteGraph.
Tensors have a DType and dims that are ints (static), strs (symbolic: "batch") or None
(unknown); `dims` None means the rank is unknown. Constants (initializers, Constant nodes,
folded values) carry their data. A sequence value is a Tensor with `sequence` set: a list of
tensors whose length and element names are known at lowering (`elements`).
"""

import dataclasses
import heapq

import numpy as np

from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType


@dataclasses.dataclass
class Tensor:
    """A named value of the model."""

    name: str
    dtype: DType = DType.UNDEFINED
    dims: tuple | None = None  # ints, symbol names, None (unknown); None: rank unknown
    data: np.ndarray | None = None  # constants only
    # A sequence value (a list of tensors; `dtype` is its elements'), resolved at lowering by
    # rtsoa.lowering.sequences into `elements`: the names of its element tensors, in order.
    sequence: bool = False
    elements: tuple | None = None
    # A string tensor (`dtype` stays UNDEFINED): its values live on the host, and only host
    # steps (rtsoa.lowering.host_split) read or make it.
    string: bool = False
    # A sequence of maps {key: float} (ZipMap's output), a host value like a string tensor:
    # its key type ("int64" or "string"); "" for any other value.
    maps: str = ""

    @property
    def on_host(self):
        """Does the value live on the host only (a string tensor or a sequence of maps)?"""
        return self.string or bool(self.maps)

    @property
    def is_constant(self):
        return self.data is not None

    @property
    def is_static(self):
        """Are all dims known integers?"""
        return self.dims is not None and all(isinstance(d, int) for d in self.dims)


@dataclasses.dataclass
class Node:
    """One op of the model."""

    op_type: str
    inputs: list  # tensor names; "" for an absent optional input
    outputs: list  # tensor names
    attributes: dict = dataclasses.field(default_factory=dict)
    name: str = ""
    domain: str = ""  # "" is the default ONNX domain
    subgraphs: dict = dataclasses.field(default_factory=dict)  # attribute -> ComputeGraph

    def describe(self, index=None):
        """`Conv node 'conv1' (#3)`: how errors name a node."""
        where = f" (#{index})" if index is not None else ""
        named = f" {self.name!r}" if self.name else ""
        domain = f"{self.domain}." if self.domain else ""
        return f"{domain}{self.op_type} node{named}{where}"


@dataclasses.dataclass
class ComputeGraph:
    """A model: nodes in a topological order, tensors by name, inputs and outputs."""

    name: str = ""
    nodes: list = dataclasses.field(default_factory=list)
    tensors: dict = dataclasses.field(default_factory=dict)
    inputs: list = dataclasses.field(default_factory=list)  # names of graph inputs
    outputs: list = dataclasses.field(default_factory=list)  # names of graph outputs
    opsets: dict = dataclasses.field(default_factory=dict)  # domain -> opset version

    def tensor(self, name):
        """The Tensor `name`, created (unknown dtype and shape) if new."""
        if name not in self.tensors:
            self.tensors[name] = Tensor(name)
        return self.tensors[name]

    def opset(self, domain=""):
        """The opset version of `domain` the model imports (0 if none)."""
        return int(self.opsets.get(domain, self.opsets.get("ai.onnx", 0)))

    def op_counts(self):
        """{op type: count}, for inspect."""
        counts = {}
        for node in self.nodes:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
        return dict(sorted(counts.items()))


def sort_nodes(graph, outer=frozenset(), where=""):
    """Put `graph.nodes` (and every subgraph's) in a topological order, as onnxruntime does for
    a model that lists them otherwise: the listed order where it is one already (Kahn's
    algorithm taking the first listed ready node). `outer`: names the enclosing graphs define
    (a subgraph may read them); `where`: how errors name a subgraph ("If node 'a' (#3)
    attribute 'then_branch': "). Returns the names the graph reads from `outer`. LoweringError
    for a tensor nothing defines (naming node and tensor), a tensor two nodes produce, or
    nodes that form a cycle (naming them)."""
    nodes = graph.nodes
    producer = {}  # tensor name -> index of the node producing it
    for index, node in enumerate(nodes):
        for name in node.outputs:
            if not name:
                continue
            if name in producer:
                first = nodes[producer[name]].describe(producer[name])
                raise LoweringError(
                    f"{where}{node.describe(index)} and {first} both produce tensor {name!r}"
                )
            producer[name] = index
    given = set(graph.inputs) | {name for name, t in graph.tensors.items() if t.is_constant}
    scope = outer | given | producer.keys()
    reads_outer = set()
    successors = [[] for _ in nodes]
    in_degree = [0] * len(nodes)
    for index, node in enumerate(nodes):
        reads = [name for name in node.inputs if name]
        for attribute, subgraph in node.subgraphs.items():
            inner = f"{where}{node.describe(index)} attribute {attribute!r}: "
            reads.extend(sorted(sort_nodes(subgraph, frozenset(scope), inner)))
        for name in dict.fromkeys(reads):  # each predecessor once, in a stable order
            if name in producer:
                successors[producer[name]].append(index)
                in_degree[index] += 1
            elif name in outer and name not in given:
                reads_outer.add(name)
            elif name not in given:
                raise LoweringError(
                    f"{where}{node.describe(index)}: input tensor {name!r} is not defined by "
                    "any node, graph input or initializer (here or in an enclosing graph)"
                )
    for name in graph.outputs:
        if name not in scope:
            raise LoweringError(
                f"{where}graph output {name!r} is not defined by any node, graph input or "
                "initializer"
            )
        if name in outer and name not in given and name not in producer:
            reads_outer.add(name)
    ready = [index for index, degree in enumerate(in_degree) if degree == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for successor in successors[index]:
            in_degree[successor] -= 1
            if in_degree[successor] == 0:
                heapq.heappush(ready, successor)
    if len(order) < len(nodes):
        cycle = _cycle(successors, in_degree)
        names = " -> ".join(nodes[index].describe(index) for index in cycle)
        raise LoweringError(f"{where}nodes form a cycle: {names}")
    graph.nodes = [nodes[index] for index in order]
    return reads_outer


def _cycle(successors, in_degree):
    """Node indices of one cycle, its first node repeated at the end, among the nodes Kahn's
    algorithm left (in_degree > 0): each of them has a predecessor left, so walking
    predecessors from any of them must come back to a node it passed."""
    left = [index for index, degree in enumerate(in_degree) if degree > 0]
    predecessor = {}
    for index in left:
        for successor in successors[index]:
            if in_degree[successor] > 0:
                predecessor.setdefault(successor, index)
    seen = {}
    index = left[0]
    while index not in seen:
        seen[index] = len(seen)
        index = predecessor[index]
    walk = list(seen)[seen[index] :]
    walk.reverse()  # predecessors were followed backwards
    return [*walk, walk[0]]
