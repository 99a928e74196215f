"""Slice's parameters (`slice_params`) and the axis normalisation it shares with the Reduce*
family (`normalize_axes`), called on their own and judged by onnxruntime (onnx.reference
where onnxruntime departs from the definition).

The command of `mutation/ops-slice.toml`; how these tests run: `op_parameters.py`.
"""

from collections import Counter

import numpy as np
import pytest
from op_parameters import judged, slots

from rtsoa.abi.operands import COL_DIMS
from rtsoa.abi.status import STATUS_OP_BAD_DTYPE, STATUS_OP_BAD_SHAPE, STATUS_OP_MISSING_INPUT
from rtsoa.ops.indexing import slice_params

BIG = np.iinfo(np.int64).max
SLICE_BOUNDS = [-BIG - 1, -BIG, -12, -7, -3, -2, -1, 0, 1, 2, 3, 5, 6, 7, 12, BIG]
SLICE_STEPS = [-BIG - 1, -5, -2, -1, 1, 2, 3, 7, BIG]


def _slice_case(rng):
    rank = int(rng.integers(1, 4))
    shape = tuple(int(v) for v in rng.integers(0, 7, rank))
    n = int(rng.integers(1, rank + 1))
    axes = rng.permutation(rank)[:n]
    axes = np.where(rng.random(n) < 0.3, axes - rank, axes)  # some negative axes
    starts = rng.choice(SLICE_BOUNDS, n)
    ends = rng.choice(SLICE_BOUNDS, n)
    steps = rng.choice(SLICE_STEPS, n)
    given_axes = rng.random() < 0.7  # omitted: the first n axes, n below the rank too
    given_steps = rng.random() < 0.8
    if not given_axes:
        axes = np.arange(n)
    inputs = [np.int64(starts), np.int64(ends)]
    if given_axes or given_steps:
        inputs.append(np.int64(axes) if given_axes else None)
    if given_steps:
        inputs.append(np.int64(steps))
    return shape, inputs


def test_slice_parameters_select_what_onnxruntime_slices():
    """rtsoa's (first, step, count) per axis, applied to x = arange(...).reshape(shape), pick
    exactly onnxruntime's Slice of x: starts and ends past either end, clamped per the step's
    sign, int64's extremes as bounds and steps, negative axes, omitted axes and steps."""
    rng = np.random.default_rng(20261209)
    reached = Counter()
    for _ in range(300):
        shape, inputs = _slice_case(rng)
        x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        want, reference = _slice_judged(x, inputs)
        reached["judged by onnx.reference"] += reference
        table, arena, attrs = slots("Slice", [x, *inputs], {})
        status, first, steps, counts = slice_params(arena, table, 1 + len(inputs), attrs)
        case = f"shape {shape}, starts/ends/axes/steps {inputs}"
        assert status == 0, case
        index = np.ix_(
            *[f + s * np.arange(c) for f, s, c in zip(first, steps, counts, strict=True)]
        )
        got = x[index] if x.size else np.zeros(tuple(counts), dtype=x.dtype)
        assert got.shape == want.shape, case
        np.testing.assert_array_equal(got, want, err_msg=case)
        reached["negative step"] += bool((steps < 0).any())
        reached["empty"] += got.size == 0
        reached["non-empty negative step"] += bool((steps < 0).any() and got.size > 0)
        omitted = len(inputs) < 3 or inputs[2] is None
        reached["axes omitted"] += omitted
        reached["axes omitted, fewer than the rank"] += omitted and len(inputs[0]) < len(shape)
        reached["steps omitted"] += len(inputs) < 4
    print(dict(reached))
    for branch in (
        "negative step",
        "empty",
        "non-empty negative step",
        "axes omitted",
        "steps omitted",
    ):
        assert reached[branch] >= 20, reached


def _slice_judged(x, inputs):
    """(x sliced by `inputs` = starts, ends[, axes or None[, steps]], whether onnx.reference
    judged it): by onnxruntime, or by onnx.reference where an end is int64's largest value with
    a negative step: onnxruntime reads that end as "past the beginning" (x = arange(4), start 3, end
    2**63 - 1, step -1: [3, 2, 1, 0]), where the definition clamps it to the last element
    (start 3, end 3: nothing), as onnx.reference and rtsoa do."""
    steps = inputs[3] if len(inputs) > 3 else np.ones_like(inputs[1])
    reference = bool(((inputs[1] == BIG) & (steps < 0)).any())
    (want,) = judged("Slice", [x, *inputs], {}, reference=reference)
    return want, reference


def test_a_negative_slice_step_from_before_the_axis_takes_element_0():
    """x = arange(6), starts -10, ends -12, step -1: the ONNX rule clamps a negative step's start
    to [0, 5] and its end to [-1, 5], so element 0 is taken (onnxruntime: [0]); numpy's rule
    (onnx.reference's) clamps the start to -1 and takes nothing."""
    x = np.arange(6, dtype=np.float32)
    inputs = [np.array([-10]), np.array([-12]), np.array([0]), np.array([-1])]
    table, arena, attrs = slots("Slice", [x, *inputs], {})
    status, first, steps, counts = slice_params(arena, table, 5, attrs)
    assert status == 0 and (list(first), list(steps), list(counts)) == ([0], [-1], [1])


