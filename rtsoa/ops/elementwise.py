"""Elementwise ops with numpy broadcasting: arithmetic, comparisons, activations.

Binary and variadic arithmetic (Add, Sub, Mul, Div, Pow, Sum, Max, Min, Mean) run on float32,
float64, int32 and int64 inputs of one dtype (Add, Sub, Mul, Div, Max and Min on the other
integer types too: int8, int16, uint8, uint16, uint32, uint64); comparisons (Equal, Less,
Greater; the same types and bool) give bool; unary activations run on float32 / float64
(Abs, Neg and Sign on integers too). Integer Div truncates toward zero like onnxruntime;
x / 0 is 0 and INT_MIN / -1 is INT_MIN (wrapping), both undefined in C. Integer Pow wraps on
overflow (numpy's result; onnxruntime goes through double); a negative exponent gives 1 for
base 1, +-1 for base -1, else 0. Mod (opset 28 semantics) takes the divisor's sign with fmod 0
and the dividend's with fmod 1, on floats and integers (unsigned ones too) alike; integer
x mod 0 is 0, float x mod 0 is NaN. Max and Min give NaN when any input is NaN, whatever the
order. Shrink runs on float32 / float64 / int32 / int64; on integers its result is truncated
to the integer type, as onnxruntime does.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_with_nrt
from rtsoa.abi.views import move_elements
from rtsoa.graph.schema import DType
from rtsoa.ops.abi import (
    BOOL,
    F16,
    F32,
    F64,
    FLOATS,
    I8,
    I16,
    I32,
    I64,
    NUMBERS,
    SMALL_INTEGERS,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    U8,
    U16,
    U32,
    U64,
    UNSIGNED,
    copy_shape,
    dtype,
    numel,
    set_output,
    view,
)
from rtsoa.ops.attributes import onnx_float
from rtsoa.ops.broadcast import broadcast_range, index_map, period, same_shape
from rtsoa.ops.elementwise_loops import (
    ABS,
    ADD,
    DIV,
    EQUAL,
    ERF,
    EXP,
    FMOD,
    GREATER,
    LEAKY_RELU,
    LESS,
    LOG,
    MAX,
    MIN,
    MOD,
    MUL,
    NEG,
    POW,
    RELU,
    SIGMOID,
    SIGN,
    SQRT,
    SUB,
    TANH,
    binary_loop,
    compare_loop,
    float_remainder_loop,
    half_select_loop,
    int_binary_loop,
    int_shrink_loop,
    periodic_loop,
    shrink_loop,
    unary_loop,
)
from rtsoa.ops.registry import register_op

# -- shape inference ----------------------------------------------------------------------------


@jit_with_nrt
def same_dtype_broadcast_infer(arena, table, n_in, n_out, attrs, fattrs):
    """All inputs one dtype; the output their broadcast shape, of that dtype."""
    first = dtype(table, 0)
    for row in range(1, n_in):
        if dtype(table, row) != first:
            return np.int32(STATUS_OP_BAD_DTYPE)
    status = broadcast_range(table, 0, n_in, n_in)
    if status != 0:
        return status
    set_output(table, n_in, first, table[n_in, 3])
    return np.int32(0)


@jit_with_nrt
def compare_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Two inputs of one dtype; a bool output of their broadcast shape."""
    status = same_dtype_broadcast_infer(arena, table, n_in, n_out, attrs, fattrs)
    table[n_in, 2] = BOOL
    return status


@jit_with_nrt
def same_shape_infer(arena, table, n_in, n_out, attrs, fattrs):
    """The output has input 0's dtype and shape (unary ops)."""
    copy_shape(table, 0, n_in)
    return np.int32(0)


@jit_with_nrt
def input_map(table, row, out):
    """The index map of row `row` into output `out`, or an empty array for the identity."""
    if same_shape(table, row, out):
        return np.zeros(0, dtype=np.int64)
    return index_map(table, row, out)


@jit_inline_ir
def _periodic_as(op, arena, table, x_row, px, row, py, o, kind):
    x = view(arena, table, x_row, kind)
    periodic_loop(op, x, px, view(arena, table, row, kind), py, view(arena, table, o, kind))


@jit_inline_ir
def _int_binary_as(op, arena, table, x_row, xi, row, yi, o, kind):
    x = view(arena, table, x_row, kind)
    int_binary_loop(op, x, xi, view(arena, table, row, kind), yi, view(arena, table, o, kind))


@jit_inline_ir
def _compare_as(op, arena, table, xi, yi, out, kind):
    compare_loop(op, view(arena, table, 0, kind), xi, view(arena, table, 1, kind), yi, out)


