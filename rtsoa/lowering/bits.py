"""The bit converters: BitShift (opsets 11 and 28; `rtsoa.ops.bitwise` implements opset 28's
rules, which define what opset 11 left open, so one op serves both) with its direction
checked at lowering, and BitCast (opset 26; `rtsoa.ops.bitcast`) with its target type and
the widths checked, naming the node."""

from rtsoa.abi.dtypes import DTYPE_OF_ONNX, DTYPES, DType
from rtsoa.errors import LoweringError
from rtsoa.lowering.converters import register_converter
from rtsoa.ops.bitcast import bit_width
from rtsoa.ops.bitwise import DIRECTIONS


def _direction(value):
    return value.decode() if isinstance(value, bytes) else str(value)


@register_converter("BitShift", since=11)
@register_converter("BitShift", since=28)
def bit_shift(ctx, node):
    """BitShift with a direction of LEFT or RIGHT."""
    if "direction" not in node.attributes:
        raise LoweringError(f"{ctx.describe(node)}: attribute 'direction' is missing")
    direction = _direction(node.attributes["direction"])
    if direction not in DIRECTIONS:
        raise LoweringError(
            f"{ctx.describe(node)}: direction {direction!r} is not one of LEFT, RIGHT"
        )
    ctx.emit("BitShift", node.inputs, node.outputs, {"direction": direction})


@register_converter("BitCast", since=26)
def bit_cast(ctx, node):
    """BitCast to a type rtsoa stores, of the input's width."""
    if "to" not in node.attributes:
        raise LoweringError(f"{ctx.describe(node)}: attribute 'to' is missing")
    to = int(node.attributes["to"])
    target = DTYPE_OF_ONNX.get(to)
    if target is None:
        raise LoweringError(
            f"{ctx.describe(node)}: to={to} is an ONNX element type rtsoa does not store"
        )
    source = ctx.tensor(node.inputs[0]).dtype
    if source != DType.UNDEFINED and bit_width(source) != bit_width(target):
        raise LoweringError(
            f"{ctx.describe(node)}: {DTYPES[source].name} ({bit_width(source)} bits) and "
            f"{DTYPES[target].name} ({bit_width(target)} bits) differ in width"
        )
    ctx.emit("BitCast", node.inputs, node.outputs, {"to": to})
