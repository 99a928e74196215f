"""Data movement ops: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Split, Slice,
Gather, Pad, Tile, Expand, Where, Dropout (inference).

Every op here moves bytes, so one compile serves every dtype. The copies go through one
function, `gather_axes`: for each output element (a multi-index over `dims`) the source element
is the sum of one per-axis offset table entry per axis (`tables[starts[k] + i_k]`) and the
destination is `dst_base + sum(i_k * dst_strides[k])`. Transpose, Slice (negative steps too),
Expand, Tile, Pad (reflect / edge / wrap), Gather, Concat and Split only differ in the tables
they build. `gather_axes` checks the extreme offsets against both rows' byte ranges before it
copies, so a table a hostile graph made inconsistent gives STATUS_OP_BAD_SHAPE, never a stray
write. Where the innermost axis is contiguous on both sides, rows are copied as byte runs.

List attributes that ONNX moved to inputs across opsets (Squeeze / Unsqueeze axes, Split's
split, Slice's starts / ends / axes / steps, Pad's pads) are accepted in both forms: the
attribute form is encoded as `[count, values...]` (count -1: not given), the input form is read
from the input's data (a `data_inputs` position, so at lowering time shape inference returns
STATUS_OP_NEEDS_DATA when the input is not a constant).
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    BOOL,
    I32,
    I64,
    ITEMSIZE,
    MAX_RANK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_MISSING_INPUT,
    STATUS_OP_NEEDS_DATA,
    STATUS_OP_RANK,
    copy_shape,
    dim,
    dtype,
    has_data,
    int_data,
    numel,
    present,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.broadcast import broadcast_rows, index_map, same_shape
from rtsoa.ops.registry import register_op

SCRATCH = 63  # a spare table row (n_in + n_out < 63 for every op here)
OK = np.int32(0)

# -- lists from attribute slots or from an input's data ----------------------------------------


def encode_list(values):
    """Slots of an optional list attribute: [-1] if absent, else [count, values...]."""
    if values is None:
        return [-1]
    values = [int(v) for v in np.asarray(values).reshape(-1)]
    return [len(values), *values]


@jit_with_nrt
def attr_list(attrs, slot):
    """(status, values, given, next slot) of the list encoded at `slot`."""
    empty = np.zeros(0, dtype=np.int64)
    if slot < 0 or slot >= attrs.shape[0]:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), empty, False, slot
    count = attrs[slot]
    if count < 0:
        return OK, empty, False, slot + 1
    if slot + 1 + count > attrs.shape[0]:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), empty, False, slot
    return OK, attrs[slot + 1 : slot + 1 + count].copy(), True, slot + 1 + count


@jit_with_nrt
def input_list(arena, table, n_in, row):
    """(status, values, given) of an int32 / int64 input of rank 0 or 1 (absent: not given)."""
    empty = np.zeros(0, dtype=np.int64)
    if row >= n_in or not present(table, row):
        return OK, empty, False
    if not has_data(table, row):
        return np.int32(STATUS_OP_NEEDS_DATA), empty, False
    kind = dtype(table, row)
    if kind != I64 and kind != I32:
        return np.int32(STATUS_OP_BAD_DTYPE), empty, False
    if rank(table, row) > 1:
        return np.int32(STATUS_OP_BAD_SHAPE), empty, False
    count = numel(table, row)
    available = view(arena, table, row, np.uint8).shape[0] // ITEMSIZE[kind]
    if count > available:
        return np.int32(STATUS_OP_BAD_SHAPE), empty, False
    values = np.empty(count, dtype=np.int64)
    for k in range(count):
        values[k] = int_data(arena, table, row, k)
    return OK, values, True


@jit_with_nrt
def list_of(arena, table, n_in, row, attrs, slot):
    """(status, values, given, next slot): input `row`'s data if present, else the attribute
    list at `slot`."""
    status, values, given, following = attr_list(attrs, slot)
    if status != 0:
        return status, values, given, following
    if row < n_in and present(table, row):
        status, values, given = input_list(arena, table, n_in, row)
    return status, values, given, following


@jit_with_nrt
def normalize_axes(axes, rank_):
    """(status, axes in 0 .. rank - 1); a repeated or out-of-range axis is a bad attribute."""
    result = np.empty(axes.shape[0], dtype=np.int64)
    seen = np.zeros(max(rank_, 0), dtype=np.bool_)
    for k in range(axes.shape[0]):
        axis = axes[k] + rank_ if axes[k] < 0 else axes[k]
        if axis < 0 or axis >= rank_ or seen[axis]:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), result
        seen[axis] = True
        result[k] = axis
    return OK, result


@jit_with_nrt
def attr_axis(attrs, slot, rank_, inclusive):
    """Attribute `slot` as an axis in 0 .. rank - 1 (0 .. rank if `inclusive`), or -1 if it is
    out of range or the slot is missing."""
    if slot >= attrs.shape[0]:
        return np.int64(-1)
    axis = attrs[slot] + rank_ if attrs[slot] < 0 else attrs[slot]
    if axis < 0 or axis > rank_ or (axis == rank_ and not inclusive):
        return np.int64(-1)
    return np.int64(axis)


@jit_with_nrt
def holds(table, row):
    """Does row `row` have data holding its numel elements of its dtype?"""
    kind = dtype(table, row)
    if table[row, 0] < 0 or kind <= 0 or kind >= ITEMSIZE.shape[0]:
        return False
    return table[row, 1] >= numel(table, row) * ITEMSIZE[kind]


# -- the one copy ---------------------------------------------------------------------------


@jit_with_nrt
def row_strides(table, row):
    """C-order element strides of row `row`."""
    r = rank(table, row)
    strides = np.empty(max(r, 0), dtype=np.int64)
    step = np.int64(1)
    for axis in range(r - 1, -1, -1):
        strides[axis] = step
        step *= dim(table, row, axis)
    return strides


@jit_with_nrt
def gather_axes(src, dst, size, dims, tables, starts, dst_strides, dst_base):
    """Copy `size`-byte elements: for each multi-index i over `dims`, source element
    sum_k tables[starts[k] + i_k] to destination element dst_base + sum_k i_k * dst_strides[k].
    Refuses (STATUS_OP_BAD_SHAPE) anything that would leave `src` or `dst`."""
    r = dims.shape[0]
    total = np.int64(1)
    for k in range(r):
        if dims[k] < 0:
            return np.int32(STATUS_OP_BAD_SHAPE)
        total *= dims[k]
    if total == 0:
        return OK
    if size <= 0 or dst_base < 0 or starts.shape[0] < r or dst_strides.shape[0] < r:
        return np.int32(STATUS_OP_BAD_SHAPE)
    low = np.int64(0)
    high = np.int64(0)
    dst_high = dst_base
    for k in range(r):
        if starts[k] < 0 or starts[k] + dims[k] > tables.shape[0] or dst_strides[k] < 0:
            return np.int32(STATUS_OP_BAD_SHAPE)
        smallest = tables[starts[k]]
        largest = smallest
        for i in range(dims[k]):
            value = tables[starts[k] + i]
            smallest = min(smallest, value)
            largest = max(largest, value)
        low += smallest
        high += largest
        dst_high += (dims[k] - 1) * dst_strides[k]
    if low < 0 or (high + 1) * size > src.shape[0] or (dst_high + 1) * size > dst.shape[0]:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if r == 0:
        d = dst_base * size
        dst[d : d + size] = src[0:size]
        return OK
    last = r - 1
    n = dims[last]
    t0 = starts[last]
    contiguous = dst_strides[last] == 1
    for i in range(1, n):
        if tables[t0 + i] != tables[t0] + i:
            contiguous = False
            break
    counters = np.zeros(r, dtype=np.int64)
    run = n * size
    for _ in range(total // n):
        s_base = np.int64(0)
        d_base = dst_base
        for k in range(last):
            s_base += tables[starts[k] + counters[k]]
            d_base += counters[k] * dst_strides[k]
        if contiguous:
            s = (s_base + tables[t0]) * size
            d = d_base * size
            dst[d : d + run] = src[s : s + run]
        else:
            step = dst_strides[last]
            for i in range(n):
                s = (s_base + tables[t0 + i]) * size
                d = (d_base + i * step) * size
                for b in range(size):
                    dst[d + b] = src[s + b]
        for k in range(last - 1, -1, -1):
            counters[k] += 1
            if counters[k] < dims[k]:
                break
            counters[k] = 0
    return OK


@jit_with_nrt
def linear_tables(dims, offsets, steps):
    """(tables, starts) with tables[starts[k] + i] = offsets[k] + i * steps[k]."""
    r = dims.shape[0]
    starts = np.empty(r, dtype=np.int64)
    total = np.int64(0)
    for k in range(r):
        starts[k] = total
        total += max(dims[k], 0)
    tables = np.empty(total, dtype=np.int64)
    for k in range(r):
        for i in range(dims[k]):
            tables[starts[k] + i] = offsets[k] + i * steps[k]
    return tables, starts


@jit_with_nrt
def item_size(table, row):
    """Bytes per element of row `row`'s dtype (0 for an unknown dtype)."""
    kind = dtype(table, row)
    if kind < 0 or kind >= ITEMSIZE.shape[0]:
        return np.int64(0)
    return ITEMSIZE[kind]


