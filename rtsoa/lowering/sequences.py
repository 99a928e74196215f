"""ONNX sequence ops, resolved at lowering: a sequence is a list of tensors known while lowering.

A sequence value (a Tensor with `sequence` set) never exists at run time. Its converter emits one
*sequence call*, which the fold pass resolves when it reaches it, as it does If / Loop regions
(`rtsoa.lowering.control_flow`), so constants folded before it and the shapes inferred so far
are known. The sequence becomes the names of its element tensors (`Tensor.elements`), and the
ops that read one become op calls on those tensors:

- SequenceEmpty: no elements; SequenceConstruct: its inputs.
- SequenceInsert / SequenceErase: the elements with one inserted / removed at a constant
  position (absent: at the end; a negative position counts from the end).
- Identity / OptionalGetElement of a sequence: the same elements.
- SequenceAt: an Identity of the element at a constant position.
- SequenceLength: an int64 constant.
- ConcatFromSequence: a Concat of the elements (each Unsqueezed at `axis` with `new_axis`).
- SplitToSequence: a Split of the input into a number of parts known at lowering: the dim along
  `axis` without `split`, ceil(dim / split) for a scalar `split`, len(split) for a 1-D `split`
  (whose values may be read at run time); without `split`, `keepdims=0` Squeezes each part.
  ONNX ignores `keepdims` when `split` is given; onnxruntime 1.32 does not for a scalar split
  (it squeezes parts of size 1 and fails on larger ones): rtsoa follows ONNX.

More parts than one op takes (`GROUP`) are split / joined in groups. Each op counts the
elements it reads and makes against the lowering's `LoweringLimits.sequence_elements` (a
split before it builds its parts), and its op calls against `op_calls`. Refused at lowering,
naming the op, node and opset: positions that are not constants or out of range, a number of
elements not known at lowering, a sequence as a graph input (`rtsoa.lowering.sequence_io`
lowers a model per run's sequences instead) or as a result of an If / Loop subgraph, and a
sequence read or made by any other op (`lower.convert_node`).
"""

import numpy as np

from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.budget import spend
from rtsoa.lowering.calls import op_call, set_constant
from rtsoa.lowering.convert import provide_pass_through
from rtsoa.lowering.converters import register_converter
from rtsoa.lowering.onnx_import import onnx_dtype
from rtsoa.lowering.subgraphs import fresh_tensor_name, identity_call, merged_dtype, scalar_value
from rtsoa.ops.abi import MAX_OP_OPERANDS

SINCE = 11  # the opset that added the sequence ops
GROUP = MAX_OP_OPERANDS - 2  # parts per Split / Concat (a Split may have two inputs)
_POSITION_TYPES = (DType.INT32, DType.INT64)
_ONNX_FLOAT = 1  # SequenceEmpty's default element type (TensorProto.FLOAT)


class SequenceCall:
    """One sequence op; the fold pass calls `fold`, which resolves it into op calls."""

    region = True  # lowered by its own `fold`, like an If / Loop region

    def __init__(self, ctx, node, resolve):
        self.where = ctx.describe(node)  # how errors name the node (op, name, index, opset)
        self.node = ctx.node_index
        self.op = node.op_type
        self.inputs = list(node.inputs)
        self.outputs = list(node.outputs)
        self.attributes = dict(node.attributes)
        self.resolve = resolve  # fn(call, model) -> op calls; sets the output sequence

    def fold(self, model, fold):
        """The op calls that replace this sequence op, folded (none when it makes a sequence
        of existing tensors or a constant)."""
        return fold(model, self.resolve(self, model))

    def input(self, k):
        """The name of input `k` ("" when absent)."""
        return self.inputs[k] if k < len(self.inputs) else ""

    def op_call(self, model, op, inputs, outputs, attributes):
        """An op call attributed to this node."""
        return op_call(model, op, inputs, outputs, attributes, self.node)

    def fresh(self, model, base):
        """A new tensor of `model` named after `base`."""
        name = fresh_tensor_name(model, base)
        model.tensor(name)
        return name

    def spend_elements(self, count):
        """Count `count` sequence elements against the lowering's limit (naming this node)."""
        spend("sequence_elements", count, lambda: self.where)

    def error(self, message):
        """A LoweringError naming the node."""
        return LoweringError(f"{self.where}: {message}")


