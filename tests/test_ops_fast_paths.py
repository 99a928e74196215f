"""The allocation-free paths of small ops, against numpy on random shapes (hypothesis):

- binary arithmetic (Add, Sub, Mul, Div, Max, Min, Sum) on float32 / float64 whose inputs are
  the output's shape, a suffix of it (a bias) or a scalar runs `periodic_loop`; other
  broadcasts (a middle axis of 1, both sides stretched) run the index-map loop; int32 / int64
  run the integer loop (identity or index maps). The path (periodic, general broadcast, empty
  output) and the dtype (the four alike) are drawn first, then shapes that take the path, in
  both operand orders; `fast_path` says which path a draw took, as
  `rtsoa.ops.elementwise.fold_numeric` decides it, and the mix is printed at the end of the run.
- MatMul without batch dims runs a plain loop up to `SMALL_PRODUCT` multiply-adds and BLAS
  above; batched products (broadcast batch dims) map their batch index. 1-D operands too.

Through the compiled op entry (`rtsoa.ops.host.run_numpy`), so every call runs shape
inference and compute as a launch does. Tolerances: float64 rtol 1e-12; float32 rtol 1e-5
(sums of up to 64 products, in another order than numpy's pairwise or BLAS sums); integers
exactly (Div truncates toward zero, as onnxruntime does).
"""

import math
from collections import Counter

import numpy as np
import pytest
from figures import counted, report
from hypothesis import given, settings
from hypothesis import strategies as st

from rtsoa.ops.host import run_numpy
from rtsoa.ops.linalg import SMALL_PRODUCT


def _truncating_divide(x, y):
    quotient = np.abs(x) // np.abs(y)
    return np.where((x >= 0) == (y >= 0), quotient, -quotient).astype(x.dtype)


BINARY = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
    "Max": np.maximum,
    "Min": np.minimum,
}
KINDS = (np.float32, np.float64)
INTEGERS = (np.int32, np.int64)
# The draw's path. Drawn blind, shapes took the periodic loop 93 % of the time and the
# general one 3-5 %; with these weights about as many draws take each (hypothesis draws
# general broadcasts more often than their share: they are seldom duplicates), 1 in 10 empty.
PATHS = ("periodic",) * 5 + ("general",) * 3 + ("empty",)
_paths_taken = {}  # test -> Counter of fast_path labels


def tolerance(kind):
    return {"rtol": 1e-12, "atol": 0} if kind == np.float64 else {"rtol": 1e-5, "atol": 1e-6}


def _period(shape, out):
    """rtsoa.ops.broadcast.period: the operand's dims less leading 1s are out's last dims."""
    lead = 0
    while lead < len(shape) and shape[lead] == 1:
        lead += 1
    own = tuple(shape[lead:])
    if len(own) > len(out) or own != tuple(out[len(out) - len(own) :]):
        return -1
    return math.prod(own)


def fast_path(shapes, kind):
    """The loop fold_numeric runs for operands of `shapes` folded left to right: "periodic",
    "general" (index maps) or "integer ..." per step, "empty" for an empty output."""
    integer = np.dtype(kind).kind == "i"
    labels = []
    x = tuple(shapes[0])
    for y in shapes[1:]:
        out = tuple(np.broadcast_shapes(x, tuple(y)))
        n = math.prod(out)
        if n == 0:
            label = "empty"
        elif integer:
            label = "same shapes" if tuple(x) == tuple(y) == out else "index maps"
        else:
            px, py = _period(x, out), _period(y, out)
            periodic = px >= 0 and py >= 0 and (px == n or py == n) and min(px, py) > 0
            label = "periodic" if periodic else "general"
        labels.append(f"integer {label}" if integer else label)
        x = out
    return " + ".join(labels)


def _count_path(test, shapes, kind):
    taken = _paths_taken.setdefault(test, Counter())
    taken[fast_path(shapes, kind)] += 1
    total = sum(taken.values())
    report(f"test_ops_fast_paths.py::{test}", [f"  {total} draws by path:"] + counted(taken))


