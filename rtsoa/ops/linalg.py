"""Matrix products: MatMul (numpy semantics, batched with broadcasting) and Gemm.

Float32 / float64 products go to BLAS through Numba's `np.dot` on contiguous 2-D views (one
call per batch matrix; scipy provides the BLAS), except small ones (`SMALL_PRODUCT`), which
run as a plain loop like integer MatMul; a product without batch dims maps no batch index.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_with_nrt
from rtsoa.ops.abi import (
    ACT_NONE,
    ACT_RELU,
    COL_DIMS,
    COL_RANK,
    F32,
    F64,
    FLOATS,
    I32,
    I64,
    MAX_RANK,
    NUMBERS,
    RESULT_ROW,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    dim,
    dtype,
    numel,
    present,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.broadcast import broadcast_range, broadcast_rows, index_map
from rtsoa.ops.registry import register_op

_SCRATCH_A = 62  # spare table rows used to broadcast batch dimensions (n_in + n_out < 62)
_SCRATCH_B = 63


@jit_inline_ir
def _batch_rows(table, ra, rb):
    """Scratch rows A / B get the batch (leading) dims of inputs 0 / 1."""
    table[_SCRATCH_A, COL_RANK] = max(ra - 2, 0)
    table[_SCRATCH_B, COL_RANK] = max(rb - 2, 0)
    for axis in range(max(ra - 2, 0)):
        table[_SCRATCH_A, COL_DIMS + axis] = dim(table, 0, axis)
    for axis in range(max(rb - 2, 0)):
        table[_SCRATCH_B, COL_DIMS + axis] = dim(table, 1, axis)


@jit_with_nrt
def matmul_infer(arena, table, n_in, n_out, attrs, fattrs):
    """numpy.matmul shapes: 1-D operands are promoted and the added dimension dropped."""
    if dtype(table, 0) != dtype(table, 1):
        return np.int32(STATUS_OP_BAD_DTYPE)
    ra = rank(table, 0)
    rb = rank(table, 1)
    if ra < 1 or rb < 1:
        return np.int32(STATUS_OP_BAD_SHAPE)
    m = dim(table, 0, ra - 2) if ra >= 2 else np.int64(1)
    k = dim(table, 0, ra - 1)
    kb = dim(table, 1, rb - 2) if rb >= 2 else dim(table, 1, 0)
    n = dim(table, 1, rb - 1) if rb >= 2 else np.int64(1)
    if k != kb:
        return np.int32(STATUS_OP_BAD_SHAPE)
    _batch_rows(table, ra, rb)  # batch dims: broadcast of the leading dims
    status = broadcast_range(table, _SCRATCH_A, 2, n_in)  # rows A and B are consecutive
    if status != 0:
        return status
    batch_rank = table[n_in, COL_RANK]
    out_rank = batch_rank + (1 if ra >= 2 else 0) + (1 if rb >= 2 else 0)
    if out_rank > MAX_RANK:
        return np.int32(STATUS_OP_BAD_SHAPE)
    set_output(table, n_in, dtype(table, 0), out_rank)
    axis = batch_rank
    if ra >= 2:
        set_dim(table, n_in, axis, m)
        axis += 1
    if rb >= 2:
        set_dim(table, n_in, axis, n)
    table[RESULT_ROW, 0] = 2 * numel(table, n_in) * k
    return np.int32(0)


# Float products of at most this many multiply-adds run as a plain loop: below it the BLAS call
# (and the 2-D views it needs) costs more than the product (1x16 @ 16x16: ~0.5 us by BLAS,
# ~0.15-0.2 us by the loop; they break even near 4,096 here).
SMALL_PRODUCT = 2048


@jit_inline_ir
def _loop_product(a, b, out, m, k, n):
    """out = a @ b, row by row: each out[i, j] sums a[i, p] * b[p, j] for p = 0 .. k - 1 in
    that order, from zero (the order of a dot product of row i and column j, so the results
    are those of that loop), but the innermost loop runs along j, over contiguous rows of b
    and out, which vectorizes; a loop along p is a chain of dependent adds."""
    for i in range(m):
        row = i * n
        for j in range(n):
            out[row + j] = 0  # not a[0] - a[0], which is NaN where a[0] is infinite
        for p in range(k):
            scale = a[i * k + p]
            column = p * n
            for j in range(n):
                out[row + j] += scale * b[column + j]


@jit_inline_ir
def _matmul_as(arena, table, n_in, kind, blas):
    a = view(arena, table, 0, kind)
    b = view(arena, table, 1, kind)
    out = view(arena, table, n_in, kind)
    ra = rank(table, 0)
    rb = rank(table, 1)
    m = dim(table, 0, ra - 2) if ra >= 2 else np.int64(1)
    k = dim(table, 0, ra - 1)
    n = dim(table, 1, rb - 1) if rb >= 2 else np.int64(1)
    if out.shape[0] == 0:
        return
    if k == 0:
        out[:] = 0
        return
    if ra <= 2 and rb <= 2:  # one matrix product: no batch dims to map
        if blas and m * k * n > SMALL_PRODUCT:
            np.dot(a.reshape((m, k)), b.reshape((k, n)), out.reshape((m, n)))
        else:
            _loop_product(a, b, out, m, k, n)
        return
    # batch index -> which matrix of a and of b (broadcast over the batch dims)
    batch = out.shape[0] // (m * n)
    _batch_rows(table, ra, rb)
    batch_row = _SCRATCH_A - 1
    table[batch_row, COL_RANK] = table[n_in, COL_RANK] - (1 if ra >= 2 else 0)
    table[batch_row, COL_RANK] -= 1 if rb >= 2 else 0
    for axis in range(table[batch_row, COL_RANK]):
        table[batch_row, COL_DIMS + axis] = table[n_in, COL_DIMS + axis]
    which_a = index_map(table, _SCRATCH_A, batch_row)
    which_b = index_map(table, _SCRATCH_B, batch_row)
    for t in range(batch):
        a2 = a[which_a[t] * m * k : (which_a[t] + 1) * m * k]
        b2 = b[which_b[t] * k * n : (which_b[t] + 1) * k * n]
        o2 = out[t * m * n : (t + 1) * m * n]
        if blas and m * k * n > SMALL_PRODUCT:
            np.dot(a2.reshape((m, k)), b2.reshape((k, n)), o2.reshape((m, n)))
        else:
            _loop_product(a2, b2, o2, m, k, n)


@jit_with_nrt.keeping_literals("kind")
def matmul_compute(arena, table, n_in, n_out, attrs, fattrs, kind):
    if kind == F32:
        _matmul_as(arena, table, n_in, np.float32, True)
    elif kind == F64:
        _matmul_as(arena, table, n_in, np.float64, True)
    elif kind == I64:
        _matmul_as(arena, table, n_in, np.int64, False)
    elif kind == I32:
        _matmul_as(arena, table, n_in, np.int32, False)
    else:
        return np.int32(STATUS_OP_BAD_DTYPE)
    return np.int32(0)


# -- Gemm: Y = alpha * op(A) @ op(B) + beta * C --------------------------------------------------
# attrs: [transA, transB, alpha (float), beta (float)]


@jit_with_nrt
def gemm_infer(arena, table, n_in, n_out, attrs, fattrs):
    if rank(table, 0) != 2 or rank(table, 1) != 2:
        return np.int32(STATUS_OP_BAD_SHAPE)
    kind = dtype(table, 0)
    if kind != F32 and kind != F64:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if dtype(table, 1) != kind or (n_in > 2 and present(table, 2) and dtype(table, 2) != kind):
        return np.int32(STATUS_OP_BAD_DTYPE)
    trans_a = attrs[0]
    trans_b = attrs[1]
    if (trans_a != 0 and trans_a != 1) or (trans_b != 0 and trans_b != 1):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    m = dim(table, 0, 1) if trans_a else dim(table, 0, 0)
    k = dim(table, 0, 0) if trans_a else dim(table, 0, 1)
    kb = dim(table, 1, 1) if trans_b else dim(table, 1, 0)
    n = dim(table, 1, 0) if trans_b else dim(table, 1, 1)
    if k != kb:
        return np.int32(STATUS_OP_BAD_SHAPE)
    set_output(table, n_in, kind, 2)
    set_dim(table, n_in, 0, m)
    set_dim(table, n_in, 1, n)
    if n_in > 2 and present(table, 2):  # C must broadcast to (m, n)
        rows = np.array([2, n_in], dtype=np.int64)
        table[_SCRATCH_A, COL_RANK] = 2
        status = broadcast_rows(table, rows, _SCRATCH_A)
        if status != 0:
            return status
        if dim(table, _SCRATCH_A, 0) != m or dim(table, _SCRATCH_A, 1) != n:
            return np.int32(STATUS_OP_BAD_SHAPE)
    table[RESULT_ROW, 0] = 2 * m * n * k
    return np.int32(0)


@jit_inline_ir
def _gemm_as(arena, table, n_in, attrs, fattrs, relu, kind):
    a = view(arena, table, 0, kind)
    b = view(arena, table, 1, kind)
    out = view(arena, table, n_in, kind)
    trans_a = attrs[0]
    trans_b = attrs[1]
    alpha = kind(fattrs[2])
    beta = kind(fattrs[3])
    m = dim(table, n_in, 0)
    n = dim(table, n_in, 1)
    if out.shape[0] == 0:
        return
    a2 = a.reshape((dim(table, 0, 0), dim(table, 0, 1)))
    b2 = b.reshape((dim(table, 1, 0), dim(table, 1, 1)))
    o2 = out.reshape((m, n))
    if dim(table, 0, 0) * dim(table, 0, 1) == 0:
        o2[:] = 0
    elif trans_a and trans_b:
        np.dot(a2.T, b2.T, o2)
    elif trans_a:
        np.dot(a2.T, b2, o2)
    elif trans_b:
        np.dot(a2, b2.T, o2)
    else:
        np.dot(a2, b2, o2)
    if alpha != 1:
        out *= alpha
    if n_in > 2 and present(table, 2) and beta != 0:
        c = view(arena, table, 2, kind)
        ci = index_map(table, 2, n_in)
        for i in range(out.shape[0]):
            out[i] += beta * c[ci[i]]
    if relu:
        zero = kind(0)
        for i in range(out.shape[0]):
            if out[i] < 0:  # NaN and -0 stay as they are, as the Relu op has them
                out[i] = zero


@jit_with_nrt.keeping_literals("kind")
def gemm_compute(arena, table, n_in, n_out, attrs, fattrs, kind):
    if kind == F32:
        _gemm_as(arena, table, n_in, attrs, fattrs, False, np.float32)
    else:
        _gemm_as(arena, table, n_in, attrs, fattrs, False, np.float64)
    return np.int32(0)


# -- FusedGemm: Relu(Gemm), what the lowering fuses Gemm -> Relu into (rtsoa.lowering.fuse), as
# onnxruntime's FusedGemm. attrs: Gemm's, then activation (ACT_NONE, ACT_RELU). The Relu runs
# over the finished Gemm result, as the Relu op would: the same bits.
GEMM_ACTIVATION = 4


@jit_with_nrt
def fused_gemm_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] <= GEMM_ACTIVATION:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    act = attrs[GEMM_ACTIVATION]
    if act != ACT_NONE and act != ACT_RELU:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    return gemm_infer(arena, table, n_in, n_out, attrs, fattrs)


@jit_with_nrt.keeping_literals("kind")
def fused_gemm_compute(arena, table, n_in, n_out, attrs, fattrs, kind):
    relu = attrs[GEMM_ACTIVATION] == ACT_RELU
    if kind == F32:
        _gemm_as(arena, table, n_in, attrs, fattrs, relu, np.float32)
    else:
        _gemm_as(arena, table, n_in, attrs, fattrs, relu, np.float64)
    return np.int32(0)


def encode_gemm(attributes, inputs):
    """Gemm attrs: transA, transB, alpha, beta."""
    return [
        int(attributes.get("transA", 0)),
        int(attributes.get("transB", 0)),
        float(attributes.get("alpha", 1.0)),
        float(attributes.get("beta", 1.0)),
    ]


def encode_fused_gemm(attributes, inputs):
    """FusedGemm attrs: Gemm's (transA, transB, alpha, beta), then activation (0 none, 1 Relu)."""
    return encode_gemm(attributes, inputs) + [int(attributes.get("activation", ACT_NONE))]


