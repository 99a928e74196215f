"""Sequences through If and Loop: the regions resolved at lowering when they carry one.

rtsoa resolves sequences at lowering (`rtsoa.lowering.sequences`), so a sequence leaves an If
only when the branch is known there, and is carried through a Loop only when the loop is
unrolled there:

- If with a sequence result: its condition must be a constant when the fold pass reaches it (a
  constant, one folded from constants, or a graph input of a model run through
  `rtsoa.InferenceSession`, which lowers such a model per condition value:
  `sequence_io.position_inputs`). The taken branch's calls replace the node and its results
  become the node's outputs. Otherwise refused, naming the node.
- Loop carrying a sequence: unrolled. Its trip count and first condition must be known at
  lowering; each iteration converts and folds the body with the iteration number a constant
  and the previous iteration's values bound to its inputs (a sequence as its elements, so
  elements may change shape from one iteration to the next), until the trip count is reached
  or the body's condition, which must fold to a constant, is false. Each iteration counts one
  op call (`LoweringLimits.op_calls`) besides its body's, so a loop that would not end is a
  LoweringError naming the node.
- Optional(x) is x (rtsoa holds a present optional as its value); an Optional without an
  input inside a subgraph is refused (an absent graph input is the only empty optional).

`sequence_results` tells at conversion which results of a subgraph are sequences (their
declared type, or the op making them), so the ops after an If / Loop see its outputs as such.
"""

import numpy as np

from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.budget import spend
from rtsoa.lowering.compute_graph import Tensor
from rtsoa.lowering.converters import register_converter
from rtsoa.lowering.dead_code import live_calls
from rtsoa.lowering.sequences import pass_through
from rtsoa.lowering.subgraphs import convert_subgraph, fresh_tensor_name, identity_call

# Ops whose output is a sequence (or an optional holding one, when its input is a sequence).
_MAKERS = frozenset(
    {"SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase", "SplitToSequence"}
    | {"SequenceMap"}
)
_PASSING = frozenset({"Identity", "Optional", "OptionalGetElement"})


def sequence_results(sub):
    """[bool] per result of subgraph `sub`: is it a sequence (or an optional of one)?"""
    made_by = {name: node for node in sub.nodes for name in node.outputs if name}

    def is_sequence(name, depth=0):
        tensor = sub.tensors.get(name)
        if tensor is not None and tensor.sequence:
            return True
        node = made_by.get(name)
        if node is None or node.domain or depth > len(sub.nodes):
            return False
        if node.op_type in _MAKERS:
            return True
        if node.op_type in _PASSING:
            if node.op_type == "Optional" and "type" in node.attributes and not node.inputs:
                return "sequence_type" in str(node.attributes["type"])
            return bool(node.inputs) and is_sequence(node.inputs[0], depth + 1)
        if node.op_type == "If":
            position = node.outputs.index(name)
            return any(
                sequence_results(branch)[position]
                for branch in node.subgraphs.values()
                if position < len(branch.outputs)
            )
        if node.op_type == "Loop" and node.outputs.index(name) < len(node.inputs) - 2:
            return is_sequence(node.inputs[2 + node.outputs.index(name)], depth + 1)
        return False

    return [is_sequence(name) for name in sub.outputs]


def with_elements(model, names):
    """`names` and the elements of those that are resolved sequences: what the calls making
    them must keep alive (a sequence op makes no call, its elements' producers do)."""
    live = list(names)
    for name in names:
        tensor = model.tensors.get(name) if name else None
        if tensor is not None and tensor.sequence and tensor.elements:
            live += list(tensor.elements)
    return live


def pass_on(model, source, target, node_index):
    """Calls making `target` the value of `source`: none for a sequence (`target` gets its
    elements), an Identity call for a tensor."""
    tensor = model.tensors[source]
    if not tensor.sequence:
        return [identity_call(model, source, target, node_index)]
    if tensor.elements is None:
        raise LoweringError(f"sequence {source!r} is not known at lowering")
    result = model.tensor(target)
    result.sequence = True
    result.elements = tuple(tensor.elements)
    result.dtype = tensor.dtype
    return []


def refuse_unknown_branch(region):
    """The LoweringError of an If with a sequence result whose condition is not known."""
    return LoweringError(
        f"{region.where}: a sequence leaves it, and rtsoa resolves sequences at lowering, so "
        f"its condition {region.condition!r} must be known there (a constant, or a graph input "
        "of a model run through rtsoa.InferenceSession, which lowers it per condition value)"
    )


def unroll_loop(region, model, fold):
    """The calls of a Loop region carrying a sequence, unrolled (see the module docstring)."""
    if region.static_trip is None or region.static_first is None:
        raise LoweringError(
            f"{region.where}: it carries a sequence, and rtsoa resolves sequences at lowering, "
            "so it is unrolled there: its trip count and condition must be known at lowering "
            "(constants, or graph inputs of a model run through rtsoa.InferenceSession)"
        )
    body = region.body
    current = list(region.initial)
    calls = []
    iteration = 0
    while iteration < region.static_trip:
        spend("op_calls", 1, lambda count=iteration: f"{region.where} (iteration {count})")
        prefix = fresh_tensor_name(model, f"{region.where_short}.iteration{iteration}")
        number = fresh_tensor_name(model, f"{prefix}/iteration")
        model.tensors[number] = Tensor(number, DType.INT64, (), np.array(iteration, np.int64))
        running = fresh_tensor_name(model, f"{prefix}/condition")
        model.tensors[running] = Tensor(running, DType.BOOL, (), np.array(True))
        bound = {body.inputs[0]: number, body.inputs[1]: running}
        bound.update(zip(body.inputs[2:], current, strict=True))
        where = f"body of {region.where}, iteration {iteration}"
        body_calls, results = convert_subgraph(
            model, body, prefix, bound, where, region.node, sequences=True
        )
        body_calls = fold(model, body_calls)
        calls += live_calls(body_calls, with_elements(model, results))
        condition = model.tensors[results[0]]
        if not condition.is_constant:
            raise LoweringError(
                f"{where}: it carries a sequence, so it is unrolled at lowering, and its "
                f"condition output {results[0]!r} is not known there"
            )
        current = results[1:]
        iteration += 1
        if not bool(np.asarray(condition.data).reshape(-1)[0]):
            break
    copies = []
    for source, target in zip(current, region.outputs, strict=True):
        copies += pass_on(model, source, target, region.node)
    return calls + fold(model, copies)


@register_converter("Optional", since=15)
def optional(ctx, node):
    """Optional(x) is x: the same sequence, or an Identity of a tensor. Without an input (the
    empty optional) it is refused: rtsoa's only empty optionals are absent graph inputs."""
    if not (node.inputs and node.inputs[0]):
        raise LoweringError(
            f"{ctx.describe(node)}: an empty optional made inside the model is not supported "
            "(rtsoa holds an optional as its value; only an optional graph input may be absent)"
        )
    source = ctx.graph.tensors.get(node.inputs[0])
    if source is not None and source.sequence:
        pass_through(ctx, node)
        return
    ctx.emit("Identity", node.inputs[:1], node.outputs[:1])


optional.takes_sequences = True  # an Optional of a sequence is that sequence