def _elements(call, model):
    """The element names of the sequence input 0 (resolved by the fold pass before)."""
    name = call.inputs[0]
    elements = model.tensors[name].elements
    if elements is None:
        raise call.error(f"sequence {name!r} is not known at lowering")
    call.spend_elements(len(elements))
    return list(elements)


def _set_sequence(call, model, elements, dtype, counted=False):
    """Output 0 is the sequence of `elements`; their element type must agree with `dtype`.
    `counted`: the caller counted them against the limit already."""
    if not counted:
        call.spend_elements(len(elements))
    for name in elements:
        dtype = merged_dtype(dtype, model.tensors[name].dtype, f"{call.where}: {name!r}")
    tensor = model.tensor(call.outputs[0])
    tensor.sequence = True
    tensor.elements = tuple(elements)
    tensor.dtype = DType(dtype)
    return []


def _position(call, model, k, count, inserting):
    """Input `k`, a constant position, as an index into `count` elements (absent: the end).
    Valid: -count .. count for an insertion, -count .. count - 1 otherwise."""
    name = call.input(k)
    high = count if inserting else count - 1
    if high < 0:
        raise call.error("the sequence is empty")
    if not name:
        return high
    tensor = model.tensors[name]
    if not tensor.is_constant:
        raise call.error(
            f"position {name!r} is not a constant; rtsoa resolves sequences at lowering, so a "
            "position must be an initializer, a Constant or a value folded from them"
        )
    if tensor.dtype not in _POSITION_TYPES or tensor.data.size != 1:
        raise call.error(
            f"position {name!r} must be one int32 / int64 element, not "
            f"{DType(tensor.dtype).name} of shape {tensor.dims}"
        )
    position = scalar_value(tensor)
    index = position + count if position < 0 else position
    if not 0 <= index <= high:
        raise call.error(
            f"position {position} is out of range for a sequence of {count} element(s) "
            f"(valid: {-count} .. {high})"
        )
    return index


def _empty(call, model):
    code = call.attributes.get("dtype", _ONNX_FLOAT)
    return _set_sequence(call, model, [], onnx_dtype(code, call.where))


def _construct(call, model):
    return _set_sequence(call, model, call.inputs, DType.UNDEFINED)


def _insert(call, model):
    elements = _elements(call, model)
    elements.insert(_position(call, model, 2, len(elements), True), call.inputs[1])
    return _set_sequence(call, model, elements, model.tensors[call.inputs[0]].dtype)


def _erase(call, model):
    elements = _elements(call, model)
    del elements[_position(call, model, 1, len(elements), False)]
    return _set_sequence(call, model, elements, model.tensors[call.inputs[0]].dtype)


def _at(call, model):
    elements = _elements(call, model)
    chosen = elements[_position(call, model, 1, len(elements), False)]
    return [identity_call(model, chosen, call.outputs[0], call.node)]


def _length(call, model):
    set_constant(model, call.outputs[0], np.array(len(_elements(call, model)), np.int64))
    return []


def _rank(model, names):
    """The rank of the first of `names` whose rank is known, or None."""
    for name in names:
        dims = model.tensors[name].dims
        if dims is not None:
            return len(dims)
    return None


def _concat(call, model):
    elements = _elements(call, model)
    if not elements:
        raise call.error("the sequence is empty; a Concat needs at least one tensor")
    axis = int(call.attributes["axis"])
    new_axis = int(call.attributes.get("new_axis", 0))
    if new_axis not in (0, 1):
        raise call.error(f"new_axis must be 0 or 1, not {new_axis}")
    rank = _rank(model, elements)
    if rank is not None and not -rank - new_axis <= axis <= rank - 1 + new_axis:
        raise call.error(
            f"axis {axis} is out of range for elements of rank {rank}"
            + (" with new_axis" if new_axis else "")
        )
    output = call.outputs[0]
    calls = []
    if new_axis:  # Unsqueeze and Concat count a negative axis from the same rank (rank + 1)
        parts = []
        for k, name in enumerate(elements):
            part = call.fresh(model, f"{output}/part{k}")
            calls.append(call.op_call(model, "Unsqueeze", [name], [part], {"axes": [axis]}))
            parts.append(part)
        elements = parts
    return calls + _concat_calls(call, model, elements, axis, output)


