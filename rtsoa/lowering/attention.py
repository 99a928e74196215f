"""The Attention converter (opsets 23 to 25): checks what the op (`rtsoa.ops.attention`) cannot
see, then emits it.

Refused at lowering, naming the node: an input or attribute the model's opset does not define
(nonpad_kv_seqlen before 24, the window sizes before 25), head-count attributes on 4-D inputs
from opset 25 on (the reference refuses them too), 3-D inputs without both head counts, and
attribute values outside the spec (is_causal not 0 / 1, qk_matmul_output_mode outside 0..3, a
softmax_precision that is not a float type, a window size below -1). float16 / bfloat16 inputs
are refused by the op's declared element types.
"""

from rtsoa.errors import LoweringError
from rtsoa.lowering.converters import register_converter

# softmax_precision: FLOAT, FLOAT16, DOUBLE, BFLOAT16 (ONNX TensorProto codes)
_SOFTMAX_PRECISIONS = (1, 10, 11, 16)
_WINDOWS = ("left_window_size", "right_window_size")


def _refuse(ctx, node, what):
    raise LoweringError(f"{ctx.describe(node)}: {what}")


@register_converter("Attention", since=23)
def attention(ctx, node):
    """Attention -> the Attention op, after the checks above; trailing absent outputs are
    dropped (absent ones in between are computed and discarded)."""
    opset = ctx.graph.opset(node.domain)
    attributes = dict(node.attributes)
    inputs = list(node.inputs)
    if opset < 24 and len(inputs) > 6 and inputs[6]:
        _refuse(ctx, node, f"input nonpad_kv_seqlen is defined from opset 24 on (opset {opset})")
    for name in _WINDOWS:
        if opset < 25 and name in attributes:
            _refuse(ctx, node, f"attribute {name!r} is defined from opset 25 on (opset {opset})")
        if int(attributes.get(name, -1)) < -1:
            _refuse(ctx, node, f"attribute {name!r} must be -1 or at least 0")
    if int(attributes.get("is_causal", 0)) not in (0, 1):
        _refuse(ctx, node, "attribute 'is_causal' must be 0 or 1")
    if int(attributes.get("qk_matmul_output_mode", 0)) not in (0, 1, 2, 3):
        _refuse(ctx, node, "attribute 'qk_matmul_output_mode' must be 0, 1, 2 or 3")
    precision = attributes.get("softmax_precision")
    if precision is not None and int(precision) not in _SOFTMAX_PRECISIONS:
        _refuse(
            ctx, node, f"softmax_precision {precision} is not FLOAT, FLOAT16, DOUBLE or BFLOAT16"
        )
    query = ctx.tensor(inputs[0])
    heads = [name for name in ("q_num_heads", "kv_num_heads") if name in attributes]
    rank = None if query.dims is None else len(query.dims)
    if opset >= 25 and heads and rank == 4:
        _refuse(ctx, node, f"{' and '.join(heads)} must not be given with 4-D inputs")
    if rank == 3 and len(heads) < 2:
        _refuse(ctx, node, "3-D inputs need both q_num_heads and kv_num_heads")
    outputs = list(node.outputs)
    while outputs and not outputs[-1]:
        outputs.pop()
    ctx.emit("Attention", inputs, outputs, attributes)
