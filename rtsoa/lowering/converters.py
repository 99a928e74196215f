"""Converters: how each ONNX op becomes compute ops, looked up by op type, domain and opset.

A converter is `fn(ctx, node)`; it reads the node (`node.inputs`, `node.attributes`) and
emits ops with `ctx.emit(op, inputs, outputs, attributes)` (an op registered in `rtsoa.ops`,
or a kernel of your own: see docs/models.md), or turns outputs into constants with
`ctx.set_constant(name, array)`. Every op registered in `rtsoa.ops` converts one-to-one
without a converter; a converter is needed for ops that map onto others or onto nothing.

    from rtsoa.lowering import register_converter

    @register_converter("Gelu", domain="com.example")
    def gelu(ctx, node):
        x, = node.inputs
        ...
        ctx.emit("Mul", [x, half], node.outputs)

`register_converter(op_type, domain="", since=1)` keys a converter by the first opset version
it applies to; the lookup takes the newest converter whose `since` is at most the model's
opset for that domain.

The `since` keys are also the record of which ONNX definitions rtsoa implements. Every
converter (and every op converted one to one) implements the default-domain definitions in
force up to opset IMPLEMENTED_OPSET; a definition introduced after it (an op's `since_version`
in the installed `onnx` schemas) is implemented only where a converter is registered with
`since` equal to that version. A node whose definition is newer than that is refused, naming
op, node, opset and the version that changed it (`changed_definition`), never run with the
older semantics.
"""

import numpy as np

from rtsoa.abi.registry import Registry
from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.ops import OPS

_CONVERTERS = Registry("converter")  # (domain, op_type) -> ((since, fn), ...) sorted by since
# The newest default-domain opset whose op definitions every converter implements (what the
# importer accepted before definitions were checked op by op).
IMPLEMENTED_OPSET = 25


def register_converter(op_type, domain="", since=1):
    """Decorator: `fn(ctx, node)` converts `op_type` of `domain` from opset `since` on."""

    def decorate(fn):
        entries = [entry for entry in _CONVERTERS.get((domain, op_type), ()) if entry[0] != since]
        entries.append((int(since), fn))
        _CONVERTERS.add((domain, op_type), tuple(sorted(entries, key=lambda entry: entry[0])), True)
        return fn

    return decorate


def unregister_converter(op_type, domain=""):
    """Remove every converter of `op_type` (tests)."""
    if (domain, op_type) in _CONVERTERS:
        _CONVERTERS.remove((domain, op_type))


def find_converter(op_type, domain, opset):
    """The converter for `op_type` at `opset`, a default one-to-one converter if `rtsoa.ops`
    has the op, or None."""
    entries = _CONVERTERS.get((domain, op_type), ())
    chosen = None
    for since, fn in entries:
        if since <= opset:
            chosen = fn
    if chosen is not None:
        return chosen
    if domain == "" and op_type in OPS:
        return one_to_one
    return None


def changed_definition(op_type, domain, opset):
    """The version of the ONNX definition of `op_type` in force at `opset` when rtsoa does not
    implement it (it is newer than IMPLEMENTED_OPSET and no converter is registered with that
    `since`); None when rtsoa implements it, or `op_type` is not a default-domain ONNX op."""
    if domain != "" or opset <= IMPLEMENTED_OPSET:
        return None
    from onnx import defs

    try:
        since = int(defs.get_schema(op_type, opset, "").since_version)
    except defs.SchemaError:  # not an ONNX op (a user's), or none at this opset
        return None
    if since <= IMPLEMENTED_OPSET:
        return None
    if any(known == since for known, _ in _CONVERTERS.get((domain, op_type), ())):
        return None
    return since


def one_to_one(ctx, node):
    """The op of the same name, with the node's inputs, outputs and attributes."""
    ctx.emit(node.op_type, node.inputs, node.outputs, node.attributes)


# -- built-in converters ---------------------------------------------------------------------


_CONSTANT_KEYS = {
    "value_float": np.float32,
    "value_floats": np.float32,
    "value_int": np.int64,
    "value_ints": np.int64,
}


