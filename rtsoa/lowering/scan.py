"""ONNX Scan (opsets 8 to 25), unrolled at lowering.

A Scan runs its body once per element of its scan inputs (slices along each one's scan axis),
threading state variables from one iteration to the next and stacking each iteration's scan
outputs along their output axes. rtsoa unrolls it when the fold pass reaches the node, so the
number of iterations must be known then (the scan inputs' lengths along their axes are static,
from ONNX shape inference or from folding): iteration i is a Gather of element i (or N - 1 - i
for a reverse scan input) of every scan input, then the body's calls (converted and folded with
the current states bound to its state inputs), and each scan output is Unsqueeze + Concat of
its elements (in reverse iteration order for a reverse scan output). The final states are
copies of the last iteration's. The ops are then those any graph runs, with the same results
as a loop, and every iteration's shapes are folded where they are static.

Opset 8 puts a batch axis first on every input and output (states included) and scans axis 1:
each batch entry is unrolled on its own and the results are stacked along axis 0;
sequence_lens is taken only when it is absent or a constant equal to the full length.

Refused at lowering, naming the node: a scan length not known at lowering or zero (the body's
output shapes would be needed to make empty outputs), scan inputs of different lengths,
axes out of range, direction values other than 0 / 1, list attributes whose length is not
the number of scan inputs / outputs, a body whose input or output count does not match.
"""

import numpy as np

from rtsoa.errors import LoweringError
from rtsoa.lowering.calls import op_call, set_constant
from rtsoa.lowering.converters import register_converter
from rtsoa.lowering.dead_code import live_calls
from rtsoa.lowering.subgraphs import convert_subgraph, fresh_tensor_name, identity_call


class ScanRegion:
    """A Scan node until the fold pass, which replaces it by its unrolled calls."""

    region = True
    op = "Scan"

    def __init__(self, where, node_index, node, opset):
        self.where = where
        self.node = node_index
        self.onnx_node = node
        self.opset = opset
        self.inputs = [name for name in node.inputs if name]
        self.outputs = list(node.outputs)

    def refuse(self, what):
        raise LoweringError(f"{self.where}: {what}")

    def fold(self, model, fold):
        """The unrolled calls, folded (see the module docstring)."""
        node = self.onnx_node
        body = node.subgraphs.get("body")
        if body is None:
            self.refuse("attribute 'body' (a graph) is missing")
        attributes = node.attributes
        scans = int(attributes.get("num_scan_inputs", -1))
        inputs = list(node.inputs)
        if self.opset < 9:
            lengths, inputs = (inputs[0] if inputs else ""), inputs[1:]
        states = len(inputs) - scans
        if scans < 1 or states < 0:
            self.refuse(f"num_scan_inputs {scans} does not fit the {len(inputs)} input(s)")
        if len(body.inputs) != len(inputs):
            self.refuse(f"the body takes {len(body.inputs)} inputs; {len(inputs)} expected")
        scan_outputs = len(body.outputs) - states
        if scan_outputs < 0:
            self.refuse(f"the body has {len(body.outputs)} outputs, fewer than the {states} states")
        if any(not name for name in inputs):
            self.refuse("a state or scan input is missing")
        unroll = Unroll(self, model, fold, body, states, scans, scan_outputs)
        if self.opset < 9:
            return unroll.batched(inputs, lengths)
        return unroll.run(inputs, self.outputs)

    def emit(self, emitter, index):  # pragma: no cover - fold always replaces the region
        raise LoweringError(f"{self.where}: the Scan was not unrolled")


