"""The Einsum converter (opsets 12 and 28): the equation is parsed at lowering with the
operands' ranks (`rtsoa.ops.einsum.parse_equation`), so an ellipsis needs the rank of the
operands it stands in; a malformed equation is refused naming the node and what is wrong."""

from rtsoa.errors import LoweringError
from rtsoa.lowering.converters import register_converter
from rtsoa.ops.einsum import LABELS_KEY, parse_equation


def einsum(ctx, node):
    """Einsum -> the Einsum op with its labels."""
    equation = node.attributes.get("equation")
    if equation is None:
        raise LoweringError(f"{ctx.describe(node)}: attribute 'equation' is missing")
    if isinstance(equation, bytes):
        equation = equation.decode()
    terms = equation.replace(" ", "").partition("->")[0].split(",")
    ranks = []
    for name, term in zip(node.inputs, terms + [""] * len(node.inputs), strict=False):
        dims = ctx.tensor(name).dims
        if dims is None and "..." in term:
            raise LoweringError(
                f"{ctx.describe(node)}: the rank of {name!r} is not known at lowering, and "
                f"its term {term!r} has an ellipsis"
            )
        ranks.append(len(term) if dims is None else len(dims))
    attributes = {**node.attributes, LABELS_KEY: parse_equation(equation, ranks)}
    ctx.emit("Einsum", node.inputs, node.outputs, attributes)


register_converter("Einsum", since=12)(einsum)
register_converter("Einsum", since=28)(einsum)
