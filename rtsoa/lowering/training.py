"""The optimizers of ai.onnx.preview.training (opset 1): Adagrad, Adam and Momentum, one update
step composed at lowering of elementwise ops, as ONNX's reference computes them.

Inputs: R, the learning rate (a scalar), T, the number of updates done before (an int64
scalar), then n tensors X to optimize, their n gradients G and the optimizer's n (Adagrad,
Momentum) or 2n (Adam: V then H) accumulators; outputs: the n new X, then the new
accumulators in the same order. All in X's element type (float32 or float64; R is cast to
it). With g = norm_coefficient * X + G:

- Adagrad: r = R / (1 + T * decay_factor); H' = H + g^2; X' = X - r * g / (sqrt(H') + epsilon)
- Adam: V' = alpha * V + (1 - alpha) * g; H' = beta * H + (1 - beta) * g^2;
  r = R * sqrt(1 - beta^T) / (1 - alpha^T) if T > 0 else R;
  X' = (1 - norm_coefficient_post) * (X - r * V' / (sqrt(H') + epsilon))
- Momentum: b = beta if T > 0 else 1; V' = alpha * V + b * g; X' = X - R * V' ("standard")
  or X - R * (g + alpha * V') ("nesterov")

The reference rounds its scalars in float64; rtsoa computes them in X's type (a relative
difference of about 1e-7 in float32). The Gradient op (automatic differentiation) is not
supported.
"""

import numpy as np

from rtsoa.abi.dtypes import DTYPES
from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.converters import register_converter

DOMAIN = "ai.onnx.preview.training"
_FLOATS = {DType.FLOAT32: np.float32, DType.FLOAT64: np.float64}


class _Step:
    """Emits one optimizer's update into `ctx`, with constants in X's element type."""

    def __init__(self, ctx, node, groups):
        self.ctx, self.node = ctx, node
        inputs = list(node.inputs)
        if len(inputs) < 2 + groups or (len(inputs) - 2) % groups:
            raise LoweringError(
                f"{ctx.describe(node)}: {len(inputs)} inputs; {node.op_type} takes R, T and "
                f"{groups} tensors per optimized tensor"
            )
        self.count = (len(inputs) - 2) // groups
        self.groups = [inputs[2 + k * self.count : 2 + (k + 1) * self.count] for k in range(groups)]
        if len(node.outputs) > (groups - 1) * self.count:
            raise LoweringError(
                f"{ctx.describe(node)}: {len(node.outputs)} outputs; {node.op_type} of "
                f"{self.count} tensor(s) gives {(groups - 1) * self.count}"
            )
        dtypes = {ctx.tensor(name).dtype for name in self.groups[0]}
        if len(dtypes) != 1 or next(iter(dtypes)) not in _FLOATS:
            found = ", ".join(sorted(DType(d).name.lower() for d in dtypes))
            raise LoweringError(
                f"{ctx.describe(node)}: the optimized tensors must all be float32 or float64 "
                f"and known at lowering, got {found}"
            )
        self.dtype = next(iter(dtypes))
        self.numpy = _FLOATS[self.dtype]
        self.rate = self.op("Cast", inputs[0], to=DTYPES[self.dtype].onnx)
        self.step = inputs[1]
        self.step_float = self.op("Cast", self.step, to=DTYPES[self.dtype].onnx)
        self.after_first = self.op("Greater", self.step, self.constant(0, np.int64))

    def constant(self, value, dtype=None):
        name = self.ctx.fresh_name("optimizer_constant")
        self.ctx.set_constant(name, np.array(value, dtype=dtype or self.numpy))
        return name

    def op(self, op, *inputs, output=None, **attributes):
        output = output or self.ctx.fresh_name(f"optimizer_{op.lower()}")
        self.ctx.emit(op, list(inputs), [output], attributes or None)
        return output

    def scaled(self, factor, name, output=None):
        return self.op("Mul", self.constant(factor), name, output=output)

    def regularized(self, x, g, norm):
        return self.op("Add", self.scaled(norm, x), g)

    def outputs(self, index):
        """The output names of result group `index` (X' is group 0); None for an absent one
        (its value gets a fresh name, and dead-code removal drops it if nothing reads it)."""
        names = list(self.node.outputs) + [""] * (len(self.groups) * self.count)
        return [name or None for name in names[index * self.count : (index + 1) * self.count]]


