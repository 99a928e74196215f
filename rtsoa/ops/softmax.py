"""Softmax and LogSoftmax along one axis (opset-13 semantics), float32 / float64.

attrs: [axis] (default -1). Opsets before 13 coerced the input to 2-D at `axis` (default 1) and
normalized over all the trailing dims together; `encode` is not told the opset, so a model of
an older opset whose axis is not the last one gets opset-13 results (the lowering must rewrite
such a node as Flatten + Softmax + Reshape).
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    FLOATS,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_SHAPE,
    copy_shape,
    dim,
    normalize_axis,
    rank,
    view,
)
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import element_count, float_inputs, holds

SOFTMAX, LOG_SOFTMAX = 0, 1


@jit_with_nrt
def _extent(table, attrs):
    """(status, outer, length, inner): the input as (outer, length along axis, inner)."""
    status = float_inputs(table, 1)
    if status != 0:
        return status, np.int64(0), np.int64(0), np.int64(0)
    count = element_count(table, 0)
    if count < 0:
        return np.int32(STATUS_OP_BAD_SHAPE), np.int64(0), np.int64(0), np.int64(0)
    x_rank = rank(table, 0)
    axis = normalize_axis(attrs[0], x_rank) if attrs.shape[0] >= 1 else np.int64(-1)
    if axis < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), np.int64(0), np.int64(0), np.int64(0)
    outer = np.int64(1)
    for a in range(axis):
        outer *= dim(table, 0, a)
    inner = np.int64(1)
    for a in range(axis + 1, x_rank):
        inner *= dim(table, 0, a)
    return np.int32(0), outer, dim(table, 0, axis), inner


@jit_with_nrt
def softmax_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, outer, length, inner = _extent(table, attrs)
    if status != 0:
        return status
    copy_shape(table, 0, 1)
    return np.int32(0)


@jit_with_nrt.keeping_literals("op")
def softmax_along(op, x, y, outer, length, inner):
    """Softmax or LogSoftmax of (outer, length, inner) `x` along `length` into `y` (which may
    be `x`: each element is read before it is written)."""
    for o in range(outer):
        for i in range(inner):
            base = o * length * inner + i
            top = -np.inf
            for k in range(length):
                top = max(top, x[base + k * inner])
            total = 0.0
            for k in range(length):
                e = np.exp(x[base + k * inner] - top)
                total += e
                if op == SOFTMAX:
                    y[base + k * inner] = e
            if op == SOFTMAX:
                scale = 1.0 / total
                for k in range(length):
                    y[base + k * inner] *= scale
            else:
                shift = top + np.log(total)
                for k in range(length):
                    y[base + k * inner] = x[base + k * inner] - shift


@jit_with_nrt.keeping_literals("op", "element")
def softmax_compute(arena, table, n_in, n_out, attrs, fattrs, op, element):
    """The family's compute: SOFTMAX or LOG_SOFTMAX (the op's constant) on input 0's dtype
    `element`."""
    status, outer, length, inner = _extent(table, attrs)
    if status != 0:
        return status
    count = outer * length * inner
    item = 4 if element == F32 else 8
    if not (holds(table, 0, count, item) and holds(table, 1, count, item)):
        return np.int32(STATUS_OP_BAD_SHAPE)
    if element == F32:
        x = view(arena, table, 0, np.float32)
        y = view(arena, table, 1, np.float32)
        softmax_along(op, x, y, outer, length, inner)
    else:
        x = view(arena, table, 0, np.float64)
        y = view(arena, table, 1, np.float64)
        softmax_along(op, x, y, outer, length, inner)
    return np.int32(0)


def encode_axis(attributes, inputs):
    """Softmax / LogSoftmax slots: axis (opset 13 default -1)."""
    return [int(attributes.get("axis", -1))]


for _name, _op in (("Softmax", SOFTMAX), ("LogSoftmax", LOG_SOFTMAX)):
    register_op(
        _name,
        softmax_infer,
        softmax_compute,
        encode=encode_axis,
        constants=(_op,),
        dtypes={0: FLOATS},
        variants=True,
    )