@jit_with_nrt
def row_dims(table, row):
    """Row `row`'s dims as an array."""
    r = rank(table, row)
    dims = np.empty(max(r, 0), dtype=np.int64)
    for axis in range(r):
        dims[axis] = dim(table, row, axis)
    return dims


@jit_with_nrt
def copy_into(arena, table, src_row, dst_row, dims, tables, starts, dst_strides, dst_base):
    """gather_axes from row `src_row` into row `dst_row` (same dtype, checked here)."""
    size = item_size(table, src_row)
    if size == 0 or dtype(table, dst_row) != dtype(table, src_row):
        return np.int32(STATUS_OP_BAD_DTYPE)
    src = view(arena, table, src_row, np.uint8)
    dst = view(arena, table, dst_row, np.uint8)
    return gather_axes(src, dst, size, dims, tables, starts, dst_strides, dst_base)


@jit_with_nrt
def byte_copy(arena, table, src_row, dst_row):
    """Row `dst_row` gets `src_row`'s bytes (the same byte size, checked)."""
    src = view(arena, table, src_row, np.uint8)
    dst = view(arena, table, dst_row, np.uint8)
    expected = numel(table, dst_row) * item_size(table, dst_row)
    if src.shape[0] < expected or dst.shape[0] < expected:
        return np.int32(STATUS_OP_BAD_SHAPE)
    dst[:expected] = src[:expected]
    return OK


