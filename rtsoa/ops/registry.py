"""The op registry: every compute op rtsoa can run, by ONNX op type.

An op is registered with `register_op(name, infer, compute, ...)`: its two njit functions (see
`rtsoa.ops.abi` for their signature), how many inputs and outputs it takes, which inputs'
data its shape inference reads (`data_inputs`: Reshape's shape, Slice's starts, ...), and
`encode`, a Python function turning the ONNX node's attributes into the int64 slots its njit
code reads. Each op compiles into an entry of its own, generated from this table on first use
(`rtsoa.ops.entry`, `rtsoa.ops.library`). The op's code is its position in the sorted names.
Codes are an in-process detail: a saved graph names its ops (the ops table,
`rtsoa.graph.op_table`), loading binds the names to this process's codes
(`compiled_op_names`), and the op kernels call each op through a table of entry addresses by
the graph's own op rows, so a graph lowered by an rtsoa with another op set runs the ops it
names.
"""

import dataclasses
import inspect

import numpy as np

from rtsoa.abi.registry import Registry
from rtsoa.errors import UnknownOpError
from rtsoa.graph.builder import float_bits
from rtsoa.graph.op_table import bind_op_names, provide_op_switch
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
    constants: tuple = ()  # integers passed to `compute` after its six arguments (op families)
    doc: str = ""
    # {input position: DType codes it may have}: lowering refuses others, naming the op, the
    # node and the dtype, instead of the op failing at run time. None: not declared.
    dtypes: dict = None
    # True: `compute` takes input 0's DType code as its last argument (after the constants),
    # so each dtype of dtypes[0] can have an entry of its own that passes that code as a
    # literal, every other dtype's branch pruned before typing (`rtsoa.ops.entry`): a model
    # compiles only the dtypes it uses.
    variants: bool = False
    # True: the op draws random numbers, so lowering never folds it into a constant.
    random: bool = False
    # True: `compute` takes the entry's mode as its very last argument, and splits its work
    # into parts that threads share (`rtsoa.ops.parts`) when the mode is MODE_COMPUTE, or
    # computes the one part a MODE_PART mode names.
    parts: bool = False

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


OPS = Registry("op", UnknownOpError)
_codes = []  # op codes of this process: the built-in ops sorted, then later registrations
_frozen = []  # [True] once rtsoa.ops has registered the built-in ops


def register_op(name, infer, compute, **options):
    """Register op `name` (see `OpDef` for the options); returns the OpDef. An op registered
    after the built-in ones (a user's) takes the next op code; its functions must be
    module-level njit functions (its compiled entry imports them by module and name)."""
    if name in OPS:
        raise ValueError(f"op {name!r} is already registered")
    constants = options.get("constants", ())
    if not all(isinstance(value, int | np.integer) for value in constants):
        raise TypeError(f"op {name!r}: constants must be integers, got {constants!r}")
    if options.get("variants") and 0 not in (options.get("dtypes") or {}):
        raise ValueError(f"op {name!r}: variants=True needs the dtypes of input 0 declared")
    python = getattr(compute, "py_func", compute)
    if callable(python):
        taken = len(inspect.signature(python).parameters)
        given = 6 + len(constants) + bool(options.get("variants")) + bool(options.get("parts"))
        if taken != given:
            raise TypeError(
                f"op {name!r}: its compute takes {taken} arguments, its entry passes {given} "
                f"(six, {len(constants)} constant(s)"
                + (", input 0's dtype" if options.get("variants") else "")
                + (", the mode" if options.get("parts") else "")
                + ")"
            )
    definition = OPS.add(name, OpDef(name=name, infer=infer, compute=compute, **options))
    if _frozen:
        _codes.append(name)
    return definition


def freeze_codes():
    """Fix the op codes of the built-in ops (their sorted names); what `rtsoa.ops` does once
    it has imported them."""
    if not _frozen:
        _codes[:] = sorted(OPS)
        _frozen.append(True)


def op_names():
    """The registered op names, sorted: position = op code."""
    return tuple(sorted(OPS))


def op_code(name):
    """The op code of `name` in this registry (ValueError if not registered)."""
    return op_names().index(name)


def compiled_op_names():
    """The op names by the code `rtsoa.ops.library.run_op` and bound graphs use in this process:
    the built-in ops sorted (equal to `op_names()` until another op is registered), then ops
    registered later in their order. Each op's entry compiles on first use
    (`rtsoa.ops.library`)."""
    return tuple(_codes) if _frozen else op_names()


provide_op_switch(compiled_op_names)


def compiled_op_code(name):
    """The code of op `name` in `compiled_op_names()` (KeyError if it is not registered)."""
    names = compiled_op_names()
    if name not in names:
        raise KeyError(f"op {name!r} is not registered in this rtsoa")
    return names.index(name)


def bind_ops(graph):
    """`graph` with its op nodes bound to this process's op codes (`rtsoa.graph.op_table`):
    what load_graph does; needed only for a graph built by hand with its own ops table."""
    return bind_op_names(graph, compiled_op_names())
