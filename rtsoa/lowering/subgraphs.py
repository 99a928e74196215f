"""Subgraphs of If / Loop nodes lowered into the model's op calls.

A subgraph (an If branch, a Loop body) is a ComputeGraph whose nodes read its own tensors and
tensors of the enclosing scopes by name. `convert_subgraph` copies its local tensors into the
model's ComputeGraph under fresh names (two branches may use the same local name, and ONNX
names are only unique per graph), renames every reference (into nested subgraphs too) and runs
the converters on its nodes, giving op calls over the model's tensors that the usual passes
(fold, dead ops, emission) handle. References to enclosing scopes keep their names.
"""

import dataclasses

from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.calls import OPSET_KEY, OpCall
from rtsoa.lowering.compute_graph import ComputeGraph, Node, Tensor
from rtsoa.lowering.convert import LoweringContext, convert_node
from rtsoa.lowering.fold import tensor_info
from rtsoa.ops import OPS


class SubgraphContext(LoweringContext):
    """The converters' `ctx` inside a subgraph: calls are attributed to the compute node of
    the enclosing If / Loop (`node_index`), errors name the subgraph (`where`)."""

    def __init__(self, graph, where, node_index):
        super().__init__(graph)
        self.where = where
        self.node_index = node_index

    def describe(self, node):
        return f"{node.describe()} in {self.where}"  # `where` names the opset


def local_names(graph):
    """Names a subgraph defines: its inputs, its initializers and its nodes' outputs."""
    names = list(graph.inputs)
    names += [name for name, tensor in graph.tensors.items() if tensor.is_constant]
    for node in graph.nodes:
        names += [name for name in node.outputs if name]
    return list(dict.fromkeys(names))


def rename_graph(graph, mapping, shadow=True):
    """A copy of `graph` with every name renamed by `mapping`, into nested subgraphs too; with
    `shadow`, the names `graph` defines itself are kept (they shadow the enclosing scope's)."""
    if shadow:
        own = set(local_names(graph))
        mapping = {old: new for old, new in mapping.items() if old not in own}

    def name(old):
        return mapping.get(old, old) if old else old

    copy = ComputeGraph(
        name=graph.name,
        tensors={name(key): tensor for key, tensor in graph.tensors.items()},
        inputs=[name(each) for each in graph.inputs],
        outputs=[name(output) for output in graph.outputs],
        opsets=dict(graph.opsets),
    )
    copy.nodes = [_renamed_node(node, name, mapping) for node in graph.nodes]
    return copy


def _renamed_node(node, name, mapping):
    return Node(
        op_type=node.op_type,
        inputs=[name(each) for each in node.inputs],
        outputs=[name(each) for each in node.outputs],
        attributes=dict(node.attributes),
        name=node.name,
        domain=node.domain,
        subgraphs={key: rename_graph(sub, mapping) for key, sub in node.subgraphs.items()},
    )


def fresh_tensor_name(graph, base):
    """`base`, or `base` with a numeric suffix, not yet a tensor of `graph`."""
    if base not in graph.tensors:
        return base
    number = 1
    while f"{base}~{number}" in graph.tensors:
        number += 1
    return f"{base}~{number}"


def free_names(graph):
    """Names the subgraph (its nodes, nested subgraphs and outputs) reads from enclosing
    scopes: read, and not defined in it."""
    names = [name for node in graph.nodes for name in node.inputs if name]
    for node in graph.nodes:
        for sub in node.subgraphs.values():
            names += free_names(sub)
    own = set(local_names(graph))
    return [name for name in dict.fromkeys(names + list(graph.outputs)) if name not in own]


