"""SwiGLU (opset 28) and CausalConvWithState (opset 27), the gated activation of transformer
MLPs and the stateful causal convolution of Mamba / Gated DeltaNet blocks, composed at lowering
from ops rtsoa has, as their ONNX function bodies define them.

SwiGLU(A, B) = Swish(A, alpha) * B. A and B must have one shape (the op does not broadcast):
shapes known at lowering to differ are refused there.

CausalConvWithState(input, weight, bias, past_state) -> (output, present_state): the input
(batch, channels, length) after past_state (or k - 1 zeros), a depthwise Conv (group =
channels) of the weight (channels, 1, k) and the bias, then `activation` ("silu" / "swish":
x * Sigmoid(x) computed in float32 and rounded once, as the function body casts; "none");
present_state is the padded input's last k - 1 positions (an input of length 0, known at
lowering, gives an empty output and the past state). The channel count must be known at
lowering (it is the Conv's group); another activation, or a weight or past_state whose known
shape does not fit, is refused naming the node.
"""

import numpy as np

from rtsoa.abi.dtypes import DTYPES
from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.converters import register_converter
from rtsoa.lowering.indexed import checked_choice

_ACTIVATIONS = ("none", "silu", "swish")
_TYPES = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)


def _refuse(ctx, node, what):
    raise LoweringError(f"{ctx.describe(node)}: {what}")


def _differ(first, second):
    """Do two dims tuples (None: rank unknown) certainly differ?"""
    if first is None or second is None:
        return False
    if len(first) != len(second):
        return True
    return any(
        isinstance(a, int) and isinstance(b, int) and a != b
        for a, b in zip(first, second, strict=True)
    )


@register_converter("SwiGLU", since=28)
def swiglu(ctx, node):
    """SwiGLU(A, B) = Mul(Swish(A, alpha), B)."""
    gate, value = node.inputs[:2]
    if _differ(ctx.tensor(gate).dims, ctx.tensor(value).dims):
        _refuse(
            ctx,
            node,
            f"A {list(ctx.tensor(gate).dims)} and B {list(ctx.tensor(value).dims)} must have "
            "one shape (SwiGLU does not broadcast)",
        )
    swished = ctx.fresh_name("swiglu_gate")
    ctx.emit("Swish", [gate], [swished], {"alpha": float(node.attributes.get("alpha", 1.0))})
    ctx.emit("Mul", [swished, value], node.outputs[:1])


def _int_constant(ctx, label, values):
    name = ctx.fresh_name(label)
    ctx.set_constant(name, np.array(values, dtype=np.int64))
    return name


@register_converter("CausalConvWithState", since=27)
def causal_conv_with_state(ctx, node):
    """CausalConvWithState as Concat -> Conv (-> x * Sigmoid(x)) and a Slice of the state."""
    inputs = list(node.inputs) + [""] * (4 - len(node.inputs))
    x, weight, bias, past = inputs[:4]
    activation = checked_choice(ctx, node, "activation", _ACTIVATIONS, "none")
    data, kernel = ctx.tensor(x), ctx.tensor(weight)
    if data.dtype not in _TYPES:
        names = ", ".join(DTYPES[kind].name for kind in _TYPES)
        _refuse(ctx, node, f"input's element type must be known at lowering and one of {names}")
    if data.dims is not None and len(data.dims) != 3:
        _refuse(ctx, node, f"input must be rank 3 (batch, channels, length), not {data.dims}")
    if not kernel.is_static or len(kernel.dims) != 3 or kernel.dims[1] != 1:
        _refuse(ctx, node, f"weight must be (channels, 1, k) and known at lowering: {kernel.dims}")
    channels = int(kernel.dims[0])
    if data.dims is not None and isinstance(data.dims[1], int) and data.dims[1] != channels:
        _refuse(ctx, node, f"weight has {channels} channels, input {data.dims[1]}")
    carried = kernel.dims[2] - 1
    if past:
        state = ctx.tensor(past).dims
        if state is not None and _differ(state, (data.dims or (None,) * 3)[:2] + (carried,)):
            _refuse(ctx, node, f"past_state {list(state)} must be (batch, {channels}, {carried})")
    else:
        past = _zero_state(ctx, x, data.dtype, carried)
    padded = ctx.fresh_name("causal_padded")
    ctx.emit("Concat", [past, x], [padded], {"axis": 2})
    if data.dims is not None and data.dims[2] == 0:
        # no step: an empty output (a Conv of k - 1 positions by k would be refused)
        none = _int_constant(ctx, "no_step", [0])
        axes = _int_constant(ctx, "step_axis", [2])
        ctx.emit("Slice", [padded, none, none, axes], node.outputs[:1])
    elif activation == "none":
        conv_inputs = [padded, weight] + ([bias] if bias else [])
        ctx.emit("Conv", conv_inputs, node.outputs[:1], {"group": channels})
    else:
        convolved = ctx.fresh_name("causal_conv")
        conv_inputs = [padded, weight] + ([bias] if bias else [])
        ctx.emit("Conv", conv_inputs, [convolved], {"group": channels})
        _silu(ctx, convolved, data.dtype, node.outputs[0])
    if len(node.outputs) > 1 and node.outputs[1]:
        length = ctx.fresh_name("padded_length")
        ctx.emit("Shape", [padded], [length], {"start": 2, "end": 3})
        start = ctx.fresh_name("state_start")
        ctx.emit("Sub", [length, _int_constant(ctx, "carried", [carried])], [start])
        axes = _int_constant(ctx, "state_axis", [2])
        ctx.emit("Slice", [padded, start, length, axes], [node.outputs[1]])


def _zero_state(ctx, x, dtype, carried):
    """Zeros (batch, channels, carried) of x's element type: the state before the first step."""
    batch_channels = ctx.fresh_name("batch_channels")
    ctx.emit("Shape", [x], [batch_channels], {"start": 0, "end": 2})
    shape = ctx.fresh_name("state_shape")
    carried_dims = _int_constant(ctx, "carried", [carried])
    ctx.emit("Concat", [batch_channels, carried_dims], [shape], {"axis": 0})
    zeros = ctx.fresh_name("zero_state")
    ctx.emit("ConstantOfShape", [shape], [zeros], {"value": np.zeros(1, dtype=np.float32)})
    if dtype == DType.FLOAT32:
        return zeros
    cast = ctx.fresh_name("zero_state_cast")
    ctx.emit("Cast", [zeros], [cast], {"to": DTYPES[dtype].onnx})
    return cast


def _silu(ctx, convolved, dtype, output):
    """output = x * Sigmoid(x) of `convolved`, in float32, rounded once to `dtype`."""
    wide = convolved
    if dtype != DType.FLOAT32:
        wide = ctx.fresh_name("causal_conv_float")
        ctx.emit("Cast", [convolved], [wide], {"to": DTYPES[DType.FLOAT32].onnx})
    gate = ctx.fresh_name("causal_sigmoid")
    ctx.emit("Sigmoid", [wide], [gate])
    if dtype == DType.FLOAT32:
        ctx.emit("Mul", [wide, gate], [output])
        return
    product = ctx.fresh_name("causal_silu_float")
    ctx.emit("Mul", [wide, gate], [product])
    ctx.emit("Cast", [product], [output], {"to": DTYPES[dtype].onnx})
