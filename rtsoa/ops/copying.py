"""The byte-generic copy engine every data-movement op goes through.

Every data-movement op moves bytes, so one compile serves every dtype. The copies go through
one function, `gather_axes`: for each output element (a multi-index over `dims`) the source
element is the sum of one per-axis offset table entry per axis (`tables[starts[k] + i_k]`) and
the destination is `dst_base + sum(i_k * dst_strides[k])`. Transpose, Slice (negative steps
too), Expand, Tile, Pad (reflect / edge / wrap), Gather and Split only differ in the
tables they build (`linear_tables`, `broadcast_tables`). `gather_axes` checks the extreme
offsets against both rows' byte ranges before it copies, so a table a hostile graph made
inconsistent gives STATUS_OP_BAD_SHAPE, never a stray write. Where the innermost axis is
contiguous on both sides, rows are copied as runs; otherwise element by element, as one 2-,
4- or 8-byte word per element where the element size and the rows' alignment allow (bytes
one at a time for the rest).
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.abi.views import move_elements
from rtsoa.ops.abi import (
    BOOL,
    ITEMSIZE,
    MAX_RANK,
    OK,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_RANK,
    dim,
    dtype,
    numel,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.broadcast import index_map, same_shape

SCRATCH = 63  # a spare table row (n_in + n_out < 63 for every op here)


@jit_with_nrt
def holds(table, row):
    """Does row `row` have data holding its numel elements of its dtype?"""
    kind = dtype(table, row)
    if table[row, 0] < 0 or kind <= 0 or kind >= ITEMSIZE.shape[0]:
        return False
    return table[row, 1] >= numel(table, row) * ITEMSIZE[kind]


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
    Refuses (STATUS_OP_BAD_SHAPE) anything that would leave `src` or `dst`.

    Elements of 2, 4 or 8 bytes are copied as one word each when both rows start on a
    multiple of the size (`copy_runs` over word views); other sizes and unaligned rows byte
    by byte. Offsets are checked in elements before either path runs."""
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
    # Word views hold whole elements only: the checks above bound every element inside them.
    if size == 8 and _aligned(src, dst, 8):
        source = src[: src.shape[0] // 8 * 8].view(np.uint64)
        target = dst[: dst.shape[0] // 8 * 8].view(np.uint64)
        copy_runs(source, target, 1, dims, tables, starts, dst_strides, dst_base, total)
    elif size == 4 and _aligned(src, dst, 4):
        source = src[: src.shape[0] // 4 * 4].view(np.uint32)
        target = dst[: dst.shape[0] // 4 * 4].view(np.uint32)
        copy_runs(source, target, 1, dims, tables, starts, dst_strides, dst_base, total)
    elif size == 2 and _aligned(src, dst, 2):
        source = src[: src.shape[0] // 2 * 2].view(np.uint16)
        target = dst[: dst.shape[0] // 2 * 2].view(np.uint16)
        copy_runs(source, target, 1, dims, tables, starts, dst_strides, dst_base, total)
    else:
        copy_runs(src, dst, size, dims, tables, starts, dst_strides, dst_base, total)
    return OK


@jit_with_nrt
def _aligned(src, dst, size):
    """Do both arrays start on a multiple of `size` bytes?"""
    return src.ctypes.data % size == 0 and dst.ctypes.data % size == 0


@jit_with_nrt
def copy_runs(src, dst, width, dims, tables, starts, dst_strides, dst_base, total):
    """The loop of `gather_axes` over arrays of units (bytes, or 2-, 4-, 8-byte words): element
    e is units [e * width, (e + 1) * width). The caller checked every offset against both
    arrays (in elements) and that `total` (the product of `dims`) is above 0."""
    r = dims.shape[0]
    if r == 0:
        d = dst_base * width
        move_elements(dst, d, src, 0, width)
        return
    last = r - 1
    n = dims[last]
    t0 = starts[last]
    contiguous = dst_strides[last] == 1
    for i in range(1, n):
        if tables[t0 + i] != tables[t0] + i:
            contiguous = False
            break
    counters = np.zeros(r, dtype=np.int64)
    run = n * width
    step = dst_strides[last]
    for _ in range(total // n):
        s_base = np.int64(0)
        d_base = dst_base
        for k in range(last):
            s_base += tables[starts[k] + counters[k]]
            d_base += counters[k] * dst_strides[k]
        if contiguous:
            s = (s_base + tables[t0]) * width
            d = d_base * width
            move_elements(dst, d, src, s, run)
        elif width == 1:
            for i in range(n):
                dst[d_base + i * step] = src[s_base + tables[t0 + i]]
        else:
            for i in range(n):
                s = (s_base + tables[t0 + i]) * width
                d = (d_base + i * step) * width
                for b in range(width):
                    dst[d + b] = src[s + b]
        for k in range(last - 1, -1, -1):
            counters[k] += 1
            if counters[k] < dims[k]:
                break
            counters[k] = 0


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
    move_elements(dst, 0, src, 0, expected)
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
def full_map(table, row, out):
    """The index map of row `row` into `out` (identity included)."""
    if same_shape(table, row, out):
        return np.arange(numel(table, out)).astype(np.int64)
    return index_map(table, row, out)


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
