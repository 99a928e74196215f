"""Normalizations: BatchNormalization (inference), InstanceNormalization, LayerNormalization,
RMSNormalization.

float32 / float64; every parameter input has X's dtype (BatchNormalization's opset-15 option
of other dtypes for mean / var is refused). Means and variances accumulate in float64.
BatchNormalization refuses training_mode = 1 and the pre-opset-9 spatial = 0 form.
FusedBatchNormalization is BatchNormalization then an optional Relu over its rounded result,
in one pass: the same bits as the two ops.
LayerNormalization (opset 17): Scale and B broadcast to X.shape[axis:]; its optional Mean and
InvStdDev outputs are float32 (stash_type 1, the only stash type accepted) of shape
X.shape[:axis] + (1, ...).
RMSNormalization (opset 23): Y = X / sqrt(mean(X^2 over axes axis..) + epsilon) * Scale, Scale
broadcast (unidirectionally) to X; the mean accumulates in float64 (stash_type 1, the only one
accepted, asks for float32 or better).
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    ACT_NONE,
    ACT_RELU,
    F32,
    FLOATS,
    MODE_COMPUTE,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_MISSING_INPUT,
    copy_shape,
    dim,
    dtype,
    normalize_axis,
    present,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.attributes import onnx_float
from rtsoa.ops.broadcast import index_map, period
from rtsoa.ops.parts import NOT_SHARED, share_items
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import element_count, float_inputs, holds

BATCH, INSTANCE, LAYER = 0, 1, 2
# a BatchNormalization of at least twice this many elements is shared by the pool's threads
# (`rtsoa.ops.parts`), by channels: a multiply-add an element, ~40 us a part
NORM_GRAIN = 1 << 17
# FusedBatchNormalization: what the lowering fuses BatchNormalization -> Relu into
# (rtsoa.lowering.fuse), as onnxruntime runs a BatchNormalization with its activation.
# attrs: BatchNormalization's, then activation (ACT_NONE, ACT_RELU) in this slot.
BATCH_ACTIVATION = 3


@jit_with_nrt
def _per_channel(table, first, last):
    """Status: inputs first .. last are present, 1-D, of X's channel count."""
    for row in range(first, last + 1):
        if not present(table, row):
            return np.int32(STATUS_OP_MISSING_INPUT)
        if rank(table, row) != 1 or dim(table, row, 0) != dim(table, 0, 1):
            return np.int32(STATUS_OP_BAD_SHAPE)
    return np.int32(0)


@jit_with_nrt
def _fits_columns(table, row, axis):
    """Does row `row` broadcast (unidirectionally) to X.shape[axis:]?"""
    own_rank = rank(table, row)
    x_rank = rank(table, 0)
    if own_rank > x_rank - axis:
        return False
    for own in range(own_rank):
        size = dim(table, row, own)
        if size != 1 and size != dim(table, 0, x_rank - own_rank + own):
            return False
    return True


@jit_with_nrt
def _checks(op, table, n_in, attrs):
    """(status, rows, row length, axis) of a normalization: the rows it standardizes."""
    status = float_inputs(table, n_in)
    if status != 0:
        return status, np.int64(0), np.int64(0), np.int64(0)
    count = element_count(table, 0)
    x_rank = rank(table, 0)
    if count < 0 or x_rank < (3 if op == INSTANCE else 1):
        return np.int32(STATUS_OP_BAD_SHAPE), np.int64(0), np.int64(0), np.int64(0)
    if op == LAYER:
        axis = normalize_axis(attrs[0], x_rank) if attrs.shape[0] >= 3 else np.int64(-1)
        if axis < 0 or attrs[2] != 1:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), np.int64(0), np.int64(0), np.int64(0)
        if n_in < 2 or not present(table, 1):
            return np.int32(STATUS_OP_MISSING_INPUT), np.int64(0), np.int64(0), axis
        if not _fits_columns(table, 1, axis) or (
            n_in > 2 and present(table, 2) and not _fits_columns(table, 2, axis)
        ):
            return np.int32(STATUS_OP_BAD_SHAPE), np.int64(0), np.int64(0), axis
    else:
        if attrs.shape[0] < 1:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), np.int64(0), np.int64(0), np.int64(0)
        if x_rank < 2:
            return np.int32(STATUS_OP_BAD_SHAPE), np.int64(0), np.int64(0), np.int64(0)
        axis = np.int64(2)
        status = _per_channel(table, 1, n_in - 1)
        if status != 0:
            return status, np.int64(0), np.int64(0), axis
        if op == BATCH and (attrs.shape[0] < 3 or attrs[1] != 0 or attrs[2] != 1):
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), np.int64(0), np.int64(0), axis
    length = np.int64(1)
    for a in range(axis, x_rank):
        length *= dim(table, 0, a)
    rows = count // length if length > 0 else np.int64(0)
    if length == 0:  # rows = product of the leading dims
        rows = np.int64(1)
        for a in range(axis):
            rows *= dim(table, 0, a)
    return np.int32(0), rows, length, axis


