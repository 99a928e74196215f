"""Shape and misc ops: Shape, ConstantOfShape, Range, Not, And, Or, Xor; and the conversions
through one wide type that Cast (`rtsoa.ops.cast`) and the reductions share: float sources read
as float64, integer and bool sources as int64 (`as_float64`, `as_int64`), written back to a
type with numpy's `astype` semantics (`narrow_to`).
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.abi.dtypes import DType, dtype_code
from rtsoa.ops.abi import (
    BOOL,
    F32,
    F64,
    I32,
    I64,
    MAX_RANK,
    NUMBERS,
    OK,
    RESULT_ROW,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_MISSING_INPUT,
    STATUS_OP_NEEDS_DATA,
    STATUS_OP_TOO_LARGE,
    dim,
    dtype,
    has_data,
    numel,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.broadcast import broadcast_rows, index_map, same_shape
from rtsoa.ops.copying import fill_pattern, holds, set_dims
from rtsoa.ops.lists import input_list
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import MAX_ELEMENTS

I8 = np.int64(DType.INT8)
I16 = np.int64(DType.INT16)
U8 = np.int64(DType.UINT8)

# -- Shape ----------------------------------------------------------------------------------------


@jit_with_nrt
def shape_range(table, attrs):
    """(start, end) of the dims Shape returns (opset 15 attributes, clamped like ONNX)."""
    r = rank(table, 0)
    start = attrs[0]
    end = attrs[2] if attrs[1] != 0 else r
    if start < 0:
        start += r
    if end < 0:
        end += r
    start = min(max(start, 0), r)
    end = min(max(end, 0), r)
    return start, max(end, start)


@jit_with_nrt
def shape_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 3:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    start, end = shape_range(table, attrs)
    set_output(table, n_in, I64, 1)
    set_dim(table, n_in, 0, end - start)
    return OK


@jit_with_nrt
def shape_compute(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 3 or dtype(table, n_in) != I64:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    start, end = shape_range(table, attrs)
    out = view(arena, table, n_in, np.int64)
    if not holds(table, n_in) or numel(table, n_in) != end - start:
        return np.int32(STATUS_OP_BAD_SHAPE)
    for k in range(start, end):
        out[k - start] = dim(table, 0, k)
    return OK


# -- ConstantOfShape ------------------------------------------------------------------------------


@jit_with_nrt
def constant_of_shape_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Shape from input 0's data; dtype from the `value` attribute (slot 0)."""
    if attrs.shape[0] < 2 or attrs[0] < 1 or attrs[0] > BOOL or attrs[0] == 3:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    status, shape, given = input_list(arena, table, n_in, 0)
    if status != 0:
        return status
    if not given:
        return np.int32(STATUS_OP_MISSING_INPUT)
    for k in range(shape.shape[0]):
        if shape[k] < 0:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    return set_dims(table, n_in, attrs[0], shape)


@jit_with_nrt
def constant_of_shape_compute(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 2 or dtype(table, n_in) != attrs[0]:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    size = np.int64(1)
    kind = attrs[0]
    if kind == F64 or kind == I64:
        size = 8
    elif kind == F32 or kind == I32:
        size = 4
    elif kind == I16:
        size = 2
    pattern = np.empty(size, dtype=np.uint8)
    bits = attrs[1]
    for b in range(size):
        pattern[b] = (bits >> (8 * b)) & 0xFF
    fill_pattern(view(arena, table, n_in, np.uint8), pattern, numel(table, n_in))
    return OK


def encode_constant_of_shape(attributes, inputs):
    """[DType code, the value's bytes as a little-endian int64] (default float32 0)."""
    value = attributes.get("value")
    if value is None:
        value = np.zeros(1, dtype=np.float32)
    value = np.asarray(value)
    try:
        code = int(dtype_code(value.dtype))
    except KeyError:
        return [-1, 0]  # infer refuses it as a bad attribute
    if value.size != 1 or code == DType.FLOAT16:
        return [-1, 0]
    raw = value.reshape(-1)[:1].astype(value.dtype.newbyteorder("<")).tobytes()
    return [code, int.from_bytes(raw.ljust(8, b"\0"), "little", signed=True)]


# -- Range ----------------------------------------------------------------------------------------


@jit_with_nrt
def range_count(arena, table):
    """(status, count) of Range(start, limit, delta): max(ceil((limit - start) / delta), 0)."""
    kind = dtype(table, 0)
    for row in range(3):
        if dtype(table, row) != kind or numel(table, row) != 1:
            return np.int32(STATUS_OP_BAD_SHAPE), np.int64(0)
        if not has_data(table, row):
            return np.int32(STATUS_OP_NEEDS_DATA), np.int64(0)
        if not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE), np.int64(0)
    if kind == F32 or kind == F64:
        start, limit, delta = range_floats(arena, table, kind)
        if delta == 0 or not np.isfinite(start + limit + delta):
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), np.int64(0)
        count = np.ceil((limit - start) / delta)
        if count > 1 << 40:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), np.int64(0)
        return OK, np.int64(max(count, 0))
    if kind == I32 or kind == I64:
        start, limit, delta = range_ints(arena, table, kind)
        if delta == 0:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), np.int64(0)
        count = _int_range_count(start, limit, delta)
        if count >= np.uint64(MAX_ELEMENTS):  # Range(INT64_MIN, INT64_MAX, 1) would wrap
            return np.int32(STATUS_OP_TOO_LARGE), np.int64(0)
        return OK, np.int64(count)
    return np.int32(STATUS_OP_BAD_DTYPE), np.int64(0)


