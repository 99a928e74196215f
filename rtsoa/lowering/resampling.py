"""Resize across opsets, and Upsample, onto the Resize op (`rtsoa.ops.resize`, opset 11-19
attributes); GridSample onto its op. Resize-10 and Upsample-7 / 9 take (X, scales) and sample
asymmetrically, rounding nearest positions down when an axis grows and up when it shrinks
(onnxruntime's rule for them). Attribute values the ops do not know are refused here, naming
the attribute."""

import numpy as np

from rtsoa.errors import LoweringError
from rtsoa.lowering.converters import register_converter
from rtsoa.ops.grid_sample import MODES as GRID_MODES
from rtsoa.ops.grid_sample import PADDING_MODES
from rtsoa.ops.resize import ASPECT_POLICIES, COORDINATE_MODES, MODES, NEAREST_MODES

_CHOICES = {
    "mode": (MODES, "nearest"),
    "coordinate_transformation_mode": (COORDINATE_MODES, "half_pixel"),
    "nearest_mode": (NEAREST_MODES, "round_prefer_floor"),
    "keep_aspect_ratio_policy": (ASPECT_POLICIES, "stretch"),
}


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def _check_choices(ctx, node, choices):
    """Refuse, by name, a STRING attribute value outside `choices` ({name: (values,
    default)})."""
    for name, (known, default) in choices.items():
        value = _text(node.attributes.get(name, default))
        if value not in known or value == "simple":
            listed = ", ".join(sorted(key for key in known if key != "simple"))
            raise LoweringError(
                f"{ctx.describe(node)}: {name} {value!r} is not supported (one of {listed})"
            )


def _check(ctx, node, attributes):
    """Refuse, by name, an attribute value the Resize op does not implement."""
    _check_choices(ctx, node, _CHOICES)
    mode = _text(attributes.get("mode", "nearest"))
    if int(attributes.get("antialias", 0)) not in (0, 1):
        raise LoweringError(f"{ctx.describe(node)}: antialias must be 0 or 1")
    if int(attributes.get("antialias", 0)) and mode == "nearest":
        raise LoweringError(
            f"{ctx.describe(node)}: antialias applies to linear and cubic modes, not nearest"
        )


@register_converter("Resize", since=11)
def resize(ctx, node):
    """Resize-11 and later: the op itself, once its attributes are checked."""
    _check(ctx, node, node.attributes)
    ctx.emit("Resize", node.inputs, node.outputs[:1], node.attributes)


def _legacy(ctx, node, x, scales):
    mode = _text(node.attributes.get("mode", "nearest"))
    if mode not in ("nearest", "linear"):
        raise LoweringError(
            f"{ctx.describe(node)}: mode {mode!r} is not supported (one of linear, nearest)"
        )
    attributes = {
        "mode": mode,
        "coordinate_transformation_mode": "asymmetric",
        "nearest_mode": "simple",
    }
    ctx.emit("Resize", [x, "", scales], node.outputs[:1], attributes)


@register_converter("Resize", since=10)
def resize_10(ctx, node):
    """Resize-10 (X, scales): asymmetric sampling, nearest rounding by direction."""
    _legacy(ctx, node, *node.inputs[:2])


@register_converter("Upsample", since=7)
def upsample_7(ctx, node):
    """Upsample-7: the scales are an attribute; as Resize-10."""
    if "scales" not in node.attributes:
        raise LoweringError(f"{ctx.describe(node)}: the scales attribute is missing")
    scales = ctx.fresh_name("scales")
    ctx.set_constant(scales, np.asarray(node.attributes["scales"], dtype=np.float32))
    _legacy(ctx, node, node.inputs[0], scales)


@register_converter("Upsample", since=9)
def upsample_9(ctx, node):
    """Upsample-9 (X, scales): as Resize-10."""
    _legacy(ctx, node, *node.inputs[:2])


@register_converter("GridSample", since=16)
def grid_sample(ctx, node):
    """GridSample: the op itself once its mode and padding_mode are known values (opset 16
    names bilinear / bicubic, opset 20 linear / cubic: the op takes both)."""
    default = "bilinear" if ctx.graph.opset("") < 20 else "linear"
    choices = {"mode": (GRID_MODES, default), "padding_mode": (PADDING_MODES, "zeros")}
    _check_choices(ctx, node, choices)
    ctx.emit("GridSample", node.inputs, node.outputs[:1], node.attributes)