@jit_with_nrt
def set_dims(table, row, kind, dims):
    """Output row `row` gets dtype `kind` and `dims`."""
    if dims.shape[0] > MAX_RANK:
        return np.int32(STATUS_OP_RANK)
    set_output(table, row, kind, dims.shape[0])
    for axis in range(dims.shape[0]):
        set_dim(table, row, axis, dims[axis])
    return OK


@jit_with_nrt
def reshape_compute(arena, table, n_in, n_out, attrs, fattrs):
    """Reshape, Flatten, Squeeze, Unsqueeze: the data keeps its order; a byte copy."""
    if numel(table, 0) != numel(table, n_in) or dtype(table, 0) != dtype(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    return byte_copy(arena, table, 0, n_in)


# -- Reshape / Flatten / Squeeze / Unsqueeze ------------------------------------------------------


@jit_with_nrt
def reshape_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Reshape: 0 copies the input dim (unless allowzero), one -1 is inferred."""
    if attrs.shape[0] < 1:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    status, shape, given = input_list(arena, table, n_in, 1)
    if status != 0:
        return status
    if not given:
        return np.int32(STATUS_OP_MISSING_INPUT)
    allowzero = attrs[0] != 0
    r = rank(table, 0)
    count = numel(table, 0)
    out = shape.copy()
    infer_at = -1
    known = np.int64(1)
    has_zero = False
    for k in range(shape.shape[0]):
        value = shape[k]
        if value == -1:
            if infer_at >= 0:
                return np.int32(STATUS_OP_BAD_ATTRIBUTE)
            infer_at = k
            continue
        if value < -1:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE)
        if value == 0:
            has_zero = True
            if not allowzero:
                if k >= r:
                    return np.int32(STATUS_OP_BAD_SHAPE)
                value = dim(table, 0, k)
        out[k] = value
        known *= value
    if infer_at >= 0:
        if allowzero and has_zero:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE)
        if known == 0 or count % known != 0:
            return np.int32(STATUS_OP_BAD_SHAPE)
        out[infer_at] = count // known
    elif known != count:
        return np.int32(STATUS_OP_BAD_SHAPE)
    return set_dims(table, n_in, dtype(table, 0), out)


@jit_with_nrt
def flatten_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Flatten at `axis` (-rank .. rank) into a 2-D tensor."""
    r = rank(table, 0)
    axis = attr_axis(attrs, 0, r, True)
    if axis < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    outer = np.int64(1)
    inner = np.int64(1)
    for k in range(r):
        if k < axis:
            outer *= dim(table, 0, k)
        else:
            inner *= dim(table, 0, k)
    set_output(table, n_in, dtype(table, 0), 2)
    set_dim(table, n_in, 0, outer)
    set_dim(table, n_in, 1, inner)
    return OK


@jit_with_nrt
def squeeze_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Squeeze `axes` (input 1 or attribute; none or empty: every dim of size 1)."""
    status, axes, given, _ = list_of(arena, table, n_in, 1, attrs, 0)
    if status != 0:
        return status
    r = rank(table, 0)
    status, axes = normalize_axes(axes, r)
    if status != 0:
        return status
    drop = np.zeros(max(r, 0), dtype=np.bool_)
    if given and axes.shape[0] > 0:  # an empty axes input squeezes every 1 (onnxruntime)
        for axis in axes:
            if dim(table, 0, axis) != 1:
                return np.int32(STATUS_OP_BAD_SHAPE)
            drop[axis] = True
    else:
        for axis in range(r):
            drop[axis] = dim(table, 0, axis) == 1
    out = np.empty(r - drop.sum(), dtype=np.int64)
    j = 0
    for axis in range(r):
        if not drop[axis]:
            out[j] = dim(table, 0, axis)
            j += 1
    return set_dims(table, n_in, dtype(table, 0), out)


@jit_with_nrt
def unsqueeze_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Unsqueeze: insert size-1 dims at `axes` (of the output's rank)."""
    status, axes, given, _ = list_of(arena, table, n_in, 1, attrs, 0)
    if status != 0:
        return status
    if not given:
        return np.int32(STATUS_OP_MISSING_INPUT)
    r = rank(table, 0)
    out_rank = r + axes.shape[0]
    if out_rank > MAX_RANK:
        return np.int32(STATUS_OP_RANK)
    status, axes = normalize_axes(axes, out_rank)
    if status != 0:
        return status
    inserted = np.zeros(out_rank, dtype=np.bool_)
    for axis in axes:
        inserted[axis] = True
    out = np.empty(out_rank, dtype=np.int64)
    j = 0
    for axis in range(out_rank):
        if inserted[axis]:
            out[axis] = 1
        else:
            out[axis] = dim(table, 0, j)
            j += 1
    return set_dims(table, n_in, dtype(table, 0), out)


# -- Transpose ------------------------------------------------------------------------------------


@jit_with_nrt
def transpose_perm(table, attrs):
    """(status, perm): the attribute (count 0: reversed axes), validated."""
    r = rank(table, 0)
    status, perm, given, _ = attr_list(attrs, 0)
    if status != 0:
        return status, perm
    if not given or perm.shape[0] == 0:
        perm = np.arange(r - 1, -1, -1).astype(np.int64)
    if perm.shape[0] != r:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), perm
    return normalize_axes(perm, r)


