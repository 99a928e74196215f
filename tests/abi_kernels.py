"""User kernels for the kernel-ABI tests, in an importable module as a user's would be.

They use only the public ABI: `rtsoa.kernels` accessors, `notify`, `value_view` and the
device API, and are registered in `ABI_REGISTRY` (with the built-ins they run beside).
"""

import numpy as np

from rtsoa.device import device_free, device_malloc
from rtsoa.kernels import (
    REGISTRY,
    KernelRegistry,
    attribute,
    builtin,
    control_flow,
    input_value,
    kernel,
    notify,
    output_value,
    value_view,
)
from rtsoa.kernels.checksum import fold, mix

ABI_REGISTRY = KernelRegistry()
for _name, _function in (
    ("Checksum0", builtin.checksum),
    ("Noop", builtin.noop),
    ("ConstInt", control_flow.const_int),
):
    ABI_REGISTRY.register(_name, _function, constants=REGISTRY[_name].constants)
_SALT = np.uint64(777)


@kernel("NotifyAttr", registry=ABI_REGISTRY, control_flow=True, requires={"attributes": 1})
def notify_attribute(rt, node):
    """attrs [k]: continue on successor k only (whatever the node's successor count)."""
    return notify(attribute(rt, node, 0))


@kernel("FillRamp", registry=ABI_REGISTRY, requires={"attributes": 2, "outputs": 1})
def fill_ramp(rt, node):
    """attrs [rows, cols]: allocate a float32 (rows, cols) block on the host, fill it with
    row * 100 + col through a typed view, keep the handle in the output's slot."""
    rows = attribute(rt, node, 0)
    cols = attribute(rt, node, 1)
    handle = device_malloc(rt.device, np.int64(2), rows * cols * 4, np.int64(0))
    if handle < 0:
        return np.int32(-handle)
    rt.values.slots[output_value(rt, node, 0)] = handle
    status, view = value_view(rt, output_value(rt, node, 0), (rows, cols), np.float32)
    if status != 0:
        return status
    for i in range(rows):
        for j in range(cols):
            view[i, j] = i * 100 + j
    return fold(rt, node, _SALT)


@kernel("SumAndFree", registry=ABI_REGISTRY, requires={"attributes": 1, "inputs": 1})
def sum_and_free(rt, node):
    """attrs [count]; input: a block of float32; adds the sum of its first `count` elements
    to the worker's checksum, then frees the block (the view dies with it)."""
    block = input_value(rt, node, 0)
    status, view = value_view(rt, block, (attribute(rt, node, 0),), np.float32)
    if status != 0:
        return status
    total = 0.0
    for i in range(view.shape[0]):
        total += view[i]
    rt.worker.checksum[0] += np.uint64(total)
    return np.int32(device_free(rt.device, rt.values.slots[block], np.int64(0)))


@kernel("ViewStale", registry=ABI_REGISTRY, requires={"inputs": 1, "attributes": 1})
def view_stale(rt, node):
    """attrs [elements]; input: a block handle. Returns the view's status and records the
    number of elements the view exposes in scratch[1]."""
    status, view = value_view(rt, input_value(rt, node, 0), (attribute(rt, node, 0), 2), np.int64)
    rt.worker.scratch[1] = view.size
    return status


# A kernel family: one function, three names, each with its own (salt, weight) constants.
SCALED = {
    "Scaled0": (np.uint64(11), 1.0),
    "Scaled1": (np.uint64(12), 3.0),
    "Scaled2": (np.uint64(13), 5.0),
}


def scaled(rt, node, salt, weight):
    """Fold `mix(node, salt) * weight` into the checksum (wrapping uint64)."""
    rt.worker.checksum[0] += mix(node, salt) * np.uint64(weight)
    return np.int32(0)


for _name, _constants in SCALED.items():
    scaled = kernel(_name, registry=ABI_REGISTRY, constants=_constants)(scaled)
