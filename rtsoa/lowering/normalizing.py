"""Ops rtsoa runs as a few of its own ops, composed at lowering:

- MeanVarianceNormalization as its ONNX function body: (X - mean) / (sqrt(mean(X^2) -
  mean^2) + 1e-9) over `axes` (default [0, 2, 3]), the constants in X's element type.
- LpNormalization: X / norm along `axis` (default -1), the norm ReduceSum(Abs(X)) for p = 1
  and Sqrt(ReduceSum(X * X)) for p = 2; where the norm is 0 the output is 0, as onnx.reference
  and onnxruntime have it. Other p are refused, naming it.
- GroupNormalization: X as [N, num_groups, rest], each group normalized by its mean and
  biased variance, (x - mean) / sqrt(var + epsilon), then scaled and shifted per channel
  (opset 21: scale and bias [C]) or per group (opset 18: [num_groups]). With stash_type 1
  (opset 21's default) a float64 X is computed in float32, as the definition says; other
  stash types are refused, naming them.
- Hardmax: OneHot(ArgMax(X, axis, keepdims 0), depth = X's size on the axis, values [0, 1] in
  X's element type): 1 at the first maximum of each row (a NaN counts as the maximum, as
  ArgMax has it). Before opset 13 X is taken as 2-D, flattened at `axis` (as Softmax was).

They run on float32 / float64; X's element type must be known at lowering (for the constants).
"""

import numpy as np

from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.converters import register_converter
from rtsoa.ops.abi import NUMPY_DTYPES

_FLOATS = {DType.FLOAT32, DType.FLOAT64}


def float_input(ctx, node):
    """The node's input 0 and its numpy element type, refused unless float32 / float64."""
    x = node.inputs[0]
    dtype = ctx.tensor(x).dtype
    if dtype not in _FLOATS:
        kind = "not known at lowering" if dtype == DType.UNDEFINED else dtype.name.lower()
        raise LoweringError(
            f"{ctx.describe(node)}: rtsoa runs {node.op_type} on float32 / float64 only; the "
            f"element type of input {x!r} is {kind}"
        )
    return x, NUMPY_DTYPES[dtype]


def constant(ctx, prefix, value, kind):
    """A fresh constant tensor holding `value` as `kind`; its name."""
    name = ctx.fresh_name(prefix)
    ctx.set_constant(name, np.asarray(value, dtype=kind))
    return name


@register_converter("MeanVarianceNormalization", since=9)
def mean_variance_normalization(ctx, node):
    """The function body of MeanVarianceNormalization-13 (-9 is the same computation)."""
    x, kind = float_input(ctx, node)
    axes = {"axes": [int(a) for a in node.attributes.get("axes", [0, 2, 3])]}
    two, epsilon = constant(ctx, "two", 2.0, kind), constant(ctx, "epsilon", 1e-9, kind)
    names = ["mean", "mean_squared", "squared", "mean_of_squares", "variance", "deviation"]
    mean, mean_squared, squared, mean_of_squares, variance, deviation = map(ctx.fresh_name, names)
    centred, shifted = ctx.fresh_name("centred"), ctx.fresh_name("shifted")
    ctx.emit("ReduceMean", [x], [mean], axes)
    ctx.emit("Pow", [mean, two], [mean_squared])
    ctx.emit("Pow", [x, two], [squared])
    ctx.emit("ReduceMean", [squared], [mean_of_squares], axes)
    ctx.emit("Sub", [mean_of_squares, mean_squared], [variance])
    ctx.emit("Sqrt", [variance], [deviation])
    ctx.emit("Sub", [x, mean], [centred])
    ctx.emit("Add", [deviation, epsilon], [shifted])
    ctx.emit("Div", [centred, shifted], node.outputs[:1])


@register_converter("LpNormalization", since=1)
def lp_normalization(ctx, node):
    """X / norm, 0 where the norm is 0."""
    x, kind = float_input(ctx, node)
    p = int(node.attributes.get("p", 2))
    if p not in (1, 2):
        raise LoweringError(f"{ctx.describe(node)}: p {p} is not supported (one of 1, 2)")
    axes = {"axes": [int(node.attributes.get("axis", -1))], "keepdims": 1}
    mapped, norm = ctx.fresh_name("mapped"), ctx.fresh_name("norm")
    if p == 1:
        ctx.emit("Abs", [x], [mapped])
        ctx.emit("ReduceSum", [mapped], [norm], axes)
    else:
        total = ctx.fresh_name("sum")
        ctx.emit("Mul", [x, x], [mapped])
        ctx.emit("ReduceSum", [mapped], [total], axes)
        ctx.emit("Sqrt", [total], [norm])
    zero = constant(ctx, "zero", 0.0, kind)
    is_zero, quotient = ctx.fresh_name("is_zero"), ctx.fresh_name("quotient")
    ctx.emit("Equal", [norm, zero], [is_zero])
    ctx.emit("Div", [x, norm], [quotient])
    ctx.emit("Where", [is_zero, zero, quotient], node.outputs[:1])


