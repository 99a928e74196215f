"""Activations with parameters: PRelu, Elu, Selu, HardSigmoid, Softplus, Clip, Gelu, Swish,
ThresholdedRelu, Celu, HardSwish, Mish; float32 / float64 (formulas evaluated in float64,
rounded once to the output dtype).

Gelu's `approximate` is slot 0 as 0.0 (none: x / 2 (1 + erf(x / sqrt 2))) or 1.0 (tanh:
x / 2 (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))); any other value fails the op with
STATUS_OP_BAD_ATTRIBUTE (the converter refuses an unknown name first). Swish is
x sigmoid(alpha x), ThresholdedRelu x where x > alpha (else 0), Celu
max(0, x) + min(0, alpha (exp(x / alpha) - 1)), HardSwish x max(0, min(1, x / 6 + 1 / 2)),
Mish x tanh(softplus(x)).

PRelu's slope broadcasts (numpy rules) to X's shape. Clip takes its bounds from the optional
scalar inputs 1 and 2 (opset 11+; read in compute, so they may be computed tensors), or from
the min / max attributes of opsets 6-10; an absent bound is the dtype's lowest / max, as ONNX
says (so +-inf is clipped to them). With min > max every value
becomes max, as onnxruntime does (y = min(max(x, lo), hi)); NaN stays NaN.
"""

import math

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    COL_RANK,
    F32,
    FLOATS,
    STATUS_OP_BAD_ATTRIBUTE,
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
from rtsoa.ops.elementwise_loops import clip_bounds, clip_value
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import element_count, float_inputs, holds

PRELU, ELU, SELU, HARD_SIGMOID, SOFTPLUS, CLIP = range(6)
GELU, SWISH, THRESHOLDED_RELU, CELU, HARD_SWISH, MISH = range(6, 12)
GELU_APPROXIMATIONS = {"none": 0.0, "tanh": 1.0}


@jit_with_nrt
def _softplus(v):
    """log(1 + exp(v)) without overflow for large v."""
    return v + np.log1p(np.exp(-v)) if v > 0 else np.log1p(np.exp(v))


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
            y[i] = _softplus(np.float64(x[i]))
    elif op == GELU:
        for i in range(n):
            v = np.float64(x[i])
            if p0 == 0.0:
                y[i] = 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))
            else:
                inner = math.sqrt(2.0 / math.pi) * (v + 0.044715 * v * v * v)
                y[i] = 0.5 * v * (1.0 + math.tanh(inner))
    elif op == SWISH:
        for i in range(n):
            v = np.float64(x[i])
            y[i] = v / (1.0 + np.exp(-p0 * v))
    elif op == THRESHOLDED_RELU:
        for i in range(n):
            v = np.float64(x[i])
            y[i] = v if v > p0 else 0.0
    elif op == CELU:
        for i in range(n):
            v = np.float64(x[i])
            y[i] = v if v >= 0 else p0 * (np.exp(v / p0) - 1.0)  # NaN stays NaN
    elif op == HARD_SWISH:
        for i in range(n):
            v = np.float64(x[i])
            y[i] = v * max(0.0, min(1.0, v / 6.0 + 0.5))
    elif op == MISH:
        for i in range(n):
            v = np.float64(x[i])
            y[i] = v * math.tanh(_softplus(v))
    else:  # Clip, compared in the elements' dtype with float64's answers (`clip_bounds`)
        lowest, highest, below, above = clip_bounds(y, p0, p1)
        for i in range(n):
            y[i] = clip_value(x[i], lowest, highest, below, above)


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
    if op == GELU and p0 != 0.0 and p0 != 1.0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
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


def encode_gelu(attributes, inputs):
    """Gelu slots: approximate as 0.0 (none) or 1.0 (tanh); -1.0 for another name, which the
    op refuses."""
    value = attributes.get("approximate", "none")
    value = value.decode() if isinstance(value, bytes) else str(value)
    return [GELU_APPROXIMATIONS.get(value, -1.0)]


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
register_op("Gelu", float_unary_infer, activation, encode=encode_gelu, constants=(GELU,), **_FAMILY)
for _name, _op, _encode in (
    ("Swish", SWISH, _floats(("alpha", 1.0))),
    ("ThresholdedRelu", THRESHOLDED_RELU, _floats(("alpha", 1.0))),
    ("Celu", CELU, _floats(("alpha", 1.0))),
    ("HardSwish", HARD_SWISH, _floats()),
    ("Mish", MISH, _floats()),
):
    register_op(_name, float_unary_infer, activation, encode=_encode, constants=(_op,), **_FAMILY)
