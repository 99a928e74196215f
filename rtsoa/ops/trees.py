"""TreeEnsemble: the inference of a tree ensemble (ai.onnx.ml TreeEnsemble, TreeEnsembleRegressor,
TreeEnsembleClassifier) over flattened node arrays that lowering prepares and checks
(`rtsoa.lowering.ml_trees`).

Inputs (every one but X a constant made at lowering; each array carries one padding element
past its count, so none is ever empty):
  0 X: [N, F] float32 / float64 / int32 / int64, one row per sample.
  1 nodes: int64 [n_nodes * NODE_WIDTH], per node (feature, mode, true child, false child,
    missing value tracks true, first, stop); a leaf's [first, stop) is its range of weights,
    a MEMBER node's its range of set members.
  2 thresholds: float64 [n_nodes] (the split value of each branch node).
  3 roots: int64 [n_trees], the root node of each tree.
  4 targets: int64 [n_weights], the target (or class) of each leaf weight.
  5 weights: float64 [n_weights].
  6 base: float64 [n_base] base values (n_base 0 or n_targets).
  7 members: float64 [n_members], the set members of MEMBER nodes.
  8 labels: int64 [n_targets], class labels (classifiers only).
Outputs: 0 Z [N, n_targets] scores (float32 or float64: attrs OUT_DTYPE); 1 Y [N] int64 labels
(classifiers only).

The comparisons run in float64 (exact for float32 and float64 values alike); the scores
aggregate in float64 and are rounded once to the output type. Aggregation and the finishing of
scores follow onnxruntime: a target no leaf weight reached is 0 (its base value is not added);
with one target the base value is added to every row. See docs/models.md for the
classifier's binary case.

Lowering has checked every index; the walk still checks each child, feature, leaf range and
target against its array (one compare each) and stops after max_depth steps, so a graph built
by hand cannot make it read outside its inputs or loop for ever: it fails with
STATUS_OP_BAD_INDEX instead.
"""

import math

import numpy as np

from rtsoa._jit import jit_inline_llvm, jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    F64,
    I32,
    I64,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
    DType,
    dim,
    dtype,
    numel,
    present,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.copying import holds
from rtsoa.ops.registry import register_op

NODE_WIDTH = 7  # int64 columns per node (see the module docstring)
BLOCK_ROWS = 128  # rows that walk each tree in turn
# node modes, as the nodes array holds them
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER, LEAF = range(8)
# aggregate functions
AVERAGE, SUM, MIN, MAX = range(4)
# post transforms
NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT = range(5)
# how the scores become outputs
REGRESSOR, CLASSIFIER, BINARY = range(3)
# attribute slots
(
    N_TARGETS,
    AGGREGATE,
    POST,
    OUT_DTYPE,
    KIND,
    ALL_POSITIVE,
    MAX_DEPTH,
    N_NODES,
    N_TREES,
    N_WEIGHTS,
    N_BASE,
    N_MEMBERS,
    SLOTS,
) = range(13)

_INPUT_DTYPES = (I64, F64, I64, I64, F64, F64, F64, I64)  # inputs 1 .. 8


@jit_with_nrt
def _counts(attrs):
    """The element count each of inputs 1 .. 8 must hold at least (the padding included)."""
    n_nodes = attrs[N_NODES]
    counts = np.empty(8, dtype=np.int64)
    counts[0] = n_nodes * NODE_WIDTH + 1
    counts[1] = n_nodes + 1
    counts[2] = attrs[N_TREES] + 1
    counts[3] = attrs[N_WEIGHTS] + 1
    counts[4] = attrs[N_WEIGHTS] + 1
    counts[5] = attrs[N_BASE] + 1
    counts[6] = attrs[N_MEMBERS] + 1
    counts[7] = attrs[N_TARGETS]
    return counts


@jit_with_nrt
def tree_ensemble_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < SLOTS:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    for slot in range(SLOTS):
        if attrs[slot] < 0:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    classifier = attrs[KIND] != REGRESSOR
    if attrs[N_TARGETS] < 1 or attrs[N_TREES] < 1 or attrs[KIND] > BINARY:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if attrs[AGGREGATE] > MAX or attrs[POST] > PROBIT:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if attrs[OUT_DTYPE] != F32 and attrs[OUT_DTYPE] != F64:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if classifier != (n_in == 9) or n_out > 1 + classifier:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    kind = dtype(table, 0)
    if kind != F32 and kind != F64 and kind != I32 and kind != I64:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if rank(table, 0) != 2 or dim(table, 0, 0) < 0 or dim(table, 0, 1) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    counts = _counts(attrs)
    for row in range(1, n_in):
        if not present(table, row) or dtype(table, row) != _INPUT_DTYPES[row - 1]:
            return np.int32(STATUS_OP_BAD_DTYPE)
        if rank(table, row) != 1 or numel(table, row) < counts[row - 1]:
            return np.int32(STATUS_OP_BAD_SHAPE)
    set_output(table, n_in, attrs[OUT_DTYPE], 2)
    set_dim(table, n_in, 0, dim(table, 0, 0))
    set_dim(table, n_in, 1, attrs[N_TARGETS])
    if n_out > 1:
        set_output(table, n_in + 1, I64, 1)
        set_dim(table, n_in + 1, 0, dim(table, 0, 0))
    return OK


