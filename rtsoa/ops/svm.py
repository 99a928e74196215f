"""The jitted parts of the ai.onnx.ml support vector machines (`rtsoa.lowering.ml_svm`).

SquaredDistances (rtsoa's own): X [N, F] and vectors [V, F], float32, give [N, V] float32,
sum over f of (x_f - v_f)^2 accumulated in float32 in feature order, as onnxruntime's RBF
kernel sums it (composed of Sub / Mul / ReduceSum it made an [N, V, F] temporary and ran
28x slower than onnxruntime on 1,000 rows of an SVC of 300 vectors, `bench_ml`).

SVMProbabilities (rtsoa's own, made by lowering an ai.onnx.ml SVMClassifier with prob_a and
prob_b, `rtsoa.lowering.ml_svm`): class probabilities from the pairwise decision values of a
one-vs-one SVM, by Platt scaling and libsvm's pairwise coupling, as the operator definition's
reference and onnxruntime compute them, in float32.

Inputs: decisions [N, P] float32 (P = C (C - 1) / 2 pairs, in the order (0, 1), (0, 2), ..,
(1, 2), ..), prob_a [P] and prob_b [P] float32. Attribute slot 0: C, the class count (>= 2).
Output [N, C] float32. For pair (i, j) with decision value s, r_ij = 1 - logistic(s a + b),
clipped to [1e-7, 1 - 1e-7], r_ji = 1 - r_ij; then p minimises sum over pairs of
(r_ji p_i - r_ij p_j)^2 with sum(p) = 1, by libsvm's fixed-point iteration from p = 1 / C
(at most max(100, C) rounds, until every |(Qp)_t - p'Qp| < 0.005 / C).
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
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

CLASSES = 0  # attribute slot: the class count


@jit_with_nrt
def squared_distances_infer(arena, table, n_in, n_out, attrs, fattrs):
    for row in range(2):
        if not present(table, row) or dtype(table, row) != F32:
            return np.int32(STATUS_OP_BAD_DTYPE)
        if rank(table, row) != 2 or dim(table, row, 0) < 0:
            return np.int32(STATUS_OP_BAD_SHAPE)
    if dim(table, 0, 1) != dim(table, 1, 1):
        return np.int32(STATUS_OP_BAD_SHAPE)
    set_output(table, n_in, F32, 2)
    set_dim(table, n_in, 0, dim(table, 0, 0))
    set_dim(table, n_in, 1, dim(table, 1, 0))
    return OK


@jit_with_nrt
def _distances(x, vectors, out, rows, count, features):
    for n in range(rows):
        for v in range(count):
            total = np.float32(0.0)
            for f in range(features):
                diff = x[n * features + f] - vectors[v * features + f]
                total += diff * diff
            out[n * count + v] = total


@jit_with_nrt
def squared_distances_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = squared_distances_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    for row in (0, 1, n_in):
        if not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    _distances(
        view(arena, table, 0, np.float32),
        view(arena, table, 1, np.float32),
        view(arena, table, n_in, np.float32),
        dim(table, 0, 0),
        dim(table, 1, 0),
        dim(table, 0, 1),
    )
    return OK


@jit_with_nrt
def svm_probabilities_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 1 or attrs[CLASSES] < 2:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    classes = attrs[CLASSES]
    pairs = classes * (classes - 1) // 2
    for row in range(3):
        if not present(table, row) or dtype(table, row) != F32:
            return np.int32(STATUS_OP_BAD_DTYPE)
    if rank(table, 0) != 2 or dim(table, 0, 0) < 0 or dim(table, 0, 1) != pairs:
        return np.int32(STATUS_OP_BAD_SHAPE)
    for row in range(1, 3):
        if rank(table, row) != 1 or numel(table, row) != pairs:
            return np.int32(STATUS_OP_BAD_SHAPE)
    set_output(table, n_in, F32, 2)
    set_dim(table, n_in, 0, dim(table, 0, 0))
    set_dim(table, n_in, 1, classes)
    return OK


@jit_with_nrt
def _logistic(value):
    """1 / (1 + exp(-value)) in float32, without overflow for large |value|."""
    positive = np.float32(1.0) / (np.float32(1.0) + np.exp(-np.abs(value)))
    return np.float32(1.0) - positive if value < 0 else positive


@jit_with_nrt
def _couple(r, p, q, qp, classes):
    """libsvm's multiclass_probability: p [C] from the pairwise estimates r [C * C]."""
    one = np.float32(1.0)
    eps = np.float32(0.005) / np.float32(classes)
    for t in range(classes):
        p[t] = one / np.float32(classes)
        total = np.float32(0.0)
        for j in range(t):
            total += r[j * classes + t] * r[j * classes + t]
            q[t * classes + j] = q[j * classes + t]
        for j in range(t + 1, classes):
            total += r[j * classes + t] * r[j * classes + t]
            q[t * classes + j] = -r[j * classes + t] * r[t * classes + j]
        q[t * classes + t] = total
    for _ in range(max(100, classes)):
        pqp = np.float32(0.0)
        for t in range(classes):
            value = np.float32(0.0)
            for j in range(classes):
                value += q[t * classes + j] * p[j]
            qp[t] = value
            pqp += p[t] * qp[t]
        largest = np.float32(0.0)
        for t in range(classes):
            largest = max(largest, np.float32(abs(qp[t] - pqp)))
        if largest < eps:
            break
        for t in range(classes):
            diff = (-qp[t] + pqp) / q[t * classes + t]
            p[t] += diff
            pqp = (pqp + diff * (diff * q[t * classes + t] + np.float32(2.0) * qp[t])) / (
                (one + diff) * (one + diff)
            )
            for j in range(classes):
                qp[j] = (qp[j] + diff * q[t * classes + j]) / (one + diff)
                p[j] /= one + diff


