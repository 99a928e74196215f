"""A user's own converter module (the worked example of docs/models.md): `com.example.Swish`,
x * sigmoid(x), lowered onto ops rtsoa already has."""

from rtsoa.lowering import register_converter


@register_converter("Swish", domain="com.example")
def swish(ctx, node):
    (x,) = node.inputs
    gate = ctx.fresh_name("swish_gate")
    ctx.emit("Sigmoid", [x], [gate])
    ctx.emit("Mul", [x, gate], node.outputs)