def _concat_calls(call, model, parts, axis, output):
    """Concat calls joining `parts` into `output`, at most GROUP parts per Concat."""
    calls = []
    while len(parts) > GROUP:
        joined = []
        for start in range(0, len(parts), GROUP):
            group = parts[start : start + GROUP]
            if len(group) == 1:
                joined.append(group[0])
                continue
            name = call.fresh(model, f"{output}/joined")
            calls.append(call.op_call(model, "Concat", group, [name], {"axis": axis}))
            joined.append(name)
        parts = joined
    calls.append(call.op_call(model, "Concat", parts, [output], {"axis": axis}))
    return calls


def _static_dim(call, tensor, axis):
    length = tensor.dims[axis]
    if not isinstance(length, int):
        raise call.error(
            f"dim {axis} of {tensor.name!r} is {length!r}, not known at lowering; the number of "
            "elements must be (give a 1-D split of static length)"
        )
    return length


def _split_sizes(call, model, tensor, axis):
    """(sizes, split input): the parts' sizes, or None and the split tensor read at run time.
    Each count is charged to the lowering's limit before its list is built."""
    name = call.input(1)
    if not name:
        count = _static_dim(call, tensor, axis)
        call.spend_elements(count)
        return [1] * count, ""
    split = model.tensors[name]
    if not split.is_constant:
        if split.dims is None or len(split.dims) != 1 or not isinstance(split.dims[0], int):
            raise call.error(
                f"split {name!r} is read at run time and its length is not known at lowering "
                f"(shape {split.dims}); the number of elements must be"
            )
        call.spend_elements(split.dims[0])
        return [None] * split.dims[0], name
    values = split.data
    if values.ndim == 0:
        chunk = int(values)
        if chunk <= 0:
            raise call.error(f"a scalar split must be positive, not {chunk}")
        length = _static_dim(call, tensor, axis)
        count = -(-length // chunk)
        call.spend_elements(count)
        return [min(chunk, length - k * chunk) for k in range(count)], ""
    call.spend_elements(values.size)
    return [int(size) for size in values.reshape(-1)], ""


def _split(call, model):
    tensor = model.tensors[call.inputs[0]]
    if tensor.dims is None:
        raise call.error(f"the rank of {tensor.name!r} is not known at lowering")
    rank = len(tensor.dims)
    axis = int(call.attributes.get("axis", 0))
    if not -rank <= axis < rank:
        raise call.error(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    sizes, runtime_split = _split_sizes(call, model, tensor, axis)
    squeeze = not call.input(1) and not int(call.attributes.get("keepdims", 1))
    output = call.outputs[0]
    parts = [call.fresh(model, f"{output}/part{k}") for k in range(len(sizes))]
    calls = []
    if runtime_split and parts:
        if len(parts) > GROUP:
            raise call.error(
                f"a split read at run time into {len(parts)} parts; at most {GROUP} are supported"
            )
        calls.append(
            call.op_call(model, "Split", [tensor.name, runtime_split], parts, {"axis": axis})
        )
    elif parts:
        calls += _split_calls(call, model, tensor.name, sizes, axis, parts)
    elements = parts
    if squeeze:
        elements = [call.fresh(model, f"{output}/element{k}") for k in range(len(parts))]
        for part, element in zip(parts, elements, strict=True):
            calls.append(call.op_call(model, "Squeeze", [part], [element], {"axes": [axis]}))
    # the parts' types: the fold infers them; their count was charged by _split_sizes
    _set_sequence(call, model, elements, tensor.dtype, counted=True)
    return calls


def _split_calls(call, model, source, sizes, axis, outputs):
    """Split calls cutting `source` into `outputs` of `sizes`, at most GROUP parts per Split
    (more: first into groups, then each group)."""
    if len(outputs) <= GROUP:
        return [call.op_call(model, "Split", [source], outputs, {"axis": axis, "split": sizes})]
    groups = [
        range(start, min(start + GROUP, len(outputs))) for start in range(0, len(outputs), GROUP)
    ]
    chunks = [
        outputs[group[0]] if len(group) == 1 else call.fresh(model, f"{outputs[group[0]]}/group")
        for group in groups
    ]
    totals = [sum(sizes[k] for k in group) for group in groups]
    calls = _split_calls(call, model, source, totals, axis, chunks)
    for group, chunk in zip(groups, chunks, strict=True):
        if len(group) > 1:
            members = [outputs[k] for k in group]
            calls += _split_calls(call, model, chunk, [sizes[k] for k in group], axis, members)
    return calls


def _same(call, model):
    elements = _elements(call, model)
    return _set_sequence(call, model, elements, model.tensors[call.inputs[0]].dtype, counted=True)


# ops that pass a sequence on unchanged (an optional holding one is the sequence itself)
PASS_THROUGH = ("Identity", "OptionalGetElement")


def pass_through(ctx, node):
    """Identity / OptionalGetElement of a sequence: the same elements (`lower.convert_node`
    sends such a node here in place of the op's own converter)."""
    where = ctx.describe(node)
    if len([name for name in node.inputs if name]) != 1 or len(node.outputs) != 1:
        raise LoweringError(f"{where}: one input and one output are needed")
    ctx.tensor(node.outputs[0]).sequence = True
    ctx.calls.append(SequenceCall(ctx, node, _same))


# op: (resolver, (fewest, most) inputs, sequence inputs, makes a sequence)
_SEQUENCE_OPS = {
    "SequenceEmpty": (_empty, (0, 0), (), True),
    "SequenceConstruct": (_construct, (1, None), (), True),
    "SequenceInsert": (_insert, (2, 3), (0,), True),
    "SequenceErase": (_erase, (1, 2), (0,), True),
    "SequenceAt": (_at, (2, 2), (0,), False),
    "SequenceLength": (_length, (1, 1), (0,), False),
    "ConcatFromSequence": (_concat, (1, 1), (0,), False),
    "SplitToSequence": (_split, (1, 2), (), True),
}


def _converter(resolve, arity, sequence_inputs, makes_sequence):
    def convert(ctx, node):
        """A sequence call, resolved in the fold pass (rtsoa.lowering.sequences)."""
        where = ctx.describe(node)
        inputs = list(node.inputs)
        while inputs and not inputs[-1]:
            inputs.pop()  # trailing absent optional inputs
        low, high = arity
        if len(inputs) < low or (high is not None and len(inputs) > high):
            raise LoweringError(f"{where}: takes {low}..{high} inputs, got {len(inputs)}")
        if len(node.outputs) != 1 or not node.outputs[0]:
            raise LoweringError(f"{where}: one output is needed, got {len(node.outputs)}")
        if node.op_type == "ConcatFromSequence" and "axis" not in node.attributes:
            raise LoweringError(f"{where}: attribute 'axis' is missing")
        for k, name in enumerate(inputs):
            tensor = ctx.tensor(name)
            if k not in sequence_inputs:
                if tensor.sequence:
                    raise LoweringError(
                        f"{where}: input {name!r} is a sequence; a tensor is needed"
                    )
            elif name in ctx.graph.inputs:
                raise LoweringError(
                    f"{where}: sequence {name!r} is a graph input; rtsoa resolves sequences at "
                    "lowering: run the model through rtsoa.InferenceSession, which lowers it "
                    "for each run's sequence (rtsoa.lowering.sequence_io)"
                )
            elif not tensor.sequence:
                raise LoweringError(
                    f"{where}: input {name!r} is not a sequence made by a sequence op; rtsoa "
                    "resolves sequences at lowering, so only those ops may make the ones it reads"
                )
        (output,) = node.outputs
        if makes_sequence:  # a graph output: returned as its elements (lower._sequence_outputs)
            ctx.tensor(output).sequence = True
        ctx.calls.append(SequenceCall(ctx, node, resolve))

    convert.takes_sequences = True  # lower.convert_node lets this converter see sequences
    return convert


provide_pass_through(pass_through)
for _op, (_resolve, _arity, _sequence_inputs, _makes) in _SEQUENCE_OPS.items():
    register_converter(_op, since=SINCE)(_converter(_resolve, _arity, _sequence_inputs, _makes))