register_op(
    "MatMul", matmul_infer, matmul_compute, inputs=(2, 2), dtypes={0: NUMBERS}, variants=True
)
_GEMM_OPERANDS = {"inputs": (2, 3), "dtypes": {0: FLOATS}, "variants": True}
register_op("Gemm", gemm_infer, gemm_compute, encode=encode_gemm, **_GEMM_OPERANDS)
register_op(
    "FusedGemm",
    fused_gemm_infer,
    fused_gemm_compute,
    encode=encode_fused_gemm,
    **_GEMM_OPERANDS,
    doc="Gemm, then an optional Relu: the lowering's fusion of Gemm -> Relu",
)


# -- MatMulBias: Y = act(A @ W + bias), what the lowering fuses MatMul -> Add (-> Relu) into ------
# (rtsoa.lowering.fuse). attrs: [activation] (ACT_NONE, ACT_RELU). A: float, rank >= 2; W:
# 2-D; bias: n elements, every dim but the last 1 and rank at most A's, so the Add it replaces
# broadcast nothing into the product's shape. The product and the adds are those of MatMul
# then Add, in the same order and precision: the fused result equals the unfused one bit for
# bit (tests/test_lowering_fusion.py).


@jit_with_nrt
def matmul_bias_infer(arena, table, n_in, n_out, attrs, fattrs):
    kind = dtype(table, 0)
    if (kind != F32 and kind != F64) or dtype(table, 1) != kind or dtype(table, 2) != kind:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if attrs[0] != ACT_NONE and attrs[0] != ACT_RELU:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    ra = rank(table, 0)
    if ra < 2 or rank(table, 1) != 2:
        return np.int32(STATUS_OP_BAD_SHAPE)
    k = dim(table, 0, ra - 1)
    n = dim(table, 1, 1)
    rc = rank(table, 2)
    if dim(table, 1, 0) != k or rc > ra or numel(table, 2) != n:
        return np.int32(STATUS_OP_BAD_SHAPE)
    for axis in range(rc - 1):
        if dim(table, 2, axis) != 1:
            return np.int32(STATUS_OP_BAD_SHAPE)
    if rc >= 1 and dim(table, 2, rc - 1) != n:
        return np.int32(STATUS_OP_BAD_SHAPE)
    set_output(table, n_in, kind, ra)
    for axis in range(ra - 1):
        set_dim(table, n_in, axis, dim(table, 0, axis))
    set_dim(table, n_in, ra - 1, n)
    table[RESULT_ROW, 0] = (2 * k + 1) * numel(table, n_in)
    return np.int32(0)


