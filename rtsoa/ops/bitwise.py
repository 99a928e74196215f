"""Bitwise ops on integers of every width, signed and unsigned: BitwiseAnd, BitwiseOr,
BitwiseXor and BitShift with numpy broadcasting, and BitwiseNot.

BitShift (attrs: [direction], 0 LEFT, 1 RIGHT) follows opset 28, which defines what earlier
opsets left open: a right shift of a signed value is arithmetic (sign-extending), a left shift
discards the bits it moves past the top (the sign bit included), and a shift by a negative
amount or by the width or more gives what the sign extension alone gives: -1 for a right shift
of a negative value, else 0.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_with_nrt
from rtsoa.ops.abi import (
    I8,
    I16,
    I32,
    I64,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    U8,
    U16,
    U32,
    U64,
    DType,
    dtype,
    view,
)
from rtsoa.ops.attributes import choice
from rtsoa.ops.elementwise import input_map, same_dtype_broadcast_infer, same_shape_infer
from rtsoa.ops.registry import register_op

AND, OR, XOR, SHIFT, NOT = 0, 1, 2, 3, 4
LEFT, RIGHT = 0, 1
DIRECTIONS = {"LEFT": LEFT, "RIGHT": RIGHT}
INTEGERS = frozenset(
    {
        DType.INT8,
        DType.INT16,
        DType.INT32,
        DType.INT64,
        DType.UINT8,
        DType.UINT16,
        DType.UINT32,
        DType.UINT64,
    }
)


@jit_with_nrt
def _shift(right, a, b, bits, signed, out, i):
    """out[i] = a shifted by b (see the module's rules); written in each branch, as the
    signed and unsigned results have no common integer type."""
    if b < 0 or b >= bits:
        out[i] = -1 if right and signed and a < 0 else 0
    elif not right:
        out[i] = np.uint64(a) << np.uint64(b)  # the bits past the top drop when stored
    elif signed:
        out[i] = np.int64(a) >> np.int64(b)
    else:
        out[i] = np.uint64(a) >> np.uint64(b)


@jit_with_nrt
def bitwise_loop(op, right, x, xi, y, yi, out, bits, signed):
    """out[i] = x[xi[i]] op y[yi[i]] (xi / yi empty: the identity); NOT reads x only."""
    mapped_x = xi.shape[0] > 0
    mapped_y = yi.shape[0] > 0
    for i in range(out.shape[0]):
        a = x[xi[i]] if mapped_x else x[i]
        if op == NOT:
            out[i] = ~a
            continue
        b = y[yi[i]] if mapped_y else y[i]
        if op == AND:
            out[i] = a & b
        elif op == OR:
            out[i] = a | b
        elif op == XOR:
            out[i] = a ^ b
        else:
            _shift(right, a, b, bits, signed, out, i)


@jit_inline_ir
def _loop_as(op, right, arena, table, n_in, kind, bits, signed):
    x = view(arena, table, 0, kind)
    y = view(arena, table, 1 if n_in > 1 else 0, kind)
    xi = input_map(table, 0, n_in)
    yi = input_map(table, 1, n_in) if n_in > 1 else xi
    bitwise_loop(op, right, x, xi, y, yi, view(arena, table, n_in, kind), bits, signed)


@jit_with_nrt
def bitwise_compute(arena, table, n_in, n_out, attrs, fattrs, op):
    """Every bitwise op (`op` the family constant), on the eight integer types."""
    right = False
    if op == SHIFT:
        if attrs.shape[0] < 1 or (attrs[0] != LEFT and attrs[0] != RIGHT):
            return np.int32(STATUS_OP_BAD_ATTRIBUTE)
        right = attrs[0] == RIGHT
    kind = dtype(table, 0)
    if kind == I8:
        _loop_as(op, right, arena, table, n_in, np.int8, 8, True)
    elif kind == I16:
        _loop_as(op, right, arena, table, n_in, np.int16, 16, True)
    elif kind == I32:
        _loop_as(op, right, arena, table, n_in, np.int32, 32, True)
    elif kind == I64:
        _loop_as(op, right, arena, table, n_in, np.int64, 64, True)
    elif kind == U8:
        _loop_as(op, right, arena, table, n_in, np.uint8, 8, False)
    elif kind == U16:
        _loop_as(op, right, arena, table, n_in, np.uint16, 16, False)
    elif kind == U32:
        _loop_as(op, right, arena, table, n_in, np.uint32, 32, False)
    elif kind == U64:
        _loop_as(op, right, arena, table, n_in, np.uint64, 64, False)
    else:
        return np.int32(STATUS_OP_BAD_DTYPE)
    return np.int32(0)


@jit_with_nrt
def shift_infer(arena, table, n_in, n_out, attrs, fattrs):
    """BitShift's shape inference: a known direction, then the broadcast of its inputs."""
    if attrs.shape[0] < 1 or (attrs[0] != LEFT and attrs[0] != RIGHT):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    return same_dtype_broadcast_infer(arena, table, n_in, n_out, attrs, fattrs)


def encode_direction(attributes, inputs):
    """BitShift slots: direction (unknown: -1, refused by compute)."""
    return [choice(attributes, "direction", DIRECTIONS, "")]


for _name, _op in (("BitwiseAnd", AND), ("BitwiseOr", OR), ("BitwiseXor", XOR)):
    register_op(
        _name,
        same_dtype_broadcast_infer,
        bitwise_compute,
        inputs=(2, 2),
        constants=(_op,),
        dtypes={0: INTEGERS},
    )
register_op(
    "BitShift",
    shift_infer,
    bitwise_compute,
    encode=encode_direction,
    inputs=(2, 2),
    constants=(SHIFT,),
    dtypes={0: INTEGERS},
)
register_op("BitwiseNot", same_shape_infer, bitwise_compute, constants=(NOT,), dtypes={0: INTEGERS})
