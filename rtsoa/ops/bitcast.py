"""BitCast (opset 26): the bits of each element read as another element type of the same width.

attrs: [target DType code (-1: a type rtsoa does not store)]. The output has the input's
shape. Widths are ONNX's: 64 (int64, uint64, double), 32, 16 (int16, uint16, float16,
bfloat16), 8 (int8, uint8, bool and the float8 formats), 4 (int4, uint4, float4e2m1) and 2
(int2, uint2). rtsoa keeps every type in whole bytes, little endian (a 4- or 2-bit value in
the low bits of its byte; `rtsoa.abi.dtypes`), so the cast copies the bytes, a 4- or 2-bit
value's through a mask of its low bits. A byte other than 0 or 1 has no bool meaning: casting
it to bool fails with STATUS_OP_BAD_INDEX rather than making a value no other op expects.
Types of different widths fail with STATUS_OP_BAD_DTYPE (the converter refuses them first).
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.abi.dtypes import DTYPE_OF_ONNX, DTYPES
from rtsoa.ops.abi import (
    BOOL,
    ITEMSIZE,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
    DType,
    copy_shape,
    dtype,
    view,
)
from rtsoa.ops.cast import F4, small_int_kind
from rtsoa.ops.copying import holds
from rtsoa.ops.registry import register_op

TYPES = frozenset(DTYPES)


def bit_width(code):
    """ONNX's bit width of DType `code` (Python side: lowering and tests)."""
    if code in (DType.INT4, DType.UINT4, DType.FLOAT4E2M1):
        return 4
    if code in (DType.INT2, DType.UINT2):
        return 2
    return 8 * DTYPES[code].itemsize


@jit_with_nrt
def _bits(kind):
    """ONNX's bit width of DType `kind` (0: not a type of the table)."""
    if kind <= 0 or kind >= ITEMSIZE.shape[0]:
        return 0
    small, _ = small_int_kind(kind)
    if small > 0:
        return small
    if kind == F4:
        return 4
    return 8 * ITEMSIZE[kind]


@jit_with_nrt
def bitcast_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 1 or _bits(attrs[0]) == 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if _bits(dtype(table, 0)) != _bits(attrs[0]):
        return np.int32(STATUS_OP_BAD_DTYPE)
    copy_shape(table, 0, n_in)
    table[n_in, 2] = attrs[0]
    return OK


@jit_with_nrt
def bitcast_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = bitcast_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    if not holds(table, 0) or not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    source = view(arena, table, 0, np.uint8)
    target = view(arena, table, n_in, np.uint8)
    bits = _bits(attrs[0])
    mask = np.uint8((1 << bits) - 1) if bits < 8 else np.uint8(255)
    for i in range(target.shape[0]):
        byte = source[i] & mask
        if attrs[0] == BOOL and byte > 1:
            return np.int32(STATUS_OP_BAD_INDEX)
        target[i] = byte
    return OK


def encode_bitcast(attributes, inputs):
    """BitCast slots: the DType of `to` (-1: one rtsoa does not store)."""
    return [int(DTYPE_OF_ONNX.get(int(attributes.get("to", -1)), -1))]


register_op(
    "BitCast",
    bitcast_infer,
    bitcast_compute,
    encode=encode_bitcast,
    dtypes={0: TYPES},
)