@register_converter("Constant")
def constant(ctx, node):
    """A Constant is data: its output becomes a constant tensor (folded into consumers or
    uploaded in Init)."""
    attributes = node.attributes
    if "value" in attributes:
        data = np.asarray(attributes["value"])
    else:
        for key, kind in _CONSTANT_KEYS.items():
            if key in attributes:
                data = np.asarray(attributes[key], dtype=kind)
                break
        else:
            raise LoweringError(
                f"{ctx.describe(node)}: constant attribute {sorted(attributes)} not supported"
            )
    ctx.set_constant(node.outputs[0], data)


@register_converter("Dropout")
def dropout(ctx, node):
    """Inference: output 0 is the input and the optional mask all True. Training mode (input
    2 true) given at run time, or constant with a ratio above 0, runs the DropoutTraining op
    (`rtsoa.ops.dropout`: seeded by the `seed` attribute); its data must be float32 or
    float64 and its ratio float32 or float64 (refused here, naming the node, otherwise)."""
    inputs = list(node.inputs)
    outputs = list(node.outputs)
    flag = inputs[2] if len(inputs) > 2 else ""
    dynamic_flag = bool(flag) and not ctx.tensor(flag).is_constant
    if dynamic_flag or (flag and _training_ratio(ctx, node) > 0.0):
        _check_training_types(ctx, node)
        wanted = outputs[:2] if len(outputs) > 1 and outputs[1] else outputs[:1]
        ctx.emit("DropoutTraining", inputs, wanted, node.attributes)
        return
    wants_mask = len(outputs) > 1 and bool(outputs[1])
    if not wants_mask:
        ctx.emit("Identity", inputs[:1], outputs[:1], {})
        return
    ctx.emit("Dropout", inputs, outputs, node.attributes)


def _check_training_types(ctx, node):
    """Refuse, naming the node, training-mode Dropout data or ratio types DropoutTraining does
    not read (float16 / bfloat16 ones)."""
    wanted = (DType.FLOAT32, DType.FLOAT64)
    for position, what in ((0, "data"), (1, "ratio")):
        name = node.inputs[position] if len(node.inputs) > position else ""
        kind = ctx.tensor(name).dtype if name else DType.UNDEFINED
        if kind not in (DType.UNDEFINED, *wanted):
            raise LoweringError(
                f"{ctx.describe(node)}: training mode with {what} of element type "
                f"{DType(kind).name} is not supported (float32, float64)"
            )


@register_converter("BatchNormalization")
def batch_normalization(ctx, node):
    """Inference BatchNormalization (running mean and variance). Training mode (the
    `training_mode` attribute, or the running-statistics outputs it fills) is refused by
    name instead of as an output count the op does not take."""
    outputs = [name for name in node.outputs[1:] if name]
    if int(node.attributes.get("training_mode", 0)) or outputs:
        raise LoweringError(
            f"{ctx.describe(node)}: training mode (training_mode=1, or the running mean / "
            "variance outputs) is not supported; rtsoa runs inference only"
        )
    ctx.emit("BatchNormalization", node.inputs, node.outputs[:1], node.attributes)


def _training_ratio(ctx, node):
    """The drop ratio of a Dropout whose training flag is a constant: 0.0 when the flag is
    false, else the ratio input (or attribute before opset 12; default 0.5)."""
    if not bool(np.asarray(ctx.tensor(node.inputs[2]).data).reshape(-1)[0]):
        return 0.0
    ratio = node.inputs[1] if len(node.inputs) > 1 else ""
    if not ratio:
        return float(node.attributes.get("ratio", 0.5))
    data = ctx.tensor(ratio).data
    return 0.5 if data is None else float(np.asarray(data).reshape(-1)[0])


# Control flow: ONNX If and Loop are converted in rtsoa.lowering.control_flow.


# -- ops whose meaning changed across opsets ----------------------------------------------------


def _softmax_before_13(ctx, node):
    """Softmax / LogSoftmax before opset 13 work on the input flattened to 2-D at `axis`:
    Flatten -> the op on the last axis -> Reshape back to the input's (run-time) shape."""
    (x,) = node.inputs[:1]
    axis = int(node.attributes.get("axis", 1))
    flat, result, shape = ctx.fresh_name("flat"), ctx.fresh_name("soft"), ctx.fresh_name("shape")
    ctx.emit("Flatten", [x], [flat], {"axis": axis})
    ctx.emit(node.op_type, [flat], [result], {"axis": -1})
    ctx.emit("Shape", [x], [shape])
    ctx.emit("Reshape", [result, shape], node.outputs[:1])


