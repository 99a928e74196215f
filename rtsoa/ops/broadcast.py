"""Numpy broadcasting over operand-table rows: result shapes and element index maps.

`broadcast_rows(table, rows, out)` writes into row `out` the broadcast shape of the operand rows
listed in `rows` (numpy's rules: align on the right, a dimension of 1 stretches), or returns
STATUS_OP_BAD_SHAPE. `index_map(table, row, out)` gives, for every element of the output row
`out`, the flat index of the element of row `row` it reads (an int64 array), so an op's loop is
`out[i] = f(x[xi[i]], y[yi[i]])` whatever the shapes; `same_shape(table, row, out)` tells when
the map is the identity (the common case, which ops run without a map), and `period(table, row,
out)` when it is `i % p` (a bias or a scalar: loops without a map, nor its allocation).

Compile cost shapes this module: the maps are computed by one function typed once, and the ops'
loops are small functions specialised per dtype only (no functions passed as arguments, which
Numba compiles once per function and refuses to cache).
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_with_nrt
from rtsoa.ops.abi import COL_DIMS, COL_RANK, MAX_RANK, STATUS_OP_BAD_SHAPE, STATUS_OP_RANK


@jit_inline_ir
def _broadcast(table, rows, first, count, out):
    """Row `out` gets the broadcast of rows rows[0 .. count - 1], or of the rows first ..
    first + count - 1 when `rows` is None (Numba compiles each case apart)."""
    result_rank = np.int64(0)
    for i in range(count):
        row = first + i if rows is None else rows[i]
        result_rank = max(result_rank, table[row, COL_RANK])
    if result_rank > MAX_RANK:
        return np.int32(STATUS_OP_RANK)
    for axis in range(result_rank):
        size = np.int64(1)
        for i in range(count):
            row = first + i if rows is None else rows[i]
            own = axis - (result_rank - table[row, COL_RANK])
            if own < 0:
                continue
            d = table[row, COL_DIMS + own]
            if d == 1:
                continue
            if size == 1:
                size = d
            elif d != size:
                return np.int32(STATUS_OP_BAD_SHAPE)
        table[out, COL_DIMS + axis] = size
    table[out, COL_RANK] = result_rank
    return np.int32(0)


@jit_with_nrt
def broadcast_rows(table, rows, out):
    """Row `out` gets the broadcast rank and dims of `rows` (dtype untouched); a status."""
    return _broadcast(table, rows, np.int64(0), rows.shape[0], out)


@jit_with_nrt
def broadcast_range(table, first, count, out):
    """`broadcast_rows` of the rows first .. first + count - 1, without an array of them (the
    per-call allocation is most of a small op's shape inference)."""
    return _broadcast(table, None, first, count, out)


@jit_with_nrt
def period(table, row, out):
    """p when element i of output `out` reads element i % p of row `row` (row's dims, less
    its leading 1s, are out's last dims: the same shape, a bias or a scalar), else -1."""
    own = table[row, COL_RANK]
    rank = table[out, COL_RANK]
    lead = np.int64(0)
    while lead < own and table[row, COL_DIMS + lead] == 1:
        lead += 1
    if own - lead > rank:
        return np.int64(-1)
    p = np.int64(1)
    for axis in range(lead, own):
        d = table[row, COL_DIMS + axis]
        if d != table[out, COL_DIMS + rank - own + axis]:
            return np.int64(-1)
        p *= d
    return p


@jit_with_nrt
def same_shape(table, row, out):
    """Does row `row` have exactly row `out`'s dims (so it needs no index map)?"""
    rank = table[out, COL_RANK]
    if table[row, COL_RANK] != rank:
        return False
    for axis in range(rank):
        if table[row, COL_DIMS + axis] != table[out, COL_DIMS + axis]:
            return False
    return True


@jit_with_nrt
def index_map(table, row, out):
    """For each element of row `out` (C order), the flat index into row `row`, which
    broadcasts to `out`'s shape (checked by the op's shape inference)."""
    rank = table[out, COL_RANK]
    total = np.int64(1)
    for axis in range(rank):
        total *= table[out, COL_DIMS + axis]
    result = np.empty(total, dtype=np.int64)
    if total == 0:
        return result
    if rank == 0:
        result[0] = 0
        return result
    dims = np.empty(rank, dtype=np.int64)
    strides = np.zeros(rank, dtype=np.int64)
    own_rank = table[row, COL_RANK]
    stride = np.int64(1)
    for axis in range(rank - 1, -1, -1):
        dims[axis] = table[out, COL_DIMS + axis]
        own = axis - (rank - own_rank)
        if own >= 0:
            size = table[row, COL_DIMS + own]
            if size != 1:
                strides[axis] = stride
            stride *= size
    counters = np.zeros(rank, dtype=np.int64)
    inner = dims[rank - 1]
    inner_stride = strides[rank - 1]
    base = np.int64(0)
    o = np.int64(0)
    for _ in range(total // inner):
        for i in range(inner):
            result[o + i] = base + i * inner_stride
        o += inner
        for axis in range(rank - 2, -1, -1):
            counters[axis] += 1
            base += strides[axis]
            if counters[axis] < dims[axis]:
                break
            base -= strides[axis] * dims[axis]
            counters[axis] = 0
    return result
