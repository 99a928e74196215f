"""Sequences and optionals as graph inputs and outputs: an ONNX model specialised on a run's.

rtsoa resolves sequences at lowering (`rtsoa.lowering.sequences`), so a model whose graph input is
a sequence or an optional is lowered once per *signature* of the values a run gives its inputs
(`signature`: every input's element type and shape, each sequence's length and its elements' types
and shapes, which optionals are given): a tensor input is declared at the run's shape (so a split
or a length read from one is known at lowering), a sequence input of n elements becomes n tensor
inputs `x[0]` .. `x[n-1]` (their element type and shape those of the run's arrays) joined by a
SequenceConstruct (a SequenceEmpty of the declared element type for n = 0); an optional input
becomes its value (a tensor or a sequence, as above) or, given None, an absent input: nodes reading
it read "" (OptionalHasElement is then false), an Identity or Optional of it is absent too, and an
optional graph output left absent is returned as None (`absent_outputs`). An `Optional(x)` node
with its input is an Identity of it (rtsoa holds a present optional as its value). A sequence graph
output is returned by the lowering as its elements, tensors named `y[0]` .. `y[n-1]`
(`rtsoa.lowering.lower`), which `element_outputs` regroups.

`value_kinds` says which inputs and outputs are what: "tensor", "sequence", "optional" (of a
tensor) or "optional_sequence"; the model API (`rtsoa.runtime.sequence_session`) builds its
description from it.
"""

import numpy as np

from rtsoa.errors import ModelInputError

TENSOR, SEQUENCE = "tensor", "sequence"
OPTIONAL, OPTIONAL_SEQUENCE = "optional", "optional_sequence"
SEQUENCE_KINDS = (SEQUENCE, OPTIONAL_SEQUENCE)
VALUE = "value"  # a signature entry of an input whose value is part of it (a position)
_FLOAT = 1  # TensorProto.FLOAT: the element type of an empty sequence of undeclared type


def element_name(name, index):
    """The name of element `index` of sequence `name` as a tensor input or output."""
    return f"{name}[{index}]"


def _kind(type_proto):
    """(kind, ONNX element type code or 0) of a TypeProto; kind None for other types (maps,
    sparse tensors: the importer refuses them)."""
    which = type_proto.WhichOneof("value")
    if which == "tensor_type":
        return TENSOR, type_proto.tensor_type.elem_type
    if which == "sequence_type":
        inner = type_proto.sequence_type.elem_type
        if inner.WhichOneof("value") == "tensor_type":
            return SEQUENCE, inner.tensor_type.elem_type
        return None, 0
    if which == "optional_type":
        kind, code = _kind(type_proto.optional_type.elem_type)
        if kind == TENSOR:
            return OPTIONAL, code
        if kind == SEQUENCE:
            return OPTIONAL_SEQUENCE, code
    return None, 0


def value_kinds(proto):
    """([(name, kind, element type code)] of the graph inputs (initializers left out),
    the same of the outputs) of a ModelProto."""
    initialized = {tensor.name for tensor in proto.graph.initializer}
    inputs = [
        (value.name, *_kind(value.type))
        for value in proto.graph.input
        if value.name not in initialized
    ]
    outputs = [(value.name, *_kind(value.type)) for value in proto.graph.output]
    return inputs, outputs


def takes_sequences(proto):
    """Whether a ModelProto has a sequence or optional graph input or output (so it is
    lowered per signature, `specialise`)."""
    inputs, outputs = value_kinds(proto)
    return any(kind not in (TENSOR, None) for _, kind, _ in inputs + outputs)


_SPLITS = ("SplitToSequence", "ConcatFromSequence")  # sequence ops not named Sequence*
# Inputs a sequence op reads as a position or a split at lowering: op -> input index.
_POSITION_READS = {"SequenceAt": 1, "SequenceInsert": 2, "SequenceErase": 1, "SplitToSequence": 1}


def position_inputs(proto):
    """Names of graph inputs a sequence op of the main graph reads as a position or a split,
    and the conditions and trip counts of main-graph If / Loop nodes whose subgraphs handle
    sequences or optionals (`rtsoa.lowering.sequence_regions` chooses the branch or unrolls
    the loop at lowering): a one-element integer or bool given for one is part of the
    signature (its value), and becomes a constant of that lowering, as rtsoa resolves
    sequences at lowering."""
    names = set()
    for node in proto.graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        index = _POSITION_READS.get(node.op_type)
        if index is not None and index < len(node.input):
            names.add(node.input[index])
        if node.op_type in ("If", "Loop") and any(_handles_sequences(a.g) for a in node.attribute):
            names.update(node.input[:1] if node.op_type == "If" else node.input[:2])
    return names


