"""NonMaxSuppression (opsets 10-11): for each batch and class, the boxes greedily kept by score
whose overlap (intersection over union) with every box kept before is at most iou_threshold.

Inputs: boxes float32 [batches, boxes, 4], scores float32 [batches, classes, boxes], and the
optional scalars (or one-element tensors) max_output_boxes_per_class (int64, default 0:
nothing kept), iou_threshold (float32, default 0) and score_threshold (float32; absent: no
threshold). attrs [center_point_box]: 0 for corners [y1, x1, y2, x2] (either diagonal), 1 for
[x_center, y_center, width, height]. Boxes are visited by descending score, ties by
ascending index; a box scoring at most score_threshold is never kept; a box with no area or
no intersection suppresses nothing. The output is int64 [kept, 3] of (batch, class, box) in
that order, batch by batch and class by class. All arithmetic is float32 (onnxruntime's), so
a box whose overlap equals the threshold exactly is kept as there. The output's length
depends on the data, which shape inference reads.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    I64,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_NEEDS_DATA,
    dim,
    dtype,
    has_data,
    numel,
    present,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.copying import holds
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import element_count


@jit_with_nrt
def _corners(boxes, base, center):
    """(y1, x1, y2, x2) of the box at `base`, y1 <= y2 and x1 <= x2, in float32."""
    if center:
        half_width = boxes[base + 2] / np.float32(2)
        half_height = boxes[base + 3] / np.float32(2)
        x, y = boxes[base], boxes[base + 1]
        return y - half_height, x - half_width, y + half_height, x + half_width
    a, b, c, d = boxes[base], boxes[base + 1], boxes[base + 2], boxes[base + 3]
    return min(a, c), min(b, d), max(a, c), max(b, d)


@jit_with_nrt
def _suppresses(boxes, first, second, center, threshold):
    """Does the box at `first` (kept) suppress the one at `second`?"""
    ay1, ax1, ay2, ax2 = _corners(boxes, first, center)
    by1, bx1, by2, bx2 = _corners(boxes, second, center)
    width = min(ax2, bx2) - max(ax1, bx1)
    height = min(ay2, by2) - max(ay1, by1)
    if width <= 0 or height <= 0:
        return False
    area_a = (ax2 - ax1) * (ay2 - ay1)
    area_b = (bx2 - bx1) * (by2 - by1)
    if area_a <= 0 or area_b <= 0:
        return False
    intersection = width * height
    return intersection / (area_a + area_b - intersection) > threshold


@jit_with_nrt
def _scalar_checks(table, n_in):
    """Status of the optional scalar inputs: one element each, of their dtype."""
    for row in range(2, n_in):
        if not present(table, row):
            continue
        if dtype(table, row) != (I64 if row == 2 else F32):
            return np.int32(STATUS_OP_BAD_DTYPE)
        if numel(table, row) != 1 or rank(table, row) > 1:
            return np.int32(STATUS_OP_BAD_SHAPE)
        if not has_data(table, row):
            return np.int32(STATUS_OP_NEEDS_DATA)
    return OK


@jit_with_nrt
def _select(arena, table, n_in, center, out):
    """The kept boxes' count; their (batch, class, box) rows written to `out` when it is not
    empty (it has room for them: the count is what shape inference sized it by)."""
    batches, count, classes = dim(table, 0, 0), dim(table, 0, 1), dim(table, 1, 1)
    limit = np.int64(0)
    if n_in > 2 and present(table, 2):
        limit = max(view(arena, table, 2, np.int64)[0], np.int64(0))
    threshold = np.float32(0)
    if n_in > 3 and present(table, 3):
        threshold = view(arena, table, 3, np.float32)[0]
    has_floor = n_in > 4 and present(table, 4)
    floor = view(arena, table, 4, np.float32)[0] if has_floor else np.float32(0)
    boxes = view(arena, table, 0, np.float32)
    scores = view(arena, table, 1, np.float32)
    writing = out.shape[0] > 0
    kept_total = np.int64(0)
    kept = np.empty(min(limit, count), dtype=np.int64)
    for b in range(batches):
        for c in range(classes):
            start = (b * classes + c) * count
            order = np.argsort(-scores[start : start + count], kind="mergesort")
            found = 0
            for candidate in order:
                if found >= limit:
                    break
                if has_floor and not scores[start + candidate] > floor:
                    continue
                second = (b * count + candidate) * 4
                suppressed = False
                for k in range(found):
                    first = (b * count + kept[k]) * 4
                    if _suppresses(boxes, first, second, center, threshold):
                        suppressed = True
                        break
                if suppressed:
                    continue
                kept[found] = candidate
                if writing:
                    row = (kept_total + found) * 3
                    out[row], out[row + 1], out[row + 2] = b, c, candidate
                found += 1
            kept_total += found
    return kept_total


@jit_with_nrt
def non_max_suppression_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 1 or (attrs[0] != 0 and attrs[0] != 1):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if dtype(table, 0) != F32 or dtype(table, 1) != F32:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if rank(table, 0) != 3 or rank(table, 1) != 3 or dim(table, 0, 2) != 4:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if dim(table, 1, 0) != dim(table, 0, 0) or dim(table, 1, 2) != dim(table, 0, 1):
        return np.int32(STATUS_OP_BAD_SHAPE)
    if element_count(table, 0) < 0 or element_count(table, 1) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    status = _scalar_checks(table, n_in)
    if status != 0:
        return status
    if not (has_data(table, 0) and has_data(table, 1)):
        return np.int32(STATUS_OP_NEEDS_DATA)
    for row in range(n_in):
        if present(table, row) and not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    kept = _select(arena, table, n_in, attrs[0] == 1, np.zeros(0, dtype=np.int64))
    set_output(table, n_in, I64, 2)
    set_dim(table, n_in, 0, kept)
    set_dim(table, n_in, 1, 3)
    return OK


@jit_with_nrt
def non_max_suppression_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = non_max_suppression_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    if not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    if dim(table, n_in, 0) > 0:
        _select(arena, table, n_in, attrs[0] == 1, view(arena, table, n_in, np.int64))
    return OK


def encode_non_max_suppression(attributes, inputs):
    """NonMaxSuppression slots: center_point_box (default 0)."""
    return [int(attributes.get("center_point_box", 0))]


register_op(
    "NonMaxSuppression",
    non_max_suppression_infer,
    non_max_suppression_compute,
    encode=encode_non_max_suppression,
    inputs=(2, 5),
    data_inputs=(0, 1, 2, 3, 4),
)
