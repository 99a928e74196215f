"""ONNX SequenceMap, composed at lowering: the body inlined once per element.

SequenceMap(s, x...) runs its `body` graph once per position k of the sequence input `s`: body
input 0 is s[k], each further input is element k of that input when it is a sequence (of the
same length) or the whole tensor otherwise; output j is the sequence of the body's output j
over k. rtsoa resolves sequences at lowering (`rtsoa.lowering.sequences`), so when the fold
pass reaches the node the lengths are known and the body's op calls are emitted once per k
(`subgraphs.convert_subgraph`, as a constant If's branch is), exactly what the node computes.
Each position's calls are counted against `LoweringLimits.op_calls` by the fold pass, and the
elements against `sequence_elements`. Refused at lowering, naming the node: sequences of
different lengths, a body whose input or output count does not match the node's, a body
output that is itself a sequence.
"""

from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.converters import register_converter
from rtsoa.lowering.sequences import SequenceCall
from rtsoa.lowering.subgraphs import convert_subgraph, fresh_tensor_name, merged_dtype


class SequenceMapCall(SequenceCall):
    """One SequenceMap node; `fold` inlines its body per element."""

    def __init__(self, ctx, node):
        super().__init__(ctx, node, None)
        self.body = node.subgraphs["body"]

    def fold(self, model, fold):
        """The body's op calls for every position, folded; the outputs' elements set."""
        tensors = [model.tensors[name] for name in self.inputs]
        lengths = {len(t.elements) for t in tensors if t.sequence and t.elements is not None}
        for tensor in tensors:
            if tensor.sequence and tensor.elements is None:
                raise self.error(f"sequence {tensor.name!r} is not known at lowering")
        if len(lengths) > 1:
            raise self.error(
                f"the sequence inputs have different lengths ({', '.join(map(str, lengths))})"
            )
        count = lengths.pop()
        self.spend_elements(count * (len(self.inputs) + len(self.outputs)))
        calls = []
        elements = [[] for _ in self.outputs]
        for k in range(count):
            bound = {
                local: tensor.elements[k] if tensor.sequence else tensor.name
                for local, tensor in zip(self.body.inputs, tensors, strict=True)
            }
            prefix = fresh_tensor_name(model, f"{self.outputs[0]}/map{k}")
            body_calls, results = convert_subgraph(
                model, self.body, prefix, bound, f"body of {self.where}", self.node
            )
            calls += fold(model, body_calls)
            for j, result in enumerate(results):
                elements[j].append(result)
        for name, names in zip(self.outputs, elements, strict=True):
            dtype = DType.UNDEFINED
            for element in names:
                dtype = merged_dtype(dtype, model.tensors[element].dtype, f"{self.where}: {name!r}")
            tensor = model.tensor(name)
            tensor.sequence = True
            tensor.elements = tuple(names)
            tensor.dtype = DType(dtype)
        return calls


@register_converter("SequenceMap", since=17)
def sequence_map(ctx, node):
    """A SequenceMap call, resolved in the fold pass (see the module docstring)."""
    where = ctx.describe(node)
    body = node.subgraphs.get("body")
    if body is None:
        raise LoweringError(f"{where}: attribute 'body' is missing")
    inputs = list(node.inputs)
    if not inputs or not inputs[0] or not ctx.tensor(inputs[0]).sequence:
        raise LoweringError(f"{where}: input 0 must be a sequence")
    if any(not name for name in inputs):
        raise LoweringError(f"{where}: an absent input; every input is needed")
    if len(body.inputs) != len(inputs):
        raise LoweringError(
            f"{where}: the body takes {len(body.inputs)} inputs, the node gives {len(inputs)}"
        )
    if len(body.outputs) != len(node.outputs) or not all(node.outputs):
        raise LoweringError(
            f"{where}: the body makes {len(body.outputs)} outputs, the node has {len(node.outputs)}"
        )
    for name in node.outputs:
        ctx.tensor(name).sequence = True
    ctx.calls.append(SequenceMapCall(ctx, node))


sequence_map.takes_sequences = True  # lower.convert_node lets this converter see sequences
