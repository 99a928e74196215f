"""Elementwise ops with numpy broadcasting: arithmetic, comparisons, activations.

Binary and variadic arithmetic (Add, Sub, Mul, Div, Pow, Sum, Max, Min, Mean) run on float32,
float64, int32 and int64 inputs of one dtype; comparisons (Equal, Less, Greater) give bool;
unary activations run on float32 / float64 (Abs and Neg on integers too). Integer Div truncates
toward zero like onnxruntime.
"""

import math

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_with_nrt
from rtsoa.ops.abi import (
    BOOL,
    F32,
    F64,
    I32,
    I64,
    STATUS_OP_BAD_DTYPE,
    copy_shape,
    dtype,
    numel,
    set_output,
    view,
)
from rtsoa.ops.broadcast import apply2, broadcast_copy, broadcast_rows
from rtsoa.ops.registry import register_op

# -- shape inference ----------------------------------------------------------------------------


@jit_with_nrt
def same_dtype_broadcast_infer(arena, table, n_in, n_out, attrs, fattrs):
    """All inputs one dtype; the output their broadcast shape, of that dtype."""
    first = dtype(table, 0)
    for row in range(1, n_in):
        if dtype(table, row) != first:
            return np.int32(STATUS_OP_BAD_DTYPE)
    status = broadcast_rows(table, np.arange(n_in), n_in)
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


# -- the functions applied elementwise --------------------------------------------------------


@jit_inline_ir
def _add(x, y):
    return x + y


@jit_inline_ir
def _sub(x, y):
    return x - y


@jit_inline_ir
def _mul(x, y):
    return x * y


@jit_inline_ir
def _div(x, y):
    return x / y


@jit_inline_ir
def _int_div(x, y):  # truncating, like C and onnxruntime; x / 0 gives 0 instead of a trap
    if y == 0:
        return x - x
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


@jit_inline_ir
def _pow(x, y):
    return x**y


@jit_inline_ir
def _max(x, y):
    return max(x, y)


@jit_inline_ir
def _min(x, y):
    return min(x, y)


@jit_inline_ir
def _equal(x, y):
    return x == y


@jit_inline_ir
def _less(x, y):
    return x < y


@jit_inline_ir
def _greater(x, y):
    return x > y


# -- dtype dispatch -----------------------------------------------------------------------------


@jit_inline_ir
def _fold(fn, arena, table, n_in, kind):
    """out = in0 fn in1 fn ... (broadcast), all of numpy dtype `kind`."""
    out = view(arena, table, n_in, kind)
    if n_in == 2:
        apply2(fn, view(arena, table, 0, kind), 0, view(arena, table, 1, kind), 1, out, n_in, table)
        return
    broadcast_copy(view(arena, table, 0, kind), 0, out, n_in, table)
    for row in range(1, n_in):
        apply2(fn, out, n_in, view(arena, table, row, kind), row, out, n_in, table)


@jit_inline_ir
def fold_numeric(fn, int_fn, arena, table, n_in):
    """`_fold` on the inputs' dtype (float32 / float64 with `fn`, int32 / int64 with `int_fn`)."""
    kind = dtype(table, 0)
    if kind == F32:
        _fold(fn, arena, table, n_in, np.float32)
    elif kind == F64:
        _fold(fn, arena, table, n_in, np.float64)
    elif kind == I64:
        _fold(int_fn, arena, table, n_in, np.int64)
    elif kind == I32:
        _fold(int_fn, arena, table, n_in, np.int32)
    else:
        return np.int32(STATUS_OP_BAD_DTYPE)
    return np.int32(0)


@jit_inline_ir
def _compare_as(fn, arena, table, kind):
    out = view(arena, table, 2, np.bool_)
    apply2(fn, view(arena, table, 0, kind), 0, view(arena, table, 1, kind), 1, out, 2, table)


@jit_inline_ir
def compare(fn, arena, table):
    """Bool output of fn(in0, in1) with broadcasting, on any numeric or bool dtype."""
    kind = dtype(table, 0)
    if kind == F32:
        _compare_as(fn, arena, table, np.float32)
    elif kind == F64:
        _compare_as(fn, arena, table, np.float64)
    elif kind == I64:
        _compare_as(fn, arena, table, np.int64)
    elif kind == I32:
        _compare_as(fn, arena, table, np.int32)
    elif kind == BOOL:
        _compare_as(fn, arena, table, np.bool_)
    else:
        return np.int32(STATUS_OP_BAD_DTYPE)
    return np.int32(0)