def convert_subgraph(model, sub, prefix, bound, where, node_index, sequences=False):
    """Op calls of subgraph `sub`, its local tensors copied into `model` as `prefix/name`.

    `bound`: {local name: model tensor name} for locals that are given (a Loop body's inputs);
    `where`: how errors name the subgraph; `sequences`: results may be sequences (a branch
    taken or a body unrolled at lowering, `rtsoa.lowering.sequence_regions`). Returns (calls,
    output names in `model`)."""
    mapping = {}
    for name in local_names(sub):
        if name in bound:
            mapping[name] = bound[name]
            continue
        new = fresh_tensor_name(model, f"{prefix}/{name}")
        known = sub.tensors.get(name) or Tensor(name)
        model.tensors[new] = dataclasses.replace(known, name=new)
        mapping[name] = new
    missing = [name for name in sub.inputs if name not in bound]
    if missing:
        raise LoweringError(f"{where}: subgraph input(s) {missing} are not bound")
    for name in free_names(sub):
        if name not in model.tensors:
            raise LoweringError(f"{where}: tensor {name!r} is not defined in any enclosing scope")
    renamed = rename_graph(sub, mapping, shadow=False)
    ctx = SubgraphContext(model, where, node_index)
    for node in renamed.nodes:
        convert_node(ctx, node, model.opset(node.domain))
    for name in [] if sequences else renamed.outputs:
        if name in model.tensors and model.tensors[name].sequence:
            raise LoweringError(
                f"{where}: result {name!r} is a sequence value; rtsoa resolves sequences at "
                "lowering, so one cannot leave an If / Loop subgraph"
            )
    return ctx.calls, list(renamed.outputs)


def outer_reads(calls, provided=()):
    """Names `calls` read that none of them produces (nor `provided`): what they take from the
    enclosing scopes, constants included, in first-read order."""
    produced = set(provided)
    for call in calls:
        produced.update(name for name in call.outputs if name)
    reads = [name for call in calls for name in call.inputs if name and name not in produced]
    return list(dict.fromkeys(reads))


def identity_call(model, source, target, node_index):
    """An Identity op call copying tensor `source` into `target` (which gets its dtype and
    dims); its attribute slots are encoded, as the fold pass does for every call."""
    attributes = {OPSET_KEY: model.opset("")}
    call = OpCall("Identity", [source], [target], attributes, node_index)
    tensor = model.tensors[source]
    call.slots = OPS["Identity"].slots(attributes, [tensor_info(tensor)])
    result = model.tensor(target)
    result.dtype = tensor.dtype
    result.dims = tensor.dims
    result.data = None
    return call


def materialise(model, calls, results, prefix, node_index, taken=()):
    """`results` as tensors that `calls` compute, each once: a result that is a constant, an
    enclosing scope's tensor, a subgraph input or a repeat (or in `taken`) gets an Identity
    copy into a fresh local tensor (appended to `calls`). Returns the result names to use."""
    produced = {name for call in calls for name in call.outputs if name}
    seen = set(taken)
    names = []
    for name in results:
        if name not in produced or name in seen:
            copy = fresh_tensor_name(model, f"{prefix}/result")
            model.tensors[copy] = Tensor(copy)
            calls.append(identity_call(model, name, copy, node_index))
            name = copy
        seen.add(name)
        names.append(name)
    return names


def merged_dims(first, second):
    """Dims that hold for both: equal entries kept, others unknown (None); different or
    unknown ranks give an unknown rank (None)."""
    if first is None or second is None or len(first) != len(second):
        return None
    return tuple(a if a == b else None for a, b in zip(first, second, strict=True))


def merged_dtype(first, second, where):
    """The element type two alternatives agree on (UNDEFINED where one is unknown)."""
    if first == DType.UNDEFINED:
        return second
    if second == DType.UNDEFINED or first == second:
        return first
    raise LoweringError(
        f"{where}: element types differ ({DType(first).name} and {DType(second).name})"
    )


def scalar_value(tensor):
    """The one element of a constant tensor as a Python int (bools 0 / 1)."""
    flat = tensor.data.reshape(-1)
    if flat.shape[0] != 1:
        raise ValueError(f"holds {flat.shape[0]} elements, not one")
    return int(flat[0])


def copy_info(tensor, dtype, dims):
    """Set a non-constant tensor's dtype and dims."""
    tensor.data = None
    tensor.dtype = DType(dtype)
    tensor.dims = None if dims is None else tuple(dims)