for _op in ("Softmax", "LogSoftmax"):
    register_converter(_op, since=1)(_softmax_before_13)
    register_converter(_op, since=13)(one_to_one)


def _legacy_broadcast(ctx, node):
    """Binary ops before opset 7 broadcast only with `broadcast=1`, aligning B at `axis` of A
    (numpy aligns on the right): B gets trailing 1-dims so numpy's rule does the same."""
    a, b = node.inputs[:2]
    attributes = node.attributes
    if int(attributes.get("broadcast", 0)) and "axis" in attributes:
        left, right = ctx.tensor(a), ctx.tensor(b)
        if left.dims is None or right.dims is None:
            raise LoweringError(
                f"{ctx.describe(node)}: legacy broadcast with axis needs the operands' ranks"
            )
        axis = int(attributes["axis"])
        if axis < 0:
            axis += len(left.dims)
        trailing = len(left.dims) - axis - len(right.dims)
        if trailing > 0:
            if not right.is_static:
                raise LoweringError(
                    f"{ctx.describe(node)}: legacy broadcast of a tensor of unknown shape"
                )
            dims = tuple(right.dims) + (1,) * trailing
            if right.is_constant:
                aligned = ctx.fresh_name(f"{b}_aligned")
                ctx.set_constant(aligned, right.data.reshape(dims))
            else:
                shape, aligned = ctx.fresh_name("shape"), ctx.fresh_name(f"{b}_aligned")
                ctx.set_constant(shape, np.array(dims, dtype=np.int64))
                ctx.emit("Reshape", [b, shape], [aligned])
            b = aligned
    ctx.emit(node.op_type, [a, b], node.outputs, {})


for _op in ("Add", "Sub", "Mul", "Div", "Pow"):
    register_converter(_op, since=1)(_legacy_broadcast)
    if _op != "Pow":  # Pow from opset 7 on: rtsoa.lowering.mixed_types (mixed element types)
        register_converter(_op, since=7)(one_to_one)


def _prelu_before_7(ctx, node):
    """PRelu before opset 7: a slope of shape [C] applies along axis 1 (channels); from opset 7
    on the slope broadcasts with numpy's rules, so it gets trailing 1-dims."""
    x, slope = node.inputs[:2]
    data, weights = ctx.tensor(x), ctx.tensor(slope)
    if (
        weights.is_constant
        and weights.data.ndim == 1
        and data.dims is not None
        and len(data.dims) > 2
        and weights.data.shape[0] > 1
    ):
        aligned = ctx.fresh_name(f"{slope}_aligned")
        ctx.set_constant(aligned, weights.data.reshape((-1,) + (1,) * (len(data.dims) - 2)))
        slope = aligned
    ctx.emit("PRelu", [x, slope], node.outputs, {})


register_converter("PRelu", since=1)(_prelu_before_7)
register_converter("PRelu", since=7)(one_to_one)


# Definitions after IMPLEMENTED_OPSET whose change does not touch what rtsoa runs: Cast 28
# adds the float6 types and Range 27 a stash type for float16 / bfloat16, element types these
# ops refuse. Mod 28 defines fmod 0 on floats (numpy's remainder), which the Mod op computes.
@register_converter("Cast", since=28)
@register_converter("Cast", since=1)
def cast(ctx, node):
    """The Cast op; a round_mode (ONNX Cast 25 on: for float8 E8M0 targets) other than "up",
    "down" or "nearest" is refused naming the node."""
    mode = node.attributes.get("round_mode", "up")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("up", "down", "nearest"):
        raise LoweringError(
            f"{ctx.describe(node)}: round_mode {mode!r} is not 'up', 'down' or 'nearest'"
        )
    one_to_one(ctx, node)


register_converter("Range", since=27)(one_to_one)
register_converter("Mod", since=28)(one_to_one)
