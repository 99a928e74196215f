"""Ops that copy a selection of their inputs' elements: Concat, Split, Slice, Gather,
Expand, Tile, Where.

Each builds the per-axis offset tables of the copy engine (`rtsoa.ops.copying`) and copies
through it (Where selects element by element through index maps), but Concat, whose inputs
are contiguous blocks of its output, moves each block whole.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.abi.views import move_elements
from rtsoa.ops.abi import (
    BOOL,
    I32,
    I64,
    MAX_RANK,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_MISSING_INPUT,
    STATUS_OP_RANK,
    STATUS_OP_TOO_LARGE,
    copy_shape,
    dim,
    dtype,
    int_data,
    numel,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.broadcast import broadcast_rows
from rtsoa.ops.copying import (
    SCRATCH,
    broadcast_tables,
    copy_into,
    full_map,
    holds,
    item_size,
    linear_tables,
    row_dims,
    row_strides,
    set_dims,
)
from rtsoa.ops.lists import (
    attr_axis,
    encode_axis,
    encode_list,
    input_list,
    list_of,
    normalize_axes,
)
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import MAX_ELEMENTS, element_count


@jit_with_nrt
def concat_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Concat along `axis`: one dtype and rank, equal dims apart from `axis`."""
    r = rank(table, 0)
    axis = attr_axis(attrs, 0, r, False)
    if axis < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    total = np.int64(0)
    for row in range(n_in):
        if dtype(table, row) != dtype(table, 0):
            return np.int32(STATUS_OP_BAD_DTYPE)
        if rank(table, row) != r:
            return np.int32(STATUS_OP_BAD_SHAPE)
        for k in range(r):
            if k != axis and dim(table, row, k) != dim(table, 0, k):
                return np.int32(STATUS_OP_BAD_SHAPE)
        total += dim(table, row, axis)
    copy_shape(table, 0, n_in)
    set_dim(table, n_in, axis, total)
    return OK


@jit_with_nrt
def concat_compute(arena, table, n_in, n_out, attrs, fattrs):
    """Each input's elements form, for every index of the axes before `axis`, one contiguous
    block of the output: one memmove each (DenseNet's channel Concats move whole planes; the
    copy engine's per-row runs cost 4x onnxruntime there, `benchmarks.cnn_layers`)."""
    status = concat_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    r = rank(table, 0)
    axis = attr_axis(attrs, 0, r, False)
    size = item_size(table, 0)
    if size == 0:
        return np.int32(STATUS_OP_BAD_DTYPE)
    for row in range(n_in + 1):  # every byte a block below touches lies in its row
        if numel(table, row) > 0 and not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    outer = np.int64(1)
    inner = np.int64(1)
    for k in range(r):
        if k < axis:
            outer *= dim(table, n_in, k)
        elif k > axis:
            inner *= dim(table, n_in, k)
    out_block = dim(table, n_in, axis) * inner * size
    dst = view(arena, table, n_in, np.uint8)
    offset = np.int64(0)
    for row in range(n_in):
        block = dim(table, row, axis) * inner * size
        if block > 0 and outer > 0:
            src = view(arena, table, row, np.uint8)
            for o in range(outer):
                move_elements(dst, o * out_block + offset, src, o * block, block)
        offset += block
    return OK


@jit_with_nrt
def split_sizes(arena, table, n_in, n_out, attrs):
    """(status, axis, sizes): the split input / attribute, else num_outputs, else equal parts."""
    r = rank(table, 0)
    axis = attr_axis(attrs, 0, r, False)
    sizes = np.zeros(n_out, dtype=np.int64)
    if axis < 0 or attrs.shape[0] < 2:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), axis, sizes
    length = dim(table, 0, axis)
    num_outputs = attrs[1]
    status, split, given, _ = list_of(arena, table, n_in, 1, attrs, 2)
    if status != 0:
        return status, axis, sizes
    if given:
        if split.shape[0] != n_out:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), axis, sizes
        total = np.int64(0)
        for k in range(n_out):
            if split[k] < 0:
                return np.int32(STATUS_OP_BAD_ATTRIBUTE), axis, sizes
            total += split[k]
        if total != length:
            return np.int32(STATUS_OP_BAD_SHAPE), axis, sizes
        return OK, axis, split
    if num_outputs > 0:  # opset 18: ceil-sized parts, the last one smaller
        if num_outputs != n_out:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), axis, sizes
        part = (length + n_out - 1) // n_out
        left = length
        for k in range(n_out):
            sizes[k] = min(part, left)
            left -= sizes[k]
        return OK, axis, sizes
    if n_out <= 0 or length % n_out != 0:
        return np.int32(STATUS_OP_BAD_SHAPE), axis, sizes
    sizes[:] = length // n_out
    return OK, axis, sizes


