"""Loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opset 12-13 semantics),
float32 / float64.

Input (N, C, d1 .. dk), target (N, d1 .. dk) of int32 / int64 class indices, optional weight
(C). Each element's loss is -input[n, target, d...] * weight[target] (SoftmaxCrossEntropyLoss
first takes the log-softmax over C, which its optional second output returns); a target equal
to ignore_index contributes nothing and weighs 0. reduction none keeps the per-element losses,
sum adds them, mean divides the sum by the total weight of the elements not ignored (0 / 0 is
NaN, as in numpy). A target outside 0 .. C - 1 that is not ignore_index fails the op
(STATUS_OP_BAD_INDEX). Sums accumulate in float64.

attrs: [reduction (0 none, 1 sum, 2 mean), ignore_index given (0 / 1), ignore_index]
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    F64,
    FLOATS,
    I32,
    I64,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
    DType,
    copy_shape,
    dim,
    dtype,
    present,
    rank,
    set_dim,
    set_output,
)
from rtsoa.ops.copying import holds
from rtsoa.ops.registry import register_op
from rtsoa.ops.shape import as_float64, as_int64, narrow_to
from rtsoa.ops.softmax import LOG_SOFTMAX, softmax_along
from rtsoa.ops.window import element_count

NLL, SOFTMAX_CROSS_ENTROPY = 0, 1
REDUCTIONS = {"none": 0, "sum": 1, "mean": 2}
NONE, SUM, MEAN = 0, 1, 2
WEIGHT = 2


@jit_with_nrt
def _extent(table, n_in, attrs):
    """(status, N, C, D): the input as (N, C, D), D the product of d1 .. dk. (The entry checks
    the output count: 1, or 2 for SoftmaxCrossEntropyLoss.)"""
    zero = np.int64(0)
    if attrs.shape[0] < 3 or attrs[0] < NONE or attrs[0] > MEAN:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), zero, zero, zero
    kind = dtype(table, 0)
    if kind != F32 and kind != F64:
        return np.int32(STATUS_OP_BAD_DTYPE), zero, zero, zero
    if dtype(table, 1) != I32 and dtype(table, 1) != I64:
        return np.int32(STATUS_OP_BAD_DTYPE), zero, zero, zero
    r = rank(table, 0)
    if r < 2 or rank(table, 1) != r - 1 or element_count(table, 0) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE), zero, zero, zero
    if dim(table, 1, 0) != dim(table, 0, 0):
        return np.int32(STATUS_OP_BAD_SHAPE), zero, zero, zero
    spread = np.int64(1)
    for a in range(2, r):
        if dim(table, 1, a - 1) != dim(table, 0, a):
            return np.int32(STATUS_OP_BAD_SHAPE), zero, zero, zero
        spread *= dim(table, 0, a)
    classes = dim(table, 0, 1)
    if n_in > WEIGHT and present(table, WEIGHT):
        if dtype(table, WEIGHT) != kind:
            return np.int32(STATUS_OP_BAD_DTYPE), zero, zero, zero
        if rank(table, WEIGHT) != 1 or dim(table, WEIGHT, 0) != classes:
            return np.int32(STATUS_OP_BAD_SHAPE), zero, zero, zero
    return np.int32(0), dim(table, 0, 0), classes, spread


@jit_with_nrt
def loss_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, _, _, _ = _extent(table, n_in, attrs)
    if status != 0:
        return status
    if attrs[0] == NONE:
        set_output(table, n_in, dtype(table, 0), rank(table, 1))
        for a in range(rank(table, 1)):
            set_dim(table, n_in, a, dim(table, 1, a))
    else:
        set_output(table, n_in, dtype(table, 0), 0)
    if n_out == 2:
        copy_shape(table, 0, n_in + 1)
    return np.int32(0)


@jit_with_nrt
def gathered_losses(x, targets, weights, n, classes, spread, ignore_given, ignore_index):
    """(status, losses (N * D), total weight): -x[n, target, d] * weight[target] per element,
    0 (and weight 0) where the target is ignore_index; STATUS_OP_BAD_INDEX for a target
    outside 0 .. C - 1."""
    losses = np.zeros(n * spread, dtype=np.float64)
    total = 0.0
    for b in range(n):
        for d in range(spread):
            target = targets[b * spread + d]
            if ignore_given and target == ignore_index:
                continue
            if target < 0 or target >= classes:
                return np.int32(STATUS_OP_BAD_INDEX), losses, total
            weight = weights[target] if weights.shape[0] > 0 else 1.0
            losses[b * spread + d] = -x[(b * classes + target) * spread + d] * weight
            total += weight
    return np.int32(0), losses, total


@jit_with_nrt
def loss_compute(arena, table, n_in, n_out, attrs, fattrs, op):
    """Both losses (`op`: NLL or SOFTMAX_CROSS_ENTROPY, the family constant)."""
    status, n, classes, spread = _extent(table, n_in, attrs)
    if status != 0:
        return status
    count = n * classes * spread
    kind = dtype(table, 0)
    if not holds(table, 0) or not holds(table, 1) or not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    x = as_float64(arena, table, 0, count)
    if op == SOFTMAX_CROSS_ENTROPY:
        softmax_along(LOG_SOFTMAX, x, x, n, classes, spread)  # in place
        if n_out == 2:
            if not holds(table, n_in + 1):
                return np.int32(STATUS_OP_BAD_SHAPE)
            narrow_to(arena, table, n_in + 1, kind, x, count)
    weights = np.zeros(0, dtype=np.float64)
    if n_in > WEIGHT and present(table, WEIGHT):
        if not holds(table, WEIGHT):
            return np.int32(STATUS_OP_BAD_SHAPE)
        weights = as_float64(arena, table, WEIGHT, classes)
    targets = as_int64(arena, table, 1, n * spread)
    status, losses, total = gathered_losses(
        x, targets, weights, n, classes, spread, attrs[1] != 0, attrs[2]
    )
    if status != 0:
        return status
    if attrs[0] == NONE:
        return narrow_to(arena, table, n_in, kind, losses, n * spread)
    result = np.zeros(1, dtype=np.float64)
    result[0] = losses.sum()
    if attrs[0] == MEAN:
        result[0] = result[0] / total
    return narrow_to(arena, table, n_in, kind, result, 1)


def encode_loss(attributes, inputs):
    """Loss slots: reduction (unknown: -1, refused by infer), ignore_index given, its value."""
    reduction = attributes.get("reduction", "mean")
    if isinstance(reduction, bytes):
        reduction = reduction.decode()
    ignore = attributes.get("ignore_index")
    return [REDUCTIONS.get(reduction, -1), 0 if ignore is None else 1, int(ignore or 0)]


_DTYPES = {0: FLOATS, 1: frozenset({DType.INT32, DType.INT64}), WEIGHT: FLOATS}
for _name, _op, _outputs in (
    ("NegativeLogLikelihoodLoss", NLL, 1),
    ("SoftmaxCrossEntropyLoss", SOFTMAX_CROSS_ENTROPY, 2),
):
    register_op(
        _name,
        loss_infer,
        loss_compute,
        encode=encode_loss,
        inputs=(2, 3),
        outputs=(1, _outputs),
        constants=(_op,),
        dtypes=_DTYPES,
    )
