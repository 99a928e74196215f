"""Pow with an exponent of another element type than its base, and Clip on integers, composed
at lowering from ops rtsoa has.

Pow(x, y) with y of another type (opset 12 on) is computed as numpy (and onnx.reference) does:
both made float64 (int64 when both are integers), the power taken there, and the result cast
to x's type once (a float rounded to nearest even, an integer base truncated toward zero, an
integer power wrapped as numpy's int64 power then narrowed). The element types must be known
at lowering; where either is not, the Pow op itself runs and refuses a mismatch at run time.
A uint64 exponent of a float or signed integer base is made float64 from its two 32-bit halves
(rounded once, as numpy promotes it); a uint64 base, or an unsigned base with a uint64
exponent (which numpy computes in uint64), is refused, since rtsoa casts nothing to uint64.

Clip on integer tensors (opset 12 on) is Min(Max(x, min), max), each bound where given: the
same result, with min > max giving max as ONNX defines. A bound must be a scalar (a one-element
tensor), which is checked at lowering; a bound whose shape is not known there is refused.
"""

import math

import numpy as np

from rtsoa.abi.dtypes import DTYPES
from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.converters import one_to_one, register_converter


def _is_integer(kind):
    return np.dtype(DTYPES[kind].numpy).kind in "iu"


def _cast(ctx, name, kind, label):
    """`name` as DType `kind` (itself if it has that type already)."""
    if ctx.tensor(name).dtype == kind:
        return name
    cast = ctx.fresh_name(label)
    ctx.emit("Cast", [name], [cast], {"to": DTYPES[kind].onnx})
    return cast


def _uint64_as_float64(ctx, name):
    """uint64 tensor `name` as float64, rounded once to nearest even as numpy converts it:
    its high and low 32 bits (BitShift, BitwiseAnd) are int64s once bit-cast, each exact in
    float64, and high * 2**32 + low rounds only in the Add."""
    halves = []
    for op, operand, label in (
        ("BitShift", np.uint64(32), "high"),
        ("BitwiseAnd", np.uint64(0xFFFFFFFF), "low"),
    ):
        constant, bits, signed, wide = (ctx.fresh_name(f"pow_{label}_{k}") for k in "cbsw")
        ctx.set_constant(constant, np.asarray(operand))
        ctx.emit(op, [name, constant], [bits], {"direction": "RIGHT"} if op == "BitShift" else {})
        ctx.emit("BitCast", [bits], [signed], {"to": DTYPES[DType.INT64].onnx})
        ctx.emit("Cast", [signed], [wide], {"to": DTYPES[DType.FLOAT64].onnx})
        halves.append(wide)
    scale, scaled, result = (ctx.fresh_name(f"pow_exponent_{k}") for k in ("scale", "high", "f"))
    ctx.set_constant(scale, np.asarray(2.0**32))
    ctx.emit("Mul", [halves[0], scale], [scaled])
    ctx.emit("Add", [scaled, halves[1]], [result])
    return result


@register_converter("Pow", since=7)
def power(ctx, node):
    """Pow: the op itself on one element type; on two, computed in float64 or int64 and cast
    back to the base's type."""
    base, exponent = node.inputs[:2]
    base_kind, exponent_kind = ctx.tensor(base).dtype, ctx.tensor(exponent).dtype
    if DType.UNDEFINED in (base_kind, exponent_kind) or base_kind == exponent_kind:
        one_to_one(ctx, node)
        return
    unsigned = np.dtype(DTYPES[base_kind].numpy).kind == "u"
    if base_kind == DType.UINT64 or (unsigned and exponent_kind == DType.UINT64):
        raise LoweringError(
            f"{ctx.describe(node)}: Pow of {DTYPES[base_kind].name} and "
            f"{DTYPES[exponent_kind].name} is not supported (numpy computes it in uint64, "
            "and rtsoa casts nothing to uint64)"
        )
    integers = _is_integer(base_kind) and _is_integer(exponent_kind)
    # numpy promotes uint64 with any signed integer or float to float64, as here
    wide = DType.INT64 if integers and exponent_kind != DType.UINT64 else DType.FLOAT64
    if exponent_kind == DType.UINT64:
        wide_exponent = _uint64_as_float64(ctx, exponent)
    else:
        wide_exponent = _cast(ctx, exponent, wide, "pow_exponent")
    arguments = [_cast(ctx, base, wide, "pow_base"), wide_exponent]
    if base_kind == wide:
        ctx.emit("Pow", arguments, node.outputs[:1])
        return
    result = ctx.fresh_name("pow_wide")
    ctx.emit("Pow", arguments, [result])
    ctx.emit("Cast", [result], node.outputs[:1], {"to": DTYPES[base_kind].onnx})


@register_converter("Clip", since=11)
def clip(ctx, node):
    """Clip: the op itself on floats; on integers Max with min, then Min with max."""
    x = node.inputs[0]
    kind = ctx.tensor(x).dtype
    if kind == DType.UNDEFINED or not _is_integer(kind):
        one_to_one(ctx, node)
        return
    bounds = []
    for op, role, name in zip(("Max", "Min"), ("min", "max"), node.inputs[1:3], strict=False):
        if name:
            bounds.append((op, _scalar_bound(ctx, node, name, role)))
    if not bounds:
        ctx.emit("Identity", [x], node.outputs[:1])
        return
    current = x
    for index, (op, name) in enumerate(bounds):
        last = index == len(bounds) - 1
        target = node.outputs[0] if last else ctx.fresh_name("clip_low")
        ctx.emit(op, [current, name], [target])
        current = target


def _scalar_bound(ctx, node, name, role):
    """Clip's bound `name` as a 0-d tensor (so it broadcasts to any x); LoweringError unless
    it is known to hold one element."""
    tensor = ctx.tensor(name)
    if not tensor.is_static:
        raise LoweringError(
            f"{ctx.describe(node)}: the shape of Clip's {role} {name!r} is not known at "
            "lowering (on integers it must be known to be a scalar)"
        )
    if math.prod(tensor.dims) != 1:
        raise LoweringError(
            f"{ctx.describe(node)}: Clip's {role} {name!r} has shape {list(tensor.dims)}; it "
            "must be a scalar"
        )
    if len(tensor.dims) == 0:
        return name
    shape, scalar = ctx.fresh_name("scalar_shape"), ctx.fresh_name(f"{role}_scalar")
    ctx.set_constant(shape, np.zeros(0, dtype=np.int64))
    ctx.emit("Reshape", [name, shape], [scalar])
    return scalar
