"""The allocation-free paths of small ops, against numpy on random shapes (hypothesis):

- binary arithmetic (Add, Sub, Mul, Div, Max, Min, Sum) on float32 / float64 whose inputs are
  the output's shape, a suffix of it (a bias) or a scalar runs `periodic_loop`; other
  broadcasts (a middle axis of 1, both sides stretched) run the index-map loop. Every pattern
  is drawn, in both operand orders.
- MatMul without batch dims runs a plain loop up to `SMALL_PRODUCT` multiply-adds and BLAS
  above; batched products (broadcast batch dims) map their batch index. 1-D operands too.

Through the compiled op entry (`rtsoa.ops.host.run_numpy`), so every call runs shape
inference and compute as a launch does. Tolerances: float64 rtol 1e-12; float32 rtol 1e-5
(sums of up to 64 products, in another order than numpy's pairwise or BLAS sums).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtsoa.ops.host import run_numpy
from rtsoa.ops.linalg import SMALL_PRODUCT

BINARY = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
    "Max": np.maximum,
    "Min": np.minimum,
}
KINDS = (np.float32, np.float64)


def tolerance(kind):
    return {"rtol": 1e-12, "atol": 0} if kind == np.float64 else {"rtol": 1e-5, "atol": 1e-6}


@st.composite
def broadcast_pairs(draw):
    """(out shape, x shape, y shape): x / y each the out shape, a suffix (with or without
    leading 1s), a scalar, or a general broadcast (some axes 1)."""
    out = draw(st.lists(st.integers(0, 5), min_size=0, max_size=4))

    def operand():
        pattern = draw(st.sampled_from(["same", "suffix", "scalar", "general"]))
        if pattern == "same" or not out:
            return list(out)
        if pattern == "suffix":
            keep = draw(st.integers(0, len(out)))
            return [1] * draw(st.integers(0, 2)) + list(out[len(out) - keep :])
        if pattern == "scalar":
            return [1] * draw(st.integers(0, len(out)))
        return [d if draw(st.booleans()) else 1 for d in out]

    return out, operand(), operand()


def values(shape, kind, rng, positive=False):
    data = rng.standard_normal(shape)
    if positive:
        data = np.abs(data) + 0.5  # Div: no division by (near) zero
    return np.asarray(data, dtype=kind)


@given(
    shapes=broadcast_pairs(),
    op=st.sampled_from(sorted(BINARY)),
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=300, deadline=None)
def test_binary_ops_match_numpy_on_every_broadcast_pattern(shapes, op, kind, seed):
    _, x_shape, y_shape = shapes
    rng = np.random.default_rng(seed)
    x = values(x_shape, kind, rng)
    y = values(y_shape, kind, rng, positive=op == "Div")
    (got,) = run_numpy(op, [x, y])
    want = BINARY[op](x, y)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, **tolerance(kind))


@given(shapes=broadcast_pairs(), kind=st.sampled_from(KINDS), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=100, deadline=None)
def test_sum_of_three_inputs_matches_numpy(shapes, kind, seed):
    out, x_shape, y_shape = shapes
    rng = np.random.default_rng(seed)
    x, y, z = values(x_shape, kind, rng), values(y_shape, kind, rng), values(out, kind, rng)
    (got,) = run_numpy("Sum", [x, y, z])
    np.testing.assert_allclose(got, x + y + z, **tolerance(kind))


@st.composite
def matmul_shapes(draw):
    m, k, n = (draw(st.integers(1, 40)) for _ in range(3))
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    a = [*batch, m, k] if draw(st.booleans()) else [k]
    b_batch = [d if draw(st.booleans()) else 1 for d in batch][
        len(batch) - draw(st.integers(0, len(batch))) :
    ]
    b = [*b_batch, k, n] if draw(st.booleans()) else [k]
    return a, b


@given(shapes=matmul_shapes(), kind=st.sampled_from(KINDS), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=300, deadline=None)
def test_matmul_matches_numpy_small_and_large_batched_or_not(shapes, kind, seed):
    a_shape, b_shape = shapes
    rng = np.random.default_rng(seed)
    a, b = values(a_shape, kind, rng), values(b_shape, kind, rng)
    (got,) = run_numpy("MatMul", [a, b])
    want = np.matmul(a, b)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, **{**tolerance(kind), "atol": 1e-4})


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: np.dtype(kind).name)
@pytest.mark.parametrize("m, k, n", [(1, 16, 16), (2, 32, 32), (1, 64, 64), (8, 64, 64)])
def test_matmul_either_side_of_the_blas_threshold(kind, m, k, n):
    assert (m * k * n <= SMALL_PRODUCT) == ((m, k, n) in [(1, 16, 16), (2, 32, 32)])
    rng = np.random.default_rng(m * k * n)
    a, b = values((m, k), kind, rng), values((k, n), kind, rng)
    (got,) = run_numpy("MatMul", [a, b])
    np.testing.assert_allclose(got, a @ b, **{**tolerance(kind), "atol": 1e-5})