@jit_inline_ir
def _matmul_bias_as(arena, table, n_in, relu, kind):
    a = view(arena, table, 0, kind)
    w = view(arena, table, 1, kind)
    bias = view(arena, table, 2, kind)
    out = view(arena, table, n_in, kind)
    k = dim(table, 1, 0)
    n = dim(table, 1, 1)
    if out.shape[0] == 0:
        return
    rows = out.shape[0] // n
    if k == 0:
        out[:] = 0
    elif rows * k * n > SMALL_PRODUCT:
        np.dot(a.reshape((rows, k)), w.reshape((k, n)), out.reshape((rows, n)))
    else:
        _loop_product(a, w, out, rows, k, n)
    for i in range(rows):
        for j in range(n):
            value = out[i * n + j] + bias[j]
            if relu and value < 0:  # Relu keeps NaN, like np.maximum(x, 0)
                value = kind(0)
            out[i * n + j] = value


@jit_with_nrt.keeping_literals("kind")
def matmul_bias_compute(arena, table, n_in, n_out, attrs, fattrs, kind):
    relu = attrs[0] == ACT_RELU
    if kind == F32:
        _matmul_bias_as(arena, table, n_in, relu, np.float32)
    else:
        _matmul_bias_as(arena, table, n_in, relu, np.float64)
    return np.int32(0)


def encode_matmul_bias(attributes, inputs):
    """MatMulBias attrs: activation (0 none, 1 Relu)."""
    return [int(attributes.get("activation", ACT_NONE))]


register_op(
    "MatMulBias",
    matmul_bias_infer,
    matmul_bias_compute,
    encode=encode_matmul_bias,
    inputs=(3, 3),
    dtypes={0: FLOATS},
    variants=True,
    doc="A @ W + bias, then an optional Relu: the lowering's fusion of MatMul -> Add -> Relu",
)
