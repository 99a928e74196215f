"""The Fourier converters (DFT, STFT, MelWeightMatrix; `rtsoa.ops.spectral`, `rtsoa.ops.mel`):
flags, element types and what is constant are checked at lowering, naming the node. DFT-17's
axis attribute (default 1) and DFT-20's default axis (-2, when the input is absent) become the
op's axis slot."""

import numpy as np

from rtsoa.errors import LoweringError
from rtsoa.lowering.converters import register_converter
from rtsoa.ops.mel import output_type


def _flag(ctx, node, name, default):
    value = int(node.attributes.get(name, default))
    if value not in (0, 1):
        raise LoweringError(f"{ctx.describe(node)}: {name} must be 0 or 1, got {value}")
    return value


def _constant_scalar(ctx, node, position, what):
    """The value of input `position` if it is a constant, else None; a constant of more
    than one element is refused."""
    if len(node.inputs) <= position or not node.inputs[position]:
        return None
    data = ctx.tensor(node.inputs[position]).data
    if data is None:
        return None
    data = np.asarray(data)
    if data.size != 1 or data.ndim > 1:
        raise LoweringError(
            f"{ctx.describe(node)}: {what} must be a scalar, got shape {list(data.shape)}"
        )
    return int(data.reshape(-1)[0])


def _dft(ctx, node, axis):
    """DFT at either opset, with `axis` the attribute slot (opset 17) or the default."""
    inverse = _flag(ctx, node, "inverse", 0)
    onesided = _flag(ctx, node, "onesided", 0)
    dims = ctx.tensor(node.inputs[0]).dims
    if dims is not None:
        if len(dims) < 2 or dims[-1] not in (1, 2, None) and not isinstance(dims[-1], str):
            raise LoweringError(
                f"{ctx.describe(node)}: the input's last dimension must be 1 (real) or 2 "
                f"(real, imaginary), got shape {list(dims)}"
            )
        given = _constant_scalar(ctx, node, 2, "axis")
        chosen = axis if given is None else given
        if not (-len(dims) <= chosen <= -2 or 0 <= chosen <= len(dims) - 2):
            raise LoweringError(
                f"{ctx.describe(node)}: axis {chosen} is out of range for rank {len(dims)} "
                f"(it may be in [{-len(dims)}, -2] or [0, {len(dims) - 2}]; the last "
                "dimension holds the real and imaginary parts)"
            )
    length = _constant_scalar(ctx, node, 1, "dft_length")
    if length is not None and length < 1:
        raise LoweringError(f"{ctx.describe(node)}: dft_length must be at least 1, got {length}")
    attributes = {"inverse": inverse, "onesided": onesided, "axis": axis}
    ctx.emit("DFT", list(node.inputs), node.outputs, attributes)


@register_converter("DFT", since=17)
def dft_17(ctx, node):
    """DFT-17: the axis is an attribute (default 1)."""
    _dft(ctx, node, int(node.attributes.get("axis", 1)))


@register_converter("DFT", since=20)
def dft_20(ctx, node):
    """DFT-20: the axis is an optional input (default -2)."""
    if "axis" in node.attributes:
        raise LoweringError(f"{ctx.describe(node)}: DFT-20 takes the axis as an input")
    _dft(ctx, node, -2)


@register_converter("STFT", since=17)
def stft(ctx, node):
    """STFT, after the checks of its flag and constant scalars."""
    onesided = _flag(ctx, node, "onesided", 1)
    step = _constant_scalar(ctx, node, 1, "frame_step")
    if step is not None and step < 1:
        raise LoweringError(f"{ctx.describe(node)}: frame_step must be at least 1, got {step}")
    frame = _constant_scalar(ctx, node, 3, "frame_length")
    if frame is not None and frame < 1:
        raise LoweringError(f"{ctx.describe(node)}: frame_length must be at least 1, got {frame}")
    window = node.inputs[2] if len(node.inputs) > 2 else ""
    window_dims = ctx.tensor(window).dims if window else None
    if window_dims is not None:
        if len(window_dims) != 1:
            raise LoweringError(
                f"{ctx.describe(node)}: the window must be 1-D, got shape {list(window_dims)}"
            )
        if frame is not None and isinstance(window_dims[0], int) and window_dims[0] != frame:
            raise LoweringError(
                f"{ctx.describe(node)}: the window has {window_dims[0]} values and "
                f"frame_length is {frame}; they must be equal"
            )
    ctx.emit("STFT", list(node.inputs), node.outputs, {"onesided": onesided})


@register_converter("MelWeightMatrix", since=17)
def mel_weight_matrix(ctx, node):
    """MelWeightMatrix, after the check of its output type."""
    if output_type(node.attributes) < 0:
        raise LoweringError(
            f"{ctx.describe(node)}: output_datatype {node.attributes['output_datatype']} is "
            "not supported (the float and integer types but uint64 are)"
        )
    ctx.emit("MelWeightMatrix", list(node.inputs), node.outputs, node.attributes)