@jit_with_nrt
def _infer(op, table, n_in, n_out, attrs):
    status, rows, length, axis = _checks(op, table, n_in, attrs)
    if status != 0:
        return status
    copy_shape(table, 0, n_in)
    for k in range(1, n_out):  # LayerNormalization's Mean and InvStdDev
        set_output(table, n_in + k, F32, rank(table, 0))
        for a in range(rank(table, 0)):
            set_dim(table, n_in + k, a, dim(table, 0, a) if a < axis else 1)
    return np.int32(0)


@jit_with_nrt
def batch_norm_infer(arena, table, n_in, n_out, attrs, fattrs):
    return _infer(BATCH, table, n_in, n_out, attrs)


@jit_with_nrt
def instance_norm_infer(arena, table, n_in, n_out, attrs, fattrs):
    return _infer(INSTANCE, table, n_in, n_out, attrs)


@jit_with_nrt
def layer_norm_infer(arena, table, n_in, n_out, attrs, fattrs):
    return _infer(LAYER, table, n_in, n_out, attrs)


# -- loops ----------------------------------------------------------------------------------------


@jit_with_nrt
def _batch_norm_run(x, y, channels, inner, scale, bias, mean, var, epsilon, relu, first, end):
    """y = (x - mean) / sqrt(var + epsilon) * scale + bias, per channel (axis 1), in float64
    and rounded once to y's dtype; then, with `relu`, negatives to 0 as the Relu op has it
    (NaN and -0 kept); channels [first, end) of every image. Unsigned indices: no
    negative-index wrap, so LLVM vectorises the loop (DenseNet-121's BatchNormalizations of
    Concat outputs, `benchmarks.cnn_layers`)."""
    images = x.shape[0] // max(channels * inner, 1)
    zero = y.dtype.type(0)
    for c in range(first, end):
        a = scale[c] / np.sqrt(np.float64(var[c]) + epsilon)
        b = bias[c] - mean[c] * a
        for n in range(images):
            start = np.uint64((n * channels + c) * inner)
            if relu:
                for j in range(inner):
                    at = start + np.uint64(j)
                    value = y.dtype.type(x[at] * a + b)
                    y[at] = zero if value < zero else value
            else:
                for j in range(inner):
                    at = start + np.uint64(j)
                    y[at] = x[at] * a + b


@jit_with_nrt
def _column_map(table, row, axis, length):
    """For each column of X.shape[axis:], the flat index of the element of row `row` (which
    broadcasts to it) it uses."""
    x_rank = rank(table, 0)
    own_rank = rank(table, row)
    result = np.empty(length, dtype=np.int64)
    for j in range(length):
        rest = j
        index = np.int64(0)
        stride = np.int64(1)
        for a in range(x_rank - 1, axis - 1, -1):
            size = dim(table, 0, a)
            coordinate = rest % size
            rest //= size
            own = a - (x_rank - own_rank)
            if own >= 0 and dim(table, row, own) != 1:
                index += coordinate * stride
            if own >= 0:
                stride *= dim(table, row, own)
        result[j] = index
    return result


