"""The op registry: every compute op rtsoa can run, by ONNX op type.

An op is registered with `register_op(name, infer, compute, ...)`: its two njit functions (see
`rtsoa.ops.abi` for their signature), how many inputs and outputs it takes, which inputs'
data its shape inference reads (`data_inputs`: Reshape's shape, Slice's starts, ...), and
`encode`, a Python function turning the ONNX node's attributes into the int64 slots its njit
code reads. The op's code is its position in the sorted names; `rtsoa/ops/switch.py`, the
switch over the codes, is generated from this table (`python -m rtsoa.ops.generate`; a test
checks it is current). Codes are an in-process detail: a saved graph names its ops (the ops
table, `rtsoa.graph.op_table`), and loading binds the names to the codes of the compiled
switch (`compiled_op_names`), so a graph lowered by an rtsoa with another op set runs the
ops it names.
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
    # {input position: DType codes it may have}: lowering refuses others, naming the op, the
    # node and the dtype, instead of the op failing at run time. None: not declared.
    dtypes: dict = None

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
    """The op code of `name` in this registry (ValueError if not registered)."""
    return op_names().index(name)


def compiled_op_names():
    """The op names of the compiled op switch (`rtsoa/ops/switch.py`), position = the code the
    op kernels and `rtsoa.ops.entry` run. Equal to `op_names()` while the switch is current."""
    from rtsoa.ops.switch import OP_NAMES

    return OP_NAMES


def compiled_op_code(name):
    """The code of op `name` in the compiled switch (what `entry` runs; KeyError if the switch
    lacks it: regenerate it with `python -m rtsoa.ops.generate`)."""
    names = compiled_op_names()
    if name not in names:
        raise KeyError(
            f"op {name!r} is not in the compiled op switch (rtsoa/ops/switch.py): run "
            "python -m rtsoa.ops.generate"
        )
    return names.index(name)


def bind_ops(graph):
    """`graph` with its op nodes bound to the compiled op switch (`rtsoa.graph.op_table`):
    what load_graph does; needed only for a graph built by hand with its own ops table."""
    from rtsoa.graph.op_table import bind_op_names

    return bind_op_names(graph, compiled_op_names())
