"""The image converters (Col2Im, MaxUnpool, RoiAlign, DeformConv; `rtsoa.ops.col2im`,
`rtsoa.ops.unpool`, `rtsoa.ops.roi_align`, `rtsoa.ops.deform_conv`): attribute lengths, modes
and what is constant are checked at lowering, naming the node. RoiAlign before opset 16 has no
coordinate_transformation_mode and works as output_half_pixel does; from opset 16 on the
default is half_pixel."""

import numpy as np

from rtsoa.errors import LoweringError
from rtsoa.lowering.converters import register_converter
from rtsoa.ops.roi_align import COORDINATE_MODES, MODES


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def _lengths(ctx, node, spatial, expected):
    """Check each integer-list attribute of `expected` ({name: length factor}) has
    factor x `spatial` values when given (`spatial` None: unknown, only pads' evenness)."""
    for name, factor in expected.items():
        if name not in node.attributes:
            continue
        values = list(node.attributes[name])
        if spatial is None:
            if len(values) % factor:
                raise LoweringError(f"{ctx.describe(node)}: {name} has {len(values)} values")
        elif len(values) != factor * spatial:
            raise LoweringError(
                f"{ctx.describe(node)}: {name} has {len(values)} values; {factor * spatial} "
                f"expected for {spatial} spatial axes"
            )
        if name == "pads" and any(v < 0 for v in values):
            raise LoweringError(f"{ctx.describe(node)}: pads must not be negative: {values}")
        if name != "pads" and any(v < 1 for v in values):
            raise LoweringError(f"{ctx.describe(node)}: {name} must be at least 1: {values}")


@register_converter("Col2Im", since=18)
def col2im(ctx, node):
    """Col2Im, after its attributes are checked against the spatial rank where known."""
    spatial = None
    for position, what in ((1, "image_shape"), (2, "block_shape")):
        data = ctx.tensor(node.inputs[position]).data
        if data is not None:
            data = np.asarray(data)
            if data.ndim != 1 or (spatial is not None and data.size != spatial):
                raise LoweringError(
                    f"{ctx.describe(node)}: image_shape and block_shape must be 1-D of one "
                    f"length, got {what} of shape {list(data.shape)}"
                )
            if (data < 1).any():
                raise LoweringError(
                    f"{ctx.describe(node)}: {what} {data.tolist()} has a value below 1"
                )
            spatial = data.size
    _lengths(ctx, node, spatial, {"dilations": 1, "pads": 2, "strides": 1})
    ctx.emit("Col2Im", list(node.inputs), node.outputs, node.attributes)


def _max_unpool(ctx, node):
    """MaxUnpool, after its attributes are checked against X's rank where known."""
    if "kernel_shape" not in node.attributes:
        raise LoweringError(f"{ctx.describe(node)}: attribute 'kernel_shape' is missing")
    dims = ctx.tensor(node.inputs[0]).dims
    spatial = len(dims) - 2 if dims is not None else len(node.attributes["kernel_shape"])
    if spatial < 1:
        raise LoweringError(
            f"{ctx.describe(node)}: X must have a spatial axis, got rank {len(dims)}"
        )
    _lengths(ctx, node, spatial, {"kernel_shape": 1, "pads": 2, "strides": 1})
    ctx.emit("MaxUnpool", list(node.inputs), node.outputs, node.attributes)


for _since in (9, 11, 22):
    register_converter("MaxUnpool", since=_since)(_max_unpool)


def _roi_align(ctx, node, default_mode):
    attributes = dict(node.attributes)
    attributes["coordinate_transformation_mode"] = _text(
        attributes.get("coordinate_transformation_mode", default_mode)
    )
    attributes["mode"] = _text(attributes.get("mode", "avg"))
    for name, table in (("coordinate_transformation_mode", COORDINATE_MODES), ("mode", MODES)):
        if attributes[name] not in table:
            raise LoweringError(
                f"{ctx.describe(node)}: {name} {attributes[name]!r} is not one of "
                f"{', '.join(sorted(table))}"
            )
    for name, least in (("output_height", 1), ("output_width", 1), ("sampling_ratio", 0)):
        if int(attributes.get(name, max(least, 1))) < least:
            raise LoweringError(
                f"{ctx.describe(node)}: {name} must be at least {least}, got {attributes[name]}"
            )
    ctx.emit("RoiAlign", list(node.inputs), node.outputs, attributes)


@register_converter("RoiAlign", since=10)
def roi_align_10(ctx, node):
    """RoiAlign-10: no coordinate_transformation_mode; its sampling is output_half_pixel."""
    if "coordinate_transformation_mode" in node.attributes:
        raise LoweringError(
            f"{ctx.describe(node)}: coordinate_transformation_mode is an attribute from opset 16 on"
        )
    _roi_align(ctx, node, "output_half_pixel")


for _since in (16, 22):
    register_converter("RoiAlign", since=_since)(
        lambda ctx, node: _roi_align(ctx, node, "half_pixel")
    )


def _deform_conv(ctx, node):
    """DeformConv on 2-D images (the op's only rank), after its attribute lengths."""
    dims = ctx.tensor(node.inputs[0]).dims
    if dims is not None and len(dims) != 4:
        raise LoweringError(
            f"{ctx.describe(node)}: only 2-D DeformConv (X of rank 4) is supported, got rank "
            f"{len(dims)}"
        )
    _lengths(ctx, node, 2, {"kernel_shape": 1, "pads": 2, "strides": 1, "dilations": 1})
    for name in ("group", "offset_group"):
        if int(node.attributes.get(name, 1)) < 1:
            raise LoweringError(f"{ctx.describe(node)}: {name} must be at least 1")
    ctx.emit("DeformConv", list(node.inputs), node.outputs, node.attributes)


for _since in (19, 22):
    register_converter("DeformConv", since=_since)(_deform_conv)
