"""Det (opsets 11, 22): the determinant of each square matrix of the last two axes.

Input [..., M, M], float32 / float64; output [...] of the same type. Each matrix is copied to
float64 and reduced by Gaussian elimination with partial pivoting (the largest magnitude in
the column: LAPACK's getrf choice); the determinant is the product of the pivots, its sign
flipped per row swap. A zero column gives 0; NaN / inf propagate. M = 0 gives 1.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    F64,
    FLOATS,
    OK,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    dim,
    dtype,
    numel,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.copying import holds
from rtsoa.ops.registry import register_op


@jit_with_nrt
def det_infer(arena, table, n_in, n_out, attrs, fattrs):
    kind = dtype(table, 0)
    if kind != F32 and kind != F64:
        return np.int32(STATUS_OP_BAD_DTYPE)
    r = rank(table, 0)
    if r < 2 or dim(table, 0, r - 1) != dim(table, 0, r - 2):
        return np.int32(STATUS_OP_BAD_SHAPE)
    set_output(table, n_in, kind, r - 2)
    for a in range(r - 2):
        set_dim(table, n_in, a, dim(table, 0, a))
    return OK


@jit_with_nrt
def _determinants(x, out, count, size):
    work = np.empty(size * size, dtype=np.float64)
    for m in range(count):
        for k in range(size * size):
            work[k] = x[m * size * size + k]
        result = 1.0
        for c in range(size):
            pivot = c
            for row in range(c + 1, size):
                if abs(work[row * size + c]) > abs(work[pivot * size + c]):
                    pivot = row
            if pivot != c:
                result = -result
                for k in range(size):
                    held = work[c * size + k]
                    work[c * size + k] = work[pivot * size + k]
                    work[pivot * size + k] = held
            lead = work[c * size + c]
            result *= lead
            if lead == 0.0:
                break
            for row in range(c + 1, size):
                factor = work[row * size + c] / lead
                for k in range(c, size):
                    work[row * size + k] -= factor * work[c * size + k]
        out[m] = result


@jit_inline_ir
def _run_as(arena, table, n_in, kind):
    size = dim(table, 0, rank(table, 0) - 1)
    x, out = view(arena, table, 0, kind), view(arena, table, n_in, kind)
    _determinants(x, out, numel(table, n_in), size)


@jit_with_nrt.keeping_literals("kind")
def det_compute(arena, table, n_in, n_out, attrs, fattrs, kind):
    status = det_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    if not holds(table, 0) or not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    if kind == F32:
        _run_as(arena, table, n_in, np.float32)
    elif kind == F64:
        _run_as(arena, table, n_in, np.float64)
    else:
        return np.int32(STATUS_OP_BAD_DTYPE)
    return OK


register_op("Det", det_infer, det_compute, dtypes={0: FLOATS}, variants=True)
