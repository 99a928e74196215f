"""The ai.onnx.ml support vector machines, composed at lowering of rtsoa's ops: SVMRegressor
and SVMClassifier, as the operator definition's reference computes them (X cast to float32).

The kernel of x and support vector v (kernel_params = [gamma, coef0, degree], zeros when
absent): LINEAR x.v; POLY (gamma x.v + coef0) ^ degree; SIGMOID tanh(gamma x.v + coef0); RBF
exp(-gamma |x - v|^2), the squared distance summed from the differences by one jitted op
(`rtsoa.ops.svm`; not expanded as |x|^2 - 2 x.v + |v|^2, which cancels when x is near v).
K = kernels of every row and support vector, [N, V].

SVMRegressor: with n_supports > 0, K @ coefficients + rho[0]; else the linear model
X @ coefficients + rho[0]. one_class maps the score to 1 where it is > 0, else -1.

SVMClassifier with support vectors (vectors_per_class, in class order): the decision value of
the pair (i, j), i < j, in the order (0, 1), (0, 2), .., (1, 2), .., is rho[k] plus the
coefficients of row j - 1 over class i's vectors and of row i over class j's vectors, dotted
with their kernels: one MatMul of K by a [V, P] matrix built here. A value > 0 is a vote for
i, else for j; the label is the class with the most votes (the first on a tie). Z is, with
prob_a and prob_b, the class probabilities (`rtsoa.ops.svm`), else the P decision values
(two classes: [-s, s]), after the post transform. Without support vectors it is a linear
model: the class scores X @ coefficients^T + rho[0], the label the class of the largest.

The definition says nothing of two corners; rtsoa labels by the votes / the largest score
there, as for every other model: a two-class model without probabilities whose coefficients
are all >= 0 (onnxruntime follows the votes too; onnx's reference evaluator labels every row
with the second class), and a two-class linear form (onnxruntime's label is not always the
class of the larger of the two scores it returns). SOFTMAX on a two-class model without
probabilities is refused: onnxruntime ignores it there ([1 - s, s]).

String class labels are a host step after the device graph (`rtsoa.lowering.ml_labels`).
Refused, naming the node and the attribute: attribute sizes that do not agree with each
other (coefficients, support_vectors, vectors_per_class, rho, prob_a / prob_b,
kernel_params) or with X's width, unknown kernel types, post transforms other than NONE,
LOGISTIC, SOFTMAX (regressor: NONE).
"""

import numpy as np

from rtsoa.graph.schema import DType
from rtsoa.lowering.ml_domain import attribute, refuse, register_ml_converter
from rtsoa.lowering.ml_labels import refuse_string_labels
from rtsoa.lowering.ml_transforms import NUMBERS, as_float32, constant, typed_input

KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")
_TRANSFORMS = {"NONE": "Identity", "LOGISTIC": "Sigmoid", "SOFTMAX": "Softmax"}


def _floats(ctx, node, name, required=False):
    return np.asarray(attribute(ctx, node, name, [], required), dtype=np.float32).ravel()


def _input(ctx, node, width):
    """Input X as float32 [N, width], refused by shape when its dims are known."""
    x, dtype = typed_input(ctx, node, 0, NUMBERS)
    dims = ctx.tensor(x).dims
    if dims is not None and (len(dims) != 2 or (isinstance(dims[1], int) and dims[1] != width)):
        refuse(ctx, node, f"X has shape {list(dims)}; the model's vectors need [N, {width}]")
    return as_float32(ctx, x, dtype)


def _kernel_params(ctx, node):
    """(kernel type, gamma, coef0, degree), checked."""
    kernel = attribute(ctx, node, "kernel_type", "LINEAR")
    if kernel not in KERNELS:
        refuse(ctx, node, f"attribute 'kernel_type' is {kernel!r}; rtsoa knows {KERNELS}")
    params = _floats(ctx, node, "kernel_params")
    if params.size not in (0, 3):
        refuse(
            ctx,
            node,
            f"attribute 'kernel_params' has {params.size} values (3: gamma, coef0, degree)",
        )
    gamma, coef0, degree = (float(v) for v in params) if params.size else (0.0, 0.0, 0.0)
    return kernel, gamma, coef0, float(int(degree))


def _emit(ctx, op, inputs, attributes=None):
    out = ctx.fresh_name(op.lower())
    ctx.emit(op, inputs, [out], attributes or {})
    return out


def _scalar(ctx, value):
    return constant(ctx, "scalar", np.array(value, dtype=np.float32))