@jit_with_nrt
def _standardize(x, y, rows, length, epsilon, scale, scale_map, bias, bias_map, channels, stats):
    """Each row of `length` elements -> (x - mean) / sqrt(variance + epsilon), then the affine
    map: scale[row % channels] (+ bias) when scale_map is empty (InstanceNormalization), else
    scale[scale_map[j]] (+ bias[bias_map[j]]) per column j (LayerNormalization). stats, if not
    empty, gets each row's mean and 1 / sqrt(variance + epsilon) (2 * rows values)."""
    has_bias = bias.shape[0] > 0
    per_row = scale_map.shape[0] == 0
    for r in range(rows):
        base = r * length
        total = 0.0
        for j in range(length):
            total += x[base + j]
        mean = total / length if length > 0 else 0.0
        squares = 0.0
        for j in range(length):
            d = x[base + j] - mean
            squares += d * d
        inv = 1.0 / np.sqrt((squares / length if length > 0 else 0.0) + epsilon)
        if stats.shape[0] > 0:
            stats[r] = mean
            stats[rows + r] = inv
        if length == 0:
            continue
        if per_row:
            c = r % channels
            a = scale[c] * inv
            b = bias[c] if has_bias else 0.0
            for j in range(length):
                y[base + j] = (x[base + j] - mean) * a + b
        else:
            for j in range(length):
                v = (x[base + j] - mean) * inv * scale[scale_map[j]]
                if has_bias:
                    v += bias[bias_map[j]]
                y[base + j] = v


@jit_with_nrt
def _run(op, x, y, scale, bias, mean, var, extent, epsilon, scale_map, bias_map, stats):
    """The op's loop on typed views (bias empty when absent; mean / var BatchNormalization's)."""
    rows, length, channels, relu, first, end = extent
    if op == BATCH:
        _batch_norm_run(x, y, channels, length, scale, bias, mean, var, epsilon, relu, first, end)
    else:
        _standardize(x, y, rows, length, epsilon, scale, scale_map, bias, bias_map, channels, stats)


@jit_with_nrt
def _compute(op, arena, table, n_in, n_out, attrs, fattrs, mode):
    """The op `op` (BATCH, INSTANCE, LAYER); a BatchNormalization's channels are shared by the
    table's pool's threads when it is large (any split gives the same bits)."""
    status, rows, length, axis = _checks(op, table, n_in, attrs)
    if status != 0:
        return status
    count = rows * length
    item = 4 if dtype(table, 0) == F32 else 8
    if not (holds(table, 0, count, item) and holds(table, n_in, count, item)):
        return np.int32(STATUS_OP_BAD_SHAPE)
    for k in range(1, n_out):
        if not holds(table, n_in + k, rows, 4):
            return np.int32(STATUS_OP_BAD_SHAPE)
    channels = dim(table, 0, 1) if op != LAYER else np.int64(1)
    for row in range(1, n_in):
        need = channels if op != LAYER else element_count(table, row)
        if present(table, row) and not holds(table, row, need, item):
            return np.int32(STATUS_OP_BAD_SHAPE)
    has_bias = n_in > 2 and present(table, 2)
    empty = np.zeros(0, dtype=np.int64)
    scale_map = _column_map(table, 1, axis, length) if op == LAYER else empty
    bias_map = _column_map(table, 2, axis, length) if op == LAYER and has_bias else empty
    stats = np.zeros(2 * rows if n_out > 1 else 0, dtype=np.float64)
    epsilon = fattrs[1] if op == LAYER else fattrs[0]
    bias_row = 2 if has_bias else 0  # absent: an empty view
    bias_count = np.int64(0)
    if has_bias:
        bias_count = channels if op != LAYER else element_count(table, 2)
    mean_row = 3 if op == BATCH else 0
    var_row = 4 if op == BATCH else 0
    relu = op == BATCH and attrs.shape[0] > BATCH_ACTIVATION and attrs[BATCH_ACTIVATION] == ACT_RELU
    # the channels of a shared BatchNormalization this call computes (all: not shared)
    splits = op == BATCH and n_out == 1
    status, first, end = share_items(
        arena, table, attrs, fattrs, n_in, n_out, mode, channels, count, NORM_GRAIN, splits
    )
    if status != NOT_SHARED:
        return np.int32(status)
    if item == 4:
        _run(
            op,
            view(arena, table, 0, np.float32)[:count],
            view(arena, table, n_in, np.float32),
            view(arena, table, 1, np.float32),
            view(arena, table, bias_row, np.float32)[:bias_count],
            view(arena, table, mean_row, np.float32),
            view(arena, table, var_row, np.float32),
            (rows, length, channels, relu, first, end),
            epsilon,
            scale_map,
            bias_map,
            stats,
        )
    else:
        _run(
            op,
            view(arena, table, 0, np.float64)[:count],
            view(arena, table, n_in, np.float64),
            view(arena, table, 1, np.float64),
            view(arena, table, bias_row, np.float64)[:bias_count],
            view(arena, table, mean_row, np.float64),
            view(arena, table, var_row, np.float64),
            (rows, length, channels, relu, first, end),
            epsilon,
            scale_map,
            bias_map,
            stats,
        )
    for k in range(1, n_out):
        out = view(arena, table, n_in + k, np.float32)
        for r in range(rows):
            out[r] = stats[(k - 1) * rows + r]
    return np.int32(0)