@jit_with_nrt
def split_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, axis, sizes = split_sizes(arena, table, n_in, n_out, attrs)
    if status != 0:
        return status
    for k in range(n_out):
        copy_shape(table, 0, n_in + k)
        set_dim(table, n_in + k, axis, sizes[k])
    return OK


@jit_with_nrt
def split_compute(arena, table, n_in, n_out, attrs, fattrs):
    status, axis, sizes = split_sizes(arena, table, n_in, n_out, attrs)
    if status != 0:
        return status
    r = rank(table, 0)
    strides = row_strides(table, 0)
    offset = np.int64(0)
    for k in range(n_out):
        row = n_in + k
        dims = row_dims(table, 0)
        dims[axis] = sizes[k]
        if rank(table, row) != r or numel(table, row) != np.prod(dims):
            return np.int32(STATUS_OP_BAD_SHAPE)
        offsets = np.zeros(r, dtype=np.int64)
        offsets[axis] = offset * strides[axis]
        tables, starts = linear_tables(dims, offsets, strides)
        status = copy_into(arena, table, 0, row, dims, tables, starts, row_strides(table, row), 0)
        if status != 0:
            return status
        offset += sizes[k]
    return OK


@jit_with_nrt
def slice_params(arena, table, n_in, attrs):
    """(status, first, steps, counts) per axis of input 0 (ONNX clamping rules)."""
    r = rank(table, 0)
    first = np.zeros(r, dtype=np.int64)
    steps = np.ones(r, dtype=np.int64)
    counts = row_dims(table, 0)
    status, begins, given_b, slot = list_of(arena, table, n_in, 1, attrs, 0)
    if status != 0:
        return status, first, steps, counts
    status, ends, given_e, slot = list_of(arena, table, n_in, 2, attrs, slot)
    if status != 0:
        return status, first, steps, counts
    status, axes, given_a, slot = list_of(arena, table, n_in, 3, attrs, slot)
    if status != 0:
        return status, first, steps, counts
    status, step_list, given_s = input_list(arena, table, n_in, 4)
    if status != 0:
        return status, first, steps, counts
    if not given_b or not given_e:
        return np.int32(STATUS_OP_MISSING_INPUT), first, steps, counts
    n = begins.shape[0]
    if ends.shape[0] != n:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), first, steps, counts
    if not given_a:
        if n > r:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), first, steps, counts
        axes = np.arange(n).astype(np.int64)
    if axes.shape[0] != n or (given_s and step_list.shape[0] != n):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), first, steps, counts
    status, axes = normalize_axes(axes, r)
    if status != 0:
        return status, first, steps, counts
    for k in range(n):
        axis = axes[k]
        d = dim(table, 0, axis)
        step = step_list[k] if given_s else np.int64(1)
        if step == 0:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), first, steps, counts
        start = begins[k]
        end = ends[k]
        if start < 0:
            start += d
        if end < 0:
            end += d
        if step > 0:
            start = min(max(start, 0), d)
            end = min(max(end, 0), d)
            count = (end - start - 1) // step + 1 if end > start else 0
        else:
            start = min(max(start, 0), d - 1)  # the ONNX rule (numpy's is -1: nothing taken)
            end = min(max(end, -1), d - 1)
            step = max(step, -(1 << 62))
            count = (start - end - 1) // (-step) + 1 if start > end else 0
        first[axis] = start
        steps[axis] = step
        counts[axis] = count
    return OK, first, steps, counts


@jit_with_nrt
def slice_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, first, steps, counts = slice_params(arena, table, n_in, attrs)
    if status != 0:
        return status
    return set_dims(table, n_in, dtype(table, 0), counts)


