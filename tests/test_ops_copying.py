"""The copy engine every data-movement op uses (`rtsoa.ops.copying.gather_axes`), on its own.

Its element-by-element path copies one 2-, 4- or 8-byte word per element when both rows are
aligned to the element size, and bytes one at a time otherwise. Both paths are driven here on
the same transposes, aligned and misaligned by one byte, and judged by numpy's transpose; the
ops' own tests (test_ops_shape.py) only ever see aligned rows (the arena aligns to 64 bytes).
"""

import numpy as np
import pytest

from rtsoa.ops.abi import STATUS_OP_BAD_SHAPE
from rtsoa.ops.copying import copy_runs, gather_axes, linear_tables
from rtsoa.ops.host import run_numpy

KINDS = [np.uint8, np.int16, np.float32, np.int64]


def transpose_tables(shape, perm):
    """gather_axes arguments of a C-order transpose of `shape` by `perm` (in elements)."""
    strides = np.cumprod((shape[1:] + (1,))[::-1])[::-1].astype(np.int64)
    dims = np.array([shape[p] for p in perm], dtype=np.int64)
    steps = np.array([strides[p] for p in perm], dtype=np.int64)
    tables, starts = linear_tables(dims, np.zeros(len(perm), dtype=np.int64), steps)
    out_strides = np.cumprod((tuple(dims[1:]) + (1,))[::-1])[::-1].astype(np.int64)
    return dims, tables, starts, out_strides


def placed(data, misalign):
    """`data`'s bytes in a buffer, starting `misalign` bytes after an aligned address."""
    raw = data.view(np.uint8).reshape(-1)
    buffer = np.zeros(raw.size + 64, dtype=np.uint8)
    start = (-buffer.ctypes.data) % 64 + misalign
    view = buffer[start : start + raw.size]
    view[:] = raw
    return view


@pytest.mark.parametrize("misalign", [0, 1], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: np.dtype(kind).name)
@pytest.mark.parametrize(
    "shape, perm", [((5, 7), (1, 0)), ((3, 4, 6), (2, 0, 1)), ((2, 3, 4, 5), (0, 3, 1, 2))]
)
def test_transposes_match_numpy_on_both_paths(kind, misalign, shape, perm):
    x = np.arange(np.prod(shape), dtype=np.int64).astype(kind).reshape(shape)
    x = x * np.array(-3, dtype=kind) if np.dtype(kind).kind != "u" else x
    want = np.ascontiguousarray(x.transpose(perm))
    dims, tables, starts, out_strides = transpose_tables(shape, perm)
    size = x.itemsize
    src = placed(x, misalign)
    dst = placed(np.zeros_like(want), misalign)
    status = gather_axes(src, dst, size, dims, tables, starts, out_strides, 0)
    assert status == 0
    np.testing.assert_array_equal(dst.view(kind).reshape(want.shape), want)
    # The byte path on the same tables gives the same bytes (what the word path replaces).
    raw = np.zeros(want.nbytes, dtype=np.uint8)
    src_bytes = x.view(np.uint8).reshape(-1)
    copy_runs(src_bytes, raw, size, dims, tables, starts, out_strides, 0, np.int64(want.size))
    np.testing.assert_array_equal(raw, want.view(np.uint8).reshape(-1))


@pytest.mark.parametrize("misalign", [0, 1], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("size", [1, 2, 4, 8])
def test_offsets_past_a_row_are_refused_on_both_paths(size, misalign):
    """The element checks run before either path: a table reaching one element past the source
    (or a destination too short by one element) is STATUS_OP_BAD_SHAPE, nothing written."""
    shape, perm = (4, 6), (1, 0)
    dims, tables, starts, out_strides = transpose_tables(shape, perm)
    count = int(np.prod(shape))
    src = placed(np.zeros(count * size, dtype=np.uint8), misalign)
    dst = placed(np.zeros(count * size, dtype=np.uint8), misalign)
    reaching = tables.copy()
    reaching[-1] += 1  # the last source element, one element further
    assert gather_axes(src, dst, size, dims, reaching, starts, out_strides, 0) == (
        STATUS_OP_BAD_SHAPE
    )
    short = dst[: dst.shape[0] - size]
    assert gather_axes(src, short, size, dims, tables, starts, out_strides, 0) == (
        STATUS_OP_BAD_SHAPE
    )
    assert not dst.any()


@pytest.mark.parametrize(
    "shapes, axis",
    [
        ([(1, 3, 4, 5), (1, 2, 4, 5), (1, 1, 4, 5)], 1),  # DenseNet's channel Concat
        ([(2, 3, 4), (2, 3, 1)], -1),  # the last axis: blocks of one row
        ([(3, 2), (1, 2), (0, 2)], 0),  # the first axis, an empty input
        ([(2, 0, 3), (2, 4, 3)], 1),
        ([(4,), (5,)], 0),
        ([(2, 1, 3, 2), (2, 2, 3, 2), (2, 1, 3, 2)], 1),  # several blocks per input
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.bool_])
def test_concat_moves_each_input_block_as_numpy_does(shapes, axis, dtype):
    rng = np.random.default_rng(len(shapes) + axis)
    inputs = [(rng.standard_normal(shape) * 50).astype(dtype) for shape in shapes]
    (got,) = run_numpy("Concat", inputs, {"axis": axis})
    want = np.concatenate(inputs, axis=axis)
    assert got.dtype == want.dtype and np.array_equal(got, want)
