"""Reruns that keep the shapes: Main without its shape inference when the input shapes repeat.

A lowered model computes its tensors' shapes at run time (OpInferShape, one per op). When every
shape of Main follows from the input shapes alone, a run whose inputs have the shapes of the
previous successful run computes exactly the shapes that run left in the value state. Such a
rerun runs a second prepared Main whose OpInferShape nodes are OpInferShapeKept (the same node,
edges and checksum; it keeps the shapes instead of inferring them). Every OpLaunch still checks
its operands' shapes against the op's shape inference, so a kept shape that were wrong would
stop the run with a status, never reach compute.

Every shape of Main follows from the input shapes alone when:
- Main runs only the kernels of plain lowered ops (no If / Loop control flow, whose branches
  and iterations change shapes, and no kernel of a user, whose outputs rtsoa cannot vouch for);
- no OpInferShape of Main reads data (Reshape of a computed shape, Slice with tensor starts,
  ...: their header's data mask is zero);
- no graph of the model is a subgraph (If / Loop bodies).

`ModelExecutor` takes the kept path only for runs without subscribers (a profile or a trace
shows every shape inference) and only after a successful run; a failed run, or other input
shapes, make the next run a full one.
"""

import numpy as np

from rtsoa.graph.schema import GraphKind
from rtsoa.kernels.checksum import FOLDS_AS

# Each kernel the kept Main runs in place of another (the one it folds as)
KEPT = {stands_for: kernel for kernel, stands_for in FOLDS_AS.items()}
# Kernels of plain lowered ops: what Main may run for its shapes to follow from the inputs'.
PLAIN = frozenset(
    {
        "AllocMemory",
        "ConstTensor",
        "FreeMemory",
        "OpInferShape",
        "OpLaunch",
        "RecordEvent",
        "StreamWaitEvent",
        "UploadConstant",
    }
)
_DATA_MASK = 4  # attribute of the op header (rtsoa.kernels.compute): inputs whose data is read


def kept_shapes_graph(graph):
    """`graph` with Main's OpInferShape nodes running OpInferShapeKept, or None when the
    shapes of Main do not follow from the input shapes alone (see the module docstring)."""
    if (np.asarray(graph.graph_parent) >= 0).any():
        return None
    names = list(graph.kernel_names)
    if "OpInferShape" not in names:
        return None
    main = graph.nodes_of(GraphKind.MAIN)
    kernels = np.asarray(graph.node_kernel)[main]
    if any(names[k] not in PLAIN for k in np.unique(kernels).tolist()):
        return None
    infer = main[kernels == names.index("OpInferShape")]
    offsets = np.asarray(graph.attr_offsets)
    if (offsets[infer + 1] - offsets[infer] <= _DATA_MASK).any():
        return None  # a malformed header: the full path reports it
    if (np.asarray(graph.attr_pool)[offsets[infer] + _DATA_MASK] != 0).any():
        return None
    return graph._replace(kernel_names=tuple(KEPT.get(name, name) for name in names))