@jit_with_nrt
def slice_compute(arena, table, n_in, n_out, attrs, fattrs):
    status, first, steps, counts = slice_params(arena, table, n_in, attrs)
    if status != 0:
        return status
    strides = row_strides(table, 0)
    tables, starts = linear_tables(counts, first * strides, steps * strides)
    return copy_into(arena, table, 0, n_in, counts, tables, starts, row_strides(table, n_in), 0)


@jit_with_nrt
def gather_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Gather along `axis`: data dims before axis, the indices' dims, data dims after axis."""
    r = rank(table, 0)
    axis = attr_axis(attrs, 0, r, False)
    if axis < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    kind = dtype(table, 1)
    if kind != I64 and kind != I32:
        return np.int32(STATUS_OP_BAD_DTYPE)
    ri = rank(table, 1)
    out_rank = r - 1 + ri
    if out_rank > MAX_RANK:
        return np.int32(STATUS_OP_RANK)
    set_output(table, n_in, dtype(table, 0), out_rank)
    j = 0
    for k in range(r):
        if k == axis:
            for m in range(ri):
                set_dim(table, n_in, j, dim(table, 1, m))
                j += 1
        else:
            set_dim(table, n_in, j, dim(table, 0, k))
            j += 1
    return OK


@jit_with_nrt
def gather_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = gather_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    r = rank(table, 0)
    axis = attr_axis(attrs, 0, r, False)
    count = numel(table, 1)
    if not holds(table, 1):
        return np.int32(STATUS_OP_BAD_SHAPE)
    dims = row_dims(table, 0)
    d = dims[axis]
    dims[axis] = count  # the indices flattened into one axis
    strides = row_strides(table, 0)
    tables, starts = linear_tables(dims, np.zeros(r, dtype=np.int64), strides)
    for j in range(count):
        index = int_data(arena, table, 1, j)
        if index < 0:
            index += d
        if index < 0 or index >= d:
            return np.int32(STATUS_OP_BAD_INDEX)
        tables[starts[axis] + j] = index * strides[axis]
    out_strides = np.empty(r, dtype=np.int64)
    step = np.int64(1)
    for k in range(r - 1, -1, -1):
        out_strides[k] = step
        step *= dims[k]
    return copy_into(arena, table, 0, n_in, dims, tables, starts, out_strides, 0)


