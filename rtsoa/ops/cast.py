"""Cast: every element type of the dtype table to every other but uint64 (refused), with
`saturate` for the float8 targets (ONNX Cast 19 on; 1 by default) and `round_mode` for float8
E8M0 ("up", the default, "down" or "nearest": ONNX Cast 25 on; the float32 of the value
rounded as `narrow_types.e8m0_code` says, as onnx.reference does).

Cast converts through one wide type: float sources (float32, float64, float16, bfloat16, the
float8 and float4 formats) are read as float64, exactly; integer and bool sources (4- and
2-bit integers too) as int64; then the wide values are written to the target type: numpy's
`astype` semantics for the numpy types (float to integer truncates toward zero, anything to
bool is `!= 0`), `ml_dtypes`' for the narrow ones (`rtsoa.ops.narrow_types`: round to nearest
even; a float out of a 4- or 2-bit integer's range gives 0, an integer wraps). An int64 above
2**53 cast to float32 may round twice. One compiled loop per source and per target dtype, not
per pair.
"""

import numpy as np

from rtsoa._jit import jit_inline_llvm, jit_with_nrt
from rtsoa.abi.dtypes import DTYPE_OF_ONNX, DTYPES, DType
from rtsoa.ops.abi import (
    F16,
    F32,
    F64,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    U16,
    U32,
    U64,
    copy_shape,
    dtype,
    numel,
    view,
)
from rtsoa.ops.copying import holds
from rtsoa.ops.elementwise_loops import half_value
from rtsoa.ops.narrow_types import (
    ROUND_MODES,
    ROUND_UP,
    SMALL_FLOATS,
    bfloat16_bits,
    e8m0_code,
    e8m0_value,
    half_bits,
    round_to_half,
    small_float_code,
    small_float_value,
    small_int_from_float,
    small_int_from_int,
    small_int_value,
)
from rtsoa.ops.registry import register_op
from rtsoa.ops.shape import as_float64, as_int64, narrow, narrow_to

BF16 = np.int64(DType.BFLOAT16)
E4M3FN = np.int64(DType.FLOAT8E4M3FN)
E4M3FNUZ = np.int64(DType.FLOAT8E4M3FNUZ)
E5M2 = np.int64(DType.FLOAT8E5M2)
E5M2FNUZ = np.int64(DType.FLOAT8E5M2FNUZ)
F4 = np.int64(DType.FLOAT4E2M1)
UINT4 = np.int64(DType.UINT4)
INT4 = np.int64(DType.INT4)
UINT2 = np.int64(DType.UINT2)
INT2 = np.int64(DType.INT2)
E8M0 = np.int64(DType.FLOAT8E8M0)  # the largest code of the table
CASTABLE = frozenset(DTYPES) - {DType.UINT64}  # what `castable` accepts
_ROWS = {int(kind): spec.row for kind, spec in SMALL_FLOATS.items()}
E4M3FN_ROW, E4M3FNUZ_ROW, E5M2_ROW, E5M2FNUZ_ROW, F4_ROW = (
    _ROWS[int(kind)] for kind in (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, F4)
)


@jit_inline_llvm
def small_float_row(kind):
    """The `narrow_types` table row of a float8 / float4 DType, -1 for any other."""
    if kind == E4M3FN:
        return E4M3FN_ROW
    if kind == E4M3FNUZ:
        return E4M3FNUZ_ROW
    if kind == E5M2:
        return E5M2_ROW
    if kind == E5M2FNUZ:
        return E5M2FNUZ_ROW
    if kind == F4:
        return F4_ROW
    return -1


@jit_inline_llvm
def small_int_kind(kind):
    """(bits, signed) of a 4- / 2-bit integer DType; bits 0 for any other."""
    if kind == UINT4:
        return 4, False
    if kind == INT4:
        return 4, True
    if kind == UINT2:
        return 2, False
    if kind == INT2:
        return 2, True
    return 0, False


@jit_inline_llvm
def is_float(kind):
    half = kind == F16 or kind == BF16
    return kind == F32 or kind == F64 or half or kind == E8M0 or small_float_row(kind) >= 0


@jit_with_nrt
def castable(kind):
    """Every DType of the table but UNDEFINED and UINT64."""
    return kind > 0 and kind != U64 and kind <= E8M0


@jit_with_nrt
def cast_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 3 or not castable(attrs[0]) or attrs[2] < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if not castable(dtype(table, 0)):
        return np.int32(STATUS_OP_BAD_DTYPE)
    copy_shape(table, 0, n_in)
    table[n_in, 2] = attrs[0]
    return OK