@jit_with_nrt
def batch_norm_compute(arena, table, n_in, n_out, attrs, fattrs, mode):
    return _compute(BATCH, arena, table, n_in, n_out, attrs, fattrs, mode)


@jit_with_nrt
def _activation_status(attrs):
    """FusedBatchNormalization's activation slot: present and ACT_NONE or ACT_RELU."""
    if attrs.shape[0] <= BATCH_ACTIVATION:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if attrs[BATCH_ACTIVATION] != ACT_NONE and attrs[BATCH_ACTIVATION] != ACT_RELU:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    return np.int32(0)


@jit_with_nrt
def fused_batch_norm_infer(arena, table, n_in, n_out, attrs, fattrs):
    status = _activation_status(attrs)
    if status != 0:
        return status
    return _infer(BATCH, table, n_in, n_out, attrs)


@jit_with_nrt
def fused_batch_norm_compute(arena, table, n_in, n_out, attrs, fattrs, mode):
    status = _activation_status(attrs)
    if status != 0:
        return status
    return _compute(BATCH, arena, table, n_in, n_out, attrs, fattrs, mode)


@jit_with_nrt
def instance_norm_compute(arena, table, n_in, n_out, attrs, fattrs):
    return _compute(INSTANCE, arena, table, n_in, n_out, attrs, fattrs, MODE_COMPUTE)


@jit_with_nrt
def layer_norm_compute(arena, table, n_in, n_out, attrs, fattrs):
    return _compute(LAYER, arena, table, n_in, n_out, attrs, fattrs, MODE_COMPUTE)


# -- RMSNormalization ----------------------------------------------------------------------------


@jit_with_nrt
def _rms_checks(table, attrs):
    """(status, rows, row length) of RMSNormalization: X's rows from `axis` on; Scale
    broadcasts to X."""
    status = float_inputs(table, 2)
    count = element_count(table, 0)
    if status != 0:
        return status, np.int64(0), np.int64(0)
    x_rank = rank(table, 0)
    if count < 0 or x_rank < 1 or element_count(table, 1) < 0 or rank(table, 1) > x_rank:
        return np.int32(STATUS_OP_BAD_SHAPE), np.int64(0), np.int64(0)
    axis = normalize_axis(attrs[0], x_rank) if attrs.shape[0] >= 3 else np.int64(-1)
    if axis < 0 or attrs[2] != 1:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), np.int64(0), np.int64(0)
    for own in range(rank(table, 1)):
        size = dim(table, 1, own)
        if size != 1 and size != dim(table, 0, x_rank - rank(table, 1) + own):
            return np.int32(STATUS_OP_BAD_SHAPE), np.int64(0), np.int64(0)
    rows = np.int64(1)
    for a in range(axis):
        rows *= dim(table, 0, a)
    return np.int32(0), rows, count // rows if rows > 0 else np.int64(0)


@jit_with_nrt
def rms_norm_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, rows, length = _rms_checks(table, attrs)
    if status != 0:
        return status
    copy_shape(table, 0, n_in)
    return np.int32(0)