def _kernels(ctx, node, x, vectors):
    """K [N, V]: the kernels of the rows of `x` and the support vectors `vectors` [V, F]."""
    kernel, gamma, coef0, degree = _kernel_params(ctx, node)
    if kernel == "RBF":
        distance = _emit(ctx, "SquaredDistances", [x, constant(ctx, "vectors", vectors)])
        return _emit(ctx, "Exp", [_emit(ctx, "Mul", [distance, _scalar(ctx, -gamma)])])
    dot = _emit(ctx, "MatMul", [x, constant(ctx, "vectors", vectors.T.copy())])
    if kernel == "LINEAR":
        return dot
    scaled = _emit(ctx, "Mul", [dot, _scalar(ctx, gamma)])
    shifted = _emit(ctx, "Add", [scaled, _scalar(ctx, coef0)])
    if kernel == "SIGMOID":
        return _emit(ctx, "Tanh", [shifted])
    return _emit(ctx, "Pow", [shifted, _scalar(ctx, degree)])


def _support_vectors(ctx, node, count):
    """The support vectors [count, F], their size checked against `count`."""
    vectors = _floats(ctx, node, "support_vectors")
    if count < 1 or vectors.size == 0 or vectors.size % count:
        refuse(
            ctx,
            node,
            f"attribute 'support_vectors' has {vectors.size} values, not whole vectors for "
            f"{count} support vectors",
        )
    return vectors.reshape(count, -1)


def _one_rho(ctx, node):
    rho = _floats(ctx, node, "rho", required=True)
    if rho.size != 1:
        refuse(ctx, node, f"attribute 'rho' has {rho.size} values; this model takes 1")
    return rho


@register_ml_converter("SVMRegressor", (1,))
def svm_regressor(ctx, node):
    """SVMRegressor(x) -> Y [N, 1] float32 (see the module docstring)."""
    post = attribute(ctx, node, "post_transform", "NONE")
    if post != "NONE":
        refuse(ctx, node, f"attribute 'post_transform' is {post!r}; NONE is supported")
    coefficients = _floats(ctx, node, "coefficients", required=True)
    supports = int(attribute(ctx, node, "n_supports", 0))
    rho = _one_rho(ctx, node)
    if supports < 0:
        refuse(ctx, node, f"attribute 'n_supports' is {supports}")
    if supports > 0:
        vectors = _support_vectors(ctx, node, supports)
        if coefficients.size != supports:
            refuse(
                ctx,
                node,
                f"attribute 'coefficients' has {coefficients.size} values for {supports} "
                "support vectors (n_supports)",
            )
        kernels = _kernels(ctx, node, _input(ctx, node, vectors.shape[1]), vectors)
    else:
        _kernel_params(ctx, node)  # checked even where the linear model does not use them
        if coefficients.size == 0:
            refuse(ctx, node, "attribute 'coefficients' is empty")
        kernels = _input(ctx, node, coefficients.size)
    weights = constant(ctx, "coefficients", coefficients.reshape(-1, 1))
    score = _emit(ctx, "Add", [_emit(ctx, "MatMul", [kernels, weights]), constant(ctx, "rho", rho)])
    if not int(attribute(ctx, node, "one_class", 0)):
        ctx.emit("Identity", [score], node.outputs[:1])
        return
    above = _emit(ctx, "Greater", [score, _scalar(ctx, 0.0)])
    ctx.emit("Where", [above, _scalar(ctx, 1.0), _scalar(ctx, -1.0)], node.outputs[:1])


