"""Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ArgMax, ArgMin.

Reduce* take their axes from the attribute (ReduceSum before opset 13, the others before 18)
or from input 1 (a `data_inputs` position), with keepdims and noop_with_empty_axes. They run on
float32 / float64 (read as and accumulated in float64) and int32 / int64 (in int64; ReduceMean
of integers divides the sum truncating toward zero, as onnxruntime does); ReduceMax and
ReduceMin on int8 / int16 / uint8 and bool too. Each input element adds into the output
element an index map gives it (the keepdims shape broadcast to the input's), so one loop per
dtype serves every axis set. A reduction over an empty axis gives 0 (Sum), 1 (Prod), the
lowest value of the dtype (Max: -inf, the integer minimum, false) and the highest (Min), as
ONNX defines them; it is refused for Mean.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.graph.schema import DType
from rtsoa.ops.abi import (
    BOOL,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    NUMBERS,
    OK,
    RESULT_ROW,
    SMALL_INTEGERS,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    U8,
    dim,
    dtype,
    numel,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.broadcast import index_map
from rtsoa.ops.copying import byte_copy, holds, row_dims, set_dims
from rtsoa.ops.lists import attr_axis, encode_list, list_of, normalize_axes
from rtsoa.ops.registry import register_op
from rtsoa.ops.shape import as_float64, as_int64, narrow_to

SCRATCH = 63
SUM, MEAN, MAX, MIN, PROD = 0, 1, 2, 3, 4

# -- Reduce* --------------------------------------------------------------------------------------


@jit_with_nrt
def reduced_axes(arena, table, n_in, attrs):
    """(status, reduced flag per axis, noop): attrs = [keepdims, noop_with_empty_axes, axes]."""
    r = rank(table, 0)
    flags = np.zeros(max(r, 0), dtype=np.bool_)
    if attrs.shape[0] < 3:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), flags, False
    status, axes, given, _ = list_of(arena, table, n_in, 1, attrs, 2)
    if status != 0:
        return status, flags, False
    if axes.shape[0] == 0:
        if attrs[1] != 0:
            return OK, flags, True
        flags[:] = True
        return OK, flags, False
    status, axes = normalize_axes(axes, r)
    if status != 0:
        return status, flags, False
    for axis in axes:
        flags[axis] = True
    return OK, flags, False


@jit_with_nrt
def reduce_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, flags, noop = reduced_axes(arena, table, n_in, attrs)
    if status != 0:
        return status
    kind = dtype(table, 0)
    if kind != F32 and kind != F64 and kind != I32 and kind != I64:
        if kind != I8 and kind != I16 and kind != U8 and kind != BOOL:
            return np.int32(STATUS_OP_BAD_DTYPE)  # and these for Max / Min only (`reduce`)
    keep = attrs[0] != 0 or noop
    dims = row_dims(table, 0)
    out = np.empty(dims.shape[0] - (0 if keep else flags.sum()), dtype=np.int64)
    j = 0
    for axis in range(dims.shape[0]):
        if flags[axis]:
            if keep:
                out[j] = 1
                j += 1
        else:
            out[j] = dims[axis]
            j += 1
    table[RESULT_ROW, 0] = numel(table, 0)
    return set_dims(table, n_in, kind, out)


@jit_with_nrt.keeping_literals("op")
def reduce_loop(op, x, targets, acc, counts):
    """acc[targets[i]] op= x[i] (counts: elements seen per output, for MAX / MIN)."""
    if op == SUM or op == MEAN:
        for i in range(x.shape[0]):
            acc[targets[i]] += x[i]
    elif op == PROD:
        for i in range(x.shape[0]):
            acc[targets[i]] *= x[i]
    else:
        for i in range(x.shape[0]):
            t = targets[i]
            if counts[t] == 0:
                acc[t] = x[i]
            elif (op == MAX and x[i] > acc[t]) or (op == MIN and x[i] < acc[t]):
                acc[t] = x[i]
            elif x[i] != x[i]:  # NaN propagates like numpy
                acc[t] = x[i]
            counts[t] += 1


@jit_with_nrt.keeping_literals("op")
def reduce(arena, table, n_in, n_out, attrs, fattrs, op):
    """The reductions' compute: reduction `op` (the op's constant) over the axes of `attrs`."""
    status, flags, noop = reduced_axes(arena, table, n_in, attrs)
    if status != 0:
        return status
    kind = dtype(table, 0)
    if dtype(table, n_in) != kind:
        return np.int32(STATUS_OP_BAD_DTYPE)
    wide = kind == F32 or kind == F64 or kind == I32 or kind == I64
    if not wide and op != MAX and op != MIN:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if noop:
        return byte_copy(arena, table, 0, n_in)
    r = rank(table, 0)
    n = numel(table, 0)
    n_out = np.int64(1)
    set_output(table, SCRATCH, kind, r)  # the keepdims shape, broadcast to the input's
    for axis in range(r):
        size = 1 if flags[axis] else dim(table, 0, axis)
        set_dim(table, SCRATCH, axis, size)
        n_out *= size
    if numel(table, n_in) != n_out:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if n == 0 and n_out > 0 and op == MEAN:
        return np.int32(STATUS_OP_BAD_SHAPE)  # the mean of nothing
    targets = index_map(table, SCRATCH, 0)
    counts = np.zeros(n_out if (op == MAX or op == MIN) else 0, dtype=np.int64)
    floating = kind == F32 or kind == F64
    if not holds(table, 0) or not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    if floating:
        acc = np.full(n_out, 1.0 if op == PROD else 0.0)
        if op == MAX or op == MIN:  # what an empty axis gives; any element replaces it
            acc[:] = -np.inf if op == MAX else np.inf
        reduce_loop(op, as_float64(arena, table, 0, n), targets, acc, counts)
        if op == MEAN:
            acc /= n // max(n_out, 1)
        return narrow_to(arena, table, n_in, kind, acc, n_out)
    iacc = np.full(n_out, 1 if op == PROD else 0, dtype=np.int64)
    if op == MAX or op == MIN:
        iacc[:] = _integer_bound(kind, op == MIN)
    reduce_loop(op, as_int64(arena, table, 0, n), targets, iacc, counts)
    if op == MEAN:
        truncate_divide(iacc, n // max(n_out, 1))
    return narrow_to(arena, table, n_in, kind, iacc, n_out)


@jit_with_nrt
def _integer_bound(kind, highest):
    """The lowest (or highest) value of integer or bool dtype `kind`."""
    if kind == I64:
        return np.iinfo(np.int64).max if highest else np.iinfo(np.int64).min
    if kind == I32:
        return np.int64(2**31 - 1) if highest else np.int64(-(2**31))
    if kind == I16:
        return np.int64(2**15 - 1) if highest else np.int64(-(2**15))
    if kind == I8:
        return np.int64(127) if highest else np.int64(-128)
    if kind == U8:
        return np.int64(255) if highest else np.int64(0)
    return np.int64(1) if highest else np.int64(0)  # bool


@jit_with_nrt
def truncate_divide(values, divisor):
    """values /= divisor rounded toward zero (C's integer division, which onnxruntime's
    integer ReduceMean uses), not floor division; `divisor` > 0."""
    for k in range(values.shape[0]):
        quotient = abs(values[k]) // divisor
        values[k] = quotient if values[k] >= 0 else -quotient


# -- ArgMax / ArgMin ------------------------------------------------------------------------------


@jit_with_nrt
def arg_axis(table, attrs):
    """(status, axis) from attrs = [axis, keepdims, select_last_index]."""
    r = rank(table, 0)
    if attrs.shape[0] < 3:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), np.int64(0)
    axis = attr_axis(attrs, 0, r, False)
    if axis < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), np.int64(0)
    if dim(table, 0, axis) == 0:
        return np.int32(STATUS_OP_BAD_SHAPE), np.int64(0)
    return OK, axis


@jit_with_nrt
def arg_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, axis = arg_axis(table, attrs)
    if status != 0:
        return status
    kind = dtype(table, 0)
    if kind != F32 and kind != F64 and kind != I32 and kind != I64:
        return np.int32(STATUS_OP_BAD_DTYPE)
    dims = row_dims(table, 0)
    if attrs[1] != 0:
        dims[axis] = 1
        return set_dims(table, n_in, I64, dims)
    return set_dims(table, n_in, I64, np.concatenate((dims[:axis], dims[axis + 1 :])))


@jit_with_nrt.keeping_literals("largest")
def arg_loop(largest, x, out, outer, n, inner, last):
    """out[o, j] = index along the middle axis of the largest / smallest x[o, :, j]; ties
    give the first index (the last with `last`)."""
    for o in range(outer):
        for j in range(inner):
            base = o * n * inner + j
            best = x[base]
            where = 0
            for k in range(1, n):
                v = x[base + k * inner]
                better = v > best if largest else v < best
                if better or (last and v == best):
                    best = v
                    where = k
            out[o * inner + j] = where


@jit_with_nrt.keeping_literals("largest")
def arg(arena, table, n_in, n_out, attrs, fattrs, largest):
    """ArgMax (`largest` 1) / ArgMin (0): the op's constant."""
    status = arg_infer(arena, table, n_in, 1, attrs, np.zeros(0))
    if status != 0:
        return status
    _, axis = arg_axis(table, attrs)
    dims = row_dims(table, 0)
    n = dims[axis]
    outer = np.prod(dims[:axis])
    inner = np.prod(dims[axis + 1 :])
    if not holds(table, 0) or not holds(table, n_in) or numel(table, n_in) != outer * inner:
        return np.int32(STATUS_OP_BAD_SHAPE)
    out = view(arena, table, n_in, np.int64)
    last = attrs[2] != 0
    kind = dtype(table, 0)
    total = outer * n * inner
    if kind == F32 or kind == F64:
        arg_loop(largest, as_float64(arena, table, 0, total), out, outer, n, inner, last)
    else:
        arg_loop(largest, as_int64(arena, table, 0, total), out, outer, n, inner, last)
    return OK