@jit_with_nrt
def transpose_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, perm = transpose_perm(table, attrs)
    if status != 0:
        return status
    set_output(table, n_in, dtype(table, 0), perm.shape[0])
    for k in range(perm.shape[0]):
        set_dim(table, n_in, k, dim(table, 0, perm[k]))
    return OK


@jit_with_nrt
def transpose_compute(arena, table, n_in, n_out, attrs, fattrs):
    status, perm = transpose_perm(table, attrs)
    if status != 0:
        return status
    strides = row_strides(table, 0)
    dims = row_dims(table, n_in)
    steps = np.empty(perm.shape[0], dtype=np.int64)
    for k in range(perm.shape[0]):
        steps[k] = strides[perm[k]]
    tables, starts = linear_tables(dims, np.zeros(dims.shape[0], dtype=np.int64), steps)
    return copy_into(arena, table, 0, n_in, dims, tables, starts, row_strides(table, n_in), 0)


# -- Concat / Split -------------------------------------------------------------------------------


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
    status = concat_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    r = rank(table, 0)
    axis = attr_axis(attrs, 0, r, False)
    out_strides = row_strides(table, n_in)
    offset = np.int64(0)
    for row in range(n_in):
        dims = row_dims(table, row)
        tables, starts = linear_tables(dims, np.zeros(r, dtype=np.int64), row_strides(table, row))
        status = copy_into(
            arena, table, row, n_in, dims, tables, starts, out_strides, offset * out_strides[axis]
        )
        if status != 0:
            return status
        offset += dims[axis]
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


