"""Ops rtsoa runs as a few of its own ops, composed at lowering:

- CenterCropPad(X, shape; axes): per axis, the centred crop (start (d - t) // 2) where the
  target t is smaller than the dim d and the centred zero pad (before (t - d) // 2, the rest
  after) where it is larger: Slice then Pad, their starts / ends / pads computed from X's
  run-time shape and the shape input (int64 integer ops: exact). X's rank must be known at
  lowering.
- LpPool: (sum of |x|^p over each window)^(1 / p), the window sums a depthwise Conv with a
  kernel of ones (zero padding adds nothing, as LpPool's padding does); kernel_shape, strides,
  pads, dilations and auto_pad pass to the Conv. ceil_mode 1 is refused, naming it, and the
  channel count must be known at lowering (the kernel's shape).
"""

import numpy as np

from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.converters import register_converter
from rtsoa.lowering.normalizing import constant, float_input


@register_converter("CenterCropPad", since=18)
def center_crop_pad(ctx, node):
    """Slice to the centred crop, then Pad to the centred target."""
    x, shape = node.inputs[:2]
    dims = ctx.tensor(x).dims
    if dims is None:
        raise LoweringError(f"{ctx.describe(node)}: the rank of input {x!r} is not known")
    rank = len(dims)
    axes = [int(a) for a in node.attributes.get("axes", range(rank))]
    if any(not -rank <= a < rank for a in axes) or len({a % rank for a in axes}) != len(axes):
        raise LoweringError(f"{ctx.describe(node)}: axes {axes} do not fit rank {rank}")
    axes = [a % rank for a in axes]
    target = shape
    if ctx.tensor(shape).dtype == DType.INT32:
        target = ctx.fresh_name("target")
        ctx.emit("Cast", [shape], [target], {"to": 7})
    names = ("shape", "dims", "over", "excess", "start", "kept", "end", "cropped", "under")
    full, size, over, excess, start, kept, end, cropped, under = map(ctx.fresh_name, names)
    more = ("padding", "before", "after", "pads")
    padding, before, after, pads = map(ctx.fresh_name, more)
    where = constant(ctx, "axes", axes, np.int64)
    zero, two = constant(ctx, "zero", 0, np.int64), constant(ctx, "two", 2, np.int64)
    ctx.emit("Shape", [x], [full])
    ctx.emit("Gather", [full, where], [size], {"axis": 0})
    ctx.emit("Sub", [size, target], [over])
    ctx.emit("Max", [over, zero], [excess])
    ctx.emit("Div", [excess, two], [start])
    ctx.emit("Min", [size, target], [kept])
    ctx.emit("Add", [start, kept], [end])
    ctx.emit("Slice", [x, start, end, where], [cropped])
    ctx.emit("Sub", [target, size], [under])
    ctx.emit("Max", [under, zero], [padding])
    ctx.emit("Div", [padding, two], [before])
    ctx.emit("Sub", [padding, before], [after])
    ctx.emit("Concat", [before, after], [pads], {"axis": 0})
    ctx.emit("Pad", [cropped, pads, "", where], node.outputs[:1], {"mode": "constant"})


@register_converter("LpPool", since=2)
def lp_pool(ctx, node):
    """Pow(Conv(Pow(Abs(X), p), ones, group = channels), 1 / p)."""
    x, kind = float_input(ctx, node)
    attributes = node.attributes
    if int(attributes.get("ceil_mode", 0)) != 0:
        raise LoweringError(f"{ctx.describe(node)}: ceil_mode 1 is not supported")
    dims = ctx.tensor(x).dims
    if dims is None or len(dims) < 3 or not isinstance(dims[1], int | np.integer):
        raise LoweringError(
            f"{ctx.describe(node)}: the channel count of input {x!r} is not known at lowering "
            "(LpPool's window sums are a depthwise Conv whose kernel needs it)"
        )
    if "kernel_shape" not in attributes:
        raise LoweringError(f"{ctx.describe(node)}: the kernel_shape attribute is missing")
    kernel = [int(k) for k in attributes["kernel_shape"]]
    p = float(attributes.get("p", 2))
    if p <= 0:
        raise LoweringError(f"{ctx.describe(node)}: p {p:g} is not supported (above 0)")
    channels = int(dims[1])
    ones = constant(ctx, "ones", np.ones([channels, 1, *kernel]), kind)
    power, inverse = constant(ctx, "p", p, kind), constant(ctx, "inverse_p", 1.0 / p, kind)
    passed = ("auto_pad", "strides", "pads", "dilations")
    window = {key: attributes[key] for key in passed if key in attributes}
    window.update(kernel_shape=kernel, group=channels)
    size, powered, summed = ctx.fresh_name("abs"), ctx.fresh_name("pow"), ctx.fresh_name("sum")
    ctx.emit("Abs", [x], [size])
    ctx.emit("Pow", [size, power], [powered])
    ctx.emit("Conv", [powered, ones], [summed], window)
    ctx.emit("Pow", [summed, inverse], node.outputs[:1])
