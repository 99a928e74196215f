"""Ops that write or read blocks of elements at indexed positions: ScatterElements (and the old
Scatter), ScatterND, GatherND and TensorScatter.

Each first turns its indices into block targets: `targets[i]` is the element offset (in the
data's C order) of block i, every block `block` elements long, and block i of the updates (or
of the output, for GatherND) is its elements i * block .. (i + 1) * block - 1. Indices may be
negative (counted from the end of their axis); one outside [-size, size) fails the op with
STATUS_OP_BAD_INDEX before anything is written. Copies move bytes, so they take every element
type; the scatter reductions add / mul / max / min are typed, on the float and integer types
(not bool or float16: STATUS_OP_BAD_DTYPE). Updates apply in their C order, so with duplicate
indices the last write wins (reduction none) and reductions accumulate every one of them.

ScatterElements (opsets 11-18): attrs [axis, reduction]; indices (int32 / int64) and updates
have one shape, of the data's rank, no larger than the data off the axis; update element
(..., i_axis, ...) goes to output element (..., indices[..., i_axis, ...], ...).
ScatterND (opsets 11-18): attrs [reduction]; indices (int64) [..., k] with k <= rank(data);
updates have shape indices.shape[:-1] + data.shape[k:], each index tuple naming one block.
GatherND (opsets 11-13): attrs [batch_dims]; the output has shape
indices.shape[:-1] + data.shape[batch_dims + k:]; the first batch_dims dims of data and
indices are equal, and each batch's index tuples address that batch's data.
TensorScatter (opset 24): attrs [axis, mode]; the output is the past cache with each batch's
update written along `axis` (not 0, the batch axis) from that batch's write index (int64
[batch], default 0) on; circular mode wraps at the cache's length, linear mode fails the op
with STATUS_OP_BAD_INDEX past it (or at a negative index).
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.abi.dtypes import DType
from rtsoa.ops.abi import (
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    MAX_RANK,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_RANK,
    U8,
    U16,
    U32,
    U64,
    copy_shape,
    dim,
    dtype,
    int_data,
    numel,
    present,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.copying import byte_copy, holds, item_size, row_strides
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import element_count

NONE, ADD, MUL, MAX, MIN = range(5)
REDUCTIONS = {"none": NONE, "add": ADD, "mul": MUL, "max": MAX, "min": MIN}
LINEAR, CIRCULAR = 0, 1
MODES = {"linear": LINEAR, "circular": CIRCULAR}  # TensorScatter's
ELEMENTS, ND = 0, 1  # the scatter family's members
EVERY_TYPE = frozenset(DType) - {DType.UNDEFINED}
# the element types the reductions run on
REDUCIBLE = EVERY_TYPE - {DType.BOOL, DType.FLOAT16}


# -- targets --------------------------------------------------------------------------------------


@jit_with_nrt
def _element_targets(arena, table, data_row, index_row, axis):
    """(status, targets) of ScatterElements: one block of one element per index, at the
    index's coordinate with its axis term replaced by the index."""
    r = rank(table, data_row)
    count = numel(table, index_row)
    targets = np.empty(count, dtype=np.int64)
    strides = row_strides(table, data_row)
    length = dim(table, data_row, axis)
    coordinate = np.zeros(r, dtype=np.int64)
    base = np.int64(0)  # the data offset of the coordinate, less its axis term
    for o in range(count):
        index = int_data(arena, table, index_row, o)
        if index < 0:
            index += length
        if index < 0 or index >= length:
            return np.int32(STATUS_OP_BAD_INDEX), targets
        targets[o] = base + index * strides[axis]
        for a in range(r - 1, -1, -1):  # the next coordinate, in C order
            coordinate[a] += 1
            if a != axis:
                base += strides[a]
            if coordinate[a] < dim(table, index_row, a):
                break
            if a != axis:
                base -= strides[a] * coordinate[a]
            coordinate[a] = 0
    return OK, targets


