"""The LinearAttention converter (opset 27): checks the attributes and which optional inputs
the update rule needs, then emits the op (`rtsoa.ops.linear_attention`).

Refused at lowering, naming the node: an update_rule other than linear, gated, delta and
gated_delta; q_num_heads or kv_num_heads missing, not positive, or q_num_heads not a multiple
of kv_num_heads; decay absent for a gated rule or given for another, beta absent for a delta
rule or given for another; query, key or value not of rank 3 where their rank is known.
chunk_size is a tuning hint that does not change the result: it is accepted and not used.
"""

from rtsoa.errors import LoweringError
from rtsoa.lowering.converters import register_converter
from rtsoa.lowering.indexed import checked_choice
from rtsoa.ops.linear_attention import RULES

_ROLES = ("query", "key", "value", "past_state", "decay", "beta")


def _refuse(ctx, node, what):
    raise LoweringError(f"{ctx.describe(node)}: {what}")


@register_converter("LinearAttention", since=27)
def linear_attention(ctx, node):
    """LinearAttention -> the op, after the checks above."""
    rule = checked_choice(ctx, node, "update_rule", tuple(RULES), "gated_delta")
    heads = {}
    for name in ("q_num_heads", "kv_num_heads"):
        if name not in node.attributes:
            _refuse(ctx, node, f"attribute {name!r} is required")
        heads[name] = int(node.attributes[name])
        if heads[name] <= 0:
            _refuse(ctx, node, f"attribute {name!r} must be positive, not {heads[name]}")
    if heads["q_num_heads"] % heads["kv_num_heads"] != 0:
        _refuse(
            ctx,
            node,
            f"q_num_heads {heads['q_num_heads']} is not a multiple of kv_num_heads "
            f"{heads['kv_num_heads']}",
        )
    inputs = list(node.inputs) + [""] * (6 - len(node.inputs))
    for role, wanted in (("decay", rule in ("gated", "gated_delta")), ("beta", "delta" in rule)):
        given = bool(inputs[_ROLES.index(role)])
        if wanted and not given:
            _refuse(ctx, node, f"update_rule {rule!r} needs input {role!r}")
        if given and not wanted:
            _refuse(ctx, node, f"update_rule {rule!r} takes no input {role!r}")
    for role, name in zip(_ROLES[:3], inputs[:3], strict=True):
        dims = ctx.tensor(name).dims
        if dims is not None and len(dims) != 3:
            _refuse(ctx, node, f"{role} must be rank 3 (batch, steps, heads * size), not {dims}")
    outputs = list(node.outputs)
    while outputs and not outputs[-1]:
        outputs.pop()
    ctx.emit("LinearAttention", inputs, outputs, dict(node.attributes))
