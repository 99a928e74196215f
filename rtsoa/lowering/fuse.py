"""Op fusion, a lowering pass between dead-op elimination and emission.

`fuse_matmul_bias`: MatMul -> Add of a bias (-> Relu) becomes one `MatMulBias` op
(`rtsoa/ops/linalg.py`), as onnxruntime fuses MatMul + Add into Gemm and Gemm + Relu into
FusedGemm. Each op of the lowered graph costs its nodes (OpInferShape, AllocMemory, OpLaunch
and the FreeMemory of its result), whatever its size: on small tensors that is most of an
inference. A chain is fused only where the result cannot differ:

- the MatMul's A has a known rank of at least 2 and W a known rank of 2;
- the Add's other operand is a constant bias of W's column count elements, every dim but the
  last 1 and a rank at most A's, so the Add broadcasts nothing into the product's shape;
- the product (and the Add's result, when a Relu is fused) is read by that op alone and is
  not a graph output;
- the dtypes are float32 or float64 (MatMul and Add refuse mixed ones anyway).

The fused op computes the product and the adds in the same order and precision as the ops it
replaces, so its results equal theirs bit for bit (`tests/test_lowering_fusion.py`).
`lower(model, fuse=False)` keeps every op as the model has it.
"""

import numpy as np

from rtsoa.graph.schema import DType
from rtsoa.lowering.lower import OpCall
from rtsoa.ops.linalg import ACT_NONE, ACT_RELU
from rtsoa.ops.registry import OPS

_FLOATS = (DType.FLOAT32, DType.FLOAT64)


def _readers(calls):
    """Tensor name -> the calls reading it (an If / Loop region's outer reads included)."""
    readers = {}
    for call in calls:
        for name in call.inputs:
            if name:
                readers.setdefault(name, []).append(call)
    return readers


def _sole_reader(name, readers, outputs, op):
    """The one call reading `name` if it is an `op` call and `name` is not a graph output."""
    if name in outputs:
        return None
    found = readers.get(name, ())
    if len(found) != 1 or getattr(found[0], "region", False) or found[0].op != op:
        return None
    return found[0]


def _bias_of(graph, add, product, columns, rank):
    """The Add's bias operand if it is a constant that broadcasts along the last axis only."""
    if len(add.inputs) != 2:
        return None
    other = add.inputs[1] if add.inputs[0] == product else add.inputs[0]
    if other == product or product not in add.inputs:
        return None
    tensor = graph.tensors.get(other)
    if tensor is None or not tensor.is_constant:
        return None
    shape = tuple(int(d) for d in np.shape(tensor.data))
    if len(shape) > rank or int(np.prod(shape, dtype=np.int64)) != columns:
        return None
    if shape and (shape[-1] != columns or any(d != 1 for d in shape[:-1])):
        return None
    return other


def fuse_matmul_bias(graph, calls):
    """`calls` with each fusable MatMul -> Add (-> Relu) chain as one MatMulBias call (see the
    module docstring); the fused call takes the MatMul's place, the others are dropped."""
    readers = _readers(calls)
    outputs = set(graph.outputs)
    replaced = {}  # id(call) -> its replacement (None: dropped)
    for call in calls:
        if getattr(call, "region", False) or call.op != "MatMul" or id(call) in replaced:
            continue
        if len(call.inputs) != 2 or len(call.outputs) != 1:
            continue
        a, w = (graph.tensors.get(name) for name in call.inputs)
        (product,) = call.outputs
        if a is None or w is None or a.dims is None or w.dims is None:
            continue
        if len(a.dims) < 2 or len(w.dims) != 2 or a.dtype not in _FLOATS or w.dtype != a.dtype:
            continue
        columns = w.dims[1]
        if not isinstance(columns, int | np.integer):
            continue
        add = _sole_reader(product, readers, outputs, "Add")
        if add is None or id(add) in replaced:
            continue
        bias = _bias_of(graph, add, product, int(columns), len(a.dims))
        if bias is None or graph.tensors[bias].dtype != a.dtype:
            continue
        (result,) = add.outputs
        activation = ACT_NONE
        relu = _sole_reader(result, readers, outputs, "Relu")
        if relu is not None and id(relu) not in replaced:
            activation = ACT_RELU
            replaced[id(relu)] = None
            (result,) = relu.outputs
        replaced[id(add)] = None
        attributes = dict(call.attributes)
        attributes["activation"] = activation
        fused = OpCall(
            "MatMulBias", [call.inputs[0], call.inputs[1], bias], [result], attributes, call.node
        )
        fused.slots = OPS["MatMulBias"].slots(attributes, [])
        replaced[id(call)] = fused
    if not replaced:
        return calls
    kept = []
    for call in calls:
        if id(call) in replaced:
            if replaced[id(call)] is not None:
                kept.append(replaced[id(call)])
        else:
            kept.append(call)
    return kept
