"""NonMaxSuppression through the compiled op entry and a lowered model, judged by onnxruntime
(single thread): both box formats, flipped corners, every optional input absent or given,
several batches and classes, ties, boxes without area; one test per failure status.
"""

import numpy as np
import pytest
from one_node import failure, one_node_model

from rtsoa.ops.abi import STATUS_OP_BAD_ATTRIBUTE, STATUS_OP_BAD_DTYPE, STATUS_OP_BAD_SHAPE
from rtsoa.ops.host import run_numpy
from rtsoa.testing.models import run_onnxruntime
from tests.model_checks import run_and_compare

rng = np.random.default_rng(109)


def random_boxes(batches, count, center):
    """Clustered boxes (many overlaps), some flipped, some without area."""
    origin = rng.uniform(0, 4, size=(batches, count, 2)).astype(np.float32)
    size = rng.uniform(0, 3, size=(batches, count, 2)).astype(np.float32)
    size[:, ::7] = 0.0  # no area
    if center:
        return np.concatenate([origin, size], axis=-1)
    corners = np.concatenate([origin, origin + size], axis=-1)
    corners[:, ::3] = corners[:, ::3][..., [2, 3, 0, 1]]  # the other diagonal
    return corners


def scalars(limit, iou, floor):
    return [
        None if limit is None else np.array([limit], np.int64),
        None if iou is None else np.array([iou], np.float32),
        None if floor is None else np.array([floor], np.float32),
    ]


def same_as_onnxruntime(inputs, center):
    """The op on `inputs` (trailing None: absent) against onnxruntime."""
    while inputs[-1] is None:
        inputs = inputs[:-1]
    attributes = {"center_point_box": center}
    model, feeds = one_node_model("NonMaxSuppression", inputs, attributes, 11, np.int64)
    want = run_onnxruntime(model, feeds)["y"]
    (got,) = run_numpy("NonMaxSuppression", [x for x in inputs if x is not None], attributes, 1)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize(
    "limit, iou, floor",
    [
        (3, 0.5, None),
        (100, 0.3, 0.4),
        (2, 0.0, 0.0),
        (10, 1.0, None),
        (0, 0.5, None),
        (None, None, None),
    ],
)
def test_non_max_suppression_against_onnxruntime(center, limit, iou, floor):
    boxes = random_boxes(2, 30, center)
    scores = rng.uniform(0, 1, size=(2, 3, 30)).astype(np.float32)
    scores[:, :, 5:9] = 0.5  # ties
    same_as_onnxruntime([boxes, scores, *scalars(limit, iou, floor)], center)


def test_non_max_suppression_of_no_boxes():
    boxes = np.zeros((1, 0, 4), np.float32)
    scores = np.zeros((1, 2, 0), np.float32)
    same_as_onnxruntime([boxes, scores, *scalars(5, 0.5, None)], 0)


def test_non_max_suppression_bad_inputs_fail():
    boxes, scores = random_boxes(1, 4, 0), np.ones((1, 1, 4), np.float32)
    limit = np.array([2], np.int64)
    name = "NonMaxSuppression"
    failure(STATUS_OP_BAD_ATTRIBUTE, name, [boxes, scores, limit], {"center_point_box": 2})
    failure(STATUS_OP_BAD_SHAPE, name, [boxes, scores[:, :, :3], limit], {})
    failure(STATUS_OP_BAD_SHAPE, name, [boxes[..., :3], scores, limit], {})
    failure(STATUS_OP_BAD_SHAPE, name, [boxes, scores, np.array([1, 2], np.int64)], {})
    failure(STATUS_OP_BAD_DTYPE, name, [boxes.astype(np.float64), scores, limit], {})
    failure(STATUS_OP_BAD_DTYPE, name, [boxes, scores, limit.astype(np.int32)], {})


def test_a_model_keeping_a_run_time_number_of_boxes():
    """The kept count depends on the scores given at run time: two input sets."""
    boxes = random_boxes(1, 20, 0)
    inputs = [boxes, np.ones((1, 2, 20), np.float32), *scalars(8, 0.4, 0.3)]
    model, feeds = one_node_model("NonMaxSuppression", inputs, {}, 11, np.int64)
    second = dict(feeds, x1=rng.uniform(0, 1, size=(1, 2, 20)).astype(np.float32))
    run_and_compare(model, [feeds, second])