# -- Slice ----------------------------------------------------------------------------------------


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
            start = min(max(start, -1), d - 1)
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


# -- Gather ---------------------------------------------------------------------------------------


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


# -- Expand / Tile --------------------------------------------------------------------------------


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
    table[n_in, 2] = dtype(table, 0)
    return OK


@jit_with_nrt
def broadcast_tables(table, row, out):
    """Per-axis tables of row `row` read at the shape of row `out` (which it broadcasts to)."""
    dims = row_dims(table, out)
    r = dims.shape[0]
    own_rank = rank(table, row)
    strides = row_strides(table, row)
    steps = np.zeros(r, dtype=np.int64)
    for k in range(r):
        own = k - (r - own_rank)
        if own >= 0 and dim(table, row, own) != 1:
            steps[k] = strides[own]
    tables, starts = linear_tables(dims, np.zeros(r, dtype=np.int64), steps)
    return dims, tables, starts


@jit_with_nrt
def expand_compute(arena, table, n_in, n_out, attrs, fattrs):
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
    return set_dims(table, n_in, dtype(table, 0), row_dims(table, 0) * repeats)


@jit_with_nrt
def tile_compute(arena, table, n_in, n_out, attrs, fattrs):
    status, repeats = tile_repeats(arena, table, n_in)
    if status != 0:
        return status
    source = row_dims(table, 0)
    dims = source * repeats
    if rank(table, n_in) != dims.shape[0] or numel(table, n_in) != np.prod(dims):
        return np.int32(STATUS_OP_BAD_SHAPE)
    strides = row_strides(table, 0)
    tables, starts = linear_tables(dims, np.zeros(dims.shape[0], dtype=np.int64), strides)
    for k in range(dims.shape[0]):
        for i in range(dims[k]):
            tables[starts[k] + i] = (i % source[k]) * strides[k]
    return copy_into(arena, table, 0, n_in, dims, tables, starts, row_strides(table, n_in), 0)


# -- Pad --------------------------------------------------------------------------------------

PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP = 0, 1, 2, 3
PAD_MODES = {"constant": PAD_CONSTANT, "reflect": PAD_REFLECT, "edge": PAD_EDGE, "wrap": PAD_WRAP}


@jit_with_nrt
def pad_amounts(arena, table, n_in, attrs):
    """(status, begins, ends) per axis: pads from input 1 or the attribute, over `axes`
    (input 3, opset 18) or every axis."""
    r = rank(table, 0)
    begins = np.zeros(r, dtype=np.int64)
    ends = np.zeros(r, dtype=np.int64)
    status, pads, given, _ = list_of(arena, table, n_in, 1, attrs, 3)
    if status != 0:
        return status, begins, ends
    if not given:
        return np.int32(STATUS_OP_MISSING_INPUT), begins, ends
    status, axes, given_axes = input_list(arena, table, n_in, 3)
    if status != 0:
        return status, begins, ends
    if not given_axes:
        axes = np.arange(r).astype(np.int64)
    status, axes = normalize_axes(axes, r)
    if status != 0:
        return status, begins, ends
    n = axes.shape[0]
    if pads.shape[0] != 2 * n:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), begins, ends
    for k in range(n):
        begins[axes[k]] = pads[k]
        ends[axes[k]] = pads[n + k]
    for k in range(r):
        if dim(table, 0, k) + begins[k] + ends[k] < 0:
            return np.int32(STATUS_OP_BAD_SHAPE), begins, ends
    return OK, begins, ends


