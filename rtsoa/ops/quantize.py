"""Linear quantisation ops on 8- and 16-bit integers and the narrow types (4- and 2-bit
integers, float8, float4; `rtsoa.ops.narrow_types`): QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, and QLinearRequantize, the last step of QLinearMatMul and QLinearConv
(which `rtsoa.lowering.quantized` composes from Cast, Sub, MatMul / Conv and this op).

Each computes in the types the ONNX reference implementation (`onnx.reference`) computes in,
so results are equal bit for bit: QuantizeLinear divides in numpy's promotion of x's and the
scale's types (or in `precision`), float16 quotients rounded to float16, then rounds halves to
even; DequantizeLinear makes the exact difference of x and its zero point float32 and
multiplies by the scale in float32 (float64 for a float64 scale), then rounds to the output
type (for an int32 x with a zero point the reference rounds x to float32 before subtracting;
rtsoa subtracts first, as onnxruntime does). Out-of-range results saturate to the output
type's range (NaN gives its lowest value, as the reference's conversion does). Values are
read into float64 / int64 arrays first, so one compiled loop serves every element type.
Float8 outputs round x / scale to nearest even (saturating unless `saturate` is 0) and ignore
the zero point, float4 outputs add it first and always saturate, as the reference does; a
float8 DequantizeLinear needs a zero point of 0 (the reference's rule), a float4 one ignores
it.

Scale and zero point: one element (per tensor), a 1-D tensor of x.shape[axis] elements (per
axis), or, with `block_size` B > 0, x's shape but ceil(x.shape[axis] / B) at `axis` (blocked).
Attribute slots (QuantizeLinear / DequantizeLinear): [axis, block_size, output DType code
(0: from the zero point, else the default), precision DType code (0: none), saturate].
"""

import numpy as np

from rtsoa._jit import jit_inline_llvm, jit_with_nrt
from rtsoa.abi.dtypes import DTYPE_OF_ONNX
from rtsoa.ops.abi import (
    F16,
    F32,
    F64,
    I8,
    I16,
    I32,
    OK,
    RESULT_ROW,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    U8,
    U16,
    DType,
    copy_shape,
    dim,
    dtype,
    normalize_axis,
    numel,
    present,
    rank,
    set_output,
    view,
)
from rtsoa.ops.broadcast import broadcast_rows, index_map
from rtsoa.ops.cast import F4, is_float, read_float, read_int, small_float_row, small_int_kind
from rtsoa.ops.copying import holds
from rtsoa.ops.narrow_types import half_bits, round_to_half, small_float_code, small_int_from_int
from rtsoa.ops.registry import register_op

# The integer types a quantised tensor may have, and what may be quantised / scale it.
QUANTIZED = frozenset({DType.UINT8, DType.INT8, DType.UINT16, DType.INT16})
# the narrow types (`rtsoa.ops.narrow_types`): 4- and 2-bit integers, float8 and float4
NARROW = frozenset(
    {DType.UINT4, DType.INT4, DType.UINT2, DType.INT2, DType.FLOAT4E2M1}
    | {DType.FLOAT8E4M3FN, DType.FLOAT8E4M3FNUZ, DType.FLOAT8E5M2, DType.FLOAT8E5M2FNUZ}
)
QUANTIZE_SOURCES = frozenset({DType.FLOAT32, DType.FLOAT16, DType.FLOAT64, DType.INT32})
SCALES = frozenset({DType.FLOAT32, DType.FLOAT16, DType.FLOAT64})
DEQUANTIZE_SOURCES = QUANTIZED | NARROW | {DType.INT32}


# -- element conversions --------------------------------------------------------------------------


@jit_inline_llvm
def round_to(value, kind):
    """`value` rounded to float type `kind` (F32, F16; F64 as it is)."""
    if kind == F32:
        return np.float64(np.float32(value))
    if kind == F16:
        return round_to_half(value)
    return value


@jit_inline_llvm
def quantized_range(kind):
    """(lowest, highest) of integer quantised type `kind`."""
    bits, signed = small_int_kind(kind)
    if bits > 0:
        return (-(2.0 ** (bits - 1)), 2.0 ** (bits - 1) - 1) if signed else (0.0, 2.0**bits - 1)
    if kind == U8:
        return 0.0, 255.0
    if kind == I8:
        return -128.0, 127.0
    if kind == U16:
        return 0.0, 65535.0
    return -32768.0, 32767.0


@jit_inline_llvm
def is_quantized(kind):
    """Is `kind` an 8- or 16-bit integer type?"""
    return kind == U8 or kind == I8 or kind == U16 or kind == I16