@jit_with_nrt
def _tuple_targets(arena, table, data_row, index_row, batch_dims):
    """(status, targets, block) of ScatterND / GatherND: index tuple i (the last axis of the
    indices) addresses data axes batch_dims .. batch_dims + k - 1 of its batch; each block is
    the data's trailing dims after those."""
    r = rank(table, data_row)
    q = rank(table, index_row)
    k = dim(table, index_row, q - 1)
    strides = row_strides(table, data_row)
    block = np.int64(1)
    for a in range(batch_dims + k, r):
        block *= dim(table, data_row, a)
    batch_size = np.int64(1)  # data elements per batch
    for a in range(batch_dims, r):
        batch_size *= dim(table, data_row, a)
    count = np.int64(1)  # index tuples
    for a in range(q - 1):
        count *= dim(table, index_row, a)
    per_batch = count  # index tuples per batch
    for a in range(batch_dims):
        per_batch //= max(dim(table, index_row, a), np.int64(1))
    targets = np.empty(count, dtype=np.int64)
    for i in range(count):
        offset = (i // per_batch) * batch_size if per_batch > 0 else np.int64(0)
        for j in range(k):
            length = dim(table, data_row, batch_dims + j)
            index = int_data(arena, table, index_row, i * k + j)
            if index < 0:
                index += length
            if index < 0 or index >= length:
                return np.int32(STATUS_OP_BAD_INDEX), targets, block
            offset += index * strides[batch_dims + j]
        targets[i] = offset
    return OK, targets, block


# -- applying blocks ------------------------------------------------------------------------------


@jit_with_nrt
def _scatter_bytes(dst, src, targets, size, block_bytes):
    """dst's block at each target gets src's block i (`size` bytes per element)."""
    for i in range(targets.shape[0]):
        start = targets[i] * size
        for b in range(block_bytes):
            dst[start + b] = src[i * block_bytes + b]


@jit_with_nrt
def _gather_bytes(dst, src, targets, size, block_bytes):
    """dst's block i gets src's block at each target (`size` bytes per element)."""
    for i in range(targets.shape[0]):
        start = targets[i] * size
        for b in range(block_bytes):
            dst[i * block_bytes + b] = src[start + b]


@jit_with_nrt
def _scatter_reduce(out, updates, targets, block, reduction):
    """out's block at each target combined with updates' block i, element by element. max /
    min keep NaN once it is there and take a NaN update (numpy's maximum / minimum)."""
    for i in range(targets.shape[0]):
        for e in range(block):
            t = targets[i] + e
            a = out[t]
            b = updates[i * block + e]
            if reduction == ADD:
                out[t] = a + b
            elif reduction == MUL:
                out[t] = a * b
            elif reduction == MAX:
                out[t] = a if (a != a or a >= b) else b
            else:
                out[t] = a if (a != a or a <= b) else b


@jit_with_nrt
def _reduce_as(arena, table, out_row, update_row, targets, block, reduction, numpy_dtype):
    out = view(arena, table, out_row, numpy_dtype)
    _scatter_reduce(out, view(arena, table, update_row, numpy_dtype), targets, block, reduction)


@jit_with_nrt.keeping_literals("element")
def _reduce_typed(arena, table, out_row, update_row, targets, block, reduction, element):
    """`_scatter_reduce` on the rows' dtype `element` (a literal in each dtype's entry)."""
    if element == F32:
        _reduce_as(arena, table, out_row, update_row, targets, block, reduction, np.float32)
    elif element == F64:
        _reduce_as(arena, table, out_row, update_row, targets, block, reduction, np.float64)
    elif element == I8:
        _reduce_as(arena, table, out_row, update_row, targets, block, reduction, np.int8)
    elif element == I16:
        _reduce_as(arena, table, out_row, update_row, targets, block, reduction, np.int16)
    elif element == I32:
        _reduce_as(arena, table, out_row, update_row, targets, block, reduction, np.int32)
    elif element == I64:
        _reduce_as(arena, table, out_row, update_row, targets, block, reduction, np.int64)
    elif element == U8:
        _reduce_as(arena, table, out_row, update_row, targets, block, reduction, np.uint8)
    elif element == U16:
        _reduce_as(arena, table, out_row, update_row, targets, block, reduction, np.uint16)
    elif element == U32:
        _reduce_as(arena, table, out_row, update_row, targets, block, reduction, np.uint32)
    elif element == U64:
        _reduce_as(arena, table, out_row, update_row, targets, block, reduction, np.uint64)
    else:
        return np.int32(STATUS_OP_BAD_DTYPE)
    return OK


# -- ScatterElements / ScatterND ------------------------------------------------------------------


@jit_with_nrt
def _same_dims(table, a, b, first_a, first_b, count):
    """Are dims first_a .. of row a equal to dims first_b .. of row b, `count` of them?"""
    for k in range(count):
        if dim(table, a, first_a + k) != dim(table, b, first_b + k):
            return False
    return True


@jit_with_nrt
def _scatter_checks(table, kind, attrs):
    """Status of a scatter's operands and attributes; the reduction's slot is last."""
    r = rank(table, 0)
    if attrs.shape[0] < 1 or attrs[attrs.shape[0] - 1] < NONE or attrs[attrs.shape[0] - 1] > MIN:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if dtype(table, 2) != dtype(table, 0) or item_size(table, 0) == 0:
        return np.int32(STATUS_OP_BAD_DTYPE)
    for row in range(3):
        if element_count(table, row) < 0:
            return np.int32(STATUS_OP_BAD_SHAPE)
    if r < 1:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if kind == ELEMENTS:
        if attrs.shape[0] < 2:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE)
        axis = attrs[0] + r if attrs[0] < 0 else attrs[0]
        if axis < 0 or axis >= r:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE)
        if dtype(table, 1) != I64 and dtype(table, 1) != I32:
            return np.int32(STATUS_OP_BAD_DTYPE)
        if rank(table, 1) != r or rank(table, 2) != r or not _same_dims(table, 1, 2, 0, 0, r):
            return np.int32(STATUS_OP_BAD_SHAPE)
        for a in range(r):
            if a != axis and dim(table, 1, a) > dim(table, 0, a):
                return np.int32(STATUS_OP_BAD_SHAPE)
        return OK
    q = rank(table, 1)
    if dtype(table, 1) != I64:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if q < 1:
        return np.int32(STATUS_OP_BAD_SHAPE)
    k = dim(table, 1, q - 1)
    if k > r or rank(table, 2) != q - 1 + r - k:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if not (_same_dims(table, 2, 1, 0, 0, q - 1) and _same_dims(table, 2, 0, q - 1, k, r - k)):
        return np.int32(STATUS_OP_BAD_SHAPE)
    return OK


