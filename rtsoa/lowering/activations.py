"""Gelu and Celu onto their activation ops (`rtsoa.ops.activations`) once their attributes are
values the ops implement: an unknown Gelu `approximate` and a zero Celu `alpha` (x / alpha) are
refused here, naming the attribute. Celu-28 only adds element types (bfloat16, float16 and
double) to Celu-12; the op runs float32 and float64, and lowering refuses the others by dtype.
"""

from rtsoa.errors import LoweringError
from rtsoa.lowering.converters import one_to_one, register_converter
from rtsoa.lowering.indexed import checked_choice
from rtsoa.ops.activations import GELU_APPROXIMATIONS


@register_converter("Gelu", since=20)
def gelu(ctx, node):
    """Gelu: the op itself once `approximate` is none or tanh."""
    checked_choice(ctx, node, "approximate", GELU_APPROXIMATIONS, "none")
    one_to_one(ctx, node)


def celu(ctx, node):
    """Celu: the op itself once alpha is not zero."""
    if float(node.attributes.get("alpha", 1.0)) == 0.0:
        raise LoweringError(f"{ctx.describe(node)}: alpha 0 is not supported (Celu divides by it)")
    one_to_one(ctx, node)


register_converter("Celu", since=12)(celu)
register_converter("Celu", since=28)(celu)