@jit_with_nrt.keeping_literals("op", "kind")
def fold_numeric(arena, table, n_in, n_out, attrs, fattrs, op, kind):
    """out = in0 op in1 op ... (numpy broadcasting), on float32 / float64, int8 / int16 /
    int32 / int64 and uint8 / uint16 / uint32 / uint64 (wrapping like numpy); MAX and MIN on
    float16 too."""
    o = n_in
    for row in range(1, n_in):
        x_row = 0 if row == 1 else o
        if kind == F32 or kind == F64:
            n = numel(table, o)
            px = period(table, x_row, o)
            py = period(table, row, o)
            if px >= 0 and py >= 0 and (px == n or py == n) and (n == 0 or min(px, py) > 0):
                if kind == F32:
                    _periodic_as(op, arena, table, x_row, px, row, py, o, np.float32)
                else:
                    _periodic_as(op, arena, table, x_row, px, row, py, o, np.float64)
                continue
        xi = input_map(table, x_row, o)
        yi = input_map(table, row, o)
        if kind == F32:
            x = view(arena, table, x_row, np.float32)
            binary_loop(
                op,
                x,
                xi,
                view(arena, table, row, np.float32),
                yi,
                view(arena, table, o, np.float32),
            )
        elif kind == F64:
            x = view(arena, table, x_row, np.float64)
            binary_loop(
                op,
                x,
                xi,
                view(arena, table, row, np.float64),
                yi,
                view(arena, table, o, np.float64),
            )
        elif kind == I64:
            x = view(arena, table, x_row, np.int64)
            int_binary_loop(
                op, x, xi, view(arena, table, row, np.int64), yi, view(arena, table, o, np.int64)
            )
        elif kind == I32:
            x = view(arena, table, x_row, np.int32)
            int_binary_loop(
                op, x, xi, view(arena, table, row, np.int32), yi, view(arena, table, o, np.int32)
            )
        elif kind == I8:
            _int_binary_as(op, arena, table, x_row, xi, row, yi, o, np.int8)
        elif kind == I16:
            _int_binary_as(op, arena, table, x_row, xi, row, yi, o, np.int16)
        elif kind == U8:
            _int_binary_as(op, arena, table, x_row, xi, row, yi, o, np.uint8)
        elif kind == U16:
            _int_binary_as(op, arena, table, x_row, xi, row, yi, o, np.uint16)
        elif kind == U32:
            _int_binary_as(op, arena, table, x_row, xi, row, yi, o, np.uint32)
        elif kind == U64:
            _int_binary_as(op, arena, table, x_row, xi, row, yi, o, np.uint64)
        elif kind == F16 and (op == MAX or op == MIN):
            x = view(arena, table, x_row, np.uint16)
            y = view(arena, table, row, np.uint16)
            half_select_loop(op, x, xi, y, yi, view(arena, table, o, np.uint16))
        else:
            return np.int32(STATUS_OP_BAD_DTYPE)
    if n_in == 1:  # Sum / Max / Min / Mean of one input: a copy
        source = view(arena, table, 0, np.uint8)
        target = view(arena, table, o, np.uint8)
        move_elements(target, 0, source, 0, target.shape[0])
    return np.int32(0)


