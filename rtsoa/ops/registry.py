"""The op registry: every compute op rtsoa can run, by ONNX op type.

An op is registered with `register_op(name, infer, compute, ...)`: its two njit functions (see
`rtsoa.ops.abi` for their signature), how many inputs and outputs it takes, which inputs'
data its shape inference reads (`data_inputs`: Reshape's shape, Slice's starts, ...), and
`encode`, a Python function turning the ONNX node's attributes into the int64 slots its njit
code reads. The op's code is its position in the sorted names; `rtsoa/ops/switch.py`, the
switch over the codes, is generated from this table (`python -m rtsoa.ops.generate`; a test
checks it is current).
"""

import dataclasses

import numpy as np

from rtsoa.graph.builder import float_bits
from rtsoa.ops.abi import MAX_OP_OPERANDS


def no_attributes(attributes, inputs):
    """The `encode` of an op without attributes."""
    return []


@dataclasses.dataclass(frozen=True)
class OpDef:
    """One compute op."""

    name: str  # ONNX op type ("Conv")
    infer: object  # njit shape inference
    compute: object  # njit compute
    encode: object = no_attributes  # (attributes dict, input TensorInfos) -> list of int / float
    inputs: tuple = (1, 1)  # (min, max) input count; max None = variadic
    outputs: tuple = (1, 1)  # (min, max) output count
    data_inputs: tuple = ()  # input positions whose data `infer` reads
    doc: str = ""

    @property
    def max_inputs(self):
        """The largest input count (variadic ops: what the operand table leaves)."""
        if self.inputs[1] is not None:
            return self.inputs[1]
        return MAX_OP_OPERANDS - (self.outputs[1] or 1)

    def slots(self, attributes, inputs):
        """The op's attribute slots for an ONNX node (int64 array; floats as their bits)."""
        values = self.encode(attributes, inputs)
        out = np.empty(len(values), dtype=np.int64)
        for k, value in enumerate(values):
            if isinstance(value, float | np.floating):
                out[k] = float_bits(float(value))
            else:
                out[k] = int(value)
        return out


OPS = {}


def register_op(name, infer, compute, **options):
    """Register op `name` (see `OpDef` for the options); returns the OpDef."""
    if name in OPS:
        raise ValueError(f"op {name!r} is already registered")
    definition = OpDef(name=name, infer=infer, compute=compute, **options)
    OPS[name] = definition
    return definition


def op_names():
    """The registered op names, sorted: position = op code."""
    return tuple(sorted(OPS))


def op_code(name):
    """The op code of `name` (KeyError if not registered)."""
    return op_names().index(name)