def _hardmax(ctx, x, kind, axis, output):
    """OneHot(ArgMax(x)) along `axis` into `output`."""
    best, shape, depth = ctx.fresh_name("best"), ctx.fresh_name("shape"), ctx.fresh_name("depth")
    position = constant(ctx, "axis", axis, np.int64)
    pair = constant(ctx, "pair", [0.0, 1.0], kind)
    ctx.emit("ArgMax", [x], [best], {"axis": axis, "keepdims": 0})
    ctx.emit("Shape", [x], [shape])
    ctx.emit("Gather", [shape, position], [depth], {"axis": 0})
    ctx.emit("OneHot", [best, depth, pair], [output], {"axis": axis})


@register_converter("Hardmax", since=13)
def hardmax(ctx, node):
    """Hardmax-13: along `axis` (default -1)."""
    x, kind = float_input(ctx, node)
    _hardmax(ctx, x, kind, int(node.attributes.get("axis", -1)), node.outputs[0])


@register_converter("Hardmax", since=1)
def hardmax_before_13(ctx, node):
    """Hardmax-1 / -11: X flattened to 2-D at `axis` (default 1), along its last axis, then
    reshaped back to X's shape."""
    x, kind = float_input(ctx, node)
    flat, result, shape = ctx.fresh_name("flat"), ctx.fresh_name("hard"), ctx.fresh_name("shape")
    ctx.emit("Flatten", [x], [flat], {"axis": int(node.attributes.get("axis", 1))})
    _hardmax(ctx, flat, kind, 1, result)
    ctx.emit("Shape", [x], [shape])
    ctx.emit("Reshape", [result, shape], node.outputs[:1])


def _group_normalization(ctx, node, per_channel):
    x, kind = float_input(ctx, node)
    scale, bias = node.inputs[1:3]
    attributes = node.attributes
    groups = int(attributes.get("num_groups", 0))
    dims = ctx.tensor(x).dims
    if groups < 1 or dims is None or len(dims) < 2:
        raise LoweringError(
            f"{ctx.describe(node)}: needs num_groups >= 1 (got {groups}) and an input of known "
            "rank 2 or more"
        )
    stash = int(attributes.get("stash_type", 1)) if per_channel else None
    if stash not in (None, 1):
        raise LoweringError(f"{ctx.describe(node)}: stash_type {stash} is not supported (1)")
    output = node.outputs[0]
    if stash == 1 and kind == np.float64:  # computed in float32, as stash_type 1 says
        narrow, x, kind = ctx.fresh_name("narrow"), ctx.fresh_name("stashed"), np.float32
        ctx.emit("Cast", [node.inputs[0]], [x], {"to": 1})
        narrow_scale, narrow_bias = ctx.fresh_name("scale"), ctx.fresh_name("bias")
        ctx.emit("Cast", [scale], [narrow_scale], {"to": 1})
        ctx.emit("Cast", [bias], [narrow_bias], {"to": 1})
        scale, bias = narrow_scale, narrow_bias
        output = narrow
    epsilon = constant(ctx, "epsilon", float(attributes.get("epsilon", 1e-5)), kind)
    grouped_shape = constant(ctx, "grouped_shape", [0, groups, -1], np.int64)
    names = ("shape", "grouped", "mean", "centred", "squares", "variance", "shifted", "deviation")
    shape, grouped, mean, centred, squares, variance, shifted, deviation = map(
        ctx.fresh_name, names
    )
    normal, scaled = ctx.fresh_name("normal"), ctx.fresh_name("scaled")
    last = {"axes": [2], "keepdims": 1}
    ctx.emit("Shape", [x], [shape])
    ctx.emit("Reshape", [x, grouped_shape], [grouped])
    ctx.emit("ReduceMean", [grouped], [mean], last)
    ctx.emit("Sub", [grouped, mean], [centred])
    ctx.emit("Mul", [centred, centred], [squares])
    ctx.emit("ReduceMean", [squares], [variance], last)
    ctx.emit("Add", [variance, epsilon], [shifted])
    ctx.emit("Sqrt", [shifted], [deviation])
    ctx.emit("Div", [centred, deviation], [normal])
    # scale and bias as [C, 1, ...] against X's shape, or [groups, 1] against the groups
    ones = [1] * (len(dims) - 2) if per_channel else [1]
    along = constant(ctx, "along", [-1, *ones], np.int64)
    scale_shaped, bias_shaped = ctx.fresh_name("scale"), ctx.fresh_name("bias")
    ctx.emit("Reshape", [scale, along], [scale_shaped])
    ctx.emit("Reshape", [bias, along], [bias_shaped])
    if per_channel:
        restored, biased = ctx.fresh_name("restored"), output
        ctx.emit("Reshape", [normal, shape], [restored])
        ctx.emit("Mul", [restored, scale_shaped], [scaled])
        ctx.emit("Add", [scaled, bias_shaped], [biased])
    else:
        biased = ctx.fresh_name("biased")
        ctx.emit("Mul", [normal, scale_shaped], [scaled])
        ctx.emit("Add", [scaled, bias_shaped], [biased])
        ctx.emit("Reshape", [biased, shape], [output])
    if output != node.outputs[0]:
        ctx.emit("Cast", [output], node.outputs[:1], {"to": 11})


@register_converter("GroupNormalization", since=18)
def group_normalization_18(ctx, node):
    """GroupNormalization-18: scale and bias per group."""
    _group_normalization(ctx, node, per_channel=False)


@register_converter("GroupNormalization", since=21)
def group_normalization(ctx, node):
    """GroupNormalization-21: scale and bias per channel, stash_type."""
    _group_normalization(ctx, node, per_channel=True)