@jit_with_nrt
def _scatter_infer(table, n_in, kind, attrs):
    status = _scatter_checks(table, kind, attrs)
    if status != 0:
        return status
    copy_shape(table, 0, n_in)
    return OK


@jit_with_nrt
def scatter_elements_infer(arena, table, n_in, n_out, attrs, fattrs):
    return _scatter_infer(table, n_in, ELEMENTS, attrs)


@jit_with_nrt
def scatter_nd_infer(arena, table, n_in, n_out, attrs, fattrs):
    return _scatter_infer(table, n_in, ND, attrs)


@jit_with_nrt.keeping_literals("kind", "element")
def scatter(arena, table, n_in, n_out, attrs, fattrs, kind, element):
    """The scatter family's compute: the output is the data with the updates written (or
    combined by the reduction) at the indices' targets."""
    status = _scatter_infer(table, n_in, kind, attrs)
    if status != 0:
        return status
    for row in range(4):
        if not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    reduction = attrs[attrs.shape[0] - 1]
    if kind == ELEMENTS:
        r = rank(table, 0)
        axis = attrs[0] + r if attrs[0] < 0 else attrs[0]
        status, targets = _element_targets(arena, table, 0, 1, axis)
        block = np.int64(1)
    else:
        status, targets, block = _tuple_targets(arena, table, 0, 1, 0)
    if status != 0:
        return status
    status = byte_copy(arena, table, 0, n_in)
    if status != 0:
        return status
    if reduction == NONE:
        size = item_size(table, 0)
        dst = view(arena, table, n_in, np.uint8)
        _scatter_bytes(dst, view(arena, table, 2, np.uint8), targets, size, block * size)
        return OK
    return _reduce_typed(arena, table, n_in, 2, targets, block, reduction, element)


# -- GatherND -------------------------------------------------------------------------------------


@jit_with_nrt
def gather_nd_infer(arena, table, n_in, n_out, attrs, fattrs):
    r = rank(table, 0)
    q = rank(table, 1)
    if attrs.shape[0] < 1:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    batch_dims = attrs[0]
    if dtype(table, 1) != I64 or item_size(table, 0) == 0:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if r < 1 or q < 1 or element_count(table, 0) < 0 or element_count(table, 1) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if batch_dims < 0 or batch_dims >= min(r, q):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    k = dim(table, 1, q - 1)
    if batch_dims + k > r or not _same_dims(table, 0, 1, 0, 0, batch_dims):
        return np.int32(STATUS_OP_BAD_SHAPE)
    out_rank = q - 1 + r - k - batch_dims
    if out_rank > MAX_RANK:
        return np.int32(STATUS_OP_RANK)
    set_output(table, n_in, dtype(table, 0), out_rank)
    for a in range(q - 1):
        set_dim(table, n_in, a, dim(table, 1, a))
    for a in range(batch_dims + k, r):
        set_dim(table, n_in, q - 1 + a - batch_dims - k, dim(table, 0, a))
    return OK


@jit_with_nrt
def gather_nd_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = gather_nd_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    if not (holds(table, 0) and holds(table, 1) and holds(table, n_in)):
        return np.int32(STATUS_OP_BAD_SHAPE)
    status, targets, block = _tuple_targets(arena, table, 0, 1, attrs[0])
    if status != 0:
        return status
    size = item_size(table, 0)
    dst = view(arena, table, n_in, np.uint8)
    _gather_bytes(dst, view(arena, table, 0, np.uint8), targets, size, block * size)
    return OK


# -- TensorScatter --------------------------------------------------------------------------------