@jit_inline_llvm
def is_narrow(kind):
    """Is `kind` a 4- or 2-bit integer, float8 or float4 type?"""
    return small_int_kind(kind)[0] > 0 or small_float_row(kind) >= 0


@jit_with_nrt
def store_quantized(arena, table, row, values):
    """Write integral float64 `values` (already in range) into quantised output `row`; for a
    float8 / float4 row, `values` are its codes."""
    kind = dtype(table, row)
    n = values.shape[0]
    bits = small_int_kind(kind)[0]
    if bits > 0 or small_float_row(kind) >= 0:
        codes = view(arena, table, row, np.uint8)
        for i in range(n):
            codes[i] = small_int_from_int(np.int64(values[i]), 8 if bits == 0 else bits)
    elif kind == U8:
        out_u8 = view(arena, table, row, np.uint8)
        for i in range(n):
            out_u8[i] = np.uint8(values[i])
    elif kind == I8:
        out_i8 = view(arena, table, row, np.int8)
        for i in range(n):
            out_i8[i] = np.int8(values[i])
    elif kind == U16:
        out_u16 = view(arena, table, row, np.uint16)
        for i in range(n):
            out_u16[i] = np.uint16(values[i])
    else:
        out_i16 = view(arena, table, row, np.int16)
        for i in range(n):
            out_i16[i] = np.int16(values[i])


@jit_with_nrt
def store_float(arena, table, row, values):
    """Write float64 `values` (already rounded to the row's type) into float output `row`."""
    kind = dtype(table, row)
    n = values.shape[0]
    if kind == F32:
        out32 = view(arena, table, row, np.float32)
        for i in range(n):
            out32[i] = values[i]
    elif kind == F16:
        out16 = view(arena, table, row, np.uint16)
        for i in range(n):
            out16[i] = half_bits(values[i])
    else:
        view(arena, table, row, np.float64)[:n] = values


@jit_inline_llvm
def saturate(value, lowest, highest):
    """An integral float64 clipped to [lowest, highest]; NaN gives `lowest`."""
    if value != value or value < lowest:
        return lowest
    return min(value, highest)


# -- scale and zero point layout ------------------------------------------------------------------


@jit_with_nrt
def parameter_layout(table, row, axis_attribute, block):
    """(status, mode, axis, size, inner, blocks) of scale row `row` for input 0: mode 0 per
    tensor, 1 per axis, 2 blocked (`block` elements a block)."""
    x_rank = rank(table, 0)
    if numel(table, row) == 1:  # whatever its rank, as the reference reads it
        return OK, 0, 0, 1, 1, 1
    axis = normalize_axis(axis_attribute, x_rank)
    if axis < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), 0, 0, 1, 1, 1
    size = dim(table, 0, axis)
    inner = np.int64(1)
    for k in range(axis + 1, x_rank):
        inner *= dim(table, 0, k)
    if block <= 0:
        if rank(table, row) != 1 or dim(table, row, 0) != size or block < 0:
            return np.int32(STATUS_OP_BAD_SHAPE), 0, 0, 1, 1, 1
        return OK, 1, axis, size, inner, 1
    if rank(table, row) != x_rank:
        return np.int32(STATUS_OP_BAD_SHAPE), 0, 0, 1, 1, 1
    blocks = (size + block - 1) // block
    for k in range(x_rank):
        expected = blocks if k == axis else dim(table, 0, k)
        if dim(table, row, k) != expected:
            return np.int32(STATUS_OP_BAD_SHAPE), 0, 0, 1, 1, 1
    return OK, 2, axis, size, inner, blocks


