"""Ops rtsoa runs as a few of its own ops, composed at lowering:

- MeanVarianceNormalization as its ONNX function body: (X - mean) / (sqrt(mean(X^2) -
  mean^2) + 1e-9) over `axes` (default [0, 2, 3]), the constants in X's element type.
- LpNormalization: X / norm along `axis` (default -1), the norm ReduceSum(Abs(X)) for p = 1
  and Sqrt(ReduceSum(X * X)) for p = 2; where the norm is 0 the output is 0, as onnx.reference
  and onnxruntime have it. Other p are refused, naming it.
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


def _float_input(ctx, node):
    """The node's input and its numpy element type, refused unless float32 / float64."""
    x = node.inputs[0]
    dtype = ctx.tensor(x).dtype
    if dtype not in _FLOATS:
        kind = "not known at lowering" if dtype == DType.UNDEFINED else dtype.name.lower()
        raise LoweringError(
            f"{ctx.describe(node)}: rtsoa runs {node.op_type} on float32 / float64 only; the "
            f"element type of input {x!r} is {kind}"
        )
    return x, NUMPY_DTYPES[dtype]


def _constant(ctx, prefix, value, kind):
    name = ctx.fresh_name(prefix)
    ctx.set_constant(name, np.asarray(value, dtype=kind))
    return name


@register_converter("MeanVarianceNormalization", since=9)
def mean_variance_normalization(ctx, node):
    """The function body of MeanVarianceNormalization-13 (-9 is the same computation)."""
    x, kind = _float_input(ctx, node)
    axes = {"axes": [int(a) for a in node.attributes.get("axes", [0, 2, 3])]}
    two, epsilon = _constant(ctx, "two", 2.0, kind), _constant(ctx, "epsilon", 1e-9, kind)
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
    x, kind = _float_input(ctx, node)
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
    zero = _constant(ctx, "zero", 0.0, kind)
    is_zero, quotient = ctx.fresh_name("is_zero"), ctx.fresh_name("quotient")
    ctx.emit("Equal", [norm, zero], [is_zero])
    ctx.emit("Div", [x, norm], [quotient])
    ctx.emit("Where", [is_zero, zero, quotient], node.outputs[:1])


def _hardmax(ctx, x, kind, axis, output):
    """OneHot(ArgMax(x)) along `axis` into `output`."""
    best, shape, depth = ctx.fresh_name("best"), ctx.fresh_name("shape"), ctx.fresh_name("depth")
    position = _constant(ctx, "axis", axis, np.int64)
    pair = _constant(ctx, "pair", [0.0, 1.0], kind)
    ctx.emit("ArgMax", [x], [best], {"axis": axis, "keepdims": 0})
    ctx.emit("Shape", [x], [shape])
    ctx.emit("Gather", [shape, position], [depth], {"axis": 0})
    ctx.emit("OneHot", [best, depth, pair], [output], {"axis": axis})


@register_converter("Hardmax", since=13)
def hardmax(ctx, node):
    """Hardmax-13: along `axis` (default -1)."""
    x, kind = _float_input(ctx, node)
    _hardmax(ctx, x, kind, int(node.attributes.get("axis", -1)), node.outputs[0])


@register_converter("Hardmax", since=1)
def hardmax_before_13(ctx, node):
    """Hardmax-1 / -11: X flattened to 2-D at `axis` (default 1), along its last axis, then
    reshaped back to X's shape."""
    x, kind = _float_input(ctx, node)
    flat, result, shape = ctx.fresh_name("flat"), ctx.fresh_name("hard"), ctx.fresh_name("shape")
    ctx.emit("Flatten", [x], [flat], {"axis": int(node.attributes.get("axis", 1))})
    _hardmax(ctx, flat, kind, 1, result)
    ctx.emit("Shape", [x], [shape])
    ctx.emit("Reshape", [result, shape], node.outputs[:1])