# -- binary and variadic ops ----------------------------------------------------------------------


@jit_with_nrt
def add_compute(arena, table, n_in, n_out, attrs, fattrs):
    return fold_numeric(_add, _add, arena, table, n_in)


@jit_with_nrt
def sub_compute(arena, table, n_in, n_out, attrs, fattrs):
    return fold_numeric(_sub, _sub, arena, table, n_in)


@jit_with_nrt
def mul_compute(arena, table, n_in, n_out, attrs, fattrs):
    return fold_numeric(_mul, _mul, arena, table, n_in)


@jit_with_nrt
def div_compute(arena, table, n_in, n_out, attrs, fattrs):
    return fold_numeric(_div, _int_div, arena, table, n_in)


@jit_with_nrt
def pow_compute(arena, table, n_in, n_out, attrs, fattrs):
    if dtype(table, 1) != dtype(table, 0):
        return np.int32(STATUS_OP_BAD_DTYPE)
    return fold_numeric(_pow, _pow, arena, table, n_in)


@jit_with_nrt
def pow_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Pow: base and exponent of one dtype (mixed types are not supported yet)."""
    return same_dtype_broadcast_infer(arena, table, n_in, n_out, attrs, fattrs)


@jit_with_nrt
def max_compute(arena, table, n_in, n_out, attrs, fattrs):
    return fold_numeric(_max, _max, arena, table, n_in)


@jit_with_nrt
def min_compute(arena, table, n_in, n_out, attrs, fattrs):
    return fold_numeric(_min, _min, arena, table, n_in)


@jit_with_nrt
def mean_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = fold_numeric(_add, _add, arena, table, n_in)
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
def equal_compute(arena, table, n_in, n_out, attrs, fattrs):
    return compare(_equal, arena, table)


@jit_with_nrt
def less_compute(arena, table, n_in, n_out, attrs, fattrs):
    return compare(_less, arena, table)


@jit_with_nrt
def greater_compute(arena, table, n_in, n_out, attrs, fattrs):
    return compare(_greater, arena, table)


# -- unary ops ------------------------------------------------------------------------------------


@jit_inline_ir
def _apply1(fn, x, out, p0, p1):
    for i in range(out.shape[0]):
        out[i] = fn(x[i], p0, p1)


@jit_inline_ir
def unary_float(fn, arena, table, n_in, p0, p1):
    """out = fn(x, p0, p1) elementwise for a float32 / float64 input (p0, p1: parameters)."""
    kind = dtype(table, 0)
    if numel(table, 0) == 0:
        return np.int32(0)
    if kind == F32:
        _apply1(
            fn,
            view(arena, table, 0, np.float32),
            view(arena, table, n_in, np.float32),
            np.float32(p0),
            np.float32(p1),
        )
    elif kind == F64:
        _apply1(
            fn,
            view(arena, table, 0, np.float64),
            view(arena, table, n_in, np.float64),
            np.float64(p0),
            np.float64(p1),
        )
    else:
        return np.int32(STATUS_OP_BAD_DTYPE)
    return np.int32(0)


@jit_inline_ir
def unary_signed(fn, arena, table, n_in):
    """out = fn(x, 0, 0) for float or signed integer inputs (Abs, Neg)."""
    kind = dtype(table, 0)
    if kind == I64:
        x = view(arena, table, 0, np.int64)
        _apply1(fn, x, view(arena, table, n_in, np.int64), np.int64(0), np.int64(0))
        return np.int32(0)
    if kind == I32:
        x = view(arena, table, 0, np.int32)
        _apply1(fn, x, view(arena, table, n_in, np.int32), np.int32(0), np.int32(0))
        return np.int32(0)
    return unary_float(fn, arena, table, n_in, 0.0, 0.0)


@jit_inline_ir
def _relu(x, p0, p1):
    return x if x > 0 else x - x


@jit_inline_ir
def _leaky_relu(x, alpha, p1):
    return x if x >= 0 else alpha * x


@jit_inline_ir
def _sigmoid(x, p0, p1):
    if x >= 0:
        return 1 / (1 + np.exp(-x))
    e = np.exp(x)
    return e / (1 + e)


@jit_inline_ir
def _tanh(x, p0, p1):
    return np.tanh(x)


@jit_inline_ir
def _exp(x, p0, p1):
    return np.exp(x)


@jit_inline_ir
def _log(x, p0, p1):
    return np.log(x)


@jit_inline_ir
def _sqrt(x, p0, p1):
    return np.sqrt(x)


@jit_inline_ir
def _neg(x, p0, p1):
    return -x


@jit_inline_ir
def _abs(x, p0, p1):
    return abs(x)


@jit_inline_ir
def _erf(x, p0, p1):
    return math.erf(x)


@jit_with_nrt
def relu_compute(arena, table, n_in, n_out, attrs, fattrs):
    return unary_float(_relu, arena, table, n_in, 0.0, 0.0)


@jit_with_nrt
def leaky_relu_compute(arena, table, n_in, n_out, attrs, fattrs):
    return unary_float(_leaky_relu, arena, table, n_in, fattrs[0], 0.0)


@jit_with_nrt
def sigmoid_compute(arena, table, n_in, n_out, attrs, fattrs):
    return unary_float(_sigmoid, arena, table, n_in, 0.0, 0.0)


@jit_with_nrt
def tanh_compute(arena, table, n_in, n_out, attrs, fattrs):
    return unary_float(_tanh, arena, table, n_in, 0.0, 0.0)


@jit_with_nrt
def exp_compute(arena, table, n_in, n_out, attrs, fattrs):
    return unary_float(_exp, arena, table, n_in, 0.0, 0.0)


@jit_with_nrt
def log_compute(arena, table, n_in, n_out, attrs, fattrs):
    return unary_float(_log, arena, table, n_in, 0.0, 0.0)


@jit_with_nrt
def sqrt_compute(arena, table, n_in, n_out, attrs, fattrs):
    return unary_float(_sqrt, arena, table, n_in, 0.0, 0.0)


@jit_with_nrt
def erf_compute(arena, table, n_in, n_out, attrs, fattrs):
    return unary_float(_erf, arena, table, n_in, 0.0, 0.0)


@jit_with_nrt
def neg_compute(arena, table, n_in, n_out, attrs, fattrs):
    return unary_signed(_neg, arena, table, n_in)


@jit_with_nrt
def abs_compute(arena, table, n_in, n_out, attrs, fattrs):
    return unary_signed(_abs, arena, table, n_in)


@jit_with_nrt
def identity_compute(arena, table, n_in, n_out, attrs, fattrs):
    """A byte copy (Identity, Dropout in inference, and reshapes, which keep the data order)."""
    source = view(arena, table, 0, np.uint8)
    target = view(arena, table, n_in, np.uint8)
    target[:] = source[: target.shape[0]]
    return np.int32(0)


def _alpha(default):
    def encode(attributes, inputs):
        return [float(attributes.get("alpha", default))]

    return encode


_VARIADIC = {"inputs": (1, None)}
for _name, _compute in (
    ("Add", add_compute),
    ("Sub", sub_compute),
    ("Mul", mul_compute),
    ("Div", div_compute),
):
    register_op(_name, same_dtype_broadcast_infer, _compute, inputs=(2, 2))
register_op("Pow", pow_infer, pow_compute, inputs=(2, 2))
for _name, _compute in (
    ("Sum", add_compute),
    ("Max", max_compute),
    ("Min", min_compute),
    ("Mean", mean_compute),
):
    register_op(_name, same_dtype_broadcast_infer, _compute, **_VARIADIC)
for _name, _compute in (
    ("Equal", equal_compute),
    ("Less", less_compute),
    ("Greater", greater_compute),
):
    register_op(_name, compare_infer, _compute, inputs=(2, 2))
for _name, _compute in (
    ("Relu", relu_compute),
    ("Sigmoid", sigmoid_compute),
    ("Tanh", tanh_compute),
    ("Exp", exp_compute),
    ("Log", log_compute),
    ("Sqrt", sqrt_compute),
    ("Erf", erf_compute),
    ("Neg", neg_compute),
    ("Abs", abs_compute),
    ("Identity", identity_compute),
):
    register_op(_name, same_shape_infer, _compute)
register_op("LeakyRelu", same_shape_infer, leaky_relu_compute, encode=_alpha(0.01))
