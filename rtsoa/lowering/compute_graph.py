"""ComputeGraph: a model as ops over named tensors, before lowering.

The ONNX importer (`rtsoa.lowering.onnx_import`) produces one; converters
(`rtsoa.lowering.converters`) read it; `rtsoa.lowering.lower` turns it into an ExecuteGraph.
Tensors have a DType and dims that are ints (static), strs (symbolic: "batch") or None
(unknown); `dims` None means the rank is unknown. Constants (initializers, Constant nodes,
folded values) carry their data. A sequence value is a Tensor with `sequence` set: a list of
tensors whose length and element names are known at lowering (`elements`).
"""

import dataclasses

import numpy as np

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