def _handles_sequences(graph):
    """Whether a GraphProto (a subgraph) makes, reads or declares a sequence or optional."""
    if graph is None or not graph.ByteSize():
        return False
    declared = list(graph.input) + list(graph.output) + list(graph.value_info)
    if any(_kind(value.type)[0] not in (TENSOR, None) for value in declared):
        return True
    for node in graph.node:
        if node.op_type.startswith(("Sequence", "Optional")) or node.op_type in _SPLITS:
            return True
        if any(_handles_sequences(attribute.g) for attribute in node.attribute):
            return True
    return False


def baked_inputs(key):
    """Names of the inputs a signature makes constants (positions, `position_inputs`)."""
    return {entry[0] for entry in key if entry[1] == VALUE}


def _numpy_of(code):
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(code))


def signature(proto, feeds, max_elements):
    """The hashable signature of `feeds` ({name: value}) for the model's inputs: per input,
    None (an absent optional) or ("tensor", dtype, shape) (tensors and optional tensors) or
    ("sequence", ((dtype, shape), ...)) or ("value", dtype, shape, value) (a one-element
    integer a sequence op reads as a position or split, `position_inputs`); every input of
    such a model is lowered at the run's shapes. ModelInputError naming the input for a tensor
    where a sequence is expected (or the reverse), elements of mixed or undeclared element
    types, or more than `max_elements` elements in all."""
    inputs, _ = value_kinds(proto)
    positions = position_inputs(proto)
    key = []
    total = 0
    for name, kind, code in inputs:
        if kind is None or name not in feeds:
            continue
        value = feeds[name]
        declared = _numpy_of(code) if code else None
        if kind == TENSOR:  # its shape too: a split or a length read from it is then known
            if isinstance(value, list | tuple) or value is None:
                raise ModelInputError(f"input {name!r} is a tensor: give an array")
            array = np.asarray(value)
            if name in positions and array.size == 1 and array.dtype.kind in "iub":
                key.append((name, VALUE, str(array.dtype), array.shape, array.item()))
                continue
            key.append((name, TENSOR, str(array.dtype), array.shape))
            continue
        if value is None:
            if kind not in (OPTIONAL, OPTIONAL_SEQUENCE):
                raise ModelInputError(f"input {name!r} is a {kind}, not an optional: None given")
            key.append((name, None))
            continue
        if kind in SEQUENCE_KINDS:
            if not isinstance(value, list | tuple):
                raise ModelInputError(
                    f"input {name!r} is a sequence of tensors: give a list of arrays, not "
                    f"{type(value).__name__}"
                )
            total += len(value)
            if total > max_elements:
                raise ModelInputError(
                    f"input {name!r}: {total} sequence elements in all, more than the "
                    f"{max_elements} the lowering limits allow (LoweringLimits.sequence_elements)"
                )
            arrays = [np.asarray(element) for element in value]
            kinds = sorted({str(array.dtype) for array in arrays})
            if len(kinds) > 1:
                raise ModelInputError(
                    f"input {name!r}: a sequence's elements share one element type, got "
                    f"{', '.join(kinds)}"
                )
            if arrays and declared is not None and arrays[0].dtype != declared:
                raise ModelInputError(
                    f"input {name!r}: elements of {arrays[0].dtype} given, the model declares "
                    f"{declared}"
                )
            key.append((name, SEQUENCE, tuple((str(a.dtype), a.shape) for a in arrays)))
            continue
        if isinstance(value, list | tuple):
            raise ModelInputError(f"input {name!r} is an optional tensor: a list given")
        array = np.asarray(value)
        if declared is not None and array.dtype != declared:
            raise ModelInputError(
                f"input {name!r}: {array.dtype} given, the model declares {declared}"
            )
        key.append((name, TENSOR, str(array.dtype), array.shape))
    return tuple(key)


def _names(graph):
    """Every value name of a GraphProto (its nodes', inputs', outputs', initializers')."""
    names = {value.name for value in list(graph.input) + list(graph.output)}
    names.update(tensor.name for tensor in graph.initializer)
    names.update(value.name for value in graph.value_info)
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
    return names


