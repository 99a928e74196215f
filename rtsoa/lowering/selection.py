"""Converters of the cumulative and selection ops across their opsets: CumProd is defined
from opset 26 on (`rtsoa.ops.cumulative` implements that definition); TopK before opset 10
takes k as an attribute, which becomes the K input of the TopK op (`rtsoa.ops.topk`)."""

import numpy as np

from rtsoa.errors import LoweringError
from rtsoa.lowering.converters import one_to_one, register_converter

register_converter("CumProd", since=26)(one_to_one)


@register_converter("TopK", since=1)
def topk_before_10(ctx, node):
    """TopK-1: attribute k -> a constant K input."""
    if "k" not in node.attributes:
        raise LoweringError(f"{ctx.describe(node)}: attribute 'k' is missing")
    k = ctx.fresh_name("k")
    ctx.set_constant(k, np.array([int(node.attributes["k"])], dtype=np.int64))
    attributes = {key: value for key, value in node.attributes.items() if key != "k"}
    ctx.emit("TopK", [node.inputs[0], k], node.outputs, attributes)


register_converter("TopK", since=10)(one_to_one)