@jit_with_nrt
def pad_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 3:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    status, begins, ends = pad_amounts(arena, table, n_in, attrs)
    if status != 0:
        return status
    if attrs[0] < PAD_CONSTANT or attrs[0] > PAD_WRAP:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    dims = row_dims(table, 0)
    out = dims + begins + ends
    if attrs[0] != PAD_CONSTANT:
        for k in range(dims.shape[0]):
            kept = dims[k] + min(begins[k], 0) + min(ends[k], 0)
            if kept <= 0 and out[k] > 0:
                return np.int32(STATUS_OP_BAD_SHAPE)  # nothing to reflect / repeat
    return set_dims(table, n_in, dtype(table, 0), out)


@jit_with_nrt
def pad_fill(arena, table, n_in, attrs, fattrs):
    """Fill output `n_in` with the constant: input 2's first element if present (same
    dtype), else the opset-2 `value` attribute (slot 2; flag slot 1), else zeros."""
    out = view(arena, table, n_in, np.uint8)
    size = item_size(table, n_in)
    pattern = np.zeros(size, dtype=np.uint8)
    if n_in > 2 and present(table, 2):
        if dtype(table, 2) != dtype(table, 0):
            return np.int32(STATUS_OP_BAD_DTYPE)
        value = view(arena, table, 2, np.uint8)
        if numel(table, 2) >= 1 and value.shape[0] >= size:
            pattern[:] = value[:size]
    elif attrs[1] != 0:
        pattern = scalar_bytes(dtype(table, 0), fattrs[2])
        if pattern.shape[0] != size:
            return np.int32(STATUS_OP_BAD_DTYPE)
    fill_pattern(out, pattern, numel(table, n_in))
    return OK