@jit_with_nrt
def _load_rows(arena, table, first, count, features, out):
    """Rows first .. first + count - 1 of X as float64 into `out` (count * features)."""
    kind = dtype(table, 0)
    start = first * features
    n = count * features
    if kind == F32:
        x32 = view(arena, table, 0, np.float32)
        for k in range(n):
            out[k] = x32[start + k]
    elif kind == F64:
        x64 = view(arena, table, 0, np.float64)
        for k in range(n):
            out[k] = x64[start + k]
    elif kind == I32:
        i32 = view(arena, table, 0, np.int32)
        for k in range(n):
            out[k] = i32[start + k]
    else:
        i64 = view(arena, table, 0, np.int64)
        for k in range(n):
            out[k] = i64[start + k]


@jit_inline_llvm
def _compare(mode, value, threshold):
    """The branch test of a node of `mode` (LEQ .. NEQ) on `value`."""
    if mode == LT:
        return value < threshold
    if mode == GTE:
        return value >= threshold
    if mode == GT:
        return value > threshold
    if mode == EQ:
        return value == threshold
    if mode == NEQ:
        return value != threshold
    return value <= threshold


@jit_inline_llvm
def _leaf(nodes, thresholds, members, root, x, at, features, n_nodes, n_members, max_depth):
    """The leaf node the row x[at : at + features] reaches from `root`, or -1 for a walk that
    leaves the arrays or does not reach a leaf within max_depth steps."""
    node = root
    for _ in range(max_depth + 1):
        if node < 0 or node >= n_nodes:
            return np.int64(-1)
        base = node * NODE_WIDTH
        mode = nodes[base + 1]
        if mode == LEAF:
            return node
        feature = nodes[base]
        if feature < 0 or feature >= features or mode < 0 or mode > MEMBER:
            return np.int64(-1)
        value = x[at + feature]
        if mode == LEQ:  # the common mode first: one compare
            go = value <= thresholds[node]
        elif mode == MEMBER:
            first, stop = nodes[base + 5], nodes[base + 6]
            if first < 0 or stop > n_members or first > stop:
                return np.int64(-1)
            go = False
            for k in range(first, stop):
                go = go or members[k] == value
        else:
            go = _compare(mode, value, thresholds[node])
        if not go and nodes[base + 4] != 0 and math.isnan(value):
            go = True
        node = nodes[base + 3 - np.int64(go)]  # true child at +2, false at +3
    return np.int64(-1)


@jit_inline_llvm
def _logistic(value):
    v = 1.0 / (1.0 + math.exp(-abs(value)))
    return 1.0 - v if value < 0 else v


@jit_with_nrt
def _probit(value):
    """onnxruntime's probit: sqrt(2) * erfinv(2 v - 1), erfinv by Winitzki's approximation."""
    x = 2.0 * value - 1.0
    sign = -1.0 if x < 0 else 1.0
    x = (1.0 - x) * (1.0 + x)
    log = math.log(x) if x > 0 else -math.inf
    v = 2.0 / (3.14159 * 0.147) + 0.5 * log
    v2 = 1.0 / 0.147 * log
    return 1.41421356 * sign * math.sqrt(-v + math.sqrt(v * v - v2))


@jit_with_nrt
def _transform(scores, post):
    """Apply post transform `post` to the scores of one row, in place."""
    if post == LOGISTIC:
        for t in range(scores.shape[0]):
            scores[t] = _logistic(scores[t])
    elif post == PROBIT:
        for t in range(scores.shape[0]):
            scores[t] = _probit(scores[t])
    elif post == SOFTMAX or post == SOFTMAX_ZERO:
        top = -np.inf
        for t in range(scores.shape[0]):
            top = max(top, scores[t])
        total = 0.0
        for t in range(scores.shape[0]):
            if post == SOFTMAX or abs(scores[t]) > 1e-7:
                scores[t] = math.exp(scores[t] - top)
                total += scores[t]
            else:
                scores[t] *= math.exp(-top)
        for t in range(scores.shape[0]):
            scores[t] /= total


