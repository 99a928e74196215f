"""The Reduce* family's axes, folds and integer helpers (`reduced_axes`, `reduce_loop`,
`_integer_bound`, `truncate_divide`), called on their own and judged by onnxruntime and numpy.

The command of `mutation/ops-reduce.toml`; how these tests run: `op_parameters.py`.
"""

from collections import Counter

import numpy as np
import pytest
from op_parameters import judged, slots

from rtsoa.abi.dtypes import DType, dtype_code
from rtsoa.abi.status import STATUS_OP_BAD_ATTRIBUTE, STATUS_OP_BAD_DTYPE, STATUS_OP_BAD_SHAPE
from rtsoa.ops.reduce import (
    MAX,
    MEAN,
    MIN,
    PROD,
    SUM,
    _integer_bound,
    reduce_loop,
    reduced_axes,
    truncate_divide,
)


def test_reduced_axes_give_onnxruntimes_output_shapes():
    """The axes input (absent, empty, negative, every axis), keepdims and
    noop_with_empty_axes: the reduced flags and keepdims give onnxruntime's ReduceSum output
    shape, and the no-op flag is set exactly where onnxruntime returns the input unchanged."""
    rng = np.random.default_rng(20261210)
    reached = Counter()
    for _ in range(160):
        rank = int(rng.integers(0, 5))
        shape = tuple(int(v) for v in rng.integers(1, 4, rank))
        x = rng.standard_normal(shape).astype(np.float32)
        attributes = {}
        if rng.random() < 0.5:
            attributes["keepdims"] = int(rng.integers(0, 2))
        if rng.random() < 0.5:
            attributes["noop_with_empty_axes"] = int(rng.integers(0, 2))
        draw = rng.random()
        if draw < 0.2 or rank == 0:
            axes = None
        elif draw < 0.35:
            axes = np.zeros(0, dtype=np.int64)
        else:
            n = int(rng.integers(1, rank + 1))
            axes = rng.permutation(rank)[:n]
            axes = np.where(rng.random(n) < 0.4, axes - rank, axes).astype(np.int64)
        feed = {"x": x} if axes is None else {"x": x, "axes": axes}
        (want,) = judged("ReduceSum", list(feed.values()), attributes)
        arrays = [x] if axes is None else [x, axes]
        table, arena, attrs = slots("ReduceSum", arrays, attributes)
        status, flags, noop = reduced_axes(arena, table, len(arrays), attrs)
        case = f"shape {shape}, axes {axes}, {attributes}"
        assert status == 0, case
        keep = attributes.get("keepdims", 1) != 0
        if noop:
            reached["no-op"] += 1
            np.testing.assert_array_equal(want, x, err_msg=case)
            continue
        dims = [1 if f else d for f, d in zip(flags, shape, strict=True) if keep or not f]
        assert tuple(dims) == want.shape, case
        np.testing.assert_allclose(
            want, x.sum(axis=tuple(np.flatnonzero(flags)), keepdims=keep), rtol=1e-5, atol=1e-5
        )
        reached["keepdims 0" if not keep else "keepdims 1"] += 1
        reached["empty axes, all reduced"] += axes is not None and axes.size == 0
        reached["some axes"] += bool(0 < flags.sum() < rank)
    print(dict(reached))
    for branch in ("no-op", "keepdims 0", "keepdims 1", "empty axes, all reduced", "some axes"):
        assert reached[branch] >= 8, reached


@pytest.mark.parametrize("axes", [[1], [-1, 0], [0, 1, 2]], ids=["1", "-1,0", "all"])
def test_reduced_axes_from_the_axes_attribute(axes):
    """Before opset 18 the axes are an attribute (slots after keepdims and
    noop_with_empty_axes): onnxruntime's ReduceMax at opset 13 gives the same shape."""
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for keepdims in (0, 1):
        attributes = {"axes": axes, "keepdims": keepdims}
        (want,) = judged("ReduceMax", [x], attributes, opset=13)
        table, arena, attrs = slots("ReduceMax", [x], attributes)
        status, flags, noop = reduced_axes(arena, table, 1, attrs)
        assert status == 0 and not noop and attrs.shape[0] > 3
        dims = [1 if f else d for f, d in zip(flags, x.shape, strict=True) if keepdims or not f]
        assert tuple(dims) == want.shape


@pytest.mark.parametrize(
    "axes, why",
    [([0, 0], "a repeated axis"), ([2], "axis 2 of rank 2"), ([3], "axis 3"), ([-3], "axis -3")],
)
def test_reduced_axes_refuse_bad_axes(axes, why):
    x = np.zeros((2, 3), dtype=np.float32)
    table, arena, attrs = slots("ReduceSum", [x, np.int64(axes)], {})
    status, _, _ = reduced_axes(arena, table, 2, attrs)
    assert status != 0, why