@jit_with_nrt
def _int_range_count(start, limit, delta):
    """ceil((limit - start) / delta), at least 0, as uint64: limit - start is taken modulo 2**64,
    exact because the true span lies in 0 .. 2**64 - 1 (int64 subtraction would wrap)."""
    zero = np.uint64(0)
    if delta > 0:
        if limit <= start:
            return zero
        span = np.uint64(limit) - np.uint64(start)
        step = np.uint64(delta)
    else:
        if limit >= start:
            return zero
        span = np.uint64(start) - np.uint64(limit)
        step = zero - np.uint64(delta)
    whole = span // step
    return whole if span % step == zero else whole + np.uint64(1)


@jit_with_nrt
def range_floats(arena, table, kind):
    if kind == F32:
        return (
            np.float64(view(arena, table, 0, np.float32)[0]),
            np.float64(view(arena, table, 1, np.float32)[0]),
            np.float64(view(arena, table, 2, np.float32)[0]),
        )
    return (
        view(arena, table, 0, np.float64)[0],
        view(arena, table, 1, np.float64)[0],
        view(arena, table, 2, np.float64)[0],
    )


@jit_with_nrt
def range_ints(arena, table, kind):
    if kind == I32:
        return (
            np.int64(view(arena, table, 0, np.int32)[0]),
            np.int64(view(arena, table, 1, np.int32)[0]),
            np.int64(view(arena, table, 2, np.int32)[0]),
        )
    return (
        view(arena, table, 0, np.int64)[0],
        view(arena, table, 1, np.int64)[0],
        view(arena, table, 2, np.int64)[0],
    )


@jit_with_nrt
def range_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, count = range_count(arena, table)
    if status != 0:
        return status
    set_output(table, n_in, dtype(table, 0), 1)
    set_dim(table, n_in, 0, count)
    return OK


@jit_with_nrt
def range_compute(arena, table, n_in, n_out, attrs, fattrs):
    status, count = range_count(arena, table)
    if status != 0:
        return status
    kind = dtype(table, 0)
    if dtype(table, n_in) != kind or numel(table, n_in) != count:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if kind == F32:
        start = view(arena, table, 0, np.float32)[0]
        delta = view(arena, table, 2, np.float32)[0]
        out32 = view(arena, table, n_in, np.float32)
        for i in range(out32.shape[0]):
            out32[i] = start + np.float32(i) * delta
    elif kind == F64:
        startd = view(arena, table, 0, np.float64)[0]
        deltad = view(arena, table, 2, np.float64)[0]
        out64 = view(arena, table, n_in, np.float64)
        for i in range(out64.shape[0]):
            out64[i] = startd + i * deltad
    else:
        starti, _, deltai = range_ints(arena, table, kind)
        if kind == I32:
            outi32 = view(arena, table, n_in, np.int32)
            for i in range(outi32.shape[0]):
                outi32[i] = starti + i * deltai
        else:
            outi64 = view(arena, table, n_in, np.int64)
            for i in range(outi64.shape[0]):
                outi64[i] = starti + i * deltai
    return OK


# -- conversions through a wide type (Cast, reductions) --------------------------------------------


@jit_with_nrt
def widen(x, out):
    for i in range(out.shape[0]):
        out[i] = x[i]


@jit_with_nrt
def narrow(x, out):
    for i in range(out.shape[0]):
        out[i] = x[i]


@jit_with_nrt
def to_bool(x, out):
    for i in range(out.shape[0]):
        out[i] = 1 if x[i] != 0 else 0


@jit_with_nrt
def as_float64(arena, table, row, n):
    """The first `n` elements of float32 / float64 row `row` as a new float64 array."""
    out = np.empty(n, dtype=np.float64)
    if dtype(table, row) == F32:
        widen(view(arena, table, row, np.float32)[:n], out)
    else:
        out[:] = view(arena, table, row, np.float64)[:n]
    return out