@jit_with_nrt
def _finish(scores, has, base, n_base, attrs, n_trees):
    """Turn one row's aggregated scores into its output scores; returns the index of its label
    among the classes (classifiers), else 0."""
    kind, post, aggregate = attrs[KIND], attrs[POST], attrs[AGGREGATE]
    targets = scores.shape[0]
    if kind == BINARY:  # two classes, weights for class 0 only: one margin s
        s = scores[0] + (base[0] if n_base > 0 else 0.0)
        if attrs[ALL_POSITIVE] != 0:
            scores[0], scores[1] = 1.0 - s, s
            label = 1 if s > 0.5 else 0
        else:
            scores[0], scores[1] = -s, s
            label = 1 if s > 0.0 else 0
        if post == LOGISTIC:
            scores[0], scores[1] = _logistic(-s), _logistic(s)
        return label
    for t in range(targets):
        value = scores[t]  # 0 where no weight reached the target
        if aggregate == AVERAGE:
            value /= n_trees
        if n_base > 0 and (has[t] != 0 or kind != REGRESSOR or targets == 1):
            value += base[t]
        scores[t] = value
    label = 0
    for t in range(1, targets):
        if scores[t] > scores[label]:
            label = t
    _transform(scores, post)
    return label


@jit_with_nrt
def tree_ensemble_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = tree_ensemble_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    for row in range(n_in + n_out):
        if not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    rows, features = dim(table, 0, 0), dim(table, 0, 1)
    targets, aggregate = attrs[N_TARGETS], attrs[AGGREGATE]
    n_nodes, n_trees, n_weights = attrs[N_NODES], attrs[N_TREES], attrs[N_WEIGHTS]
    n_members, depth = attrs[N_MEMBERS], attrs[MAX_DEPTH]
    if attrs[KIND] == BINARY and targets != 2:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    nodes = view(arena, table, 1, np.int64)
    thresholds = view(arena, table, 2, np.float64)
    roots = view(arena, table, 3, np.int64)
    leaf_targets = view(arena, table, 4, np.int64)
    weights = view(arena, table, 5, np.float64)
    base = view(arena, table, 6, np.float64)
    members = view(arena, table, 7, np.float64)
    labels = view(arena, table, 8 if n_in > 8 else 4, np.int64)  # read by classifiers only
    z32 = view(arena, table, n_in, np.float32)
    z64 = view(arena, table, n_in, np.float64)
    # Rows go in blocks, every tree over the block's rows in turn: a tree's nodes stay in cache
    # while the block's rows walk it (bench_ml: rf-100x10 rows 1000).
    block = min(rows, BLOCK_ROWS)
    x = np.empty(block * features, dtype=np.float64)
    scores = np.empty(block * targets, dtype=np.float64)
    has = np.empty(block * targets, dtype=np.uint8)
    for first in range(0, rows, BLOCK_ROWS):
        count = min(BLOCK_ROWS, rows - first)
        _load_rows(arena, table, first, count, features, x)
        scores[:] = 0.0
        has[:] = 0
        for tree in range(n_trees):
            for r in range(count):
                leaf = _leaf(
                    nodes,
                    thresholds,
                    members,
                    roots[tree],
                    x,
                    r * features,
                    features,
                    n_nodes,
                    n_members,
                    depth,
                )
                if leaf < 0:
                    return np.int32(STATUS_OP_BAD_INDEX)
                first_weight = nodes[leaf * NODE_WIDTH + 5]
                stop = nodes[leaf * NODE_WIDTH + 6]
                if first_weight < 0 or stop > n_weights or first_weight > stop:
                    return np.int32(STATUS_OP_BAD_INDEX)
                for w in range(first_weight, stop):
                    t = leaf_targets[w]
                    if t < 0 or t >= targets:
                        return np.int32(STATUS_OP_BAD_INDEX)
                    at = r * targets + t
                    value = weights[w]
                    if has[at] == 0 or aggregate <= SUM:
                        scores[at] = value + (scores[at] if aggregate <= SUM else 0.0)
                    elif aggregate == MIN:
                        scores[at] = min(scores[at], value)
                    else:
                        scores[at] = max(scores[at], value)
                    has[at] = 1
        for r in range(count):
            row = scores[r * targets : (r + 1) * targets]
            label = _finish(
                row, has[r * targets : (r + 1) * targets], base, attrs[N_BASE], attrs, n_trees
            )
            out = (first + r) * targets
            for t in range(targets):
                if attrs[OUT_DTYPE] == F32:
                    z32[out + t] = row[t]
                else:
                    z64[out + t] = row[t]
            if n_out > 1:
                view(arena, table, n_in + 1, np.int64)[first + r] = labels[label]
    return OK


def encode_tree_ensemble(attributes, inputs):
    """The slots lowering prepared (`rtsoa.lowering.ml_trees`)."""
    return list(attributes["slots"])


register_op(
    "TreeEnsemble",
    tree_ensemble_infer,
    tree_ensemble_compute,
    encode=encode_tree_ensemble,
    inputs=(8, 9),
    outputs=(1, 2),
    dtypes={0: frozenset({DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64})},
    doc="tree ensemble inference over node arrays prepared at lowering",
)
