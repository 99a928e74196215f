"""The lowering IR: `OpCall`, one op of `rtsoa.ops` on named tensors of a ComputeGraph, and
how the passes make and change them (`op_call`, `set_constant`).

Converters (`rtsoa.lowering.converters`) emit op calls; fold (`fold.py`), dead code
(`dead_code.py`) and fusion (`fuse.py`) rewrite the list; `emit.py` turns it into an
ExecuteGraph. `lower.py` runs them in that order.
"""

import dataclasses

import numpy as np

from rtsoa.errors import LoweringError
from rtsoa.lowering.budget import spend
from rtsoa.ops import OPS
from rtsoa.ops.abi import MAX_OP_OPERANDS, dtype_code

# Key of the op attributes holding the model's default-domain opset (for ops whose semantics
# changed across opsets: an op's `encode` reads attributes.get(OPSET_KEY)).
OPSET_KEY = "__opset__"


@dataclasses.dataclass
class OpCall:
    """One op to run: an op of `rtsoa.ops` on named tensors, from compute node `node`."""

    op: str
    inputs: list
    outputs: list
    attributes: dict
    node: int  # index of the ComputeGraph node it came from
    slots: np.ndarray | None = None  # the op's encoded attributes


def set_constant(graph, name, array):
    """Tensor `name` of `graph` is the constant `array`."""
    array = np.ascontiguousarray(array).reshape(np.shape(array))  # keep 0-d scalars 0-d
    tensor = graph.tensor(name)
    tensor.data = array
    tensor.dtype = dtype_code(array.dtype)
    tensor.dims = tuple(int(d) for d in array.shape)


def op_call(graph, op, inputs, outputs, attributes, node_index):
    """An OpCall of op `op` (a name in `rtsoa.ops.OPS`) on tensors `inputs` ("" = absent) of
    `graph`, from compute node `node_index`; its tensors are created in `graph` if new."""
    if op not in OPS:
        raise LoweringError(f"op {op!r} is not registered in rtsoa.ops")
    definition = OPS[op]
    low, high = definition.inputs
    count = len(inputs)
    while count > low and inputs[count - 1] == "":
        count -= 1  # trailing absent optional inputs
    inputs = list(inputs[:count])
    if count < low or (high is not None and count > high):
        where = _where(graph, op, node_index)
        raise LoweringError(f"{where}: op {op} takes {low}..{high} inputs, got {count}")
    low, high = definition.outputs
    if len(outputs) < low or (high is not None and len(outputs) > high):
        where = _where(graph, op, node_index)
        raise LoweringError(
            f"{where}: op {op} gives {low}..{high} outputs, {len(outputs)} asked for"
        )
    if len(inputs) + len(outputs) > MAX_OP_OPERANDS:
        raise LoweringError(
            f"{_where(graph, op, node_index)}: op {op} with {len(inputs)} inputs and "
            f"{len(outputs)} outputs exceeds {MAX_OP_OPERANDS} operands"
        )
    for name in inputs + list(outputs):
        if name:
            graph.tensor(name)
    attributes = dict(attributes or {})
    attributes.setdefault(OPSET_KEY, graph.opset(""))
    call = OpCall(op, inputs, list(outputs), attributes, node_index)
    spend("op_calls", 1, lambda: describe_call(graph, call))
    return call


def describe_call(graph, call):
    """How errors name `call`: its compute node, op and opset."""
    return _where(graph, call.op, call.node)


def _where(graph, op, index):
    """Compute node `index` of `graph` running op `op`, as errors name it."""
    node = graph.nodes[index] if 0 <= index < len(graph.nodes) else None
    where = node.describe(index) if node is not None else f"op {op}"
    return f"{where} (op {op}, opset {graph.opset('')})"