@jit_inline_llvm
def parameter_index(i, mode, size, inner, blocks, block):
    """The scale / zero point element that element `i` of x uses (see parameter_layout)."""
    if mode == 0:
        return np.int64(0)
    a = (i // inner) % size
    if mode == 1:
        return a
    outer = i // (inner * size)
    return (outer * blocks + a // block) * inner + i % inner


@jit_with_nrt
def _same_shape_rows(table, a, b):
    if rank(table, a) != rank(table, b):
        return False
    for k in range(rank(table, a)):
        if dim(table, a, k) != dim(table, b, k):
            return False
    return True


@jit_with_nrt
def _like_input(table, n_in, attrs, target):
    """The end of Quantize / DequantizeLinear's shape inference: the scale (row 1) and zero
    point (row 2, optional) checked against x (row 0); the output x's shape in `target`."""
    status = parameter_layout(table, 1, attrs[0], attrs[1])[0]
    if status != 0:
        return status
    if n_in > 2 and present(table, 2) and not _same_shape_rows(table, 1, 2):
        if numel(table, 1) != 1 or numel(table, 2) != 1:  # a scalar and a [1] agree
            return np.int32(STATUS_OP_BAD_SHAPE)
    copy_shape(table, 0, n_in)
    table[n_in, 2] = target
    table[RESULT_ROW, 0] = numel(table, 0)
    return OK


@jit_with_nrt
def _parameters(arena, table, n_in, attrs):
    """(status, with zero point, mode, size, inner, blocks, scale and zero point as float64)
    of Quantize / DequantizeLinear, whose shapes were inferred."""
    with_zero = n_in > 2 and present(table, 2)
    _, mode, _, size, inner, blocks = parameter_layout(table, 1, attrs[0], attrs[1])
    held = holds(table, 0) and holds(table, 1) and holds(table, n_in)
    if not held or (with_zero and not holds(table, 2)):
        empty = np.zeros(1, np.float64)
        return np.int32(STATUS_OP_BAD_SHAPE), with_zero, mode, size, inner, blocks, empty, empty
    scale = read_any(arena, table, 1, numel(table, 1))
    zero = read_any(arena, table, 2, numel(table, 2)) if with_zero else np.zeros(1)
    return OK, with_zero, mode, size, inner, blocks, scale, zero


@jit_with_nrt
def read_any(arena, table, row, n):
    """The first `n` elements of row `row`, of any castable type, as float64."""
    if is_float(dtype(table, row)):
        return read_float(arena, table, row, n)
    return read_int(arena, table, row, n).astype(np.float64)


# -- QuantizeLinear -------------------------------------------------------------------------------


@jit_inline_llvm
def _division_type(x_kind, scale_kind, precision):
    """The float type x / scale is computed in: `precision` if given, else numpy's promotion."""
    if precision != 0:
        return precision
    if x_kind == F64 or scale_kind == F64 or x_kind == I32 or scale_kind == I32:
        return F64
    if x_kind == F32 or scale_kind == F32:
        return F32
    return F16


@jit_with_nrt
def quantize_infer(arena, table, n_in, n_out, attrs, fattrs):
    x_kind = dtype(table, 0)
    if not (x_kind == F32 or x_kind == F16 or x_kind == F64 or x_kind == I32):
        return np.int32(STATUS_OP_BAD_DTYPE)
    scale_kind = dtype(table, 1)
    if not (scale_kind == F32 or scale_kind == F16 or scale_kind == F64 or scale_kind == I32):
        return np.int32(STATUS_OP_BAD_DTYPE)
    target = attrs[2]
    if n_in > 2 and present(table, 2):
        if target != 0 and target != dtype(table, 2):
            return np.int32(STATUS_OP_BAD_DTYPE)
        target = dtype(table, 2)
    elif target == 0:
        target = U8
    if not (is_quantized(target) or is_narrow(target)):
        return np.int32(STATUS_OP_BAD_DTYPE)
    precision = attrs[3]
    if precision != 0 and precision != F32 and precision != F16 and precision != F64:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    return _like_input(table, n_in, attrs, target)


@jit_with_nrt
def quantize_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = quantize_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    status, with_zero, mode, size, inner, blocks, scale, zero = _parameters(
        arena, table, n_in, attrs
    )
    if status != 0:
        return status
    n = numel(table, 0)
    x = read_any(arena, table, 0, n)
    # both operands in the division's type first (exact unless `precision` narrows them)
    kind = _division_type(dtype(table, 0), dtype(table, 1), attrs[3])
    target = dtype(table, n_in)
    small = small_float_row(target)
    float4 = target == F4
    lowest, highest = quantized_range(target)
    out = np.empty(n, dtype=np.float64)
    for i in range(n):
        k = parameter_index(i, mode, size, inner, blocks, attrs[1])
        quotient = round_to(round_to(x[i], kind) / round_to(scale[k], kind), kind)
        if small >= 0:  # float8 ignores its zero point (the reference's), float4 adds it
            if float4 and with_zero:
                quotient = round_to(quotient + zero[k], kind)
            out[i] = small_float_code(small, quotient, attrs[4] != 0 or float4)
            continue
        value = np.rint(quotient)
        if with_zero:
            value += zero[k]
        out[i] = saturate(value, lowest, highest)
    store_quantized(arena, table, n_in, out)
    return OK


# -- DequantizeLinear -----------------------------------------------------------------------------


@jit_with_nrt
def dequantize_infer(arena, table, n_in, n_out, attrs, fattrs):
    x_kind = dtype(table, 0)
    if not (is_quantized(x_kind) or is_narrow(x_kind) or x_kind == I32):
        return np.int32(STATUS_OP_BAD_DTYPE)
    if n_in > 2 and present(table, 2) and dtype(table, 2) != x_kind:
        return np.int32(STATUS_OP_BAD_DTYPE)
    scale_kind = dtype(table, 1)
    if not (scale_kind == F32 or scale_kind == F16 or scale_kind == F64):
        return np.int32(STATUS_OP_BAD_DTYPE)
    target = attrs[2] if attrs[2] != 0 else scale_kind
    if not (target == F32 or target == F16 or target == F64):
        return np.int32(STATUS_OP_BAD_DTYPE)
    return _like_input(table, n_in, attrs, target)


@jit_with_nrt
def dequantize_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = dequantize_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    status, with_zero, mode, size, inner, blocks, scale, zero = _parameters(
        arena, table, n_in, attrs
    )
    if status != 0:
        return status
    n = numel(table, 0)
    x = read_any(arena, table, 0, n)
    small = small_float_row(dtype(table, 0))
    if small >= 0:  # float4's zero point is ignored, float8's must be zero (the reference's)
        with_zero = False
        if dtype(table, 0) != F4:
            for k in range(zero.shape[0]):
                if zero[k] != 0:
                    return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    # the exact difference made float32 (the reference's float32(x) - zero point for 8- and
    # 16-bit x; onnxruntime's for int32, where the reference rounds x first), times the scale
    # in float32 unless the scale is float64
    wide = dtype(table, 1) == F64
    target = dtype(table, n_in)
    out = np.empty(n, dtype=np.float64)
    for i in range(n):
        k = parameter_index(i, mode, size, inner, blocks, attrs[1])
        difference = x[i] - zero[k] if with_zero else x[i]
        product = np.float64(np.float32(difference)) * scale[k]
        if not wide:
            product = np.float64(np.float32(product))
        out[i] = round_to(product, target)
    store_float(arena, table, n_in, out)
    return OK


def encode_quantize(attributes, inputs):
    """[axis, block_size, output DType code (0: none), precision DType code (0: none),
    saturate (float8 outputs; 1 by default)]; an ONNX type rtsoa has no code for becomes -1,
    which shape inference refuses."""

    def code(name):
        value = int(attributes.get(name, 0) or 0)
        return 0 if value == 0 else int(DTYPE_OF_ONNX.get(value, -1))

    return [
        int(attributes.get("axis", 1)),
        int(attributes.get("block_size", 0)),
        code("output_dtype"),
        code("precision"),
        int(attributes.get("saturate", 1)),
    ]


# -- DynamicQuantizeLinear ------------------------------------------------------------------------


@jit_with_nrt
def dynamic_infer(arena, table, n_in, n_out, attrs, fattrs):
    if dtype(table, 0) != F32:
        return np.int32(STATUS_OP_BAD_DTYPE)
    copy_shape(table, 0, n_in)
    table[n_in, 2] = U8
    set_output(table, n_in + 1, F32, 0)
    set_output(table, n_in + 2, U8, 0)
    table[RESULT_ROW, 0] = 2 * numel(table, 0)
    return OK


@jit_with_nrt
def dynamic_compute(arena, table, n_in, n_out, attrs, fattrs):
    """y_scale = (max(x, 0) - min(x, 0)) / 255 and the uint8 zero point that maps 0 exactly,
    all in float32 as the reference computes them; when max == min (an empty x too) the scale
    is 1 and the zero point 0, as onnxruntime gives."""
    status = dynamic_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    for row in range(n_in + 3):
        if not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    n = numel(table, 0)
    x = view(arena, table, 0, np.float32)[:n]
    highest = np.float32(0.0)
    lowest = np.float32(0.0)
    for i in range(n):
        if x[i] != x[i]:  # numpy's max / min propagate NaN
            highest = x[i]
            lowest = x[i]
            break
        highest = max(highest, x[i])
        lowest = min(lowest, x[i])
    if highest == lowest:  # onnxruntime's scale (the reference's is 1 / 255)
        scale = np.float32(1.0)
    else:
        scale = np.float32(np.float32(highest - lowest) / np.float32(255.0))
    initial = np.float32(np.float32(0.0) - np.float32(lowest / scale))
    zero = np.rint(max(np.float32(0.0), min(np.float32(255.0), initial)))
    out = view(arena, table, n_in, np.uint8)
    for i in range(n):
        value = np.rint(np.float32(x[i] / scale)) + zero
        out[i] = np.uint8(saturate(np.float64(value), 0.0, 255.0))
    view(arena, table, n_in + 1, np.float32)[0] = scale
    view(arena, table, n_in + 2, np.uint8)[0] = np.uint8(saturate(np.float64(zero), 0.0, 255.0))
    return OK


# -- QLinearRequantize: the integer product of QLinearMatMul / QLinearConv to its output type -----
# inputs: accumulator (int32), a_scale, b_scale, y_scale (all float32 or all float16),
# y_zero_point (optional); attrs: [output DType code when the zero point is absent]


@jit_with_nrt
def requantize_infer(arena, table, n_in, n_out, attrs, fattrs):
    if dtype(table, 0) != I32:
        return np.int32(STATUS_OP_BAD_DTYPE)
    kind = dtype(table, 1)
    if (kind != F32 and kind != F16) or dtype(table, 2) != kind or dtype(table, 3) != kind:
        return np.int32(STATUS_OP_BAD_DTYPE)
    target = dtype(table, 4) if n_in > 4 and present(table, 4) else attrs[0]
    if not is_quantized(target):
        return np.int32(STATUS_OP_BAD_DTYPE)
    rows = np.arange(n_in if n_in > 4 and present(table, 4) else 4)
    status = broadcast_rows(table, rows, n_in)
    if status != 0:
        return status
    if not _same_shape_rows(table, 0, n_in):  # the parameters broadcast to the product
        return np.int32(STATUS_OP_BAD_SHAPE)
    table[n_in, 2] = target
    table[RESULT_ROW, 0] = 3 * numel(table, 0)
    return OK


@jit_with_nrt
def requantize_compute(arena, table, n_in, n_out, attrs, fattrs):
    """y = saturate(rint(acc * (a_scale * b_scale / y_scale) + y_zero_point)), the multiplier
    in the scales' type and the rest in float64, as numpy promotes int32 with it."""
    status = requantize_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    with_zero = n_in > 4 and present(table, 4)
    for row in range(n_in + 1):
        if (row < 4 or row == n_in or with_zero) and not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    n = numel(table, 0)
    acc = view(arena, table, 0, np.int32)
    kind = dtype(table, 1)
    a_scale = read_any(arena, table, 1, numel(table, 1))
    b_scale = read_any(arena, table, 2, numel(table, 2))
    y_scale = read_any(arena, table, 3, numel(table, 3))
    ai = index_map(table, 1, n_in)
    bi = index_map(table, 2, n_in)
    yi = index_map(table, 3, n_in)
    zero = read_int(arena, table, 4, numel(table, 4)) if with_zero else np.zeros(1, np.int64)
    zi = index_map(table, 4, n_in) if with_zero else np.zeros(n, np.int64)
    lowest, highest = quantized_range(dtype(table, n_in))
    out = np.empty(n, dtype=np.float64)
    for i in range(n):
        product = round_to(a_scale[ai[i]] * b_scale[bi[i]], kind)
        multiplier = round_to(product / y_scale[yi[i]], kind)
        value = np.float64(acc[i]) * multiplier
        if with_zero:
            value += zero[zi[i]]
        out[i] = saturate(np.rint(value), lowest, highest)
    store_quantized(arena, table, n_in, out)
    return OK


def encode_requantize(attributes, inputs):
    """[output DType code when the zero point is absent] (attribute `to`)."""
    return [int(attributes.get("to", DType.UINT8))]


register_op(
    "QuantizeLinear",
    quantize_infer,
    quantize_compute,
    encode=encode_quantize,
    inputs=(2, 3),
    dtypes={0: QUANTIZE_SOURCES, 1: SCALES | {DType.INT32}, 2: QUANTIZED | NARROW},
)
register_op(
    "DequantizeLinear",
    dequantize_infer,
    dequantize_compute,
    encode=encode_quantize,
    inputs=(2, 3),
    dtypes={0: DEQUANTIZE_SOURCES, 1: SCALES, 2: DEQUANTIZE_SOURCES},
)
register_op(
    "DynamicQuantizeLinear",
    dynamic_infer,
    dynamic_compute,
    outputs=(3, 3),
    dtypes={0: frozenset({DType.FLOAT32})},
)
register_op(
    "QLinearRequantize",
    requantize_infer,
    requantize_compute,
    encode=encode_requantize,
    inputs=(4, 5),
    dtypes={0: frozenset({DType.INT32}), 4: QUANTIZED},
)
