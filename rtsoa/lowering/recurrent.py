"""The LSTM, GRU and RNN converters: check what the ops (`rtsoa.ops.recurrent`) cannot name,
then emit them.

Refused at lowering, naming the node: a direction or activation function ONNX does not define,
an activation list that is not one function per cell function and direction, `layout` before
opset 14 or outside 0 / 1, GRU's `linear_before_reset` before opset 3, a flag
(`input_forget`, `linear_before_reset`) outside 0 / 1, a clip that is not positive, and a
`hidden_size` or direction count that the weights' shapes contradict, and ThresholdedRelu,
ScaledTanh or Affine without the alpha (and beta) they take: their defaults are not agreed.
Opset 1's `output_sequence` only says Y may be left out, which changes nothing computed.
"""

from rtsoa.errors import LoweringError
from rtsoa.lowering.converters import register_converter
from rtsoa.ops.recurrent_attributes import (
    ACTIVATION_FUNCTIONS,
    CELLS,
    DIRECTIONS,
    activation_names,
    attribute_text,
)

_FLAGS = {"LSTM": "input_forget", "GRU": "linear_before_reset"}
# Functions whose alpha / beta default onnxruntime takes as 0 (ONNX: ThresholdedRelu's 1.0;
# Affine and ScaledTanh are no longer ONNX operators): refused unless the model gives them.
_NO_AGREED_DEFAULT = ("thresholdedrelu", "scaledtanh", "affine")


def _refuse(ctx, node, what):
    raise LoweringError(f"{ctx.describe(node)}: {what}")


def _check_attributes(ctx, node):
    op, attributes = node.op_type, node.attributes
    opset = ctx.graph.opset(node.domain)
    direction = attribute_text(attributes.get("direction", "forward"))
    if direction not in DIRECTIONS:
        _refuse(ctx, node, f"direction {direction!r} is not forward, reverse or bidirectional")
    directions = 2 if direction == "bidirectional" else 1
    names = activation_names(op, attributes)
    per_direction = len(CELLS[op][1])
    if len(names) != per_direction * directions:
        _refuse(
            ctx,
            node,
            f"{len(names)} activations given; {op} {direction} takes "
            f"{per_direction * directions} ({per_direction} per direction)",
        )
    alphas = len(attributes.get("activation_alpha", ()))
    betas = len(attributes.get("activation_beta", ()))
    for name in names:
        if name.lower() not in ACTIVATION_FUNCTIONS:
            _refuse(ctx, node, f"activation function {name!r} is not supported")
        _, takes_alpha, takes_beta, _, _ = ACTIVATION_FUNCTIONS[name.lower()]
        alphas -= takes_alpha
        betas -= takes_beta
        if name.lower() in _NO_AGREED_DEFAULT and (alphas < 0 or betas < 0):
            _refuse(
                ctx,
                node,
                f"activation {name!r} needs its activation_alpha"
                + (" and activation_beta" if takes_beta else "")
                + " given (its defaults differ between ONNX and onnxruntime)",
            )
    if "layout" in attributes:
        if opset < 14:
            _refuse(ctx, node, f"attribute 'layout' is defined from opset 14 on (opset {opset})")
        if int(attributes["layout"]) not in (0, 1):
            _refuse(ctx, node, f"layout {int(attributes['layout'])} is not 0 or 1")
    flag = _FLAGS.get(op)
    if op == "GRU" and flag in attributes and opset < 3:
        _refuse(ctx, node, f"attribute {flag!r} is defined from opset 3 on (opset {opset})")
    if flag and int(attributes.get(flag, 0)) not in (0, 1):
        _refuse(ctx, node, f"{flag} {int(attributes[flag])} is not 0 or 1")
    if "clip" in attributes and not float(attributes["clip"]) > 0.0:
        _refuse(ctx, node, f"clip {float(attributes['clip'])} is not positive")
    return directions


def _check_weights(ctx, node, directions):
    """The weights' shapes, where lowering knows them, against direction and hidden_size."""
    gates = CELLS[node.op_type][0]
    weights = ctx.tensor(node.inputs[2]).dims
    if weights is None or len(weights) != 3 or not all(isinstance(d, int) for d in weights):
        return
    if weights[0] != directions:
        _refuse(
            ctx,
            node,
            f"R has {weights[0]} direction(s); direction "
            f"{attribute_text(node.attributes.get('direction', 'forward'))!r} takes {directions}",
        )
    hidden = int(node.attributes.get("hidden_size", weights[2]))
    if weights[2] != hidden or weights[1] != gates * hidden:
        _refuse(
            ctx,
            node,
            f"R has shape {list(weights)}; hidden_size {hidden} needs "
            f"[{directions}, {gates * hidden}, {hidden}]",
        )


def recurrent(ctx, node):
    """LSTM / GRU / RNN -> the op of the same name, after the checks above; trailing absent
    outputs are dropped (an absent Y before a wanted Y_h is computed and discarded), and a node
    whose outputs are all absent computes nothing."""
    directions = _check_attributes(ctx, node)
    _check_weights(ctx, node, directions)
    outputs = list(node.outputs)
    while outputs and not outputs[-1]:
        outputs.pop()
    if outputs:
        ctx.emit(node.op_type, node.inputs, outputs, node.attributes)


for _op in CELLS:
    register_converter(_op, since=1)(recurrent)
