"""Pass 1 of lowering, convert: each node of a ComputeGraph through its converter
(`rtsoa.lowering.converters`) into op calls; an op nothing converts fails here, naming the op,
node and opset. `LoweringContext` is what a converter sees."""

from rtsoa.errors import LoweringError
from rtsoa.lowering.calls import op_call, set_constant
from rtsoa.lowering.converters import IMPLEMENTED_OPSET, changed_definition, find_converter


class LoweringContext:
    """What a converter sees (`ctx`): the graph, and where to put what it emits."""

    def __init__(self, graph):
        self.graph = graph
        self.calls = []
        self.node_index = -1
        self._fresh = 0

    def describe(self, node):
        """How errors name `node` (op, name, index, opset)."""
        opset = self.graph.opset(node.domain)
        return f"{node.describe(self.node_index)} (opset {opset})"

    def tensor(self, name):
        return self.graph.tensor(name)

    def fresh_name(self, prefix="tmp"):
        """A tensor name not used in the graph."""
        while True:
            self._fresh += 1
            name = f"{prefix}__{self._fresh}"
            if name not in self.graph.tensors:
                return name

    def set_constant(self, name, array):
        """Tensor `name` is the constant `array`."""
        set_constant(self.graph, name, array)

    def emit(self, op, inputs, outputs, attributes=None):
        """Run op `op` (a name in `rtsoa.ops.OPS`) on tensors `inputs` ("" = absent)."""
        call = op_call(self.graph, op, inputs, outputs, attributes, self.node_index)
        self.calls.append(call)
        return call


def convert(graph):
    """Pass 1: the op calls of every node."""
    ctx = LoweringContext(graph)
    for index, node in enumerate(graph.nodes):
        ctx.node_index = index
        convert_node(ctx, node, graph.opset(node.domain))
    return ctx


# The converter of an Identity / OptionalGetElement that passes a sequence on: provided by
# rtsoa.lowering.sequences (`provide_pass_through`), which imports this module's callers.
_PASS_THROUGH = []


def provide_pass_through(converter):
    """Make `converter` the one a node passing a sequence on is converted with."""
    _PASS_THROUGH[:] = [converter]


def convert_node(ctx, node, opset):
    """Run `node`'s converter into `ctx`; an unsupported op or a converter's error becomes a
    LoweringError naming the node (top-level graphs and If / Loop subgraphs alike)."""
    converter = find_converter(node.op_type, node.domain, opset)
    if converter is None:
        raise LoweringError(f"{ctx.describe(node)}: op {node.op_type!r} is not supported")
    changed = changed_definition(node.op_type, node.domain, opset)
    if changed is not None:
        raise LoweringError(
            f"{ctx.describe(node)}: op {node.op_type!r} changed in opset {changed}, and rtsoa "
            f"implements its definitions up to opset {IMPLEMENTED_OPSET} only"
        )
    if _passes_sequence(ctx, node):
        if not _PASS_THROUGH:
            raise LoweringError(f"{ctx.describe(node)}: sequence support is not loaded")
        converter = _PASS_THROUGH[0]
    elif not getattr(converter, "takes_sequences", False):
        for name in node.inputs + node.outputs:
            if name and name in ctx.graph.tensors and ctx.graph.tensors[name].sequence:
                raise LoweringError(
                    f"{ctx.describe(node)}: {name!r} is a sequence value; rtsoa resolves "
                    "sequences at lowering, and only its sequence ops (rtsoa.lowering."
                    "sequences) take or make them"
                )
    for name in node.inputs + node.outputs:
        if name and name in ctx.graph.tensors and ctx.graph.tensors[name].on_host:
            raise LoweringError(
                f"{ctx.describe(node)}: {name!r} is a string tensor or a sequence of maps; "
                "their ops run as host steps of the top-level graph only "
                "(rtsoa.lowering.host_split), not in subgraphs"
            )
    try:
        converter(ctx, node)
    except LoweringError:
        raise
    except (ValueError, TypeError, KeyError, IndexError) as error:
        raise LoweringError(f"{ctx.describe(node)}: {error}") from None


def _passes_sequence(ctx, node):
    """Whether `node` is an Identity / OptionalGetElement of a sequence."""
    if node.domain or node.op_type not in ("Identity", "OptionalGetElement") or not node.inputs:
        return False
    tensor = ctx.graph.tensors.get(node.inputs[0])
    return tensor is not None and tensor.sequence
