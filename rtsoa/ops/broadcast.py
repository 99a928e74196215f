"""Numpy broadcasting over operand-table rows: result shapes and the strided loop.

`broadcast_rows(table, rows, out)` writes into row `out` the broadcast shape of the operand rows
listed in `rows` (numpy's rules: align on the right, a dimension of 1 stretches), or returns
STATUS_OP_BAD_SHAPE. `apply2(fn, x, xrow, y, yrow, out, orow, table)` computes
`out = fn(x, y)` elementwise with broadcasting, `x` and `y` flat views of rows `xrow` / `yrow`
and `out` the flat view of row `orow` (whose shape is the broadcast shape). `fn` is an njit
function; each (fn, dtypes) pair compiles once into the op library.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_with_nrt
from rtsoa.ops.abi import (
    COL_DIMS,
    COL_RANK,
    MAX_RANK,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_RANK,
)


@jit_with_nrt
def broadcast_rows(table, rows, out):
    """Row `out` gets the broadcast rank and dims of `rows` (dtype untouched); a status."""
    result_rank = np.int64(0)
    for row in rows:
        result_rank = max(result_rank, table[row, COL_RANK])
    if result_rank > MAX_RANK:
        return np.int32(STATUS_OP_RANK)
    for axis in range(result_rank):
        size = np.int64(1)
        for row in rows:
            rank = table[row, COL_RANK]
            own = axis - (result_rank - rank)
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


@jit_inline_ir
def _strides(table, row, out_rank, dims_of_out, strides):
    """Element strides of row `row` aligned to the output's rank (0 where it broadcasts)."""
    rank = table[row, COL_RANK]
    stride = np.int64(1)
    for axis in range(out_rank - 1, -1, -1):
        own = axis - (out_rank - rank)
        if own < 0 or table[row, COL_DIMS + own] == 1:
            strides[axis] = 0
        else:
            strides[axis] = stride
        if own >= 0:
            stride *= table[row, COL_DIMS + own]


@jit_inline_ir  # `fn` is a function: inlined, it binds statically (cacheable)
def apply2(fn, x, xrow, y, yrow, out, orow, table):
    """out = fn(x, y) elementwise with numpy broadcasting (see the module docstring)."""
    rank = table[orow, COL_RANK]
    dims = np.ones(MAX_RANK + 1, dtype=np.int64)
    for axis in range(rank):
        dims[axis] = table[orow, COL_DIMS + axis]
    total = np.int64(1)
    for axis in range(rank):
        total *= dims[axis]
    if total == 0:
        return
    if rank == 0:
        out[0] = fn(x[0], y[0])
        return
    xs = np.zeros(MAX_RANK + 1, dtype=np.int64)
    ys = np.zeros(MAX_RANK + 1, dtype=np.int64)
    _strides(table, xrow, rank, dims, xs)
    _strides(table, yrow, rank, dims, ys)
    inner = dims[rank - 1]
    xi = xs[rank - 1]
    yi = ys[rank - 1]
    outer = total // inner
    counters = np.zeros(MAX_RANK + 1, dtype=np.int64)
    xo = np.int64(0)
    yo = np.int64(0)
    o = np.int64(0)
    for _ in range(outer):
        if xi == 1 and yi == 1:
            for i in range(inner):
                out[o + i] = fn(x[xo + i], y[yo + i])
        elif xi == 1 and yi == 0:
            yv = y[yo]
            for i in range(inner):
                out[o + i] = fn(x[xo + i], yv)
        elif xi == 0 and yi == 1:
            xv = x[xo]
            for i in range(inner):
                out[o + i] = fn(xv, y[yo + i])
        else:
            for i in range(inner):
                out[o + i] = fn(x[xo + i * xi], y[yo + i * yi])
        o += inner
        for axis in range(rank - 2, -1, -1):
            counters[axis] += 1
            xo += xs[axis]
            yo += ys[axis]
            if counters[axis] < dims[axis]:
                break
            xo -= xs[axis] * dims[axis]
            yo -= ys[axis] * dims[axis]
            counters[axis] = 0


@jit_inline_ir
def broadcast_copy(x, xrow, out, orow, table):
    """out = x broadcast to row `orow`'s shape."""
    rank = table[orow, COL_RANK]
    total = np.int64(1)
    for axis in range(rank):
        total *= table[orow, COL_DIMS + axis]
    if total == 0:
        return
    if rank == 0:
        out[0] = x[0]
        return
    dims = np.ones(MAX_RANK + 1, dtype=np.int64)
    for axis in range(rank):
        dims[axis] = table[orow, COL_DIMS + axis]
    xs = np.zeros(MAX_RANK + 1, dtype=np.int64)
    _strides(table, xrow, rank, dims, xs)
    inner = dims[rank - 1]
    xi = xs[rank - 1]
    counters = np.zeros(MAX_RANK + 1, dtype=np.int64)
    xo = np.int64(0)
    o = np.int64(0)
    for _ in range(total // inner):
        for i in range(inner):
            out[o + i] = x[xo + i * xi]
        o += inner
        for axis in range(rank - 2, -1, -1):
            counters[axis] += 1
            xo += xs[axis]
            if counters[axis] < dims[axis]:
                break
            xo -= xs[axis] * dims[axis]
            counters[axis] = 0
