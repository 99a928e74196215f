"""Elementwise math functions on float32 / float64, one family sharing one loop: the
trigonometric and hyperbolic functions and their inverses (Cos, Sin, Tan, Acos, Asin, Atan,
Cosh, Sinh, Acosh, Asinh, Atanh), rounding (Ceil, Floor, Round: halves to even, as ONNX
defines it) and Softsign (x / (1 + |x|)); and the tests IsNaN and IsInf (attrs
[detect_positive, detect_negative], both 1 by default), which give bool.

Each value is computed in its own type (numpy's functions of float32 are float32), so results
equal numpy's; arguments outside a function's domain give NaN, as in numpy and onnxruntime.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    BOOL,
    F32,
    F64,
    FLOATS,
    STATUS_OP_BAD_DTYPE,
    copy_shape,
    dtype,
    numel,
    set_output,
    view,
)
from rtsoa.ops.registry import register_op

COS, SIN, TAN, ACOS, ASIN, ATAN, COSH, SINH, ACOSH, ASINH, ATANH = range(11)
CEIL, FLOOR, ROUND, SOFTSIGN = range(11, 15)
FUNCTIONS = {
    "Cos": COS,
    "Sin": SIN,
    "Tan": TAN,
    "Acos": ACOS,
    "Asin": ASIN,
    "Atan": ATAN,
    "Cosh": COSH,
    "Sinh": SINH,
    "Acosh": ACOSH,
    "Asinh": ASINH,
    "Atanh": ATANH,
    "Ceil": CEIL,
    "Floor": FLOOR,
    "Round": ROUND,
    "Softsign": SOFTSIGN,
}


@jit_with_nrt
def float_infer(arena, table, n_in, n_out, attrs, fattrs):
    """A float32 / float64 input; the output its dtype and shape."""
    kind = dtype(table, 0)
    if kind != F32 and kind != F64:
        return np.int32(STATUS_OP_BAD_DTYPE)
    copy_shape(table, 0, n_in)
    return np.int32(0)


@jit_with_nrt.keeping_literals("op")
def _function_loop(op, x, out):
    """out[i] = f(x[i]) for function `op`."""
    one = x.dtype.type(1)
    for i in range(out.shape[0]):
        v = x[i]
        if op == COS:
            out[i] = np.cos(v)
        elif op == SIN:
            out[i] = np.sin(v)
        elif op == TAN:
            out[i] = np.tan(v)
        elif op == ACOS:
            out[i] = np.arccos(v)
        elif op == ASIN:
            out[i] = np.arcsin(v)
        elif op == ATAN:
            out[i] = np.arctan(v)
        elif op == COSH:
            out[i] = np.cosh(v)
        elif op == SINH:
            out[i] = np.sinh(v)
        elif op == ACOSH:
            out[i] = np.arccosh(v)
        elif op == ASINH:
            out[i] = np.arcsinh(v)
        elif op == ATANH:
            out[i] = np.arctanh(v)
        elif op == CEIL:
            out[i] = np.ceil(v)
        elif op == FLOOR:
            out[i] = np.floor(v)
        elif op == ROUND:
            out[i] = np.rint(v)  # halves to even (the default rounding mode)
        else:
            out[i] = v / (one + abs(v))


@jit_with_nrt.keeping_literals("op")
def function_compute(arena, table, n_in, n_out, attrs, fattrs, op):
    status = float_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    count = numel(table, 0)
    if dtype(table, 0) == F32:
        x = view(arena, table, 0, np.float32)[:count]
        _function_loop(op, x, view(arena, table, n_in, np.float32)[:count])
    else:
        x = view(arena, table, 0, np.float64)[:count]
        _function_loop(op, x, view(arena, table, n_in, np.float64)[:count])
    return np.int32(0)


# -- IsNaN, IsInf ---------------------------------------------------------------------------------

IS_NAN, IS_INF = 0, 1


@jit_with_nrt
def predicate_infer(arena, table, n_in, n_out, attrs, fattrs):
    """A float32 / float64 input; a bool output of its shape."""
    status = float_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status == 0:
        set_output(table, n_in, BOOL, table[n_in, 3])
    return status


@jit_with_nrt.keeping_literals("op")
def _predicate_loop(op, x, out, positive, negative):
    for i in range(out.shape[0]):
        v = x[i]
        if op == IS_NAN:
            out[i] = v != v
        else:
            out[i] = (positive and v == np.inf) or (negative and v == -np.inf)


@jit_with_nrt.keeping_literals("op")
def predicate_compute(arena, table, n_in, n_out, attrs, fattrs, op):
    status = predicate_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    count = numel(table, 0)
    positive = attrs.shape[0] < 1 or attrs[0] != 0
    negative = attrs.shape[0] < 2 or attrs[1] != 0
    out = view(arena, table, n_in, np.bool_)[:count]
    if dtype(table, 0) == F32:
        _predicate_loop(op, view(arena, table, 0, np.float32)[:count], out, positive, negative)
    else:
        _predicate_loop(op, view(arena, table, 0, np.float64)[:count], out, positive, negative)
    return np.int32(0)


def encode_is_inf(attributes, inputs):
    """IsInf slots: detect_positive, detect_negative (default 1 each)."""
    return [int(attributes.get("detect_positive", 1)), int(attributes.get("detect_negative", 1))]


for _name, _op in FUNCTIONS.items():
    register_op(_name, float_infer, function_compute, constants=(_op,), dtypes={0: FLOATS})
register_op("IsNaN", predicate_infer, predicate_compute, constants=(IS_NAN,), dtypes={0: FLOATS})
register_op(
    "IsInf",
    predicate_infer,
    predicate_compute,
    encode=encode_is_inf,
    constants=(IS_INF,),
    dtypes={0: FLOATS},
)