def _pair_matrix(coefficients, per_class, classes):
    """W [V, P]: the decision value of pair k is K @ W[:, k] (+ rho[k])."""
    starts = np.concatenate([[0], np.cumsum(per_class)])
    weights = np.zeros((int(starts[-1]), classes * (classes - 1) // 2), dtype=np.float32)
    k = 0
    for i in range(classes):
        for j in range(i + 1, classes):
            block_i, block_j = slice(starts[i], starts[i + 1]), slice(starts[j], starts[j + 1])
            weights[block_i, k] = coefficients[j - 1, block_i]
            weights[block_j, k] = coefficients[i, block_j]
            k += 1
    return weights


def _vote_matrices(classes):
    """(A [P, C], c [C]): votes = positive @ A + c, positive [N, P] 1.0 where pair k's value
    is > 0 (a vote for its first class i, else for its second j)."""
    pairs = [(i, j) for i in range(classes) for j in range(i + 1, classes)]
    towards = np.zeros((len(pairs), classes), dtype=np.float32)
    base = np.zeros(classes, dtype=np.float32)
    for k, (i, j) in enumerate(pairs):
        towards[k, i] += 1.0
        towards[k, j] -= 1.0
        base[j] += 1.0
    return towards, base


@register_ml_converter("SVMClassifier", (1,), (DType.INT64, DType.FLOAT32))
def svm_classifier(ctx, node):
    """SVMClassifier(x) -> Y [N] int64 labels, Z scores (see the module docstring)."""
    refuse_string_labels(ctx, node)
    labels = [int(v) for v in attribute(ctx, node, "classlabels_ints", required=True)]
    classes = len(labels)
    if classes < 2:
        refuse(ctx, node, f"attribute 'classlabels_ints' has {classes} label(s); 2 or more")
    post = attribute(ctx, node, "post_transform", "NONE")
    if post not in _TRANSFORMS:
        refuse(ctx, node, f"attribute 'post_transform' is {post!r}; rtsoa runs {_TRANSFORMS}")
    coefficients = _floats(ctx, node, "coefficients", required=True)
    per_class = np.asarray(attribute(ctx, node, "vectors_per_class", []), dtype=np.int64)
    y, z = (list(node.outputs) + ["", ""])[:2]
    if per_class.size == 0 or per_class.sum() == 0:
        _linear(ctx, node, coefficients, labels, post, y, z)
        return
    if per_class.size != classes or (per_class < 0).any():
        refuse(
            ctx,
            node,
            f"attribute 'vectors_per_class' is {per_class.tolist()}; it needs {classes} "
            "counts >= 0, one per class label",
        )
    count = int(per_class.sum())
    vectors = _support_vectors(ctx, node, count)
    if coefficients.size != (classes - 1) * count:
        refuse(
            ctx,
            node,
            f"attribute 'coefficients' has {coefficients.size} values; {classes} classes of "
            f"{count} support vectors need {(classes - 1) * count}",
        )
    pairs = classes * (classes - 1) // 2
    rho = _floats(ctx, node, "rho", required=True)
    if rho.size != pairs:
        refuse(ctx, node, f"attribute 'rho' has {rho.size} values; {classes} classes need {pairs}")
    prob_a, prob_b = _floats(ctx, node, "prob_a"), _floats(ctx, node, "prob_b")
    if (prob_a.size, prob_b.size) not in ((0, 0), (pairs, pairs)):
        refuse(
            ctx,
            node,
            f"attributes 'prob_a' and 'prob_b' have {prob_a.size} and {prob_b.size} values; "
            f"both {pairs} (one per pair of classes) or both none",
        )
    if classes == 2 and not prob_a.size and post == "SOFTMAX":
        refuse(
            ctx,
            node,
            "attribute 'post_transform' is SOFTMAX on a two-class model without probabilities "
            "(onnxruntime ignores it there)",
        )
    kernels = _kernels(ctx, node, _input(ctx, node, vectors.shape[1]), vectors)
    pair_weights = _pair_matrix(coefficients.reshape(classes - 1, count), per_class, classes)
    product = _emit(ctx, "MatMul", [kernels, constant(ctx, "pairs", pair_weights)])
    decisions = _emit(ctx, "Add", [product, constant(ctx, "rho", rho)])
    if y:
        positive = _emit(ctx, "Greater", [decisions, _scalar(ctx, 0.0)])
        as_float = _emit(ctx, "Cast", [positive], {"to": 1})
        towards, base = _vote_matrices(classes)
        counted = _emit(ctx, "MatMul", [as_float, constant(ctx, "towards", towards)])
        votes = _emit(ctx, "Add", [counted, constant(ctx, "base", base)])
        _label(ctx, votes, labels, y)
    if not z:
        return
    if prob_a.size:
        a, b = constant(ctx, "prob_a", prob_a), constant(ctx, "prob_b", prob_b)
        scores = _emit(ctx, "SVMProbabilities", [decisions, a, b], {"classes": classes})
    elif classes == 2:
        flipped = _emit(ctx, "Neg", [decisions])
        scores = _emit(ctx, "Concat", [flipped, decisions], {"axis": 1})
    else:
        scores = decisions
    _transform(ctx, scores, post, z)


def _linear(ctx, node, coefficients, labels, post, y, z):
    """A classifier without support vectors: class scores X @ coefficients^T + rho[0]."""
    classes = len(labels)
    _kernel_params(ctx, node)
    if coefficients.size == 0 or coefficients.size % classes:
        refuse(
            ctx,
            node,
            f"attribute 'coefficients' has {coefficients.size} values, not whole rows for "
            f"{classes} classes",
        )
    rho = _floats(ctx, node, "rho", required=True)
    if rho.size < 1:
        refuse(ctx, node, "attribute 'rho' is empty")
    rows = coefficients.reshape(classes, -1)
    x = _input(ctx, node, rows.shape[1])
    product = _emit(ctx, "MatMul", [x, constant(ctx, "coefficients", rows.T.copy())])
    scores = _emit(ctx, "Add", [product, constant(ctx, "rho", rho[:1])])
    if y:
        _label(ctx, scores, labels, y)
    if z:
        _transform(ctx, scores, post, z)


def _label(ctx, values, labels, y):
    """y = labels[argmax(values, axis=1)] (the first largest)."""
    index = _emit(ctx, "ArgMax", [values], {"axis": 1, "keepdims": 0})
    table = constant(ctx, "labels", np.asarray(labels, dtype=np.int64))
    ctx.emit("Gather", [table, index], [y], {"axis": 0})


def _transform(ctx, scores, post, z):
    ctx.emit(_TRANSFORMS[post], [scores], [z], {"axis": -1} if post == "SOFTMAX" else {})