@jit_with_nrt
def _rms_run(x, scale, y, rows, length, epsilon, every, scale_map):
    """y = x / sqrt(mean of the row's squares + epsilon) * scale[k % every], or
    scale[scale_map[k]] when `every` is -1."""
    for r in range(rows):
        base = r * length
        squares = 0.0
        for j in range(length):
            squares += np.float64(x[base + j]) * np.float64(x[base + j])
        inv = 1.0 / np.sqrt(squares / length + epsilon) if length > 0 else 0.0
        for j in range(length):
            k = base + j
            factor = scale[k % every] if every > 0 else scale[scale_map[k]]
            y[k] = np.float64(x[k]) * inv * np.float64(factor)


@jit_with_nrt
def rms_norm_compute(arena, table, n_in, n_out, attrs, fattrs):
    status, rows, length = _rms_checks(table, attrs)
    if status != 0:
        return status
    count = rows * length
    item = 4 if dtype(table, 0) == F32 else 8
    if not (holds(table, 0, count, item) and holds(table, n_in, count, item)):
        return np.int32(STATUS_OP_BAD_SHAPE)
    if not holds(table, 1, element_count(table, 1), item):
        return np.int32(STATUS_OP_BAD_SHAPE)
    every = period(table, 1, n_in)
    scale_map = index_map(table, 1, n_in) if every <= 0 else np.zeros(0, dtype=np.int64)
    if item == 4:
        x, w = view(arena, table, 0, np.float32), view(arena, table, 1, np.float32)
        y = view(arena, table, n_in, np.float32)
        _rms_run(x, w, y, rows, length, fattrs[1], every, scale_map)
    else:
        x, w = view(arena, table, 0, np.float64), view(arena, table, 1, np.float64)
        y = view(arena, table, n_in, np.float64)
        _rms_run(x, w, y, rows, length, fattrs[1], every, scale_map)
    return np.int32(0)


def encode_batch_norm(attributes, inputs):
    """BatchNormalization slots: epsilon, training_mode, spatial."""
    return [
        onnx_float(attributes.get("epsilon", 1e-5)),
        int(attributes.get("training_mode", 0)),
        int(attributes.get("spatial", 1)),
    ]


def encode_fused_batch_norm(attributes, inputs):
    """FusedBatchNormalization slots: BatchNormalization's, then activation (0 none, 1 Relu)."""
    return encode_batch_norm(attributes, inputs) + [int(attributes.get("activation", ACT_NONE))]


def encode_instance_norm(attributes, inputs):
    """InstanceNormalization slots: epsilon."""
    return [onnx_float(attributes.get("epsilon", 1e-5))]


def encode_layer_norm(attributes, inputs):
    """LayerNormalization and RMSNormalization slots: axis, epsilon, stash_type."""
    return [
        int(attributes.get("axis", -1)),
        onnx_float(attributes.get("epsilon", 1e-5)),
        int(attributes.get("stash_type", 1)),
    ]


register_op(
    "BatchNormalization",
    batch_norm_infer,
    batch_norm_compute,
    encode=encode_batch_norm,
    inputs=(5, 5),
    parts=True,
)
register_op(
    "FusedBatchNormalization",
    fused_batch_norm_infer,
    fused_batch_norm_compute,
    encode=encode_fused_batch_norm,
    inputs=(5, 5),
    parts=True,
    doc="BatchNormalization, then an optional Relu: the lowering's fusion of "
    "BatchNormalization -> Relu",
)
register_op(
    "InstanceNormalization",
    instance_norm_infer,
    instance_norm_compute,
    encode=encode_instance_norm,
    inputs=(3, 3),
)
register_op(
    "LayerNormalization",
    layer_norm_infer,
    layer_norm_compute,
    encode=encode_layer_norm,
    inputs=(2, 3),
    outputs=(1, 3),
)
register_op(
    "RMSNormalization",
    rms_norm_infer,
    rms_norm_compute,
    encode=encode_layer_norm,
    inputs=(2, 2),
    dtypes={0: FLOATS, 1: FLOATS},
)
