"""RandomUniformLike and Bernoulli: the random ops of `rtsoa.ops.randomness`, their `dtype`
attribute translated from ONNX's element type codes. An output type the op does not write
(RandomUniformLike: float32, float64; Bernoulli: bool, the integers, float16, float32,
float64) is refused at lowering naming the node, as is an input Bernoulli cannot read."""

from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.converters import register_converter
from rtsoa.lowering.onnx_import import onnx_dtype
from rtsoa.ops.randomness import BERNOULLI_TYPES, UNIFORM_TYPES


def _random(kinds):
    def convert(ctx, node):
        attributes = dict(node.attributes)
        where = ctx.describe(node)
        if "dtype" in attributes:
            kind = onnx_dtype(attributes["dtype"], f"{where}: attribute 'dtype'")
        else:
            kind = ctx.tensor(node.inputs[0]).dtype
        if kind != DType.UNDEFINED and int(kind) not in {int(k) for k in kinds}:
            raise LoweringError(
                f"{where}: output element type {DType(kind).name} is not supported (it writes "
                f"{', '.join(DType(int(k)).name for k in kinds)})"
            )
        attributes["dtype"] = int(kind)
        ctx.emit(node.op_type, node.inputs[:1], node.outputs[:1], attributes)

    convert.__doc__ = "The op, its dtype attribute an rtsoa DType code (0: the input's)."
    return convert


register_converter("RandomUniformLike", since=1)(_random(UNIFORM_TYPES))
register_converter("Bernoulli", since=15)(_random(BERNOULLI_TYPES))
