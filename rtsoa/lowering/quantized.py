"""Quantised ONNX ops at lowering: QuantizeLinear and DequantizeLinear checked and run as the
ops of `rtsoa.ops.quantize`; MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv composed
from ops rtsoa has, exactly:

- MatMulInteger(a, b, a_zp, b_zp) = MatMul(Cast(a, int32) - a_zp, Cast(b, int32) - b_zp): an
  int32 product, which wraps as onnxruntime's int32 accumulation does.
- ConvInteger(x, w, x_zp, w_zp) = Cast(Conv(Cast(x, double) - x_zp, Cast(w, double) - w_zp),
  int32): the convolution of 8-bit differences in float64 is exact (every partial sum is an
  integer far below 2**53), padding with 0 after the subtraction as the zero point would.
- QLinearMatMul / QLinearConv: the same integer product, then QLinearRequantize (multiplier
  a_scale * b_scale / y_scale in the scales' type, rounding halves to even, saturating).

Scales and zero points: a's (x's) must be per tensor (one element); b's (w's) per tensor or per
output column (channel). Anything else, an element type the ops do not take or an attribute
value they do not implement is refused here, naming the node and what is wrong.
"""

import math

import numpy as np

from rtsoa.abi.dtypes import DTYPE_OF_ONNX, DTYPES
from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.converters import register_converter
from rtsoa.ops.quantize import DEQUANTIZE_SOURCES, NARROW, QUANTIZE_SOURCES, QUANTIZED, SCALES

_ONNX = {kind: DTYPES[kind].onnx for kind in (DType.FLOAT32, DType.FLOAT16, DType.FLOAT64)}
_PRECISIONS = set(_ONNX.values())
_INT32, _DOUBLE = DTYPES[DType.INT32].onnx, DTYPES[DType.FLOAT64].onnx
_CONV_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def _type_name(code):
    """The ONNX name of element type `code` ("UINT8")."""
    from onnx import TensorProto

    return TensorProto.DataType.Name(int(code)) if code in TensorProto.DataType.values() else code


def _inputs(node, count):
    return list(node.inputs) + [""] * (count - len(node.inputs))


def _check_dtype(ctx, node, name, allowed, role):
    """The element type of tensor `name`, refused unless in `allowed` (or unknown)."""
    kind = ctx.tensor(name).dtype
    if kind != DType.UNDEFINED and kind not in allowed:
        names = ", ".join(sorted(DType(code).name.lower() for code in allowed))
        raise LoweringError(
            f"{ctx.describe(node)}: {role} {name!r} has element type {kind.name.lower()}; "
            f"rtsoa's {node.op_type} takes {names} there"
        )
    return kind


def _static_dims(ctx, name):
    tensor = ctx.tensor(name)
    return tuple(tensor.dims) if tensor.is_static else None