@pytest.mark.parametrize("step", [-100, -(2**62), -(2**63)], ids=["-100", "-2**62", "-2**63"])
def test_a_large_negative_slice_step_on_a_long_axis(step):
    """On 200 elements from the last, a step of -100 takes [199, 99]; the steps that would
    overflow -step are clamped to -2**62 (one element, as any step past the axis)."""
    x = np.arange(200, dtype=np.float32)
    inputs = [np.int64([-1]), np.int64([-(2**63)]), np.int64([0]), np.int64([step])]
    want, _ = _slice_judged(x, inputs)
    table, arena, attrs = slots("Slice", [x, *inputs], {})
    status, first, steps, counts = slice_params(arena, table, 5, attrs)
    assert status == 0
    np.testing.assert_array_equal(x[first[0] + steps[0] * np.arange(counts[0])], want)
    assert list(want) == ([199.0, 99.0] if step == -100 else [199.0])


def test_a_negative_slice_step_past_2_to_62_on_an_empty_tensor_of_a_huge_axis():
    """A (0, 2**62) tensor is empty, so any axis length is possible: from its last index by
    -2**63 (clamped to -2**62, so that -step does not overflow) is one index; a clamp at
    -2**61 would take two."""
    x = np.zeros((0, 1), dtype=np.float32)
    inputs = [np.int64([-1]), np.int64([-(2**63)]), np.int64([1]), np.int64([-(2**63)])]
    table, arena, attrs = slots("Slice", [x, *inputs], {})
    table[0, COL_DIMS + 1] = 2**62
    status, first, steps, counts = slice_params(arena, table, 5, attrs)
    assert status == 0
    assert (first[1], steps[1], counts[1]) == (2**62 - 1, -(2**62), 1)
    assert counts[0] == 0


BAD_SLICES = [  # (x shape, starts, ends, axes, steps, why)
    ((4, 4), [0], [2], [0], [0], "a zero step"),
    ((4, 4), [0, 0], [2], None, None, "ends shorter than starts"),
    ((4, 4), [0, 0], [2, 2], [0], None, "axes shorter than starts"),
    ((4, 4), [0], [2], [0], [1, 1], "steps longer than starts"),
    ((4, 4), [0, 0], [2, 2], [0, 1], [1], "steps shorter than starts"),
    ((4, 4), [0], [2], [0, 1], None, "axes longer than starts"),
    ((4, 4), [0], [2], [3], None, "axis 3 of a rank-2 input"),
    ((4, 4), [0], [2, 2], None, None, "ends longer than starts"),
    ((4, 4), [0, 0], [2, 2], [1, 1], None, "a repeated axis"),
    ((4, 4), [0, 0], [2, 2], [1, -1], None, "an axis repeated as a negative one"),
    ((4, 4), [0], [2], [2], None, "axis 2 of a rank-2 input"),
    ((4, 4), [0], [2], [-3], None, "axis -3 of a rank-2 input"),
    ((4,), [0, 0], [2, 2], None, None, "two starts for one axis"),
]


@pytest.mark.parametrize(
    "shape, starts, ends, axes, steps, why", BAD_SLICES, ids=[c[-1] for c in BAD_SLICES]
)
def test_slice_parameters_refuse_what_onnx_forbids(shape, starts, ends, axes, steps, why):
    x = np.zeros(shape, dtype=np.float32)
    inputs = [np.int64(starts), np.int64(ends), None if axes is None else np.int64(axes)]
    if steps is not None:
        inputs.append(np.int64(steps))
    while inputs[-1] is None:
        inputs.pop()
    table, arena, attrs = slots("Slice", [x, *inputs], {})
    status, *_ = slice_params(arena, table, 1 + len(inputs), attrs)
    assert status != 0, why


@pytest.mark.parametrize("bad", ["float32", "rank 2"])
@pytest.mark.parametrize("position", [0, 1, 2, 3], ids=["starts", "ends", "axes", "steps"])
def test_slice_list_inputs_of_another_dtype_or_rank_are_refused(position, bad):
    """Starts, ends, axes and steps are int32 / int64 lists of rank 0 or 1: another dtype is
    STATUS_OP_BAD_DTYPE and rank 2 STATUS_OP_BAD_SHAPE, for each of the four (an axes or
    steps input whose refusal went unread would slice by the defaults instead)."""
    x = np.zeros((4, 4), dtype=np.float32)
    inputs = [np.int64([0, 1]), np.int64([2, 3]), np.int64([0, 1]), np.int64([1, 1])]
    inputs[position] = (
        inputs[position].astype(np.float32) if bad == "float32" else inputs[position].reshape(1, 2)
    )
    table, arena, attrs = slots("Slice", [x, *inputs], {})
    status, *_ = slice_params(arena, table, 5, attrs)
    assert status == (STATUS_OP_BAD_DTYPE if bad == "float32" else STATUS_OP_BAD_SHAPE)


def test_slice_without_starts_or_ends_is_a_missing_input():
    """Slice's starts and ends are required: either absent is STATUS_OP_MISSING_INPUT (not a
    length mismatch with the one given)."""
    x = np.zeros((4,), dtype=np.float32)
    for inputs in ([np.int64([0]), None], [None, np.int64([2])]):
        table, arena, attrs = slots("Slice", [x, *inputs], {})
        status, *_ = slice_params(arena, table, 3, attrs)
        assert status == STATUS_OP_MISSING_INPUT, inputs