@jit_with_nrt
def tensor_scatter_infer(arena, table, n_in, n_out, attrs, fattrs):
    r = rank(table, 0)
    if attrs.shape[0] < 2 or (attrs[1] != LINEAR and attrs[1] != CIRCULAR):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    axis = attrs[0] + r if attrs[0] < 0 else attrs[0]
    if axis < 1 or axis >= r:  # axis 0 is the batch
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if dtype(table, 1) != dtype(table, 0) or item_size(table, 0) == 0:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if element_count(table, 0) < 0 or rank(table, 1) != r:
        return np.int32(STATUS_OP_BAD_SHAPE)
    for a in range(r):
        if a != axis and dim(table, 1, a) != dim(table, 0, a):
            return np.int32(STATUS_OP_BAD_SHAPE)
    if dim(table, 1, axis) > dim(table, 0, axis):
        return np.int32(STATUS_OP_BAD_SHAPE)
    if n_in > 2 and present(table, 2):
        if dtype(table, 2) != I64:
            return np.int32(STATUS_OP_BAD_DTYPE)
        if rank(table, 2) != 1 or dim(table, 2, 0) != dim(table, 0, 0):
            return np.int32(STATUS_OP_BAD_SHAPE)
    copy_shape(table, 0, n_in)
    return OK


@jit_with_nrt
def tensor_scatter_compute(arena, table, n_in, n_out, attrs, fattrs):
    """Each batch's updates go to the cache from its write index on along `axis` (wrapping
    in circular mode; past the end fails the op with STATUS_OP_BAD_INDEX in linear mode)."""
    status = tensor_scatter_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    has_indices = n_in > 2 and present(table, 2)
    if not (holds(table, 0) and holds(table, 1) and holds(table, n_in)):
        return np.int32(STATUS_OP_BAD_SHAPE)
    if has_indices and not holds(table, 2):
        return np.int32(STATUS_OP_BAD_SHAPE)
    r = rank(table, 0)
    axis = attrs[0] + r if attrs[0] < 0 else attrs[0]
    capacity = dim(table, 0, axis)
    length = dim(table, 1, axis)
    block = np.int64(1)
    for a in range(axis + 1, r):
        block *= dim(table, 0, a)
    prefixes = np.int64(1)
    for a in range(axis):
        prefixes *= dim(table, 0, a)
    per_batch = prefixes // dim(table, 0, 0) if dim(table, 0, 0) > 0 else np.int64(0)
    targets = np.empty(prefixes * length, dtype=np.int64)
    for p in range(prefixes):
        start = int_data(arena, table, 2, p // per_batch) if has_indices else np.int64(0)
        for s in range(length):
            position = start + s
            if attrs[1] == CIRCULAR:
                position %= capacity
            if position < 0 or position >= capacity:
                return np.int32(STATUS_OP_BAD_INDEX)
            targets[p * length + s] = (p * capacity + position) * block
    status = byte_copy(arena, table, 0, n_in)
    if status != 0:
        return status
    size = item_size(table, 0)
    dst = view(arena, table, n_in, np.uint8)
    _scatter_bytes(dst, view(arena, table, 1, np.uint8), targets, size, block * size)
    return OK


def encode_scatter_elements(attributes, inputs):
    """ScatterElements slots: axis (default 0), reduction (`REDUCTIONS`; the converter refuses
    other names)."""
    return [int(attributes.get("axis", 0)), _reduction(attributes)]


def encode_scatter_nd(attributes, inputs):
    """ScatterND slots: reduction."""
    return [_reduction(attributes)]


def encode_gather_nd(attributes, inputs):
    """GatherND slots: batch_dims (default 0)."""
    return [int(attributes.get("batch_dims", 0))]


def encode_tensor_scatter(attributes, inputs):
    """TensorScatter slots: axis (default -2), mode (`MODES`; the converter refuses others)."""
    return [int(attributes.get("axis", -2)), MODES.get(_text(attributes.get("mode", "linear")), -1)]


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def _reduction(attributes):
    return REDUCTIONS.get(_text(attributes.get("reduction", "none")), -1)


_FAMILY = {"dtypes": {0: EVERY_TYPE}, "variants": True, "inputs": (3, 3)}
register_op(
    "ScatterElements",
    scatter_elements_infer,
    scatter,
    encode=encode_scatter_elements,
    constants=(ELEMENTS,),
    **_FAMILY,
)
register_op(
    "ScatterND",
    scatter_nd_infer,
    scatter,
    encode=encode_scatter_nd,
    constants=(ND,),
    **_FAMILY,
)
register_op("GatherND", gather_nd_infer, gather_nd_compute, encode=encode_gather_nd, inputs=(2, 2))
register_op(
    "TensorScatter",
    tensor_scatter_infer,
    tensor_scatter_compute,
    encode=encode_tensor_scatter,
    inputs=(2, 3),
)
