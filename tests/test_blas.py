"""`rtsoa.ops.blas.gemm_at`: a GEMM on blocks of larger row-major matrices (leading
dimensions), the product intra-op parts use to split a conv's GEMM by columns. Judged by
numpy's product of the same blocks."""

import numpy as np
import pytest
from numba import njit
from numba.core.errors import TypingError

from rtsoa.ops.blas import gemm_addresses, gemm_at, gemm_fits


@njit
def _block_product(address, a, a_at, lda, b, b_at, ldb, c, c_at, ldc, m, n, k):
    gemm_at(address, a, a_at, lda, b, b_at, ldb, c, c_at, ldc, m, n, k)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_block_of_columns_is_the_product_of_the_blocks(dtype):
    rng = np.random.default_rng(3)
    sgemm, dgemm = gemm_addresses()
    address = sgemm if dtype == np.float32 else dgemm
    m, k, p = 5, 7, 40  # W is m x k, X k x p, Y m x p; the block: columns 11 .. 11 + 13
    w = rng.standard_normal(3 + m * k).astype(dtype)  # W from element 3 of a longer array
    x = rng.standard_normal(k * p).astype(dtype)
    y = np.full(m * p, -7.0, dtype=dtype)
    first, n = 11, 13
    _block_product(address, w, 3, k, x, first, p, y, first, p, m, n, k)
    want = w[3:].reshape(m, k) @ x.reshape(k, p)[:, first : first + n]
    got = y.reshape(m, p)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got[:, first : first + n], want, rtol=tolerance, atol=tolerance)
    outside = np.ones((m, p), dtype=bool)
    outside[:, first : first + n] = False
    assert (got[outside] == -7.0).all()  # the block only: no element of Y outside it written


def test_other_element_types_are_refused_and_the_extents_checked():
    sgemm, _ = gemm_addresses()
    half = np.zeros(4, dtype=np.float16)
    with pytest.raises(TypingError):
        _block_product(sgemm, half, 0, 2, half, 0, 2, half, 0, 2, 2, 2, 2)
    assert gemm_fits(16, 1 << 20, 1152, 1152, 1 << 20, 1 << 20)
    assert not gemm_fits(16, 1 << 31, 8, 8, 1 << 31, 1 << 31)  # past the BLAS's int32