@jit_with_nrt
def as_int64(arena, table, row, n):
    """The first `n` elements of an integer or bool row `row` as a new int64 array."""
    kind = dtype(table, row)
    out = np.empty(n, dtype=np.int64)
    if kind == I8:
        widen(view(arena, table, row, np.int8)[:n], out)
    elif kind == I16:
        widen(view(arena, table, row, np.int16)[:n], out)
    elif kind == I32:
        widen(view(arena, table, row, np.int32)[:n], out)
    elif kind == I64:
        out[:] = view(arena, table, row, np.int64)[:n]
    else:  # UINT8 and BOOL (bytes 0 / 1)
        widen(view(arena, table, row, np.uint8)[:n], out)
    return out


@jit_with_nrt
def narrow_to(arena, table, row, target, wide, n):
    """Write `wide` (float64 or int64) into output `row` as dtype `target` (checked to hold
    `n` elements)."""
    if target == F32:
        narrow(wide, view(arena, table, row, np.float32)[:n])
    elif target == F64:
        narrow(wide, view(arena, table, row, np.float64)[:n])
    elif target == I8:
        narrow(wide, view(arena, table, row, np.int8)[:n])
    elif target == I16:
        narrow(wide, view(arena, table, row, np.int16)[:n])
    elif target == I32:
        narrow(wide, view(arena, table, row, np.int32)[:n])
    elif target == I64:
        narrow(wide, view(arena, table, row, np.int64)[:n])
    elif target == BOOL:
        to_bool(wide, view(arena, table, row, np.uint8)[:n])
    else:
        narrow(wide, view(arena, table, row, np.uint8)[:n])
    return OK


# -- Not / And / Or / Xor ---------------------------------------------------------------------

AND, OR, XOR = 0, 1, 2


@jit_with_nrt
def logic_infer(arena, table, n_in, n_out, attrs, fattrs):
    for row in range(n_in):
        if dtype(table, row) != BOOL:
            return np.int32(STATUS_OP_BAD_DTYPE)
    status = broadcast_rows(table, np.arange(n_in), n_in)
    if status != 0:
        return status
    table[n_in, 2] = BOOL
    if table[n_in, 3] > MAX_RANK:
        return np.int32(STATUS_OP_BAD_SHAPE)
    table[RESULT_ROW, 0] = numel(table, n_in)
    return OK


@jit_with_nrt
def logic(op, arena, table, n_in):
    status = logic_infer(arena, table, n_in, 1, np.zeros(0, np.int64), np.zeros(0))
    if status != 0:
        return status
    out = view(arena, table, n_in, np.uint8)
    n = numel(table, n_in)
    for row in range(n_in + 1):
        if not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    x = view(arena, table, 0, np.uint8)
    if n_in == 1:  # Not
        for i in range(n):
            out[i] = 0 if x[i] != 0 else 1
        return OK
    y = view(arena, table, 1, np.uint8)
    xi = np.arange(n) if same_shape(table, 0, n_in) else index_map(table, 0, n_in)
    yi = np.arange(n) if same_shape(table, 1, n_in) else index_map(table, 1, n_in)
    for i in range(n):
        a = x[xi[i]] != 0
        b = y[yi[i]] != 0
        if op == AND:
            out[i] = a and b
        elif op == OR:
            out[i] = a or b
        else:
            out[i] = a != b
    return OK


@jit_with_nrt
def not_compute(arena, table, n_in, n_out, attrs, fattrs):
    return logic(AND, arena, table, n_in)


@jit_with_nrt
def and_compute(arena, table, n_in, n_out, attrs, fattrs):
    return logic(AND, arena, table, n_in)


@jit_with_nrt
def or_compute(arena, table, n_in, n_out, attrs, fattrs):
    return logic(OR, arena, table, n_in)


@jit_with_nrt
def xor_compute(arena, table, n_in, n_out, attrs, fattrs):
    return logic(XOR, arena, table, n_in)


def encode_shape(attributes, inputs):
    end = attributes.get("end")
    return [int(attributes.get("start", 0)), 0 if end is None else 1, int(end or 0)]


register_op("Shape", shape_infer, shape_compute, encode=encode_shape)
register_op(
    "ConstantOfShape",
    constant_of_shape_infer,
    constant_of_shape_compute,
    encode=encode_constant_of_shape,
    data_inputs=(0,),
)
register_op(
    "Range",
    range_infer,
    range_compute,
    inputs=(3, 3),
    data_inputs=(0, 1, 2),
    dtypes={0: NUMBERS, 1: NUMBERS, 2: NUMBERS},
)
register_op("Not", logic_infer, not_compute)
for _name, _compute in (("And", and_compute), ("Or", or_compute), ("Xor", xor_compute)):
    register_op(_name, logic_infer, _compute, inputs=(2, 2))