def encode_reduce(attributes, inputs):
    return [
        int(attributes.get("keepdims", 1)),
        int(attributes.get("noop_with_empty_axes", 0)),
        *encode_list(attributes.get("axes")),
    ]


def encode_arg(attributes, inputs):
    return [
        int(attributes.get("axis", 0)),
        int(attributes.get("keepdims", 1)),
        int(attributes.get("select_last_index", 0)),
    ]


_SELECTED = NUMBERS | SMALL_INTEGERS | {DType.BOOL}  # Max / Min pick an element: any order
# families: one compute, the op's constant after the six arguments
for _name, _op, _dtypes in (
    ("ReduceSum", SUM, NUMBERS),
    ("ReduceMean", MEAN, NUMBERS),
    ("ReduceMax", MAX, _SELECTED),
    ("ReduceMin", MIN, _SELECTED),
    ("ReduceProd", PROD, NUMBERS),
):
    register_op(
        _name,
        reduce_infer,
        reduce,
        encode=encode_reduce,
        inputs=(1, 2),
        data_inputs=(1,),
        constants=(_op,),
        dtypes={0: _dtypes},
    )
for _name, _largest in (("ArgMax", 1), ("ArgMin", 0)):
    register_op(
        _name, arg_infer, arg, encode=encode_arg, constants=(_largest,), dtypes={0: NUMBERS}
    )
