"""ONNX If and Loop: converters and the lowering of their subgraphs (regions).

The converter of an If or Loop node emits one *region* call: an object the passes of
`rtsoa.lowering.lower` treat like an op call (its `inputs` are what it reads from the
enclosing scope, its `outputs` the node's outputs) but that lowers its subgraphs itself:

- **fold** (when the fold pass reaches it, so its inputs' constants and shapes are known):
  the subgraphs are converted (`subgraphs.convert_subgraph`), folded and cleared of dead ops;
  results that no op of the subgraph computes get an Identity copy, so every result is a
  block the subgraph owns. An If whose condition is a constant is replaced by the calls of
  the branch it takes; a Loop that cannot run (constant trip count 0, constant false
  condition) by copies of its initial values. A Loop's loop-carried values start with the
  shapes of the initial values, widened (dims that change become unknown) until the body
  keeps them: so a shape folded inside the body holds in every iteration.
- **emit** (`rtsoa.lowering.regions`): the execute-graph nodes (switch, branch / body
  subgraphs, joins, the tensors' moves).

Loop scan outputs are carried as accumulators (`rtsoa.lowering.loop_scans`). Refused at
lowering, naming the node: conditions and trip counts that are not one-element integer / bool
tensors, branches whose results disagree in element type.
"""

import numpy as np

from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering import regions
from rtsoa.lowering.compute_graph import Tensor
from rtsoa.lowering.converters import register_converter
from rtsoa.lowering.dead_code import live_calls
from rtsoa.lowering.loop_scans import carry_scans
from rtsoa.lowering.sequence_regions import (
    pass_on,
    refuse_unknown_branch,
    sequence_results,
    unroll_loop,
    with_elements,
)
from rtsoa.lowering.subgraphs import (
    convert_subgraph,
    copy_info,
    fresh_tensor_name,
    identity_call,
    materialise,
    merged_dims,
    merged_dtype,
    outer_reads,
    scalar_value,
)

# Element types a condition / trip count may have (read by the TensorToInt kernel).
_INTEGER_TYPES = (DType.BOOL, DType.UINT8, DType.INT8, DType.INT16, DType.INT32, DType.INT64)
NO_TRIP_LIMIT = np.iinfo(np.int64).max  # the trip count of a Loop without M


def _check_scalar(model, name, what, where):
    """A condition / trip count tensor: an integer or bool type and (if known) one element."""
    tensor = model.tensors[name]
    if tensor.dtype not in _INTEGER_TYPES and tensor.dtype != DType.UNDEFINED:
        raise LoweringError(
            f"{where}: the {what} {name!r} has element type {DType(tensor.dtype).name}; "
            "an integer or bool tensor is needed"
        )
    if tensor.is_static and int(np.prod(tensor.dims, dtype=np.int64)) != 1:
        raise LoweringError(
            f"{where}: the {what} {name!r} has shape {tensor.dims}; one element is needed"
        )
    return tensor


class IfRegion:
    """An ONNX If: condition, two branches (else first: branch index = the condition)."""

    region = True
    op = "If"

    def __init__(self, where, node_index, condition, outputs, branches):
        self.where = where  # how errors name the node
        self.node = node_index  # the compute node the region's calls come from
        self.condition = condition
        self.outputs = outputs
        self.subgraphs = branches  # [(label, ComputeGraph)]: else, then
        self.branches = []  # after fold: [(calls, result names)] per branch
        self.inputs = [condition]

    def _lower_branch(self, model, label, sub, fold, sequences=False):
        prefix = fresh_tensor_name(model, f"{self.where_short}.{label}")
        calls, results = convert_subgraph(
            model, sub, prefix, {}, f"{label} of {self.where}", self.node, sequences
        )
        if len(results) != len(self.outputs):
            raise LoweringError(
                f"{self.where}: {label} has {len(results)} outputs, the node {len(self.outputs)}"
            )
        calls = fold(model, calls)
        return live_calls(calls, with_elements(model, results)), results, prefix

    @property
    def where_short(self):
        return self.outputs[0] if self.outputs else "if"

    def fold(self, model, fold):
        """The calls that replace this region in the fold pass (see the module docstring)."""
        condition = _check_scalar(model, self.condition, "condition", self.where)
        if condition.is_constant:
            label, sub = self.subgraphs[1 if scalar_value(condition) else 0]
            calls, results, _ = self._lower_branch(model, label, sub, fold, sequences=True)
            copies = []
            for result, output in zip(results, self.outputs, strict=True):
                copies += pass_on(model, result, output, self.node)
            return calls + fold(model, copies)
        if any(model.tensors[output].sequence for output in self.outputs):
            raise refuse_unknown_branch(self)
        for label, sub in self.subgraphs:
            calls, results, prefix = self._lower_branch(model, label, sub, fold)
            results = materialise(model, calls, results, prefix, self.node)
            self.branches.append((calls, results))
        for k, output in enumerate(self.outputs):
            tensors = [model.tensors[results[k]] for _, results in self.branches]
            dtype = merged_dtype(tensors[0].dtype, tensors[1].dtype, f"{self.where} output {k}")
            copy_info(model.tensor(output), dtype, merged_dims(tensors[0].dims, tensors[1].dims))
        self.inputs = [self.condition] + outer_reads(
            [call for calls, _ in self.branches for call in calls]
        )
        return [self]

    def emit(self, emitter, index):
        """Nodes of the region (rtsoa.lowering.regions.emit_if)."""
        regions.emit_if(emitter, index, self)


