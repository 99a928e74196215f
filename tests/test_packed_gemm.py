"""rtsoa's own float32 GEMM (`rtsoa.ops.packed_gemm`) against a float64 numpy product, on the
shapes that reach each of its paths: B read in place or packed, partial panels of A and B, K
over several packed blocks, N over several column blocks, strided and transposed operands;
and `short_gemm`'s choice between it and the BLAS."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import cfunc, types

from rtsoa._jit import jit
from rtsoa.ops import packed_gemm
from rtsoa.ops.blas import gemm_addresses
from rtsoa.ops.packed_gemm import (
    DIRECT_K,
    KC,
    MR,
    NARROW_N,
    NC,
    NR,
    SHORT_K,
    WIDE_N,
    gemm_f32,
    matmul_f32,
    packed_wins,
)


@jit
def _short(a, b, out):
    packed_gemm.short_gemm(a, b, out)


@jit
def _short_at(address, a, a_at, lda, b, b_at, ldb, c, c_at, ldc, m, n, k):
    packed_gemm.short_gemm_at(address, a, a_at, lda, b, b_at, ldb, c, c_at, ldc, m, n, k)


@jit
def _blas(a, b, out):
    np.dot(a, b, out)  # the BLAS Numba calls (SciPy's), which may differ from numpy's


def _bound(a, b):
    """1e-5 of |A| @ |B|: float32 sums of K terms in any order stay within it."""
    return 1e-5 * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)) + 1e-30


def _operands(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    return a, b


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [
        (1, 1, 1),
        (MR, 16, NR),  # one whole micro-tile, B in place
        (MR + 1, 17, NR + 1),  # a partial panel of each
        (5, 3, 7),  # smaller than one tile
        (2 * MR, DIRECT_K, 3 * NR),  # the longest K read in place
        (13, DIRECT_K + 1, 40),  # B packed, two K blocks
        (7, 2 * KC + 5, 33),  # three K blocks: C accumulated twice
        (150, 40, 20),  # rows over one A block (MC)
        (3, 20, NC + 37),  # columns over one B block (NC)
        (96, 16, 12544),  # a MobileNetV2 1 x 1 conv
        (64, 600, 196),  # a packed B of many panels
    ],
)
def test_matmul_agrees_with_a_float64_product(m, k, n):
    a, b = _operands(m, k, n)
    out = np.full((m, n), np.nan, dtype=np.float32)
    matmul_f32(a, b, out)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.all(np.abs(out - exact) <= _bound(a, b))


def test_empty_k_gives_zeros_and_empty_m_or_n_writes_nothing():
    out = np.full((3, 4), np.nan, dtype=np.float32)
    matmul_f32(np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32), out)
    assert np.all(out == 0)
    flat = np.full(8, 7.0, dtype=np.float32)
    a, b = _operands(0, 5, 4)
    gemm_f32(0, 4, 5, a.reshape(-1), 0, 5, 1, b.reshape(-1), 0, 4, 1, flat, 0, 4, 1)
    gemm_f32(2, 0, 5, a.reshape(-1), 0, 5, 1, b.reshape(-1), 0, 4, 1, flat, 0, 4, 1)
    assert np.all(flat == 7.0)


@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 20),
    k=st.integers(1, 300),
    n=st.integers(1, 40),
    transpose_a=st.booleans(),
    transpose_b=st.booleans(),
    margin=st.integers(0, 3),
    seed=st.integers(0, 2**31),
)
def test_strided_operands_and_a_block_of_a_larger_c(
    m, k, n, transpose_a, transpose_b, margin, seed
):
    """A and B as (transposed) blocks of larger matrices, C a block inside a larger one: the
    block is the product, and nothing around it changes."""
    rng = np.random.default_rng(seed)
    a_store = rng.standard_normal(
        (k + margin, m + margin) if transpose_a else (m + margin, k + margin)
    )
    b_store = rng.standard_normal(
        (n + margin, k + margin) if transpose_b else (k + margin, n + margin)
    )
    a_store, b_store = a_store.astype(np.float32), b_store.astype(np.float32)
    a = a_store[margin:, margin:].T if transpose_a else a_store[margin:, margin:]
    b = b_store[margin:, margin:].T if transpose_b else b_store[margin:, margin:]
    a_at = margin * a_store.shape[1] + margin
    b_at = margin * b_store.shape[1] + margin
    a_rs, a_cs = (1, a_store.shape[1]) if transpose_a else (a_store.shape[1], 1)
    b_rs, b_cs = (1, b_store.shape[1]) if transpose_b else (b_store.shape[1], 1)
    c_store = np.full((m + 2 * margin, n + 2 * margin), np.nan, dtype=np.float32)
    c_at = margin * c_store.shape[1] + margin
    gemm_f32(
        m, n, k, a_store.reshape(-1), a_at, a_rs, a_cs, b_store.reshape(-1), b_at, b_rs, b_cs,
        c_store.reshape(-1), c_at, c_store.shape[1], 1,
    )  # fmt: skip
    block = c_store[margin : margin + m, margin : margin + n]
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.all(np.abs(block - exact) <= _bound(a, b))
    around = np.ones(c_store.shape, dtype=bool)
    around[margin : margin + m, margin : margin + n] = False
    assert np.all(np.isnan(c_store[around]))


def test_short_gemm_takes_the_packed_gemm_only_where_it_is_faster():
    """Bit for bit where the two paths' bits differ: the packed GEMM's sums run in another order
    than the BLAS's, so which one computed a product shows in its last bits. Where a BLAS adds in
    the same order (OpenBLAS's AVX-512 kernels do for K up to their own block), the case still
    checks the answer and the rule (`packed_wins`); the routing itself is then checked with a
    stand-in BLAS by the `short_gemm_at` test below."""
    cases = [
        ((24, SHORT_K, NARROW_N), np.float32, "packed"),
        ((24, SHORT_K + 1, NARROW_N), np.float32, "blas"),  # K too long for N
        ((24, 144, NARROW_N - 1), np.float32, "blas"),  # N too narrow
        ((24, DIRECT_K, WIDE_N), np.float32, "packed"),
        ((24, DIRECT_K + 1, WIDE_N), np.float32, "blas"),  # K too long
        ((24, DIRECT_K, WIDE_N - 1), np.float32, "blas"),  # N too narrow for K
        ((24, 144, 3136), np.float64, "blas"),  # float64: always the BLAS
    ]
    for (m, k, n), dtype, expected in cases:
        if dtype == np.float32:
            assert packed_wins(k, n) == (expected == "packed"), (m, k, n)
        a, b = _operands(m, k, n, seed=k + n)
        a, b = a.astype(dtype), b.astype(dtype)
        out = np.empty((m, n), dtype=dtype)
        _short(a, b, out)
        packed = np.empty((m, n), dtype=np.float32)
        matmul_f32(a.astype(np.float32), b.astype(np.float32), packed)
        blas = np.empty((m, n), dtype=dtype)
        _blas(a, b, blas)
        assert np.array_equal(out, packed if expected == "packed" else blas), (m, k, n, dtype)


_FORTRAN_INT = types.CPointer(types.int32)
_FORTRAN_REAL = types.CPointer(types.float32)


@cfunc(
    types.void(
        types.voidptr,
        types.voidptr,
        _FORTRAN_INT,
        _FORTRAN_INT,
        _FORTRAN_INT,
        _FORTRAN_REAL,
        _FORTRAN_REAL,
        _FORTRAN_INT,
        _FORTRAN_REAL,
        _FORTRAN_INT,
        _FORTRAN_REAL,
        _FORTRAN_REAL,
        _FORTRAN_INT,
    )
)
def _stand_in_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """sgemm's Fortran signature; writes 7.0 over its C block instead of a product, so a block
    it computed is told from the packed GEMM's on any machine."""
    for column in range(n[0]):
        for row in range(m[0]):
            c[column * ldc[0] + row] = 7.0


def test_short_gemm_at_takes_the_packed_gemm_for_a_column_block_where_it_is_faster():
    """The column parts of a conv's GEMM (`short_gemm_at`: blocks of larger row-major
    matrices), with a stand-in BLAS that marks its block: a block of SHORT_K rows and NARROW_N
    columns (and of DIRECT_K rows and WIDE_N columns) by the packed GEMM, one column narrower
    or one row longer by the BLAS, and the columns around the block untouched. Then the real
    BLAS, for the answer."""
    sgemm = gemm_addresses()[0]
    cases = [
        (SHORT_K, NARROW_N, True),
        (SHORT_K, NARROW_N - 1, False),
        (SHORT_K + 1, NARROW_N, False),
        (DIRECT_K, WIDE_N, True),
        (DIRECT_K, WIDE_N - 1, False),
        (DIRECT_K + 1, WIDE_N, False),
    ]
    m, first = 24, 7  # first: the block's first column
    for k, n, packed in cases:
        width = n + 2 * first
        a, b = _operands(m, k, width, seed=k + n)
        block = np.ascontiguousarray(b[:, first : first + n])
        by_packed = np.empty((m, n), np.float32)
        matmul_f32(a, block, by_packed)
        for address in (_stand_in_sgemm.address, sgemm):
            c = np.full((m, width), np.nan, dtype=np.float32)
            _short_at(address, a.reshape(-1), 0, k, b.reshape(-1), first, width,
                      c.reshape(-1), first, width, m, n, k)  # fmt: skip
            got = c[:, first : first + n]
            if packed:
                assert np.array_equal(got, by_packed), (k, n)
            elif address == sgemm:
                exact = a.astype(np.float64) @ block.astype(np.float64)
                assert np.all(np.abs(got - exact) <= _bound(a, block)), (k, n)
            else:
                assert np.all(got == 7.0), (k, n)
            assert np.all(np.isnan(c[:, :first])) and np.all(np.isnan(c[:, first + n :]))


def test_called_from_python_the_choice_is_the_jitted_ones():
    """`short_gemm` and `short_gemm_at` called from Python run the jitted choice: the same bits."""
    a, b = _operands(24, SHORT_K, NARROW_N, seed=9)
    from_python, jitted = np.empty((24, NARROW_N), np.float32), np.empty((24, NARROW_N), np.float32)
    packed_gemm.short_gemm(a, b, from_python)
    _short(a, b, jitted)
    assert np.array_equal(from_python, jitted)
    sgemm = gemm_addresses()[0]
    flat = np.empty(24 * NARROW_N, np.float32)
    packed_gemm.short_gemm_at(sgemm, a.reshape(-1), 0, SHORT_K, b.reshape(-1), 0, NARROW_N,
                              flat, 0, NARROW_N, 24, NARROW_N, SHORT_K)  # fmt: skip
    assert np.array_equal(flat.reshape(24, NARROW_N), jitted)
