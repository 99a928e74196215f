"""Reductions rtsoa runs as a few of its own ops, composed at lowering as the ONNX function
bodies define them: ReduceL1 = ReduceSum(Abs(x)), ReduceSumSquare = ReduceSum(x * x),
ReduceL2 = Sqrt(ReduceSum(x * x)), ReduceLogSum = Log(ReduceSum(x)) and ReduceLogSumExp =
Log(ReduceSum(Exp(x))), the last in float64 (a float32 input is cast there and back, as the
function body does, so exp does not overflow where the log-sum would not).

The axes come as ReduceSum takes them (an attribute before opset 18, input 1 from 18), with
keepdims and noop_with_empty_axes passed through. L1 and SumSquare run on every type ReduceSum
takes; L2, LogSum and LogSumExp on float32 / float64 (ReduceLogSum-28 and ReduceLogSumExp-28
dropped the integer types; for the older definitions they are refused naming the node).
"""

from rtsoa.abi.dtypes import DTYPES
from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.converters import register_converter

_FLOATS = {DType.FLOAT32, DType.FLOAT64}
_PASSED = ("axes", "keepdims", "noop_with_empty_axes")


def _reduce_sum(ctx, node, x, output):
    """ReduceSum of `x` over the node's axes (input or attribute) into `output`."""
    attributes = {key: node.attributes[key] for key in _PASSED if key in node.attributes}
    ctx.emit("ReduceSum", [x, *node.inputs[1:2]], [output], attributes)


def _float_input(ctx, node):
    """The node's input and its element type, refused unless float32 / float64."""
    x = node.inputs[0]
    dtype = ctx.tensor(x).dtype
    if dtype not in _FLOATS:
        kind = "not known at lowering" if dtype == DType.UNDEFINED else f"{dtype.name.lower()}"
        raise LoweringError(
            f"{ctx.describe(node)}: rtsoa runs {node.op_type} on float32 / float64 only; the "
            f"element type of input {x!r} is {kind}"
        )
    return x, dtype


def _elementwise_then_sum(op):
    def convert(ctx, node):
        x = node.inputs[0]
        mapped = ctx.fresh_name(op.lower())
        ctx.emit(op, [x] if op == "Abs" else [x, x], [mapped])
        _reduce_sum(ctx, node, mapped, node.outputs[0])

    convert.__doc__ = f"ReduceSum({op}(x))."
    return convert


@register_converter("ReduceL2")
def reduce_l2(ctx, node):
    """ReduceL2(x) = Sqrt(ReduceSum(x * x))."""
    x, _ = _float_input(ctx, node)
    square, total = ctx.fresh_name("square"), ctx.fresh_name("sum")
    ctx.emit("Mul", [x, x], [square])
    _reduce_sum(ctx, node, square, total)
    ctx.emit("Sqrt", [total], node.outputs[:1])


def reduce_log_sum(ctx, node):
    """ReduceLogSum(x) = Log(ReduceSum(x))."""
    x, _ = _float_input(ctx, node)
    total = ctx.fresh_name("sum")
    _reduce_sum(ctx, node, x, total)
    ctx.emit("Log", [total], node.outputs[:1])


def reduce_log_sum_exp(ctx, node):
    """ReduceLogSumExp(x) = Log(ReduceSum(Exp(x))), in float64."""
    x, dtype = _float_input(ctx, node)
    if dtype == DType.FLOAT32:
        wide = ctx.fresh_name("double")
        ctx.emit("Cast", [x], [wide], {"to": DTYPES[DType.FLOAT64].onnx})
        x = wide
    exponent, total = ctx.fresh_name("exp"), ctx.fresh_name("sum")
    ctx.emit("Exp", [x], [exponent])
    _reduce_sum(ctx, node, exponent, total)
    if dtype == DType.FLOAT64:
        ctx.emit("Log", [total], node.outputs[:1])
        return
    logarithm = ctx.fresh_name("log")
    ctx.emit("Log", [total], [logarithm])
    ctx.emit("Cast", [logarithm], node.outputs[:1], {"to": DTYPES[DType.FLOAT32].onnx})


register_converter("ReduceL1")(_elementwise_then_sum("Abs"))
register_converter("ReduceSumSquare")(_elementwise_then_sum("Mul"))
for _since in (1, 28):  # 28 drops the integer types these refuse anyway
    register_converter("ReduceLogSum", since=_since)(reduce_log_sum)
    register_converter("ReduceLogSumExp", since=_since)(reduce_log_sum_exp)