class Unroll:
    """The calls of one Scan unrolled (`run`), or of each batch entry of an opset-8 Scan."""

    def __init__(self, region, model, fold, body, states, scans, scan_outputs):
        self.region = region
        self.model = model
        self.fold = fold
        self.body = body
        self.states = states
        self.scans = scans
        self.scan_outputs = scan_outputs
        self.calls = []
        attributes = region.onnx_node.attributes
        if region.opset < 9:
            self.input_axes = [0] * scans
            self.input_directions = self._list("directions", scans, 0)
            self.output_axes = [0] * scan_outputs
            self.output_directions = [0] * scan_outputs
        else:
            self.input_axes = self._list("scan_input_axes", scans, 0)
            self.input_directions = self._list("scan_input_directions", scans, 0)
            self.output_axes = self._list("scan_output_axes", scan_outputs, 0)
            self.output_directions = self._list("scan_output_directions", scan_outputs, 0)
        for name in ("directions", "scan_input_directions", "scan_output_directions"):
            if any(value not in (0, 1) for value in attributes.get(name, ())):
                region.refuse(f"{name} {list(attributes[name])} must hold 0 or 1 only")

    def _list(self, name, count, default):
        values = self.region.onnx_node.attributes.get(name)
        if values is None:
            return [default] * count
        values = [int(value) for value in values]
        if len(values) != count:
            self.region.refuse(f"{name} has {len(values)} entries; {count} expected")
        return values

    def fresh(self, base):
        name = fresh_tensor_name(self.model, base)
        self.model.tensor(name)
        return name

    def constant(self, base, value):
        name = fresh_tensor_name(self.model, base)
        self.model.tensor(name)
        set_constant(self.model, name, np.asarray(value, dtype=np.int64))
        return name

    def emit(self, op, inputs, outputs, attributes=None):
        """One op call, folded at once (so the next iteration sees its shapes)."""
        call = op_call(self.model, op, inputs, outputs, attributes, self.region.node)
        self.calls.extend(self.fold(self.model, [call]))

    def _length(self, scan_inputs):
        """The number of iterations: every scan input's length along its axis, static."""
        length = None
        for name, axis in zip(scan_inputs, self.input_axes, strict=True):
            dims = self.model.tensors[name].dims
            if dims is None:
                self.region.refuse(f"the rank of scan input {name!r} is not known at lowering")
            rank = len(dims)
            if not -rank <= axis < rank:
                self.region.refuse(f"scan axis {axis} is out of range for rank {rank}")
            size = dims[axis % rank]
            if not isinstance(size, int):
                self.region.refuse(
                    f"the length of scan input {name!r} is not known at lowering; rtsoa unrolls "
                    "a Scan, so it needs its number of iterations"
                )
            if length is not None and size != length:
                self.region.refuse(f"scan inputs have different lengths ({length} and {size})")
            length = size
        if length == 0:
            self.region.refuse("a Scan of length 0 is not supported")
        return length

    def run(self, inputs, outputs):
        """Unroll over `inputs` (states, then scan inputs) into `outputs` (final states, then
        scan outputs; "" = unused). Returns the calls."""
        where = self.region.where
        states = list(inputs[: self.states])
        scan_inputs = inputs[self.states :]
        length = self._length(scan_inputs)
        ranks = [len(self.model.tensors[name].dims) for name in scan_inputs]
        elements = [[] for _ in range(self.scan_outputs)]
        base = fresh_tensor_name(self.model, f"{(outputs + ['scan'])[0] or 'scan'}.scan")
        for i in range(length):
            bound = dict(zip(self.body.inputs[: self.states], states, strict=True))
            for k, name in enumerate(scan_inputs):
                position = length - 1 - i if self.input_directions[k] else i
                index = self.constant(f"{base}/index", position)
                element = self.fresh(f"{base}/{i}/input{k}")
                axis = self.input_axes[k] % ranks[k]
                self.emit("Gather", [name, index], [element], {"axis": axis})
                bound[self.body.inputs[self.states + k]] = element
            prefix = fresh_tensor_name(self.model, f"{base}/{i}")
            calls, results = convert_subgraph(
                self.model, self.body, prefix, bound, f"body of {where}", self.region.node
            )
            self.calls.extend(live_calls(self.fold(self.model, calls), results))
            states = results[: self.states]
            for k, result in enumerate(results[self.states :]):
                elements[k].append(result)
        for k, output in enumerate(outputs[: self.states]):
            if output:
                self.calls.append(identity_call(self.model, states[k], output, self.region.node))
        for k, output in enumerate(outputs[self.states :]):
            if output:
                self._stack(k, elements[k], output)
        return self.calls

    def _stack(self, k, elements, output):
        """Scan output k: its elements stacked along its axis."""
        dims = self.model.tensors[elements[0]].dims
        axis = self.output_axes[k]
        if axis < 0:
            if dims is None:
                self.region.refuse(f"scan output {k}'s rank is not known for axis {axis}")
            axis += len(dims) + 1
        if dims is not None and not 0 <= axis <= len(dims):
            self.region.refuse(f"scan output axis {self.output_axes[k]} is out of range")
        if self.output_directions[k]:
            elements = elements[::-1]
        axes = self.constant(f"{output}/axes", [axis])
        parts = []
        for element in elements:
            part = self.fresh(f"{output}/part")
            self.emit("Unsqueeze", [element, axes], [part])
            parts.append(part)
        self.emit("Concat", parts, [output], {"axis": axis})

    def batched(self, inputs, lengths):
        """Opset 8: each batch entry unrolled on its own, results stacked along axis 0."""
        first = self.model.tensors[inputs[self.states]].dims
        if first is None or not first or not isinstance(first[0], int):
            self.region.refuse("the batch size is not known at lowering")
        batch = first[0]
        if batch == 0:
            self.region.refuse("a Scan of batch size 0 is not supported")
        self.input_axes = [0] * self.scans  # after the batch entry is taken, axis 1 is axis 0
        if lengths:
            self._check_lengths(lengths, inputs)
        outputs = self.region.outputs
        count = self.states + self.scan_outputs
        pieces = [[] for _ in range(count)]
        for b in range(batch):
            index = self.constant("scan/batch", b)
            entries = []
            for name in inputs:
                entry = self.fresh(f"{name}/batch{b}")
                self.emit("Gather", [name, index], [entry], {"axis": 0})
                entries.append(entry)
            results = [self.fresh(f"scan/batch{b}/result") for _ in range(count)]
            self.run(entries, results)
            for k in range(count):
                pieces[k].append(results[k])
        axes = self.constant("scan/axes", [0])
        for k in range(count):
            output = outputs[k] if k < len(outputs) else ""
            if not output:
                continue
            parts = []
            for piece in pieces[k]:
                part = self.fresh(f"{output}/entry")
                self.emit("Unsqueeze", [piece, axes], [part])
                parts.append(part)
            self.emit("Concat", parts, [output], {"axis": 0})
        return self.calls

    def _check_lengths(self, lengths, inputs):
        tensor = self.model.tensors[lengths]
        scan_length = self.model.tensors[inputs[self.states]].dims[1]
        if not tensor.is_constant or np.any(np.asarray(tensor.data) != scan_length):
            self.region.refuse(
                "sequence_lens must be absent or a constant equal to the scan length "
                f"({scan_length}); shorter sequences are not supported"
            )


@register_converter("Scan", since=8)
def convert_scan(ctx, node):
    """ONNX Scan: a region that the fold pass unrolls (see the module docstring)."""
    where = ctx.describe(node)
    ctx.calls.append(ScanRegion(where, ctx.node_index, node, ctx.graph.opset(node.domain)))