@jit_with_nrt
def read_float(arena, table, row, n):
    """The first `n` elements of a float row of any float type as float64, exactly."""
    kind = dtype(table, row)
    if kind == F32 or kind == F64:
        return as_float64(arena, table, row, n)
    out = np.empty(n, dtype=np.float64)
    if kind == F16:
        halves = view(arena, table, row, np.uint16)
        for i in range(n):
            out[i] = half_value(halves[i])
        return out
    if kind == BF16:  # the float32 of the bits shifted up: NaN payloads kept, as ml_dtypes has
        brains = view(arena, table, row, np.uint16)
        word = np.empty(1, dtype=np.uint32)
        single = word.view(np.float32)
        for i in range(n):
            word[0] = np.uint32(brains[i]) << np.uint32(16)
            out[i] = single[0]
        return out
    codes = view(arena, table, row, np.uint8)
    small = small_float_row(kind)
    for i in range(n):
        out[i] = e8m0_value(codes[i]) if kind == E8M0 else small_float_value(small, codes[i])
    return out


@jit_with_nrt
def read_int(arena, table, row, n):
    """The first `n` elements of an integer or bool row (uint64 aside) as int64."""
    kind = dtype(table, row)
    bits, signed = small_int_kind(kind)
    if kind == U16 or kind == U32 or bits > 0:
        out = np.empty(n, dtype=np.int64)
        if kind == U16:
            source16 = view(arena, table, row, np.uint16)
            for i in range(n):
                out[i] = source16[i]
        elif kind == U32:
            source32 = view(arena, table, row, np.uint32)
            for i in range(n):
                out[i] = source32[i]
        else:
            codes = view(arena, table, row, np.uint8)
            for i in range(n):
                out[i] = small_int_value(codes[i], bits, signed)
        return out
    return as_int64(arena, table, row, n)


@jit_with_nrt
def write_float(arena, table, row, wide, n, saturate, round_mode=ROUND_UP):
    """Write float64 `wide` into output `row` as its type."""
    target = dtype(table, row)
    bits, signed = small_int_kind(target)
    if target == E8M0:  # from the float32 of each value, as ONNX defines it
        codes = view(arena, table, row, np.uint8)
        word = np.empty(1, dtype=np.float32)
        single = word.view(np.uint32)
        for i in range(n):
            word[0] = np.float32(wide[i])
            codes[i] = e8m0_code(single[0], saturate, round_mode)
    elif target == F16 or target == BF16:
        halves = view(arena, table, row, np.uint16)
        for i in range(n):
            if target == F16:
                halves[i] = half_bits(round_to_half(wide[i]))
            else:
                halves[i] = bfloat16_bits(wide[i])
    elif small_float_row(target) >= 0:
        small = small_float_row(target)
        codes = view(arena, table, row, np.uint8)
        for i in range(n):
            codes[i] = small_float_code(small, wide[i], saturate)
    elif bits > 0:
        codes = view(arena, table, row, np.uint8)
        for i in range(n):
            codes[i] = small_int_from_float(wide[i], bits, signed)
    else:
        return write_numpy(arena, table, row, wide, n)
    return OK


@jit_with_nrt
def write_int(arena, table, row, wide, n):
    """Write int64 `wide` into output `row` as its type (floats through float64)."""
    target = dtype(table, row)
    bits, _ = small_int_kind(target)
    if is_float(target) and target != F32 and target != F64:
        floats = np.empty(n, dtype=np.float64)
        narrow(wide, floats)
        return write_float(arena, table, row, floats, n, True)
    if bits > 0:
        codes = view(arena, table, row, np.uint8)
        for i in range(n):
            codes[i] = small_int_from_int(wide[i], bits)
    else:
        return write_numpy(arena, table, row, wide, n)
    return OK


@jit_with_nrt
def write_numpy(arena, table, row, wide, n):
    """Write float64 or int64 `wide` into output `row` of a numpy type (`astype`'s rules)."""
    target = dtype(table, row)
    if target == U16:
        narrow(wide, view(arena, table, row, np.uint16)[:n])
    elif target == U32:
        narrow(wide, view(arena, table, row, np.uint32)[:n])
    else:
        return narrow_to(arena, table, row, target, wide, n)
    return OK


@jit_with_nrt
def cast_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = cast_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    n = numel(table, 0)
    if not holds(table, 0) or not holds(table, n_in) or numel(table, n_in) != n:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if is_float(dtype(table, 0)):
        wide = read_float(arena, table, 0, n)
        return write_float(arena, table, n_in, wide, n, attrs[1] != 0, attrs[2])
    return write_int(arena, table, n_in, read_int(arena, table, 0, n), n)


def encode_cast(attributes, inputs):
    """[rtsoa DType code of `to` (-1 for a type Cast does not convert: infer refuses it),
    saturate (1 by default), round_mode (`narrow_types.ROUND_MODES`; -1 for another: infer
    refuses it)]."""
    to = DTYPE_OF_ONNX.get(int(attributes.get("to", -1)))
    mode = attributes.get("round_mode", "up")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    return [
        int(to) if to in CASTABLE else -1,
        int(attributes.get("saturate", 1)),
        ROUND_MODES.get(mode, -1),
    ]


register_op("Cast", cast_infer, cast_compute, encode=encode_cast, dtypes={0: CASTABLE})