class LoopRegion:
    """An ONNX Loop: trip count M and condition (each optional), loop-carried values."""

    region = True
    op = "Loop"

    def __init__(self, where, node_index, trip, condition, initial, outputs, body):
        self.where = where
        self.node = node_index
        self.trip = trip  # "" when absent
        self.condition = condition  # "" when absent
        self.initial = initial  # initial values of the loop-carried tensors
        self.outputs = outputs  # their final values: the loop state tensors
        self.body = body
        self.static_trip = NO_TRIP_LIMIT  # or None: read at run time
        self.static_first = 1  # the condition before the first iteration, or None
        self.static_next = 1  # the condition the body computes, or None
        self.calls = []  # after fold: the body's calls
        self.copies = []  # Identity copies of the initial values into the loop state
        self.iteration = ""  # tensor holding the iteration number (when the body reads it)
        self.next_condition = ""  # body tensor of the condition (static_next None)
        self.results = []  # body tensors moved into the loop state after each iteration
        self.body_reads = []  # what the body reads from the enclosing scopes
        self.inputs = list(initial)

    def _static(self, model, name, what):
        if not name:
            return NO_TRIP_LIMIT if what == "trip count" else 1
        tensor = _check_scalar(model, name, what, self.where)
        return scalar_value(tensor) if tensor.is_constant else None

    def fold(self, model, fold):
        """The calls that replace this region in the fold pass (see the module docstring)."""
        self.static_trip = self._static(model, self.trip, "trip count")
        self.static_first = self._static(model, self.condition, "condition")
        never = (self.static_trip is not None and self.static_trip <= 0) or (
            self.static_first is not None and not self.static_first
        )
        if never:
            copies = []
            for source, target in zip(self.initial, self.outputs, strict=True):
                copies += pass_on(model, source, target, self.node)
            return fold(model, copies)
        if any(model.tensors[name].sequence for name in self.initial):
            return unroll_loop(self, model, fold)
        # the loop state starts as copies of the initial values (with their dtypes and dims)
        self.copies = [
            identity_call(model, source, target, self.node)
            for source, target in zip(self.initial, self.outputs, strict=True)
        ]
        while True:  # widen the loop state's dims until the body keeps them (monotone)
            calls, results = self._lower_body(model, fold)
            widened = False
            for k, state in enumerate(self.outputs):
                tensor, result = model.tensors[state], model.tensors[results[1 + k]]
                where = f"{self.where} loop-carried value {k} ({state!r})"
                dtype = merged_dtype(tensor.dtype, result.dtype, where)
                dims = merged_dims(tensor.dims, result.dims)
                if dims != tensor.dims or dtype != tensor.dtype:
                    copy_info(tensor, dtype, dims)
                    widened = True
            if not widened:
                break
        condition = model.tensors[results[0]]
        _check_scalar(model, results[0], "body's condition output", self.where)
        self.static_next = scalar_value(condition) if condition.is_constant else None
        prefix = f"{self.outputs[0] if self.outputs else 'loop'}.body"
        taken = []
        if self.static_next is None:
            (self.next_condition,) = materialise(model, calls, results[:1], prefix, self.node)
            taken = [self.next_condition]
        self.results = materialise(model, calls, results[1:], prefix, self.node, taken)
        self.calls = calls
        runtime = [name for name in (self.trip, self.condition) if name]
        runtime = [name for name in runtime if not model.tensors[name].is_constant]
        provided = list(self.outputs) + ([self.iteration] if self.iteration else [])
        self.body_reads = outer_reads(calls, provided)
        self.inputs = runtime + list(self.initial) + self.body_reads
        return [self]

    @property
    def where_short(self):
        return self.outputs[0] if self.outputs else "loop"

    def _lower_body(self, model, fold):
        """Convert and fold the body once, with the loop state's current dims."""
        body = self.body
        base = self.outputs[0] if self.outputs else "loop"
        prefix = fresh_tensor_name(model, f"{base}.body")
        iteration = fresh_tensor_name(model, f"{prefix}/iteration")
        model.tensors[iteration] = Tensor(iteration, DType.INT64, ())
        condition = fresh_tensor_name(model, f"{prefix}/condition")
        model.tensors[condition] = Tensor(condition, DType.BOOL, (), np.array(True))
        bound = {body.inputs[0]: iteration, body.inputs[1]: condition}
        bound.update(zip(body.inputs[2:], self.outputs, strict=True))
        calls, results = convert_subgraph(
            model, body, prefix, bound, f"body of {self.where}", self.node
        )
        calls = live_calls(fold(model, calls), results)
        reads = {name for call in calls for name in call.inputs}
        self.iteration = iteration if iteration in reads or iteration in results else ""
        return calls, results

    def emit(self, emitter, index):
        """Nodes of the region (rtsoa.lowering.regions.emit_loop)."""
        regions.emit_loop(emitter, index, self)