@jit_with_nrt
def fill_pattern(out, pattern, count):
    """out = `count` repetitions of `pattern` (bounded by out's bytes)."""
    size = pattern.shape[0]
    if size == 0:
        return
    count = min(count, out.shape[0] // size)
    zero = True
    for b in range(size):
        if pattern[b] != 0:
            zero = False
    if zero:
        out[: count * size] = 0
        return
    for i in range(count):
        for b in range(size):
            out[i * size + b] = pattern[b]


@jit_with_nrt
def scalar_bytes(kind, value):
    """The bytes of float64 `value` converted to dtype `kind` (empty for an unknown kind)."""
    if kind == 1:
        return _one(np.float32, value)
    if kind == 2:
        return _one(np.float64, value)
    if kind == 4:
        return _one(np.int8, value)
    if kind == 5:
        return _one(np.int16, value)
    if kind == 6:
        return _one(np.int32, value)
    if kind == 7:
        return _one(np.int64, value)
    if kind == 8:
        return _one(np.uint8, value)
    if kind == BOOL:
        return _one(np.uint8, 1.0 if value != 0 else 0.0)
    return np.zeros(0, dtype=np.uint8)


@jit_with_nrt
def _one(kind, value):
    """The bytes of a one-element array of `kind` holding `value`."""
    one = np.empty(1, dtype=kind)
    one[0] = value
    return one.view(np.uint8)


@jit_with_nrt
def pad_compute(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 3:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    status, begins, ends = pad_amounts(arena, table, n_in, attrs)
    if status != 0:
        return status
    dims = row_dims(table, 0)
    out_dims = dims + begins + ends
    r = dims.shape[0]
    if rank(table, n_in) != r or numel(table, n_in) != np.prod(out_dims):
        return np.int32(STATUS_OP_BAD_SHAPE)
    strides = row_strides(table, 0)
    out_strides = row_strides(table, n_in)
    mode = attrs[0]
    if mode == PAD_CONSTANT:
        status = pad_fill(arena, table, n_in, attrs, fattrs)
        if status != 0:
            return status
        first = np.zeros(r, dtype=np.int64)
        counts = np.zeros(r, dtype=np.int64)
        base = np.int64(0)
        for k in range(r):
            low = max(begins[k], 0)
            high = min(out_dims[k], dims[k] + begins[k])
            counts[k] = max(high - low, 0)
            first[k] = (low - begins[k]) * strides[k]
            base += low * out_strides[k]
        tables, starts = linear_tables(counts, first, strides)
        return copy_into(arena, table, 0, n_in, counts, tables, starts, out_strides, base)
    tables, starts = linear_tables(out_dims, np.zeros(r, dtype=np.int64), strides)
    for k in range(r):  # negative pads crop first, the rest pads the cropped tensor
        low = max(-begins[k], 0)
        d = dims[k] - low - max(-ends[k], 0)
        if d <= 0 and out_dims[k] > 0:
            return np.int32(STATUS_OP_BAD_SHAPE)
        for i in range(out_dims[k]):
            j = i - max(begins[k], 0)
            if mode == PAD_EDGE:
                j = min(max(j, 0), d - 1)
            elif mode == PAD_WRAP:
                j = j % d
            else:
                period = 2 * (d - 1)
                if period == 0:
                    j = 0
                else:
                    j = j % period
                    if j >= d:
                        j = period - j
            tables[starts[k] + i] = (low + j) * strides[k]
    return copy_into(arena, table, 0, n_in, out_dims, tables, starts, out_strides, 0)


# -- Where / Dropout ----------------------------------------------------------------------------


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
def full_map(table, row, out):
    """The index map of row `row` into `out` (identity included)."""
    if same_shape(table, row, out):
        return np.arange(numel(table, out)).astype(np.int64)
    return index_map(table, row, out)


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


@jit_with_nrt
def dropout_infer(arena, table, n_in, n_out, attrs, fattrs):
    """Dropout in inference: output 0 is the input, the optional mask all True."""
    copy_shape(table, 0, n_in)
    if n_out > 1:
        copy_shape(table, 0, n_in + 1)
        table[n_in + 1, 2] = BOOL
    return OK


@jit_with_nrt
def dropout_compute(arena, table, n_in, n_out, attrs, fattrs):
    if n_in > 2 and present(table, 2) and has_data(table, 2):
        if dtype(table, 2) != BOOL or numel(table, 2) < 1 or not holds(table, 2):
            return np.int32(STATUS_OP_BAD_DTYPE)
        if view(arena, table, 2, np.uint8)[0] != 0:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE)  # training mode is not supported
    status = reshape_compute(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0 or n_out < 2:
        return status
    mask = view(arena, table, n_in + 1, np.uint8)
    mask[: min(mask.shape[0], numel(table, n_in + 1))] = 1
    return OK


# -- encoders and registration ------------------------------------------------------------------


def encode_axis(default):
    def encode(attributes, inputs):
        return [int(attributes.get("axis", default))]

    return encode


def encode_axes(attributes, inputs):
    return encode_list(attributes.get("axes"))


def encode_transpose(attributes, inputs):
    return encode_list(attributes.get("perm"))


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


def encode_pad(attributes, inputs):
    mode = attributes.get("mode", "constant")
    if isinstance(mode, bytes):
        mode = mode.decode()
    code = PAD_MODES.get(mode, -1)  # unknown: infer refuses it as a bad attribute
    value = attributes.get("value")
    return [
        code,
        0 if value is None else 1,
        float(0.0 if value is None else value),
        *encode_list(attributes.get("pads")),
    ]


register_op(
    "Reshape",
    reshape_infer,
    reshape_compute,
    encode=lambda attributes, inputs: [int(attributes.get("allowzero", 0))],
    inputs=(2, 2),
    data_inputs=(1,),
)
register_op("Flatten", flatten_infer, reshape_compute, encode=encode_axis(1))
register_op(
    "Squeeze", squeeze_infer, reshape_compute, encode=encode_axes, inputs=(1, 2), data_inputs=(1,)
)
register_op(
    "Unsqueeze",
    unsqueeze_infer,
    reshape_compute,
    encode=encode_axes,
    inputs=(1, 2),
    data_inputs=(1,),
)
register_op("Transpose", transpose_infer, transpose_compute, encode=encode_transpose)
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
register_op("Pad", pad_infer, pad_compute, encode=encode_pad, inputs=(1, 4), data_inputs=(1, 3))
register_op("Where", where_infer, where_compute, inputs=(3, 3))
register_op("Dropout", dropout_infer, dropout_compute, inputs=(1, 3), outputs=(1, 2))