@jit_with_nrt
def mod_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Mod: fmod 0 or 1, then as the other binary ops."""
    if attrs.shape[0] < 1 or (attrs[0] != 0 and attrs[0] != 1):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    return same_dtype_broadcast_infer(arena, table, n_in, n_out, attrs, fattrs)


@jit_with_nrt
def mod_compute(arena, table, n_in, n_out, attrs, fattrs):
    """Mod: floats by `float_remainder_loop`, integers by `fold_numeric`."""
    status = mod_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    op = FMOD if attrs[0] == 1 else MOD
    kind = dtype(table, 0)
    if kind != F32 and kind != F64:
        return fold_numeric(arena, table, n_in, n_out, attrs, fattrs, op, kind)
    xi = input_map(table, 0, n_in)
    yi = input_map(table, 1, n_in)
    if kind == F32:
        x, y = view(arena, table, 0, np.float32), view(arena, table, 1, np.float32)
        float_remainder_loop(op, x, xi, y, yi, view(arena, table, n_in, np.float32))
    else:
        x, y = view(arena, table, 0, np.float64), view(arena, table, 1, np.float64)
        float_remainder_loop(op, x, xi, y, yi, view(arena, table, n_in, np.float64))
    return np.int32(0)


@jit_with_nrt.keeping_literals("op", "kind")
def compare(arena, table, n_in, n_out, attrs, fattrs, op, kind):
    """Bool output of in0 op in1 with broadcasting, on float32 / float64, int8 / int16 /
    int32 / int64, uint8 / uint16 / uint32 / uint64 and bool."""
    xi = input_map(table, 0, 2)
    yi = input_map(table, 1, 2)
    out = view(arena, table, 2, np.bool_)
    if kind == F32:
        compare_loop(
            op, view(arena, table, 0, np.float32), xi, view(arena, table, 1, np.float32), yi, out
        )
    elif kind == F64:
        compare_loop(
            op, view(arena, table, 0, np.float64), xi, view(arena, table, 1, np.float64), yi, out
        )
    elif kind == I64:
        compare_loop(
            op, view(arena, table, 0, np.int64), xi, view(arena, table, 1, np.int64), yi, out
        )
    elif kind == I32:
        compare_loop(
            op, view(arena, table, 0, np.int32), xi, view(arena, table, 1, np.int32), yi, out
        )
    elif kind == BOOL:
        compare_loop(
            op, view(arena, table, 0, np.bool_), xi, view(arena, table, 1, np.bool_), yi, out
        )
    elif kind == I8:
        _compare_as(op, arena, table, xi, yi, out, np.int8)
    elif kind == I16:
        _compare_as(op, arena, table, xi, yi, out, np.int16)
    elif kind == U8:
        _compare_as(op, arena, table, xi, yi, out, np.uint8)
    elif kind == U16:
        _compare_as(op, arena, table, xi, yi, out, np.uint16)
    elif kind == U32:
        _compare_as(op, arena, table, xi, yi, out, np.uint32)
    elif kind == U64:
        _compare_as(op, arena, table, xi, yi, out, np.uint64)
    else:
        return np.int32(STATUS_OP_BAD_DTYPE)
    return np.int32(0)


@jit_with_nrt.keeping_literals("op", "kind")
def unary(arena, table, n_in, n_out, attrs, fattrs, op, kind):
    """out = f(x) for activation `op`: float32 / float64, and int32 / int64 for NEG, ABS,
    SIGN and RELU (ONNX Relu takes integers from opset 14). LeakyRelu's alpha is its one
    float attribute slot."""
    p0 = fattrs[0] if fattrs.shape[0] > 0 else 0.0
    p1 = 0.0
    if kind == F32:
        unary_loop(
            op,
            view(arena, table, 0, np.float32),
            view(arena, table, n_in, np.float32),
            np.float32(p0),
            np.float32(p1),
        )
    elif kind == F64:
        unary_loop(
            op,
            view(arena, table, 0, np.float64),
            view(arena, table, n_in, np.float64),
            np.float64(p0),
            np.float64(p1),
        )
    elif kind == I64 and (op == NEG or op == ABS or op == SIGN or op == RELU):
        unary_loop(
            op,
            view(arena, table, 0, np.int64),
            view(arena, table, n_in, np.int64),
            np.int64(0),
            np.int64(0),
        )
    elif kind == I32 and (op == NEG or op == ABS or op == SIGN or op == RELU):
        unary_loop(
            op,
            view(arena, table, 0, np.int32),
            view(arena, table, n_in, np.int32),
            np.int32(0),
            np.int32(0),
        )
    else:
        return np.int32(STATUS_OP_BAD_DTYPE)
    return np.int32(0)


# -- the ops --------------------------------------------------------------------------------------


@jit_with_nrt
def mean_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = fold_numeric(arena, table, n_in, n_out, attrs, fattrs, ADD, dtype(table, 0))
    if status != 0:
        return status
    kind = dtype(table, n_in)
    if kind == F32:
        out = view(arena, table, n_in, np.float32)
        out /= np.float32(n_in)
    elif kind == F64:
        out = view(arena, table, n_in, np.float64)
        out /= np.float64(n_in)
    else:
        return np.int32(STATUS_OP_BAD_DTYPE)
    return np.int32(0)


@jit_with_nrt
def shrink_compute(arena, table, n_in, n_out, attrs, fattrs):
    """Shrink with attrs [lambd, bias] (float bits)."""
    if attrs.shape[0] < 2:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    lambd = fattrs[0]
    bias = fattrs[1]
    kind = dtype(table, 0)
    if kind == F32:
        shrink_loop(
            view(arena, table, 0, np.float32), view(arena, table, n_in, np.float32), lambd, bias
        )
    elif kind == F64:
        shrink_loop(
            view(arena, table, 0, np.float64), view(arena, table, n_in, np.float64), lambd, bias
        )
    elif kind == I64:
        int_shrink_loop(
            view(arena, table, 0, np.int64), view(arena, table, n_in, np.int64), lambd, bias
        )
    elif kind == I32:
        int_shrink_loop(
            view(arena, table, 0, np.int32), view(arena, table, n_in, np.int32), lambd, bias
        )
    else:
        return np.int32(STATUS_OP_BAD_DTYPE)
    return np.int32(0)


@jit_with_nrt
def identity_compute(arena, table, n_in, n_out, attrs, fattrs):
    """A byte copy (Identity, Dropout in inference, and reshapes, which keep the data order)."""
    source = view(arena, table, 0, np.uint8)
    target = view(arena, table, n_in, np.uint8)
    move_elements(target, 0, source, 0, target.shape[0])
    return np.int32(0)


def _alpha(default):
    def encode(attributes, inputs):
        return [float(attributes.get("alpha", default))]

    return encode


_VARIADIC = {"inputs": (1, None)}
# families: one compute, the op's constant passed after its six arguments (then input 0's
# dtype: every family has per-dtype entries); `dtypes` are what lowering lets through
# (rtsoa.lowering.dtypes)
_ARITHMETIC = {0: NUMBERS | SMALL_INTEGERS | UNSIGNED}
for _name, _op in (("Add", ADD), ("Sub", SUB), ("Mul", MUL), ("Div", DIV)):
    register_op(
        _name,
        same_dtype_broadcast_infer,
        fold_numeric,
        inputs=(2, 2),
        constants=(_op,),
        dtypes=_ARITHMETIC,
        variants=True,
    )
register_op(
    "Pow",
    same_dtype_broadcast_infer,
    fold_numeric,
    inputs=(2, 2),
    constants=(POW,),
    dtypes={0: NUMBERS},
    variants=True,
)
for _name, _op, _dtypes in (
    ("Sum", ADD, NUMBERS),
    ("Max", MAX, NUMBERS | SMALL_INTEGERS | UNSIGNED | {DType.FLOAT16}),
    ("Min", MIN, NUMBERS | SMALL_INTEGERS | UNSIGNED | {DType.FLOAT16}),
):
    register_op(
        _name,
        same_dtype_broadcast_infer,
        fold_numeric,
        constants=(_op,),
        dtypes={0: _dtypes},
        variants=True,
        **_VARIADIC,
    )
register_op("Mean", same_dtype_broadcast_infer, mean_compute, dtypes={0: FLOATS}, **_VARIADIC)


def encode_mod(attributes, inputs):
    """Mod slots: fmod (default 0)."""
    return [int(attributes.get("fmod", 0))]


register_op(
    "Mod",
    mod_infer,
    mod_compute,
    encode=encode_mod,
    inputs=(2, 2),
    dtypes={0: NUMBERS | SMALL_INTEGERS | UNSIGNED, 1: NUMBERS | SMALL_INTEGERS | UNSIGNED},
)
_COMPARED = NUMBERS | SMALL_INTEGERS | UNSIGNED | {DType.BOOL}
for _name, _op in (("Equal", EQUAL), ("Less", LESS), ("Greater", GREATER)):
    register_op(
        _name,
        compare_infer,
        compare,
        inputs=(2, 2),
        constants=(_op,),
        dtypes={0: _COMPARED},
        variants=True,
    )
for _name, _op, _dtypes in (
    ("Relu", RELU, NUMBERS),
    ("Sigmoid", SIGMOID, FLOATS),
    ("Tanh", TANH, FLOATS),
    ("Exp", EXP, FLOATS),
    ("Log", LOG, FLOATS),
    ("Sqrt", SQRT, FLOATS),
    ("Erf", ERF, FLOATS),
    ("Neg", NEG, NUMBERS),
    ("Abs", ABS, NUMBERS),
    ("Sign", SIGN, NUMBERS),
):
    register_op(
        _name, same_shape_infer, unary, constants=(_op,), dtypes={0: _dtypes}, variants=True
    )
register_op(
    "LeakyRelu",
    same_shape_infer,
    unary,
    encode=_alpha(0.01),
    constants=(LEAKY_RELU,),
    dtypes={0: FLOATS},
    variants=True,
)
register_op("Identity", same_shape_infer, identity_compute)


def encode_shrink(attributes, inputs):
    """Shrink slots: lambd, bias (ONNX defaults 0.5 and 0.0)."""
    return [onnx_float(attributes.get("lambd", 0.5)), onnx_float(attributes.get("bias", 0.0))]


register_op("Shrink", same_shape_infer, shrink_compute, encode=encode_shrink, dtypes={0: NUMBERS})
