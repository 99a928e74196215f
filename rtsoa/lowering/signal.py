"""The window converters (HannWindow, HammingWindow, BlackmanWindow): the output element type
and `periodic` are checked at lowering, naming the node, since the size may be known only when
the model runs."""

from rtsoa.errors import LoweringError
from rtsoa.lowering.converters import one_to_one, register_converter
from rtsoa.ops.signal import WINDOWS, output_type


def window(ctx, node):
    """A window op, after the checks above."""
    if output_type(node.attributes) < 0:
        raise LoweringError(
            f"{ctx.describe(node)}: output_datatype {node.attributes['output_datatype']} is not "
            "supported (FLOAT and DOUBLE are)"
        )
    if int(node.attributes.get("periodic", 1)) not in (0, 1):
        raise LoweringError(f"{ctx.describe(node)}: periodic must be 0 or 1")
    one_to_one(ctx, node)


for _name in WINDOWS:
    register_converter(_name, since=17)(window)
