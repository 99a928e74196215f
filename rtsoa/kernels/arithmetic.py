"""Integer arithmetic on value slots: small host-side kernels for shapes, counters and tests."""

import numpy as np

from rtsoa.kernels.abi import input_value, output_value
from rtsoa.kernels.control_flow import int_output
from rtsoa.kernels.registry import kernel


@kernel("AddInt", requires={"inputs": 2, "outputs": 1}, outputs=int_output)
def add_int(rt, node):
    """inputs: two INT values; output: their sum (int64, wrapping)."""
    slots = rt.values.slots
    slots[output_value(rt, node, 0)] = (
        slots[input_value(rt, node, 0)] + slots[input_value(rt, node, 1)]
    )
    return np.int32(0)