def specialise(proto, key):
    """(ModelProto, absent outputs): `proto` rewritten for one signature (`signature`), its
    sequence and optional inputs as described in the module docstring; `proto` is not
    modified. ModelInputError when an element's name `x[k]` is a value of the model already."""
    from onnx import ModelProto, helper, numpy_helper

    model = ModelProto()
    model.CopyFrom(proto)
    graph = model.graph
    given = {entry[0]: entry[1:] for entry in key}
    taken = _names(graph)
    inputs, outputs = value_kinds(proto)
    kinds = {name: (kind, code) for name, kind, code in inputs}
    prologue, absent, kept = [], set(), []
    for value in graph.input:
        if value.name not in kinds or kinds[value.name][0] is None:
            kept.append(value)
            continue
        kind, code = kinds[value.name]
        spec = given.get(value.name)
        if kind == TENSOR and spec is None:
            kept.append(value)  # not given: the session's own check names it
            continue
        if spec is None or spec == (None,):
            if spec is None:
                raise ModelInputError(f"input {value.name!r} is not given")
            absent.add(value.name)
            continue
        if spec[0] == TENSOR:
            dtype, shape = spec[1], spec[2]
            kept.append(helper.make_tensor_value_info(value.name, _code_of(dtype), shape))
            continue
        if spec[0] == VALUE:  # a position: the run's value, a constant of this lowering
            array = np.full(spec[2], spec[3], dtype=spec[1])
            graph.initializer.append(numpy_helper.from_array(array, value.name))
            continue
        elements = spec[1]
        names = [element_name(value.name, k) for k in range(len(elements))]
        clash = sorted(set(names) & taken)
        if clash:
            raise ModelInputError(
                f"input {value.name!r}: its element name {clash[0]!r} is a value of the model "
                "already"
            )
        for element, (dtype, shape) in zip(names, elements, strict=True):
            kept.append(helper.make_tensor_value_info(element, _code_of(dtype), shape))
        if names:
            prologue.append(helper.make_node("SequenceConstruct", names, [value.name]))
        else:
            prologue.append(
                helper.make_node("SequenceEmpty", [], [value.name], dtype=code or _FLOAT)
            )
    del graph.input[:]
    graph.input.extend(kept)
    nodes = _without_absent(list(graph.node), absent)
    del graph.node[:]
    graph.node.extend(prologue + nodes)
    absent_outputs = set()
    kept_outputs = []
    for (name, kind, code), value in zip(outputs, list(graph.output), strict=True):
        if kind in (OPTIONAL, OPTIONAL_SEQUENCE) and name in absent:
            absent_outputs.add(name)
            continue
        if kind == OPTIONAL:
            value = helper.make_tensor_value_info(name, code, None)
        elif kind == OPTIONAL_SEQUENCE:
            value = helper.make_tensor_sequence_value_info(name, code, None)
        kept_outputs.append(value)
    del graph.output[:]
    graph.output.extend(kept_outputs)
    optional = {v.name for v in graph.value_info if v.type.WhichOneof("value") == "optional_type"}
    infos = [v for v in graph.value_info if v.name not in optional and v.name not in absent]
    del graph.value_info[:]
    graph.value_info.extend(infos)
    return model, absent_outputs


def _code_of(dtype):
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _without_absent(nodes, absent):
    """`nodes` with the absent optionals in `absent` (a set, grown here) propagated: an
    Identity or Optional of one is absent too (the node goes), an Optional without input
    makes one, an Optional of a value is an Identity, and other nodes read "" for one."""
    from onnx import helper

    kept = []
    for node in nodes:
        present = [name for name in node.input if name and name not in absent]
        if node.op_type == "Optional" and node.domain in ("", "ai.onnx"):
            if not present:
                absent.update(name for name in node.output if name)
                continue
            node = helper.make_node("Identity", present[:1], list(node.output[:1]), node.name)
        elif node.op_type == "Identity" and node.input and node.input[0] in absent:
            absent.update(name for name in node.output if name)
            continue
        if any(name in absent for name in node.input):
            rewritten = [("" if name in absent else name) for name in node.input]
            del node.input[:]
            node.input.extend(rewritten)
        kept.append(node)
    return kept


def element_outputs(output_names, name):
    """The names `name[0]`, `name[1]`, ... among a lowered graph's `output_names`, in order:
    the elements of sequence output `name`."""
    present = set(output_names)
    names = []
    while element_name(name, len(names)) in present:
        names.append(element_name(name, len(names)))
    return names
