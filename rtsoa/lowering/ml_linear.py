"""The ai.onnx.ml linear models, composed at lowering of rtsoa's ops: LinearRegressor and
LinearClassifier (X cast to float32, a MatMul by the coefficients, the intercepts added, as
onnxruntime computes them).

LinearClassifier has one row of coefficients per intercept. With several, the label is the
class of the largest raw score and Z the scores after the post transform (NONE, LOGISTIC,
SOFTMAX). With one row and two labels it is a binary classifier on the margin s: the label
is labels[1] where s > 0, and Z is [1 - s, s] (NONE) or [logistic(-s), logistic(s)]
(LOGISTIC), as onnxruntime writes them.

String class labels are a host step after the device graph (`rtsoa.lowering.ml_labels`).
Refused, naming the node: string class labels in a subgraph, LinearRegressor post transforms
other than NONE, LinearClassifier post transforms SOFTMAX_ZERO and PROBIT (and SOFTMAX on one row,
which onnxruntime ignores there), one row of coefficients with other than two labels, and
coefficients that do not fill whole rows of X's width.
"""

import numpy as np

from rtsoa.graph.schema import DType
from rtsoa.lowering.ml_domain import attribute, refuse, register_ml_converter
from rtsoa.lowering.ml_labels import refuse_string_labels
from rtsoa.lowering.ml_transforms import NUMBERS, as_float32, constant, typed_input


def _scores(ctx, node, rows):
    """float32(x) @ coefficients^T + intercepts ([N, rows]); returns its tensor name."""
    x, dtype = typed_input(ctx, node, 0, NUMBERS)
    coefficients = np.asarray(attribute(ctx, node, "coefficients", required=True), np.float32)
    if rows < 1 or coefficients.size == 0 or coefficients.size % rows:
        refuse(ctx, node, f"{coefficients.size} coefficients do not fill {rows} rows")
    width = coefficients.size // rows
    dims = ctx.tensor(x).dims
    if dims is not None and (len(dims) != 2 or (isinstance(dims[1], int) and dims[1] != width)):
        refuse(ctx, node, f"X has shape {list(dims)}; the coefficients need [N, {width}]")
    weights = constant(ctx, "coefficients", coefficients.reshape(rows, width).T.copy())
    product = ctx.fresh_name("product")
    ctx.emit("MatMul", [as_float32(ctx, x, dtype), weights], [product])
    intercepts = attribute(ctx, node, "intercepts")
    if intercepts is None or len(intercepts) == 0:
        return product
    if len(intercepts) not in (1, rows):
        refuse(ctx, node, f"{len(intercepts)} intercepts for {rows} rows of coefficients")
    scores = ctx.fresh_name("scores")
    bias = constant(ctx, "intercepts", np.asarray(intercepts, dtype=np.float32))
    ctx.emit("Add", [product, bias], [scores])
    return scores


@register_ml_converter("LinearRegressor", (1,))
def linear_regressor(ctx, node):
    """LinearRegressor(x) = float32(x) @ coefficients^T + intercepts: [N, targets]."""
    post = attribute(ctx, node, "post_transform", "NONE")
    if post != "NONE":
        refuse(ctx, node, f"post_transform {post!r} is not supported (NONE is)")
    scores = _scores(ctx, node, int(attribute(ctx, node, "targets", 1)))
    ctx.emit("Identity", [scores], node.outputs[:1])


@register_ml_converter("LinearClassifier", (1,), (DType.INT64, DType.FLOAT32))
def linear_classifier(ctx, node):
    """LinearClassifier(x) -> Y [N] int64 labels, Z [N, classes] float32 scores."""
    refuse_string_labels(ctx, node)
    labels = [int(v) for v in attribute(ctx, node, "classlabels_ints", required=True)]
    intercepts = attribute(ctx, node, "intercepts", required=True)
    rows = len(intercepts)
    post = attribute(ctx, node, "post_transform", "NONE")
    allowed = ("NONE", "LOGISTIC") if rows == 1 else ("NONE", "LOGISTIC", "SOFTMAX")
    if post not in allowed:
        refuse(
            ctx, node, f"post_transform {post!r} is not supported here ({', '.join(allowed)} are)"
        )
    if rows == 1 and len(labels) != 2:
        refuse(ctx, node, f"one row of coefficients with {len(labels)} labels (2 are needed)")
    if rows > 1 and len(labels) != rows:
        refuse(ctx, node, f"{len(labels)} labels for {rows} rows of coefficients")
    scores = _scores(ctx, node, rows)
    y, z = (list(node.outputs) + ["", ""])[:2]
    if rows == 1:
        _binary(ctx, scores, labels, post, y, z)
        return
    if y:
        index = ctx.fresh_name("index")
        ctx.emit("ArgMax", [scores], [index], {"axis": 1, "keepdims": 0})
        table = constant(ctx, "labels", np.asarray(labels, dtype=np.int64))
        ctx.emit("Gather", [table, index], [y], {"axis": 0})
    if z:
        transform = {"NONE": "Identity", "LOGISTIC": "Sigmoid", "SOFTMAX": "Softmax"}[post]
        ctx.emit(transform, [scores], [z], {"axis": -1} if post == "SOFTMAX" else {})


def _binary(ctx, margin, labels, post, y, z):
    """Labels and [N, 2] scores of a one-row classifier on `margin` [N, 1]."""
    if y:
        zero = constant(ctx, "zero", np.zeros((), dtype=np.float32))
        above, chosen = ctx.fresh_name("above"), ctx.fresh_name("chosen")
        ctx.emit("Greater", [margin, zero], [above])
        high = constant(ctx, "positive", np.array(labels[1], dtype=np.int64))
        low = constant(ctx, "negative", np.array(labels[0], dtype=np.int64))
        ctx.emit("Where", [above, high, low], [chosen])
        ctx.emit("Reshape", [chosen, constant(ctx, "flat", np.array([-1], np.int64))], [y])
    if not z:
        return
    positive, negative = ctx.fresh_name("positive"), ctx.fresh_name("negative")
    if post == "LOGISTIC":
        flipped = ctx.fresh_name("flipped")
        ctx.emit("Neg", [margin], [flipped])
        ctx.emit("Sigmoid", [flipped], [negative])
        ctx.emit("Sigmoid", [margin], [positive])
    else:
        one = constant(ctx, "one", np.ones((), dtype=np.float32))
        ctx.emit("Identity", [margin], [positive])
        ctx.emit("Sub", [one, margin], [negative])
    ctx.emit("Concat", [negative, positive], [z], {"axis": 1})
