"""The element types an op declares it runs (`register_op(..., dtypes=...)`), checked at
lowering: a model whose op gets a dtype it cannot run is refused there, naming the op, the
node and the dtype, rather than failing when it runs. Tensors whose dtype is not known at
lowering are left to the op's own check at run time."""

from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.ops import OPS


def check_dtypes(graph, call, describe):
    """Raise LoweringError (prefixed by `describe(graph, call)`, which names the node) if an
    input of `call` has a dtype its op does not declare."""
    declared = OPS[call.op].dtypes
    if not declared:
        return
    for position, allowed in declared.items():
        if position >= len(call.inputs) or not call.inputs[position]:
            continue
        name = call.inputs[position]
        tensor = graph.tensors.get(name)
        if tensor is None or tensor.dtype == DType.UNDEFINED or tensor.dtype in allowed:
            continue
        names = ", ".join(sorted(DType(code).name.lower() for code in allowed))
        raise LoweringError(
            f"{describe(graph, call)}: input {position} ({name!r}) has element type "
            f"{DType(tensor.dtype).name.lower()}, which op {call.op} does not take (it takes "
            f"{names})"
        )