@jit_with_nrt
def _probabilities(decisions, prob_a, prob_b, out, rows, classes):
    pairs = classes * (classes - 1) // 2
    low, high = np.float32(1.0e-7), np.float32(1.0) - np.float32(1.0e-7)
    r = np.zeros(classes * classes, dtype=np.float32)
    q = np.zeros(classes * classes, dtype=np.float32)
    qp = np.zeros(classes, dtype=np.float32)
    p = np.zeros(classes, dtype=np.float32)
    for n in range(rows):
        k = 0
        for i in range(classes):
            for j in range(i + 1, classes):
                score = decisions[n * pairs + k] * prob_a[k] + prob_b[k]
                value = min(max(np.float32(1.0) - _logistic(score), low), high)
                r[i * classes + j] = value
                r[j * classes + i] = np.float32(1.0) - value
                k += 1
        _couple(r, p, q, qp, classes)
        for t in range(classes):
            out[n * classes + t] = p[t]


@jit_with_nrt
def svm_probabilities_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = svm_probabilities_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    for row in (0, 1, 2, n_in):
        if not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    _probabilities(
        view(arena, table, 0, np.float32),
        view(arena, table, 1, np.float32),
        view(arena, table, 2, np.float32),
        view(arena, table, n_in, np.float32),
        dim(table, 0, 0),
        attrs[CLASSES],
    )
    return OK


def encode_svm_probabilities(attributes, inputs):
    """Slot 0: the class count."""
    return [int(attributes["classes"])]


register_op(
    "SquaredDistances",
    squared_distances_infer,
    squared_distances_compute,
    inputs=(2, 2),
    outputs=(1, 1),
    dtypes={0: frozenset({DType.FLOAT32}), 1: frozenset({DType.FLOAT32})},
    doc="squared Euclidean distances of every row of X to every row of a second matrix",
)
register_op(
    "SVMProbabilities",
    svm_probabilities_infer,
    svm_probabilities_compute,
    encode=encode_svm_probabilities,
    inputs=(3, 3),
    outputs=(1, 1),
    dtypes={0: frozenset({DType.FLOAT32})},
    doc="one-vs-one SVM class probabilities: Platt scaling and libsvm's pairwise coupling",
)
