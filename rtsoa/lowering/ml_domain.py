"""Converters of the ai.onnx.ml domain, registered by the definitions they implement.

`register_ml_converter(op, versions)` registers a converter for each ai.onnx.ml definition of
`op` in `versions` (their since_version). At a model's ai.onnx.ml opset, the definition in
force (from the installed onnx's schemas) must be one of them: a newer one (the legacy tree
ensembles are deprecated at ai.onnx.ml 5) is refused, naming op, node and version, never run
with the older semantics.

`outputs` gives the element type of each output (a DType, or SAME_AS_X for input 0's), set on
the output tensors ONNX shape inference leaves untyped (it does not type ai.onnx.ml ops), so
the next converter of a pipeline (Scaler -> LinearClassifier) knows its input's type.
"""

from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.converters import register_converter

DOMAIN = "ai.onnx.ml"
SAME_AS_X = "x"  # an output of input 0's element type


def definition_in_force(op, opset):
    """The since_version of ai.onnx.ml `op` at `opset` (None: no definition there)."""
    from onnx import defs

    try:
        return int(defs.get_schema(op, opset, DOMAIN).since_version)
    except defs.SchemaError:
        return None


def register_ml_converter(op, versions, outputs=(DType.FLOAT32,)):
    """Decorator: `fn(ctx, node)` converts ai.onnx.ml `op` at the definitions `versions`;
    its outputs have the element types `outputs`."""

    def decorate(fn):
        def convert(ctx, node):
            opset = ctx.graph.opset(DOMAIN)
            since = definition_in_force(op, opset)
            if since not in versions:
                known = ", ".join(str(v) for v in versions)
                raise LoweringError(
                    f"{ctx.describe(node)}: the definition of {op} in force at ai.onnx.ml "
                    f"opset {opset} is version {since}; rtsoa implements versions {known}"
                )
            fn(ctx, node)
            _declare(ctx, node, outputs)

        convert.__doc__ = fn.__doc__
        for since in versions:
            register_converter(op, domain=DOMAIN, since=since)(convert)
        return fn

    return decorate


def attribute(ctx, node, name, default=None, required=False):
    """Attribute `name` of `node`, or LoweringError naming it when required and absent."""
    value = node.attributes.get(name)
    if value is None:
        if required:
            raise LoweringError(f"{ctx.describe(node)}: attribute {name!r} is required")
        return default
    return value


def refuse(ctx, node, message):
    """LoweringError naming `node`."""
    raise LoweringError(f"{ctx.describe(node)}: {message}")


def _declare(ctx, node, outputs):
    """Give untyped outputs of `node` their element types."""
    for name, kind in zip(node.outputs, outputs, strict=False):
        if not name:
            continue
        if kind == SAME_AS_X:
            kind = ctx.tensor(node.inputs[0]).dtype
        tensor = ctx.tensor(name)
        if tensor.dtype == DType.UNDEFINED:
            tensor.dtype = kind
