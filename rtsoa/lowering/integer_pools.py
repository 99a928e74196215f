"""MaxPool on int8 / uint8 (opset 12 on), composed at lowering: a Cast to float32 (exact for
every value of both types), the float MaxPool, and a Cast back. A max selects one of the
window's values, so the result, and the indices output where asked for, are the op's own."""

from rtsoa.abi.dtypes import DTYPES
from rtsoa.graph.schema import DType
from rtsoa.lowering.converters import one_to_one, register_converter

_SMALL_INTEGERS = (DType.INT8, DType.UINT8)


@register_converter("MaxPool", since=1)
def max_pool(ctx, node):
    """MaxPool: the op itself, on float32 copies of an int8 / uint8 input."""
    x = node.inputs[0]
    kind = ctx.tensor(x).dtype
    if kind not in _SMALL_INTEGERS:
        one_to_one(ctx, node)
        return
    wide, pooled = ctx.fresh_name(f"{x}_float"), ctx.fresh_name("max_pool_float")
    ctx.emit("Cast", [x], [wide], {"to": DTYPES[DType.FLOAT32].onnx})
    ctx.emit("MaxPool", [wide], [pooled, *node.outputs[1:]], node.attributes)
    ctx.emit("Cast", [pooled], node.outputs[:1], {"to": DTYPES[kind].onnx})