def _attribute(ctx, node, name, default=None):
    """A float attribute, or its default, as ONNX holds it (float32)."""
    value = node.attributes.get(name, default)
    if value is None:
        raise LoweringError(f"{ctx.describe(node)}: attribute {name!r} is required")
    return float(np.float32(value))


@register_converter("Adagrad", domain=DOMAIN, since=1)
def adagrad(ctx, node):
    decay = _attribute(ctx, node, "decay_factor", 0.0)
    epsilon = _attribute(ctx, node, "epsilon", 0.0)
    norm = _attribute(ctx, node, "norm_coefficient", 0.0)
    step = _Step(ctx, node, 3)
    xs, gs, hs = step.groups
    denominator = step.op("Add", step.constant(1.0), step.scaled(decay, step.step_float))
    rate = step.op("Div", step.rate, denominator)
    for x, g, h, x_out, h_out in zip(xs, gs, hs, step.outputs(0), step.outputs(1), strict=True):
        regular = step.regularized(x, g, norm)
        h_new = step.op("Add", h, step.op("Mul", regular, regular), output=h_out)
        root = step.op("Add", step.op("Sqrt", h_new), step.constant(epsilon))
        update = step.op("Div", step.op("Mul", rate, regular), root)
        step.op("Sub", x, update, output=x_out)


@register_converter("Adam", domain=DOMAIN, since=1)
def adam(ctx, node):
    alpha = _attribute(ctx, node, "alpha", 0.9)
    beta = _attribute(ctx, node, "beta", 0.999)
    epsilon = _attribute(ctx, node, "epsilon", 0.0)
    norm = _attribute(ctx, node, "norm_coefficient", 0.0)
    post = _attribute(ctx, node, "norm_coefficient_post", 0.0)
    step = _Step(ctx, node, 4)
    xs, gs, vs, hs = step.groups
    one = step.constant(1.0)
    beta_t = step.op("Pow", step.constant(beta), step.step_float)
    alpha_t = step.op("Pow", step.constant(alpha), step.step_float)
    corrected = step.op(
        "Div",
        step.op("Mul", step.rate, step.op("Sqrt", step.op("Sub", one, beta_t))),
        step.op("Sub", one, alpha_t),
    )
    rate = step.op("Where", step.after_first, corrected, step.rate)
    outputs = zip(step.outputs(0), step.outputs(1), step.outputs(2), strict=True)
    for x, g, v, h, (x_out, v_out, h_out) in zip(xs, gs, vs, hs, outputs, strict=True):
        regular = step.regularized(x, g, norm)
        momentum = step.scaled(1.0 - alpha, regular)
        v_new = step.op("Add", step.scaled(alpha, v), momentum, output=v_out)
        square = step.op("Mul", regular, regular)
        h_new = step.op("Add", step.scaled(beta, h), step.scaled(1.0 - beta, square), output=h_out)
        root = step.op("Add", step.op("Sqrt", h_new), step.constant(epsilon))
        moved = step.op("Sub", x, step.op("Mul", rate, step.op("Div", v_new, root)))
        step.scaled(1.0 - post, moved, output=x_out)


@register_converter("Momentum", domain=DOMAIN, since=1)
def momentum(ctx, node):
    alpha = _attribute(ctx, node, "alpha")
    beta = _attribute(ctx, node, "beta")
    norm = _attribute(ctx, node, "norm_coefficient")
    mode = node.attributes.get("mode")
    if isinstance(mode, bytes):
        mode = mode.decode("utf-8", "replace")
    if mode not in ("standard", "nesterov"):
        raise LoweringError(f"{ctx.describe(node)}: mode {mode!r} is not 'standard' or 'nesterov'")
    step = _Step(ctx, node, 3)
    xs, gs, vs = step.groups
    factor = step.op("Where", step.after_first, step.constant(beta), step.constant(1.0))
    for x, g, v, x_out, v_out in zip(xs, gs, vs, step.outputs(0), step.outputs(1), strict=True):
        regular = step.regularized(x, g, norm)
        scaled = step.op("Mul", factor, regular)
        v_new = step.op("Add", step.scaled(alpha, v), scaled, output=v_out)
        direction = v_new
        if mode == "nesterov":
            direction = step.op("Add", regular, step.scaled(alpha, v_new))
        step.op("Sub", x, step.op("Mul", step.rate, direction), output=x_out)