@jit_with_nrt
def expand_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Expand: input 0 broadcast with the shape in input 1 (both ways, numpy rules)."""
    status, shape, given = input_list(arena, table, n_in, 1)
    if status != 0:
        return status
    if not given:
        return np.int32(STATUS_OP_MISSING_INPUT)
    if shape.shape[0] > MAX_RANK:
        return np.int32(STATUS_OP_RANK)
    for k in range(shape.shape[0]):
        if shape[k] < 0:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    status = set_dims(table, SCRATCH, dtype(table, 0), shape)
    if status != 0:
        return status
    rows = np.array([0, SCRATCH], dtype=np.int64)
    status = broadcast_rows(table, rows, n_in)
    if status != 0:
        return status
    if element_count(table, n_in) < 0:  # overflow-safe: a wrapped product could look small
        return np.int32(STATUS_OP_TOO_LARGE)
    table[n_in, 2] = dtype(table, 0)
    return OK


@jit_with_nrt
def expand_compute(arena, table, n_in, n_out, attrs, fattrs):
    if element_count(table, n_in) == 0:  # nothing to copy; a huge other dim must not size tables
        return OK
    r = rank(table, n_in)
    own_rank = rank(table, 0)
    if own_rank > r:
        return np.int32(STATUS_OP_BAD_SHAPE)
    for k in range(own_rank):
        d = dim(table, 0, k)
        if d != 1 and d != dim(table, n_in, k + r - own_rank):
            return np.int32(STATUS_OP_BAD_SHAPE)
    dims, tables, starts = broadcast_tables(table, 0, n_in)
    return copy_into(arena, table, 0, n_in, dims, tables, starts, row_strides(table, n_in), 0)


@jit_with_nrt
def tile_repeats(arena, table, n_in):
    status, repeats, given = input_list(arena, table, n_in, 1)
    if status != 0:
        return status, repeats
    if not given:
        return np.int32(STATUS_OP_MISSING_INPUT), repeats
    if repeats.shape[0] != rank(table, 0):
        return np.int32(STATUS_OP_BAD_SHAPE), repeats
    for k in range(repeats.shape[0]):
        if repeats[k] < 0:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), repeats
    return OK, repeats


@jit_with_nrt
def tile_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, repeats = tile_repeats(arena, table, n_in)
    if status != 0:
        return status
    source = row_dims(table, 0)
    empty = False
    for k in range(repeats.shape[0]):
        empty = empty or repeats[k] == 0 or source[k] == 0
    for k in range(repeats.shape[0]):  # each dim's product first: it may wrap on its own
        if not empty and source[k] > MAX_ELEMENTS // repeats[k]:
            return np.int32(STATUS_OP_TOO_LARGE)
    status = set_dims(table, n_in, dtype(table, 0), source * repeats)
    if status == 0 and element_count(table, n_in) < 0:
        return np.int32(STATUS_OP_TOO_LARGE)
    return status


@jit_with_nrt
def tile_compute(arena, table, n_in, n_out, attrs, fattrs):
    status, repeats = tile_repeats(arena, table, n_in)
    if status != 0:
        return status
    source = row_dims(table, 0)
    dims = source * repeats
    if rank(table, n_in) != dims.shape[0] or numel(table, n_in) != np.prod(dims):
        return np.int32(STATUS_OP_BAD_SHAPE)
    if element_count(table, n_in) == 0:  # as in expand_compute
        return OK
    strides = row_strides(table, 0)
    tables, starts = linear_tables(dims, np.zeros(dims.shape[0], dtype=np.int64), strides)
    for k in range(dims.shape[0]):
        for i in range(dims[k]):
            tables[starts[k] + i] = (i % source[k]) * strides[k]
    return copy_into(arena, table, 0, n_in, dims, tables, starts, row_strides(table, n_in), 0)


@jit_with_nrt
def where_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Where(cond, x, y): bool cond; x and y of one dtype; the three broadcast."""
    if dtype(table, 0) != BOOL or dtype(table, 1) != dtype(table, 2):
        return np.int32(STATUS_OP_BAD_DTYPE)
    status = broadcast_rows(table, np.arange(3), n_in)
    if status != 0:
        return status
    table[n_in, 2] = dtype(table, 1)
    return OK


@jit_with_nrt
def where_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = where_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    o = n_in
    for row in range(4):
        if not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    size = item_size(table, 1)
    ci = full_map(table, 0, o)
    xi = full_map(table, 1, o)
    yi = full_map(table, 2, o)
    cond = view(arena, table, 0, np.uint8)
    x = view(arena, table, 1, np.uint8)
    y = view(arena, table, 2, np.uint8)
    out = view(arena, table, o, np.uint8)
    for i in range(ci.shape[0]):
        d = i * size
        if cond[ci[i]] != 0:
            s = xi[i] * size
            for b in range(size):
                out[d + b] = x[s + b]
        else:
            s = yi[i] * size
            for b in range(size):
                out[d + b] = y[s + b]
    return OK


def encode_split(attributes, inputs):
    return [
        int(attributes.get("axis", 0)),
        int(attributes.get("num_outputs", 0)),
        *encode_list(attributes.get("split")),
    ]


def encode_slice(attributes, inputs):
    return [
        *encode_list(attributes.get("starts")),
        *encode_list(attributes.get("ends")),
        *encode_list(attributes.get("axes")),
    ]


register_op("Concat", concat_infer, concat_compute, encode=encode_axis(0), inputs=(1, None))
register_op(
    "Split",
    split_infer,
    split_compute,
    encode=encode_split,
    inputs=(1, 2),
    outputs=(1, None),
    data_inputs=(1,),
)
register_op(
    "Slice",
    slice_infer,
    slice_compute,
    encode=encode_slice,
    inputs=(1, 5),
    data_inputs=(1, 2, 3, 4),
)
register_op("Gather", gather_infer, gather_compute, encode=encode_axis(0), inputs=(2, 2))
register_op("Expand", expand_infer, expand_compute, inputs=(2, 2), data_inputs=(1,))
register_op("Tile", tile_infer, tile_compute, inputs=(2, 2), data_inputs=(1,))
register_op("Where", where_infer, where_compute, inputs=(3, 3))