def _node_outputs(ctx, node, count, fresh_for_graph_outputs, sequences=()):
    """The region's output names: "" (unused) and, for an If, graph outputs that are not
    `sequences` (flags per output) get fresh names (a graph output must be a block an
    AllocMemory creates: an Identity copies it there; a sequence is returned as elements)."""
    names, copies = [], []
    for k in range(count):
        name = node.outputs[k] if k < len(node.outputs) else ""
        sequence = k < len(sequences) and sequences[k]
        if not name or (fresh_for_graph_outputs and name in ctx.graph.outputs and not sequence):
            fresh = ctx.fresh_name(f"{name or node.op_type.lower()}_{k}")
            ctx.graph.tensor(fresh)
            if name:
                copies.append((fresh, name))
            name = fresh
        names.append(name)
    return names, copies


@register_converter("If")
def convert_if(ctx, node):
    """ONNX If: a region lowered onto SwitchNotify / branches / WaitAnyone (see regions.py)."""
    where = ctx.describe(node)
    branches = []
    for label in ("else_branch", "then_branch"):
        if label not in node.subgraphs:
            raise LoweringError(f"{where}: attribute {label!r} (a graph) is missing")
        branches.append((label, node.subgraphs[label]))
    if not node.inputs or not node.inputs[0]:
        raise LoweringError(f"{where}: the condition input is missing")
    flags = [sequence_results(branch) for _, branch in branches]
    sequences = [any(pair) for pair in zip(*flags, strict=False)]
    outputs, copies = _node_outputs(ctx, node, len(node.outputs), True, sequences)
    for name, sequence in zip(outputs, sequences, strict=False):
        ctx.tensor(name).sequence = ctx.tensor(name).sequence or sequence
    ctx.calls.append(IfRegion(where, ctx.node_index, node.inputs[0], outputs, branches))
    for fresh, name in copies:
        ctx.emit("Identity", [fresh], [name])


convert_if.takes_sequences = True  # a sequence result: the branch is chosen at lowering


@register_converter("Loop")
def convert_loop(ctx, node):
    """ONNX Loop: a region lowered onto the While construct (see regions.py)."""
    where = ctx.describe(node)
    body = node.subgraphs.get("body")
    if body is None:
        raise LoweringError(f"{where}: attribute 'body' (a graph) is missing")
    inputs = list(node.inputs) + ["", ""]
    trip, condition, initial = inputs[0], inputs[1], list(node.inputs[2:])
    carried = len(initial)
    if len(body.inputs) != carried + 2:
        raise LoweringError(
            f"{where}: the body takes {len(body.inputs)} inputs; {carried + 2} expected "
            "(iteration number, condition, loop-carried values)"
        )
    scans = len(body.outputs) - 1 - carried
    if scans < 0:
        raise LoweringError(f"{where}: the body has {len(body.outputs)} outputs, too few")
    if any(not name for name in initial):
        raise LoweringError(f"{where}: a loop-carried value has no initial value")
    outputs, _ = _node_outputs(ctx, node, carried, False)
    results = sequence_results(body)[1 : 1 + carried]
    for name, initial_value, sequence in zip(outputs, initial, results, strict=True):
        carries = sequence or ctx.tensor(initial_value).sequence
        ctx.tensor(name).sequence = ctx.tensor(name).sequence or carries
    finals = []
    if scans:  # carried as accumulators, reshaped after the loop (rtsoa.lowering.loop_scans)
        body, extra, finish = carry_scans(ctx, where, body, carried)
        initial = initial + extra
        finals = [ctx.fresh_name("scan_final") for _ in extra]
        for name in finals:
            ctx.graph.tensor(name)
    region = LoopRegion(where, ctx.node_index, trip, condition, initial, outputs + finals, body)
    ctx.calls.append(region)
    if scans:
        targets = list(node.outputs[carried : carried + scans])
        finish(finals, targets + [""] * (scans - len(targets)))


convert_loop.takes_sequences = True  # a carried sequence: the loop is unrolled at lowering
