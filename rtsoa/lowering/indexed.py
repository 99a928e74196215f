"""ScatterElements, the old Scatter, ScatterND and TensorScatter onto the scatter ops
(`rtsoa.ops.scatter`), once their reduction (or mode) is one the ops implement for the data's
element type; other values are refused here, naming the attribute. EyeLike's dtype attribute
must name an element type rtsoa has, DepthToSpace's and SpaceToDepth's mode be DCR or CRD.
DepthToSpace-28, OneHot-28, Compress-28, ReverseSequence-28 and Unique-28 only add bfloat16 to
the types of the earlier definitions (lowering refuses bfloat16 by dtype), and SpaceToDepth-28
the mode, so they are registered as implemented."""

from rtsoa.abi.dtypes import DTYPE_OF_ONNX
from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.converters import one_to_one, register_converter
from rtsoa.ops import OPS
from rtsoa.ops.blocks import MODES as BLOCK_MODES
from rtsoa.ops.scatter import MODES, REDUCIBLE, REDUCTIONS


def checked_choice(ctx, node, name, known, default):
    """The node's STRING attribute `name` (`default` if absent), refused by name when it is
    not one of `known`."""
    value = node.attributes.get(name, default)
    value = value.decode() if isinstance(value, bytes) else str(value)
    if value not in known:
        listed = ", ".join(known)
        raise LoweringError(
            f"{ctx.describe(node)}: {name} {value!r} is not supported (one of {listed})"
        )
    return value


def _checked_reduction(ctx, node):
    """The node's reduction name, refused by name when the op does not implement it."""
    value = checked_choice(ctx, node, "reduction", REDUCTIONS, "none")
    data = ctx.tensor(node.inputs[0]).dtype
    if value != "none" and data != DType.UNDEFINED and data not in REDUCIBLE:
        raise LoweringError(
            f"{ctx.describe(node)}: reduction {value!r} on element type "
            f"{DType(data).name.lower()} is not supported (only reduction 'none' is)"
        )
    return value


@register_converter("ScatterElements", since=11)
def scatter_elements(ctx, node):
    """ScatterElements: the op itself once its reduction is checked."""
    _checked_reduction(ctx, node)
    ctx.emit("ScatterElements", node.inputs, node.outputs[:1], node.attributes)


@register_converter("Scatter", since=9)
def scatter(ctx, node):
    """Scatter (opsets 9-10, deprecated by ScatterElements) is ScatterElements without a
    reduction."""
    attributes = {"axis": int(node.attributes.get("axis", 0))}
    ctx.emit("ScatterElements", node.inputs, node.outputs[:1], attributes)


@register_converter("ScatterND", since=11)
def scatter_nd(ctx, node):
    """ScatterND: the op itself once its reduction is checked."""
    _checked_reduction(ctx, node)
    ctx.emit("ScatterND", node.inputs, node.outputs[:1], node.attributes)


@register_converter("TensorScatter", since=24)
def tensor_scatter(ctx, node):
    """TensorScatter: the op itself once its mode is checked."""
    checked_choice(ctx, node, "mode", MODES, "linear")
    ctx.emit("TensorScatter", node.inputs, node.outputs[:1], node.attributes)


@register_converter("EyeLike", since=9)
def eye_like(ctx, node):
    """EyeLike: the op itself once its dtype attribute names an element type rtsoa has."""
    onnx_type = int(node.attributes.get("dtype", 0))
    runs = OPS["EyeLike"].dtypes[0]  # the types it writes ones of (not the narrow ones)
    if onnx_type and (onnx_type not in DTYPE_OF_ONNX or DTYPE_OF_ONNX[onnx_type] not in runs):
        raise LoweringError(
            f"{ctx.describe(node)}: dtype {onnx_type} (ONNX TensorProto code) is not an element "
            "type rtsoa runs"
        )
    one_to_one(ctx, node)


def blocks(ctx, node):
    """DepthToSpace / SpaceToDepth: the op itself once its mode is DCR or CRD (SpaceToDepth
    takes a mode from opset 28; before, it is DCR)."""
    checked_choice(ctx, node, "mode", BLOCK_MODES, "DCR")
    one_to_one(ctx, node)


for _since in (1, 28):
    register_converter("DepthToSpace", since=_since)(blocks)
    register_converter("SpaceToDepth", since=_since)(blocks)
for _op in ("OneHot", "Compress", "ReverseSequence", "Unique"):
    register_converter(_op, since=28)(one_to_one)
