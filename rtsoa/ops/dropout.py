"""DropoutTraining: ONNX Dropout (opsets 12-22) whose training_mode may be true, never folded at
lowering (`OpDef.random`). Inference Dropout is the `Dropout` op of `rtsoa.ops.reshape`.

Inputs: data (float32 or float64), ratio (a float32 / float64 scalar, optional: 0.5), training
mode (a bool scalar, optional: false). Outputs: the output in the data's type and shape, and
optionally the mask (bool, the data's shape). With training mode false or a ratio of 0 the
output is the data and the mask all true. Otherwise element i is kept (mask true) when the
draw u_i in [0, 1) of `rtsoa.ops.randomness` (splitmix64: seeded by the `seed` attribute, so
the same on every run and machine; without one a fresh stream each run) is at least the
ratio, which happens with probability 1 - ratio, and the output is data * mask / (1 - ratio)
(a dropped inf or NaN gives NaN, as the definition's product does), computed in float64 and
rounded once to the data's type. A ratio outside [0, 1), or of another
type, fails the run (STATUS_OP_BAD_ATTRIBUTE / STATUS_OP_BAD_DTYPE).

attrs: [0, seeded, seed bits]: the slots `rtsoa.ops.randomness` draws from (its slot 0, the output
type, unused here).
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    BOOL,
    F32,
    F64,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    copy_shape,
    dtype,
    numel,
    present,
    rank,
    set_output,
    view,
)
from rtsoa.ops.copying import holds
from rtsoa.ops.math_functions import float_infer
from rtsoa.ops.randomness import _draws, _seed_slots
from rtsoa.ops.registry import register_op

DEFAULT_RATIO = 0.5


@jit_with_nrt
def dropout_training_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Output 0: the data's shape and type (float32 / float64); the mask: its shape, bool."""
    status = float_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status == 0 and n_out > 1:
        copy_shape(table, 0, n_in + 1)
        set_output(table, n_in + 1, BOOL, rank(table, 0))
    return status


@jit_with_nrt
def _scalar(arena, table, row):
    """(status, value as float64) of float / bool scalar input `row` (one element)."""
    if not holds(table, row) or numel(table, row) != 1:
        return np.int32(STATUS_OP_BAD_SHAPE), 0.0
    kind = dtype(table, row)
    if kind == F32:
        return OK, np.float64(view(arena, table, row, np.float32)[0])
    if kind == F64:
        return OK, view(arena, table, row, np.float64)[0]
    if kind == BOOL:
        return OK, np.float64(view(arena, table, row, np.uint8)[0] != 0)
    return np.int32(STATUS_OP_BAD_DTYPE), 0.0


@jit_with_nrt
def _ratio_and_training(arena, table, n_in):
    """(status, ratio, training) from the optional inputs 1 and 2."""
    ratio = DEFAULT_RATIO
    if n_in > 1 and present(table, 1):
        status, ratio = _scalar(arena, table, 1)
        if status != 0 or dtype(table, 1) == BOOL:
            return np.int32(STATUS_OP_BAD_DTYPE), ratio, False
    training = False
    if n_in > 2 and present(table, 2):
        status, flag = _scalar(arena, table, 2)
        if status != 0 or dtype(table, 2) != BOOL:
            return np.int32(STATUS_OP_BAD_DTYPE), ratio, False
        training = flag != 0.0
    if not (ratio >= 0.0 and ratio < 1.0):  # NaN too
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), ratio, training
    return OK, ratio, training


@jit_with_nrt
def dropout_training_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = dropout_training_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    if not holds(table, 0) or not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    status, ratio, training = _ratio_and_training(arena, table, n_in)
    if status != 0:
        return status
    count = numel(table, 0)
    keep = np.ones(count, dtype=np.bool_)
    if training and ratio > 0.0:
        if attrs.shape[0] < 3:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE)
        keep = _draws(attrs, count) >= ratio
    scale = 1.0 / (1.0 - ratio) if training else 1.0
    # data * mask * scale, as ONNX defines it: a dropped inf or NaN gives NaN
    if dtype(table, 0) == F32:
        x = view(arena, table, 0, np.float32)
        y = view(arena, table, n_in, np.float32)
        for i in range(count):
            y[i] = np.float32(np.float64(x[i]) * np.float64(keep[i]) * scale)
    else:
        x64 = view(arena, table, 0, np.float64)
        y64 = view(arena, table, n_in, np.float64)
        for i in range(count):
            y64[i] = x64[i] * np.float64(keep[i]) * scale
    if n_out > 1:
        if not holds(table, n_in + 1):
            return np.int32(STATUS_OP_BAD_SHAPE)
        mask = view(arena, table, n_in + 1, np.uint8)
        for i in range(count):
            mask[i] = 1 if keep[i] else 0
    return OK


def encode_dropout_training(attributes, inputs):
    """DropoutTraining slots: 0, seeded, seed bits (the integer seed attribute as a float, as
    RandomUniformLike takes its seed)."""
    return [0, *_seed_slots(attributes)]


register_op(
    "DropoutTraining",
    dropout_training_infer,
    dropout_training_compute,
    encode=encode_dropout_training,
    inputs=(1, 3),
    outputs=(1, 2),
    dtypes={0: (F32, F64)},
    random=True,
)