@pytest.mark.parametrize(
    "op", [SUM, MEAN, MAX, MIN, PROD], ids=["sum", "mean", "max", "min", "prod"]
)
def test_reduce_loop_folds_like_numpy_with_nans_anywhere(op):
    """reduce_loop over random targets (a NaN first, in the middle or last of an output's
    elements, or none): numpy's max / min / sum / prod of each output's elements, NaN
    propagating wherever it sits (acc starts as the reduction's identity, as `reduce` sets it)."""
    rng = np.random.default_rng(op)
    fold = {SUM: np.sum, MEAN: np.sum, MAX: np.max, MIN: np.min, PROD: np.prod}[op]
    start = {SUM: 0.0, MEAN: 0.0, PROD: 1.0, MAX: -np.inf, MIN: np.inf}[op]
    for trial in range(40):
        outputs = int(rng.integers(1, 5))
        x = rng.standard_normal(int(rng.integers(outputs, 24)))
        targets = np.concatenate([np.arange(outputs), rng.integers(0, outputs, x.size - outputs)])
        rng.shuffle(targets)
        for t in range(outputs):
            mine = np.flatnonzero(targets == t)
            where = trial % 4  # first, last, anywhere, none
            if where < 3 and rng.random() < 0.7:
                pick = mine[0] if where == 0 else mine[-1] if where == 1 else rng.choice(mine)
                x[pick] = np.nan
        acc = np.full(outputs, start)
        counts = np.zeros(outputs if op in (MAX, MIN) else 0, dtype=np.int64)
        reduce_loop(op, x, targets.astype(np.int64), acc, counts)
        want = np.array([fold(x[targets == t]) for t in range(outputs)])
        np.testing.assert_allclose(acc, want, rtol=1e-12, equal_nan=True)
        if op in (MAX, MIN):
            assert list(counts) == [int((targets == t).sum()) for t in range(outputs)]


@pytest.mark.parametrize("op", [MAX, MIN], ids=["max", "min"])
def test_reduce_loop_keeps_the_first_of_equal_elements_as_onnxruntime(op):
    """Max / Min over -0.0 and +0.0 (equal): onnxruntime keeps the first one's sign (numpy the
    last's), and so does rtsoa."""
    name = "ReduceMax" if op == MAX else "ReduceMin"
    for pair in ([-0.0, 0.0], [0.0, -0.0]):
        x = np.array(pair, dtype=np.float32)
        (want,) = judged(name, [x], {"keepdims": 0})
        acc = np.full(1, -np.inf if op == MAX else np.inf)
        reduce_loop(
            op, x.astype(np.float64), np.zeros(2, dtype=np.int64), acc, np.zeros(1, np.int64)
        )
        assert acc[0] == 0 and np.signbit(acc[0]) == np.signbit(want) == np.signbit(pair[0])


INTEGER_TYPES = [(dtype_code(t), t) for t in (np.int64, np.int32, np.int16, np.int8, np.uint8)]


@pytest.mark.parametrize("op", [MAX, MIN], ids=["max", "min"])
def test_integer_reduce_loop_takes_each_outputs_extreme(op):
    """An integer Max / Min, started from `_integer_bound` as `reduce` starts it, takes each
    output's extreme, the dtype's own extremes included. (The start value is not what this
    checks: the first element of each output replaces it; the bounds are checked on their
    own below.)"""
    for kind, numpy_type in INTEGER_TYPES:
        info = np.iinfo(numpy_type)
        x = np.array(
            [info.min, 3, info.max, 0, -1 if info.min < 0 else 1, info.max], dtype=np.int64
        )
        targets = np.array([0, 0, 1, 1, 2, 2], dtype=np.int64)
        acc = np.full(3, _integer_bound(int(kind), op == MIN), dtype=np.int64)
        counts = np.zeros(3, dtype=np.int64)
        reduce_loop(op, x, targets, acc, counts)
        fold = np.max if op == MAX else np.min
        assert list(acc) == [fold(x[targets == t]) for t in range(3)], numpy_type


def test_integer_bounds_are_the_dtypes_extremes():
    for kind, numpy_type in INTEGER_TYPES:
        info = np.iinfo(numpy_type)
        assert _integer_bound(int(kind), True) == info.max, numpy_type
        assert _integer_bound(int(kind), False) == info.min, numpy_type
    assert (_integer_bound(int(DType.BOOL), True), _integer_bound(int(DType.BOOL), False)) == (1, 0)


@pytest.mark.parametrize("bad", ["float32", "rank 2", "two slots"])
def test_reduced_axes_refuse_an_axes_list_of_another_dtype_or_rank(bad):
    """The axes input is an int32 / int64 list of rank 0 or 1 (else STATUS_OP_BAD_DTYPE /
    STATUS_OP_BAD_SHAPE, not a reduction over the default axes); the slots are at least
    keepdims, noop_with_empty_axes and the axes."""
    x = np.zeros((2, 3), dtype=np.float32)
    axes = {"float32": np.float32([1]), "rank 2": np.int64([[1]])}.get(bad, np.int64([1]))
    table, arena, attrs = slots("ReduceSum", [x, axes], {})
    if bad == "two slots":
        attrs = attrs[:2]
    status, _, _ = reduced_axes(arena, table, 2, attrs)
    want = {"float32": STATUS_OP_BAD_DTYPE, "rank 2": STATUS_OP_BAD_SHAPE}
    assert status == want.get(bad, STATUS_OP_BAD_ATTRIBUTE)


def test_truncate_divide_rounds_toward_zero():
    """Integer ReduceMean divides as C does (onnxruntime's rule): -7 / 2 is -3, not numpy's -4."""
    values = np.array([-7, 7, -6, 6, 0, -1, 1, -(2**63 - 1)], dtype=np.int64)
    truncate_divide(values, 2)
    assert list(values) == [-3, 3, -3, 3, 0, 0, 0, -(2**62 - 1)]
    values = np.array([-1, -3, 0, 5], dtype=np.int64)  # the mean over an axis of one
    truncate_divide(values, 1)
    assert list(values) == [-1, -3, 0, 5]
