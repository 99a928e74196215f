"""Activations with parameters: PRelu, Elu, Selu, HardSigmoid, Softplus, Clip; float32 /
float64 (formulas evaluated in float64, rounded once to the output dtype).

PRelu's slope broadcasts (numpy rules) to X's shape. Clip takes its bounds from the optional
scalar inputs 1 and 2 (opset 11+; read in compute, so they may be computed tensors), or from
the min / max attributes of opsets 6-10; an absent bound is the dtype's lowest / max, as ONNX
says (so +-inf is clipped to them). With min > max every value
becomes max, as onnxruntime does (y = min(max(x, lo), hi)); NaN stays NaN.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    COL_RANK,
    F32,
    FLOATS,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_MISSING_INPUT,
    copy_shape,
    dim,
    dtype,
    present,
    rank,
    view,
)
from rtsoa.ops.attributes import onnx_float
from rtsoa.ops.broadcast import index_map, same_shape
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import element_count, float_inputs, holds

PRELU, ELU, SELU, HARD_SIGMOID, SOFTPLUS, CLIP = range(6)


@jit_with_nrt.keeping_literals("op")
def _activation_run(op, x, y, slope, slope_map, p0, p1):
    """y[i] = f(x[i]) for activation `op` with parameters p0, p1 (float64); PRelu reads
    slope[slope_map[i]] (slope[i] if slope_map is empty)."""
    n = y.shape[0]
    if op == PRELU:
        mapped = slope_map.shape[0] > 0
        for i in range(n):
            v = x[i]
            if v < 0:
                v = v * slope[slope_map[i]] if mapped else v * slope[i]
            y[i] = v
    elif op == ELU:
        for i in range(n):
            v = np.float64(x[i])
            y[i] = v if v >= 0 else p0 * (np.exp(v) - 1.0)
    elif op == SELU:
        for i in range(n):
            v = np.float64(x[i])
            y[i] = p1 * v if v > 0 else p1 * (p0 * np.exp(v) - p0)
    elif op == HARD_SIGMOID:
        for i in range(n):
            v = p0 * x[i] + p1
            y[i] = v if v != v else max(0.0, min(1.0, v))  # NaN stays NaN
    elif op == SOFTPLUS:
        for i in range(n):
            v = np.float64(x[i])
            y[i] = v + np.log1p(np.exp(-v)) if v > 0 else np.log1p(np.exp(v))
    else:
        for i in range(n):
            v = np.float64(x[i])
            if v < p0:
                v = p0
            if v > p1:
                v = p1
            y[i] = v


@jit_with_nrt
def _checks(op, table, n_in):
    """Status of an activation's inputs: float X; PRelu's slope broadcasting to X; Clip's
    bounds scalars."""
    status = float_inputs(table, n_in)
    if status != 0:
        return status
    if element_count(table, 0) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if op == PRELU:
        if n_in < 2 or not present(table, 1):
            return np.int32(STATUS_OP_MISSING_INPUT)
        own_rank = rank(table, 1)
        x_rank = rank(table, 0)
        if own_rank > x_rank:
            return np.int32(STATUS_OP_BAD_SHAPE)
        for own in range(own_rank):
            size = dim(table, 1, own)
            if size != 1 and size != dim(table, 0, x_rank - own_rank + own):
                return np.int32(STATUS_OP_BAD_SHAPE)
    if op == CLIP:
        for row in range(1, n_in):
            if present(table, row) and element_count(table, row) != 1:
                return np.int32(STATUS_OP_BAD_SHAPE)
    return np.int32(0)


@jit_with_nrt
def _infer(op, table, n_in):
    status = _checks(op, table, n_in)
    if status != 0:
        return status
    copy_shape(table, 0, n_in)
    return np.int32(0)


@jit_with_nrt
def _bound(arena, table, n_in, row, has_attribute, value, default):
    """Clip's bound: input `row`'s scalar if present, else the attribute, else `default`."""
    if row < n_in and present(table, row):
        if dtype(table, row) == F32:
            return np.float64(view(arena, table, row, np.float32)[0])
        return view(arena, table, row, np.float64)[0]
    return value if has_attribute else default


@jit_with_nrt.keeping_literals("op", "element")
def activation(arena, table, n_in, n_out, attrs, fattrs, op, element):
    """The family's compute: activation `op` (the op's constant) on input 0's dtype
    `element` (each op's entry, and each dtype's, compiles its own formula only)."""
    status = _checks(op, table, n_in)
    if status != 0:
        return status
    count = element_count(table, 0)
    item = 4 if element == F32 else 8
    if not (holds(table, 0, count, item) and holds(table, n_in, count, item)):
        return np.int32(STATUS_OP_BAD_SHAPE)
    for row in range(1, n_in):
        if present(table, row) and not holds(table, row, element_count(table, row), item):
            return np.int32(STATUS_OP_BAD_SHAPE)
    # PRelu's slope map into the output, whose shape (X's) compute checks rather than trusts
    slope_map = np.zeros(0, dtype=np.int64)
    if op == PRELU:
        if table[n_in, COL_RANK] != rank(table, 0) or not same_shape(table, 0, n_in):
            return np.int32(STATUS_OP_BAD_SHAPE)
        if not same_shape(table, 1, n_in):
            slope_map = index_map(table, 1, n_in)
    p0 = fattrs[0] if attrs.shape[0] > 0 else 0.0
    p1 = fattrs[1] if attrs.shape[0] > 1 else 0.0
    if op == CLIP:
        if attrs.shape[0] < 4:
            return np.int32(STATUS_OP_BAD_SHAPE)
        # an absent bound is the dtype's lowest / max (ONNX; onnxruntime): inf clips to max
        largest = np.float64(np.finfo(np.float32).max) if item == 4 else np.finfo(np.float64).max
        p0 = _bound(arena, table, n_in, 1, attrs[0] != 0, fattrs[1], -largest)
        p1 = _bound(arena, table, n_in, 2, attrs[2] != 0, fattrs[3], largest)
    slope_row = 1 if op == PRELU else 0
    if element == F32:
        x = view(arena, table, 0, np.float32)
        y = view(arena, table, n_in, np.float32)
        slope = view(arena, table, slope_row, np.float32)
        _activation_run(op, x[:count], y[:count], slope, slope_map, p0, p1)
    else:
        x = view(arena, table, 0, np.float64)
        y = view(arena, table, n_in, np.float64)
        slope = view(arena, table, slope_row, np.float64)
        _activation_run(op, x[:count], y[:count], slope, slope_map, p0, p1)
    return np.int32(0)


@jit_with_nrt
def prelu_infer(arena, table, n_in, n_out, attrs, fattrs):
    return _infer(PRELU, table, n_in)


@jit_with_nrt
def clip_infer(arena, table, n_in, n_out, attrs, fattrs):
    return _infer(CLIP, table, n_in)


@jit_with_nrt
def float_unary_infer(arena, table, n_in, n_out, attrs, fattrs):
    return _infer(ELU, table, n_in)


def _floats(*names_and_defaults):
    def encode(attributes, inputs):
        return [onnx_float(attributes.get(name, default)) for name, default in names_and_defaults]

    return encode


def encode_clip(attributes, inputs):
    """Clip slots: has min, min, has max, max (the attributes of opsets 6-10)."""
    return [
        int("min" in attributes),
        onnx_float(attributes.get("min", 0.0)),
        int("max" in attributes),
        onnx_float(attributes.get("max", 0.0)),
    ]


# a family: one compute, the op's constant then input 0's dtype after the six arguments
_FAMILY = {"dtypes": {0: FLOATS}, "variants": True}
register_op("PRelu", prelu_infer, activation, inputs=(2, 2), constants=(PRELU,), **_FAMILY)
register_op(
    "Elu",
    float_unary_infer,
    activation,
    encode=_floats(("alpha", 1.0)),
    constants=(ELU,),
    **_FAMILY,
)
register_op(
    "Selu",
    float_unary_infer,
    activation,
    encode=_floats(("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875)),
    constants=(SELU,),
    **_FAMILY,
)
register_op(
    "HardSigmoid",
    float_unary_infer,
    activation,
    encode=_floats(("alpha", 0.2), ("beta", 0.5)),
    constants=(HARD_SIGMOID,),
    **_FAMILY,
)
register_op("Softplus", float_unary_infer, activation, constants=(SOFTPLUS,), **_FAMILY)
register_op(
    "Clip",
    clip_infer,
    activation,
    encode=encode_clip,
    inputs=(1, 3),
    constants=(CLIP,),
    **_FAMILY,
)
