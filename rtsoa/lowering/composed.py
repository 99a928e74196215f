"""Ops rtsoa runs as a few of its own ops, composed at lowering: CastLike (a Cast to the
second input's element type), Size (the product of Shape), GreaterOrEqual / LessOrEqual
(Greater or Equal: false where an input is NaN, as ONNX has it) and Reciprocal (1 / x in x's
element type), OptionalHasElement (a constant) and OptionalGetElement (an Identity). The
element types they need must be known at lowering (graph inputs, constants,
ONNX shape inference); a LoweringError names the node when one is not."""

import numpy as np

from rtsoa.abi.dtypes import DTYPES
from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.converters import register_converter
from rtsoa.ops.abi import NUMPY_DTYPES


def _known_dtype(ctx, node, name, role):
    dtype = ctx.tensor(name).dtype
    if dtype == DType.UNDEFINED:
        raise LoweringError(
            f"{ctx.describe(node)}: the element type of {role} {name!r} is not known at lowering"
        )
    return dtype


@register_converter("CastLike", since=15)
def cast_like(ctx, node):
    """CastLike(x, like) = Cast(x, to = like's element type, the same `saturate`)."""
    x, like = node.inputs[:2]
    dtype = _known_dtype(ctx, node, like, "input")
    attributes = {"to": DTYPES[dtype].onnx, "saturate": int(node.attributes.get("saturate", 1))}
    ctx.emit("Cast", [x], node.outputs[:1], attributes)


@register_converter("Size")
def size(ctx, node):
    """Size(x) = ReduceProd(Shape(x)) over every axis, keepdims 0: an int64 scalar (1 for a
    scalar x, whose shape is empty)."""
    shape = ctx.fresh_name("shape")
    ctx.emit("Shape", node.inputs[:1], [shape])
    ctx.emit("ReduceProd", [shape], node.outputs[:1], {"keepdims": 0})


def _or_equal(strict):
    def convert(ctx, node):
        a, b = node.inputs[:2]
        ordered, equal = ctx.fresh_name("ordered"), ctx.fresh_name("equal")
        ctx.emit(strict, [a, b], [ordered])
        ctx.emit("Equal", [a, b], [equal])
        ctx.emit("Or", [ordered, equal], node.outputs[:1])

    convert.__doc__ = f"{strict}OrEqual(a, b) = Or({strict}(a, b), Equal(a, b))."
    return convert


register_converter("GreaterOrEqual", since=12)(_or_equal("Greater"))
register_converter("LessOrEqual", since=12)(_or_equal("Less"))


@register_converter("Reciprocal")
def reciprocal(ctx, node):
    """Reciprocal(x) = Div(1, x), the 1 a scalar of x's element type."""
    (x,) = node.inputs[:1]
    dtype = _known_dtype(ctx, node, x, "input")
    one = ctx.fresh_name("one")
    ctx.set_constant(one, np.ones((), dtype=NUMPY_DTYPES[dtype]))
    ctx.emit("Div", [one, x], node.outputs[:1])


# rtsoa has no optional values: every value a node reads is a tensor or a sequence (an
# optional-typed graph input is refused when the model is imported), so an optional input is
# present exactly when it is given.


@register_converter("OptionalHasElement", since=28)  # 18, 28: more element types; 18: tensors
@register_converter("OptionalHasElement", since=18)
@register_converter("OptionalHasElement", since=15)
def optional_has_element(ctx, node):
    """OptionalHasElement(x): true for a tensor or sequence input, false without one (the
    empty optional), a bool scalar constant."""
    present = bool(node.inputs and node.inputs[0])
    ctx.set_constant(node.outputs[0], np.array(present))


optional_has_element.takes_sequences = True  # it reads whether a sequence is given, not it


@register_converter("OptionalGetElement", since=28)
@register_converter("OptionalGetElement", since=18)
@register_converter("OptionalGetElement", since=15)
def optional_get_element(ctx, node):
    """OptionalGetElement(x) of a tensor is x (an Identity); without an input it is ONNX's
    error of an empty optional, refused here."""
    if not (node.inputs and node.inputs[0]):
        raise LoweringError(
            f"{ctx.describe(node)}: the input is an empty optional (none given), which "
            "OptionalGetElement may not read"
        )
    ctx.emit("Identity", node.inputs[:1], node.outputs[:1])