def _check_layout(ctx, node, x, parameter, role, axis, block):
    """Refuse a scale / zero point whose shape is neither per tensor, per axis nor blocked
    along `axis` (checked where the shapes are known at lowering)."""
    x_dims, dims = _static_dims(ctx, x), _static_dims(ctx, parameter)
    if x_dims is None or dims is None or math.prod(dims) == 1:
        return
    where = f"{ctx.describe(node)}: {role} {parameter!r} of shape {list(dims)}"
    if not -len(x_dims) <= axis < len(x_dims):
        raise LoweringError(f"{where}: axis {axis} is outside input 0's rank {len(x_dims)}")
    size = x_dims[axis]
    if block == 0:
        if dims != (size,):
            raise LoweringError(
                f"{where} is neither one element nor per axis ({size} elements along axis "
                f"{axis} of {list(x_dims)})"
            )
        return
    expected = list(x_dims)
    expected[axis] = -(-size // block)
    if list(dims) != expected:
        raise LoweringError(
            f"{where} does not block input 0 {list(x_dims)} by {block} along axis {axis} "
            f"(expected {expected})"
        )


def _attribute_type(ctx, node, attribute, allowed):
    """The rtsoa DType named by ONNX type attribute `attribute` (None when absent or 0)."""
    code = int(node.attributes.get(attribute, 0) or 0)
    if code == 0:
        return None
    kind = DTYPE_OF_ONNX.get(code)
    if kind is None or kind not in allowed:
        raise LoweringError(
            f"{ctx.describe(node)}: {attribute}={_type_name(code)} is not supported (rtsoa's "
            f"{node.op_type} takes " + ", ".join(sorted(k.name.lower() for k in allowed)) + ")"
        )
    return kind


def _linear(ctx, node, sources, targets, check_precision):
    x, scale, zero = _inputs(node, 3)[:3]
    _check_dtype(ctx, node, x, sources, "input")
    _check_dtype(ctx, node, scale, SCALES | {DType.INT32} if check_precision else SCALES, "scale")
    target = _attribute_type(ctx, node, "output_dtype", targets)
    if zero:
        kind = _check_dtype(ctx, node, zero, targets if check_precision else sources, "zero")
        if target is not None and kind not in (DType.UNDEFINED, target):
            raise LoweringError(
                f"{ctx.describe(node)}: output_dtype {target.name.lower()} differs from the "
                f"zero point's element type {kind.name.lower()}"
            )
    if check_precision:
        code = int(node.attributes.get("precision", 0) or 0)
        if code and code not in _PRECISIONS:
            raise LoweringError(
                f"{ctx.describe(node)}: precision={_type_name(code)} is not supported (rtsoa "
                "divides in float, float16 or double)"
            )
    block = int(node.attributes.get("block_size", 0))
    if block < 0:
        raise LoweringError(f"{ctx.describe(node)}: block_size {block} is negative")
    axis = int(node.attributes.get("axis", 1))
    _check_layout(ctx, node, x, scale, "scale", axis, block)
    if zero:
        _check_layout(ctx, node, x, zero, "zero point", axis, block)
    ctx.emit(node.op_type, [x, scale, zero], node.outputs[:1], node.attributes)


def quantize_linear(ctx, node):
    """QuantizeLinear to 8- and 16-bit integers and the narrow types (4- and 2-bit integers,
    float8 with `saturate`, float4)."""
    _linear(ctx, node, QUANTIZE_SOURCES, QUANTIZED | NARROW, True)


def dequantize_linear(ctx, node):
    """DequantizeLinear of 8-, 16- and 32-bit integers and the narrow types to float / float16 /
    double."""
    _linear(ctx, node, DEQUANTIZE_SOURCES, SCALES, False)


for _since in (1, 28):  # definitions 10 to 25 differ only in types and attributes checked here
    register_converter("QuantizeLinear", since=_since)(quantize_linear)
    register_converter("DequantizeLinear", since=_since)(dequantize_linear)


# -- integer products -------------------------------------------------------------------------


_EIGHT_BIT = frozenset({DType.UINT8, DType.INT8})


def _one_element(ctx, node, name, role):
    dims = _static_dims(ctx, name)
    if dims is not None and math.prod(dims) != 1:
        raise LoweringError(
            f"{ctx.describe(node)}: {role} {name!r} has shape {list(dims)}; rtsoa takes it per "
            "tensor only (one element)"
        )


def _per_output(ctx, node, name, role, count):
    """Refuse `name` unless it has one element or is 1-D of `count` (known) elements."""
    dims = _static_dims(ctx, name)
    if dims is None or math.prod(dims) == 1:
        return
    if len(dims) != 1 or (count is not None and dims[0] != count):
        per = "column" if node.op_type.endswith("MatMul") else "channel"
        known = f" ({count})" if count is not None else ""
        raise LoweringError(
            f"{ctx.describe(node)}: {role} {name!r} has shape {list(dims)}; rtsoa takes one "
            f"element or one per output {per}{known}"
        )


def _shifted(ctx, node, data, zero, to, shape=None):
    """Cast(data, to) - Cast(zero, to) (zero reshaped to `shape` when given), or the cast
    alone without a zero point."""
    cast = ctx.fresh_name(f"{data}_wide")
    ctx.emit("Cast", [data], [cast], {"to": to})
    if not zero:
        return cast
    zero_wide = ctx.fresh_name(f"{zero}_wide")
    ctx.emit("Cast", [zero], [zero_wide], {"to": to})
    if shape is not None:
        reshaped, dims = ctx.fresh_name(f"{zero}_shaped"), ctx.fresh_name("shape")
        ctx.set_constant(dims, np.array(shape, dtype=np.int64))
        ctx.emit("Reshape", [zero_wide, dims], [reshaped])
        zero_wide = reshaped
    shifted = ctx.fresh_name(f"{data}_shifted")
    ctx.emit("Sub", [cast, zero_wide], [shifted])
    return shifted


def _last_dim(ctx, name):
    dims = _static_dims(ctx, name)
    return dims[-1] if dims else None


def _integer_product(ctx, node, a, b, a_zero, b_zero, output):
    """MatMul(a - a_zero, b - b_zero) in int32 into `output`."""
    for name, role in ((a, "input A"), (b, "input B"), (a_zero, "a_zero_point")):
        if name:
            _check_dtype(ctx, node, name, _EIGHT_BIT, role)
    if b_zero:
        _check_dtype(ctx, node, b_zero, _EIGHT_BIT, "b_zero_point")
        _per_output(ctx, node, b_zero, "b_zero_point", _last_dim(ctx, b))
    if a_zero:
        _one_element(ctx, node, a_zero, "a_zero_point")
    left = _shifted(ctx, node, a, a_zero, _INT32)
    right = _shifted(ctx, node, b, b_zero, _INT32)
    ctx.emit("MatMul", [left, right], [output])


@register_converter("MatMulInteger", since=10)
def matmul_integer(ctx, node):
    """MatMulInteger: an int32 MatMul of the zero-point-shifted inputs."""
    a, b, a_zero, b_zero = _inputs(node, 4)[:4]
    _integer_product(ctx, node, a, b, a_zero, b_zero, node.outputs[0])


def _requantize(ctx, node, product, scales, zero, default_type):
    """QLinearRequantize of the int32 `product` into the node's output."""
    a_scale, b_scale, y_scale = scales
    for name, role in zip(scales, ("first scale", "second scale", "y_scale"), strict=True):
        _check_dtype(ctx, node, name, {DType.FLOAT32, DType.FLOAT16}, role)
    _one_element(ctx, node, a_scale, "the first input's scale")
    _one_element(ctx, node, y_scale, "y_scale")
    if zero:
        _check_dtype(ctx, node, zero, _EIGHT_BIT, "y_zero_point")
        _one_element(ctx, node, zero, "y_zero_point")
    to = default_type if default_type in _EIGHT_BIT else DType.UINT8
    ctx.emit(
        "QLinearRequantize",
        [product, a_scale, b_scale, y_scale, zero],
        node.outputs[:1],
        {"to": int(to)},
    )


@register_converter("QLinearMatMul", since=10)
def qlinear_matmul(ctx, node):
    """QLinearMatMul: MatMulInteger, then requantised to y's type (a's without y_zero_point).
    Definition 21 adds float16 scales, which the requantisation takes."""
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = _inputs(node, 8)[:8]
    _per_output(ctx, node, b_scale, "b_scale", _last_dim(ctx, b))
    product = ctx.fresh_name("product")
    _integer_product(ctx, node, a, b, a_zero, b_zero, product)
    _requantize(ctx, node, product, (a_scale, b_scale, y_scale), y_zero, ctx.tensor(a).dtype)


register_converter("QLinearMatMul", since=21)(qlinear_matmul)


def _conv_product(ctx, node, x, w, x_zero, w_zero, bias, output):
    """Conv of the zero-point-shifted inputs in float64 (exact), plus the int32 bias, cast to
    int32 into `output`."""
    for name, role in ((x, "input x"), (w, "input w"), (x_zero, "x_zero_point")):
        if name:
            _check_dtype(ctx, node, name, _EIGHT_BIT, role)
    w_dims = _static_dims(ctx, w)
    channels = w_dims[0] if w_dims else None
    shape = None
    if w_zero:
        _check_dtype(ctx, node, w_zero, _EIGHT_BIT, "w_zero_point")
        _per_output(ctx, node, w_zero, "w_zero_point", channels)
        dims = _static_dims(ctx, w_zero)
        if dims is None or math.prod(dims) != 1:
            if w_dims is None:
                raise LoweringError(
                    f"{ctx.describe(node)}: a per-channel w_zero_point needs w's rank at lowering"
                )
            shape = [-1] + [1] * (len(w_dims) - 1)
    if x_zero:
        _one_element(ctx, node, x_zero, "x_zero_point")
    left = _shifted(ctx, node, x, x_zero, _DOUBLE)
    right = _shifted(ctx, node, w, w_zero, _DOUBLE, shape)
    inputs = [left, right]
    if bias:
        _check_dtype(ctx, node, bias, {DType.INT32}, "bias B")
        wide_bias = ctx.fresh_name(f"{bias}_wide")
        ctx.emit("Cast", [bias], [wide_bias], {"to": _DOUBLE})
        inputs.append(wide_bias)
    attributes = {k: node.attributes[k] for k in _CONV_ATTRIBUTES if k in node.attributes}
    wide = ctx.fresh_name("conv")
    ctx.emit("Conv", inputs, [wide], attributes)
    ctx.emit("Cast", [wide], [output], {"to": _INT32})


@register_converter("ConvInteger", since=10)
def conv_integer(ctx, node):
    """ConvInteger: an exact float64 Conv of the shifted inputs, cast to int32."""
    x, w, x_zero, w_zero = _inputs(node, 4)[:4]
    _conv_product(ctx, node, x, w, x_zero, w_zero, "", node.outputs[0])


@register_converter("QLinearConv", since=10)
def qlinear_conv(ctx, node):
    """QLinearConv: the ConvInteger product plus B, requantised with a per-tensor or
    per-channel w_scale."""
    x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias = _inputs(node, 9)[:9]
    product = ctx.fresh_name("product")
    _conv_product(ctx, node, x, w, x_zero, w_zero, bias, product)
    w_dims = _static_dims(ctx, w)
    _per_output(ctx, node, w_scale, "w_scale", w_dims[0] if w_dims else None)
    scale_dims = _static_dims(ctx, w_scale)
    if scale_dims is None or math.prod(scale_dims) != 1:
        if w_dims is None:
            raise LoweringError(
                f"{ctx.describe(node)}: a per-channel w_scale needs w's rank at lowering"
            )
        shaped, dims = ctx.fresh_name(f"{w_scale}_shaped"), ctx.fresh_name("shape")
        ctx.set_constant(dims, np.array([-1] + [1] * (len(w_dims) - 2), dtype=np.int64))
        ctx.emit("Reshape", [w_scale, dims], [shaped])
        w_scale = shaped
    _requantize(ctx, node, product, (x_scale, w_scale, y_scale), y_zero, ctx.tensor(x).dtype)


@register_converter("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(ctx, node):
    """DynamicQuantizeLinear of a float32 tensor: y, y_scale and y_zero_point."""
    _check_dtype(ctx, node, node.inputs[0], {DType.FLOAT32}, "input")
    ctx.emit("DynamicQuantizeLinear", node.inputs[:1], node.outputs, {})