@st.composite
def broadcast_pairs(draw):
    """(out shape, x shape, y shape) taking the path drawn from PATHS:

    - periodic: x / y each the out shape, a suffix (with or without leading 1s) or a scalar;
    - general: x has a 1 at an axis k of out that is not 1, after an axis j it keeps (so the
      1 is no leading 1): no period; y keeps axis k (the same shape, a suffix reaching k or a
      general broadcast keeping k) so the output really is out; operands swapped at random;
    - empty: an out with a 0 dim, operands of any pattern."""
    path = draw(st.sampled_from(PATHS))
    if path == "general":
        rank = draw(st.integers(2, 4))
        out = draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank))
        k = draw(st.integers(1, rank - 1))
        j = draw(st.integers(0, k - 1))
        out[j], out[k] = draw(st.integers(2, 5)), draw(st.integers(2, 5))
        x = [d if axis == j or draw(st.booleans()) else 1 for axis, d in enumerate(out)]
        x[k] = 1
        pattern = draw(st.sampled_from(["same", "suffix", "general"]))
        if pattern == "same":
            y = list(out)
        elif pattern == "suffix":
            keep = draw(st.integers(rank - k, rank))
            y = [1] * draw(st.integers(0, 2)) + out[rank - keep :]
        else:
            y = [d if axis == k or draw(st.booleans()) else 1 for axis, d in enumerate(out)]
        return (out, x, y) if draw(st.booleans()) else (out, y, x)
    if path == "periodic":
        out = draw(st.lists(st.integers(1, 5), min_size=0, max_size=4))
    else:
        out = draw(st.lists(st.integers(0, 5), min_size=1, max_size=4))
        out[draw(st.integers(0, len(out) - 1))] = 0
    patterns = ["same", "suffix", "scalar"] + (["general"] if path == "empty" else [])

    def operand():
        pattern = draw(st.sampled_from(patterns))
        if pattern == "same" or not out:
            return list(out)
        if pattern == "suffix":
            keep = draw(st.integers(0, len(out)))
            return [1] * draw(st.integers(0, 2)) + list(out[len(out) - keep :])
        if pattern == "scalar":
            return [1] * draw(st.integers(0, len(out)))
        return [d if draw(st.booleans()) else 1 for d in out]

    return out, operand(), operand()


def values(shape, kind, rng, divisor=False):
    """Normal floats; integers in [-50, 50]. `divisor`: no (near) zeros (floats |x| >= 0.5,
    integers 1..50 of either sign)."""
    if np.dtype(kind).kind == "i":
        if divisor:
            data = rng.integers(1, 51, size=shape) * rng.choice([-1, 1], size=shape)
            return np.asarray(data, dtype=kind)
        return np.asarray(rng.integers(-50, 51, size=shape), dtype=kind)
    data = rng.standard_normal(shape)
    if divisor:
        data = np.abs(data) + 0.5
    return np.asarray(data, dtype=kind)


def expected(op, x, y):
    if op == "Div" and np.dtype(x.dtype).kind == "i":
        return _truncating_divide(x, y)
    return BINARY[op](x, y)


def assert_matches(got, want, kind):
    assert got.shape == want.shape and got.dtype == want.dtype
    if np.dtype(kind).kind == "i":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, **tolerance(kind))


@given(
    shapes=broadcast_pairs(),
    op=st.sampled_from(sorted(BINARY)),
    kind=st.sampled_from(KINDS + INTEGERS),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=300, deadline=None)
def test_binary_ops_match_numpy_on_every_broadcast_pattern(shapes, op, kind, seed):
    _, x_shape, y_shape = shapes
    _count_path("test_binary_ops_match_numpy_on_every_broadcast_pattern", [x_shape, y_shape], kind)
    rng = np.random.default_rng(seed)
    x = values(x_shape, kind, rng)
    y = values(y_shape, kind, rng, divisor=op == "Div")
    (got,) = run_numpy(op, [x, y])
    assert_matches(got, expected(op, x, y), kind)


@given(
    shapes=broadcast_pairs(),
    kind=st.sampled_from(KINDS + INTEGERS),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=100, deadline=None)
def test_sum_of_three_inputs_matches_numpy(shapes, kind, seed):
    out, x_shape, y_shape = shapes
    _count_path("test_sum_of_three_inputs_matches_numpy", [x_shape, y_shape, out], kind)
    rng = np.random.default_rng(seed)
    x, y, z = values(x_shape, kind, rng), values(y_shape, kind, rng), values(out, kind, rng)
    (got,) = run_numpy("Sum", [x, y, z])
    assert_matches(got, x + y + z, kind)


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
