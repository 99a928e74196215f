"""Lowering: a ComputeGraph (or an ONNX model) into an ExecuteGraph with Init / Main / DeInit.

Passes, in order:
1. **convert**: each node through its converter (`rtsoa.lowering.converters`) into op calls;
   an op nothing converts fails here, naming the op, node and opset.
2. **fold and infer**: in topological order, an op call whose inputs are all constants is run
   at lowering time (`rtsoa.ops.host`) and its outputs become constants (Shape of a tensor
   with static dims too); otherwise its output shapes are inferred when its inputs' shapes are
   static, and left to run time (an OpInferShape kernel) when they are not.
3. **dead ops**: calls nothing reachable from the graph outputs reads are dropped.
4. **emit**: constants the remaining calls read are uploaded in Init (ConstTensor ->
   AllocMemory -> UploadConstant) and released in DeInit; each call becomes
   OpInferShape -> AllocMemory (per output) -> OpLaunch in Main, and each intermediate tensor
   is freed (FreeMemory) after its last reader. Priorities follow the reference: the launch of
   call i gets i * 10 + 9, its shape and allocation nodes the launch they feed, a free the
   largest priority of the launches it waits for.

A tensor at run time is two values: a SHAPE value and a MEMORY_BLOCK value. A graph input's
SHAPE value is the value just before its block value (the runner fills both).
"""

import dataclasses
import math

import numpy as np

from rtsoa.errors import LoweringError
from rtsoa.graph.builder import GraphBuilder
from rtsoa.graph.schema import DType, GraphKind, Placement, ValueKind
from rtsoa.kernels import REGISTRY
from rtsoa.limits import check_lowering_limits
from rtsoa.lowering.budget import running, spend
from rtsoa.lowering.compute_graph import ComputeGraph, Tensor
from rtsoa.lowering.converters import find_converter
from rtsoa.ops import OPS, op_code, op_names
from rtsoa.ops.abi import MAX_OP_OPERANDS, NUMPY_DTYPES, dtype_code
from rtsoa.ops.host import OpError, TensorInfo, infer_shapes, run_numpy

# Key of the op attributes holding the model's default-domain opset (for ops whose semantics
# changed across opsets: an op's `encode` reads attributes.get(OPSET_KEY)).
OPSET_KEY = "__opset__"
FOLD_LIMIT = 1 << 20  # elements: larger results stay run-time ops (the graph stays small)


@dataclasses.dataclass
class OpCall:
    """One op to run: an op of `rtsoa.ops` on named tensors, from compute node `node`."""

    op: str
    inputs: list
    outputs: list
    attributes: dict
    node: int  # index of the ComputeGraph node it came from
    slots: np.ndarray | None = None  # the op's encoded attributes


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


def set_constant(graph, name, array):
    """Tensor `name` of `graph` is the constant `array`."""
    array = np.ascontiguousarray(array).reshape(np.shape(array))  # keep 0-d scalars 0-d
    tensor = graph.tensor(name)
    tensor.data = array
    tensor.dtype = dtype_code(array.dtype)
    tensor.dims = tuple(int(d) for d in array.shape)


def op_call(graph, op, inputs, outputs, attributes, node_index):
    """An OpCall of op `op` (a name in `rtsoa.ops.OPS`) on tensors `inputs` ("" = absent) of
    `graph`, from compute node `node_index`; its tensors are created in `graph` if new."""
    if op not in OPS:
        raise LoweringError(f"op {op!r} is not registered in rtsoa.ops")
    definition = OPS[op]
    low, high = definition.inputs
    count = len(inputs)
    while count > low and inputs[count - 1] == "":
        count -= 1  # trailing absent optional inputs
    inputs = list(inputs[:count])
    if count < low or (high is not None and count > high):
        raise LoweringError(f"op {op} takes {low}..{high} inputs, got {count}")
    if len(inputs) + len(outputs) > MAX_OP_OPERANDS:
        raise LoweringError(
            f"op {op} with {len(inputs)} inputs and {len(outputs)} outputs exceeds "
            f"{MAX_OP_OPERANDS} operands"
        )
    for name in inputs + list(outputs):
        if name:
            graph.tensor(name)
    attributes = dict(attributes or {})
    attributes.setdefault(OPSET_KEY, graph.opset(""))
    call = OpCall(op, inputs, list(outputs), attributes, node_index)
    spend("op_calls", 1, lambda: _describe_call(graph, call))
    return call


def convert(graph):
    """Pass 1: the op calls of every node."""
    ctx = LoweringContext(graph)
    for index, node in enumerate(graph.nodes):
        ctx.node_index = index
        convert_node(ctx, node, graph.opset(node.domain))
    return ctx


def convert_node(ctx, node, opset):
    """Run `node`'s converter into `ctx`; an unsupported op or a converter's error becomes a
    LoweringError naming the node (top-level graphs and If / Loop subgraphs alike)."""
    converter = find_converter(node.op_type, node.domain, opset)
    if converter is None:
        raise LoweringError(f"{ctx.describe(node)}: op {node.op_type!r} is not supported")
    if not getattr(converter, "takes_sequences", False):
        for name in node.inputs + node.outputs:
            if name and name in ctx.graph.tensors and ctx.graph.tensors[name].sequence:
                raise LoweringError(
                    f"{ctx.describe(node)}: {name!r} is a sequence value; rtsoa resolves "
                    "sequences at lowering, and only its sequence ops (rtsoa.lowering."
                    "sequences) take or make them"
                )
    try:
        converter(ctx, node)
    except LoweringError:
        raise
    except (ValueError, TypeError, KeyError, IndexError) as error:
        raise LoweringError(f"{ctx.describe(node)}: {error}") from None


def _info(tensor):
    if tensor.dims is None or not tensor.is_static or tensor.dtype == DType.UNDEFINED:
        return None
    return TensorInfo(int(tensor.dtype), tuple(tensor.dims))


def _describe_call(graph, call):
    node = graph.nodes[call.node] if 0 <= call.node < len(graph.nodes) else None
    where = node.describe(call.node) if node is not None else f"op {call.op}"
    return f"{where} (op {call.op}, opset {graph.opset('')})"


def fold_and_infer(graph, calls):
    """Pass 2: fold constant calls; static shapes where inputs allow. Returns kept calls."""
    kept = []
    for call in calls:
        if getattr(call, "region", False):
            # an If / Loop (rtsoa.lowering.control_flow): its bodies are lowered and folded
            # now that its inputs are known; a constant If condition splices in one branch
            kept.extend(call.fold(graph, fold_and_infer))
            continue
        definition = OPS[call.op]
        tensors = [graph.tensors[name] if name else None for name in call.inputs]
        infos = [None if t is None else _info(t) for t in tensors]
        call.slots = definition.slots(call.attributes, infos)
        constant = all(t is None or t.is_constant for t in tensors)
        if call.op == "Shape" and tensors[0] is not None and tensors[0].is_static:
            constant = True  # only the dims are read
        if constant:
            inputs = []
            for t, info in zip(tensors, infos, strict=True):
                if t is None:
                    inputs.append(None)
                elif t.is_constant:
                    inputs.append(t.data)
                else:
                    inputs.append(info)
            try:
                shapes, _ = infer_shapes(call.op, inputs, call.attributes, len(call.outputs))
            except OpError as error:
                raise LoweringError(f"{_describe_call(graph, call)}: {error}") from None
            # Python ints: an int64 product of huge dims can wrap to a small count
            small = all(math.prod(s.dims) <= FOLD_LIMIT for s in shapes)
            if small:
                try:
                    results = run_numpy(call.op, inputs, call.attributes, len(call.outputs))
                except OpError as error:
                    raise LoweringError(f"{_describe_call(graph, call)}: {error}") from None
                for name, result in zip(call.outputs, results, strict=True):
                    if name:
                        tensor = graph.tensor(name)
                        tensor.data = result
                        tensor.dtype = DType(dtype_code(result.dtype))
                        tensor.dims = tuple(int(d) for d in result.shape)
                continue
        kept.append(call)
        data_known = all(
            t is not None and t.is_constant
            for k, t in enumerate(tensors)
            if k in definition.data_inputs and t is not None
        )
        if all(info is not None or t is None for info, t in zip(infos, tensors, strict=True)) and (
            data_known
        ):
            inputs = [
                None if t is None else (t.data if t.is_constant else info)
                for t, info in zip(tensors, infos, strict=True)
            ]
            try:
                shapes, _ = infer_shapes(call.op, inputs, call.attributes, len(call.outputs))
            except OpError as error:
                raise LoweringError(f"{_describe_call(graph, call)}: {error}") from None
            for name, info in zip(call.outputs, shapes, strict=True):
                if name:
                    tensor = graph.tensor(name)
                    tensor.dtype = DType(info.dtype)
                    tensor.dims = tuple(info.dims)
    return kept


def drop_dead(graph, calls):
    """Pass 3: the calls whose outputs reach a graph output."""
    needed = set(graph.outputs)
    kept = []
    for call in reversed(calls):
        if any(name in needed for name in call.outputs if name):
            kept.append(call)
            needed.update(name for name in call.inputs if name)
    kept.reverse()
    return kept


class _Emitter:
    """Pass 4: builds the ExecuteGraph."""

    def __init__(self, graph, calls, name, streams=1):
        self.graph = graph
        self.calls = calls
        self.streams = int(streams)
        self.builder = GraphBuilder(name=name, stream_count=self.streams, event_count=1)
        self.builder.set_op_names(op_names())  # op codes below are rows of this table
        self.events = 0  # events used by cross-stream synchronisation
        self.stream_of = {}  # tensor name -> stream its Main producer launches on
        self.recorded = {}  # (tensor name, stream) -> (RecordEvent, StreamWaitEvent) nodes
        self.node_stream = {}  # Main node -> its stream
        self.shape_value = {}  # tensor name -> SHAPE value
        self.block_value = {}  # tensor name -> MEMORY_BLOCK value
        self.shape_node = {}  # tensor name -> Main node producing its SHAPE value
        self.launch_node = {}  # tensor name -> Main OpLaunch producing its data
        self.readers = {}  # tensor name -> Main nodes reading its data
        self.priority = {}
        # If / Loop regions (rtsoa.lowering.control_flow): the subgraph nodes go to, each
        # node's owning graph, nodes with a successor / a predecessor, the next call index
        self.region_graph = GraphKind.MAIN
        self.node_graph = {}
        self.linked_from = set()
        self.linked_to = set()
        self.next_index = len(calls)

    def node(
        self, kernel, root, priority, inputs=(), attributes=(), compute=-1, outputs=None, stream=0
    ):
        if root == GraphKind.MAIN:
            root = self.region_graph
        info = REGISTRY[kernel]
        node, values = REGISTRY.add_node(
            self.builder,
            kernel,
            output_options=outputs,
            graph=root,
            priority=priority,
            stream=stream,
            worker=info.worker,
            compute_node=compute,
            attributes=attributes,
            inputs=inputs,
        )
        self.node_stream[node] = stream
        self.node_graph[node] = root
        return node, values

    def block(self, node):
        return self.builder.add_value(
            kind=ValueKind.MEMORY_BLOCK,
            dtype=DType.UINT8,
            placement=Placement.DEVICE_HBM,
            producer=node,
        )

    def edge(self, source, target):
        if source is not None and source != target:
            self.builder.add_edge(source, target)
            self.linked_from.add(source)
            self.linked_to.add(target)

    def sync(self, after, on_stream, before, from_stream, priority):
        """Cross-stream order: RecordEvent on `from_stream` after node `after`, and
        StreamWaitEvent on `on_stream` before node `before` (the reference's event pair)."""
        event = self.events
        self.events += 1
        record, _ = self.node(
            "RecordEvent", GraphKind.MAIN, priority, attributes=[event], stream=from_stream
        )
        wait, _ = self.node(
            "StreamWaitEvent", GraphKind.MAIN, priority, attributes=[event], stream=on_stream
        )
        self.edge(after, record)
        self.edge(record, wait)
        self.edge(wait, before)
        return record, wait

    def constant(self, tensor, priority):
        """Init: upload `tensor`; DeInit: free it."""
        data = np.ascontiguousarray(tensor.data)
        offset, length = self.builder.add_constant(data.view(np.uint8).reshape(-1).tobytes())
        dims = [int(d) for d in data.shape]
        if tensor.is_static and int(np.prod(tensor.dims, dtype=np.int64)) == data.size:
            # ascontiguousarray makes a 0-d array 1-d: the tensor's dims keep its rank
            dims = [int(d) for d in tensor.dims]
        shape_node, (shape,) = self.node(
            "ConstTensor",
            GraphKind.INIT,
            priority,
            attributes=[int(dtype_code(data.dtype)), len(dims), *dims],
        )
        alloc, (block,) = self.node("AllocMemory", GraphKind.INIT, priority, [shape], [length])
        upload, _ = self.node("UploadConstant", GraphKind.INIT, priority, [block], [offset, length])
        self.edge(shape_node, alloc)
        self.edge(alloc, upload)
        self.node("FreeMemory", GraphKind.DEINIT, priority, [block])
        self.builder.add_tensor_info(block, tensor.name, dims)  # weights by name (constants.py)
        self.shape_value[tensor.name] = shape
        self.block_value[tensor.name] = block

    def graph_input(self, tensor):
        shape = self.builder.add_value(
            kind=ValueKind.SHAPE, dtype=DType.INT64, placement=Placement.HOST
        )
        block = self.builder.add_value(
            kind=ValueKind.MEMORY_BLOCK, dtype=tensor.dtype, placement=Placement.DEVICE_HBM
        )
        self.builder.mark_graph_input(block)
        self.builder.add_tensor_info(block, tensor.name, tensor.dims)
        self.shape_value[tensor.name] = shape
        self.block_value[tensor.name] = block

    def emit(self):
        graph = self.graph
        for name in graph.inputs:
            tensor = graph.tensors[name]
            if tensor.dtype == DType.UNDEFINED:
                raise LoweringError(f"graph input {name!r} has no element type")
            self.graph_input(tensor)
        used = {name for call in self.calls for name in call.inputs if name}
        for name in sorted(used):
            tensor = graph.tensors[name]
            if tensor.is_constant:
                self.constant(tensor, 0)
        last_reader = {}
        for index, call in enumerate(self.calls):
            for name in call.inputs:
                if name:
                    last_reader[name] = index
        for index, call in enumerate(self.calls):
            if getattr(call, "region", False):
                call.emit(self, index)
            else:
                self.call(index, call)
        outputs = set(graph.outputs)
        inputs = set(graph.inputs)
        for name, launch in self.launch_node.items():
            if name in outputs or name in inputs:
                continue
            readers = self.readers.get(name, [])
            priority = max([self.priority.get(r, 0) for r in readers] + [self.priority[launch]])
            stream = self.stream_of[name]
            free, _ = self.node(
                "FreeMemory", GraphKind.MAIN, priority, [self.block_value[name]], stream=stream
            )
            self.edge(launch, free)
            for reader in readers:
                reader_stream = self.node_stream[reader]
                if reader_stream != stream:  # the block is reused only after the reader's work
                    self.sync(reader, stream, free, reader_stream, priority)
                else:
                    self.edge(reader, free)
        for name in graph.outputs:
            if name not in self.block_value or name not in self.launch_node:
                raise LoweringError(
                    f"graph output {name!r} is not computed by the model (a graph input or a "
                    "constant passed through unchanged is not supported)"
                )
            block = self.block_value[name]
            self.builder.mark_graph_output(block)
            tensor = graph.tensors[name]
            self.builder.add_tensor_info(block, name, tensor.dims)
        self.builder.meta = self.builder.meta._replace(event_count=max(self.events, 1))
        return self.builder.finalize()

    def call(self, index, call):
        graph = self.graph
        definition = OPS[call.op]
        priority = index * 10 + 9
        stream = index % self.streams
        present = 0
        data = 0
        for k, name in enumerate(call.inputs):
            if name:
                present |= 1 << k
                if k in definition.data_inputs:
                    data |= 1 << k
        header = [op_code(call.op), len(call.inputs), len(call.outputs), present, data]
        attributes = header + [int(s) for s in call.slots]
        shape_inputs = [self.shape_value[name] for name in call.inputs if name]
        data_inputs = [
            self.block_value[name] for k, name in enumerate(call.inputs) if name and (data >> k) & 1
        ]
        infer, shapes = self.node(
            "OpInferShape",
            GraphKind.MAIN,
            priority,
            shape_inputs + data_inputs,
            attributes,
            compute=call.node,
            outputs={"count": len(call.outputs)},
            stream=stream,
        )
        self.priority[infer] = priority
        for k, name in enumerate(call.inputs):
            if not name:
                continue
            self.edge(self.shape_node.get(name), infer)
            if (data >> k) & 1:
                self.edge(self.launch_node.get(name), infer)
                self.readers.setdefault(name, []).append(infer)
        allocs = []
        launch_inputs = []
        for name in call.inputs:
            if name:
                launch_inputs += [self.block_value[name], self.shape_value[name]]
        outputs = []
        for k, name in enumerate(call.outputs):
            shape = shapes[k]
            dtype = graph.tensors[name].dtype if name in graph.tensors else DType.UNDEFINED
            alloc, (block,) = self.node(
                "AllocMemory",
                GraphKind.MAIN,
                priority,
                [shape],
                [0],
                compute=call.node,
                outputs={"dtype": dtype},
                stream=stream,
            )
            self.priority[alloc] = priority
            self.edge(infer, alloc)
            allocs.append(alloc)
            launch_inputs += [block, shape]
            outputs.append((name or f"__unused_{index}_{k}", shape, block))
        launch, _ = self.node(
            "OpLaunch",
            GraphKind.MAIN,
            priority,
            launch_inputs,
            attributes,
            compute=call.node,
            stream=stream,
        )
        self.priority[launch] = priority
        for alloc in allocs:
            self.edge(alloc, launch)
        for name in call.inputs:
            if not name:
                continue
            producer = self.launch_node.get(name)
            source = self.stream_of.get(name, stream)
            if producer is not None and source != stream:
                key = (name, stream)
                if key not in self.recorded:
                    self.recorded[key] = self.sync(producer, stream, launch, source, priority)
                else:
                    self.edge(self.recorded[key][1], launch)
            self.edge(producer, launch)
            self.readers.setdefault(name, []).append(launch)
        for name, shape, block in outputs:
            if name in self.block_value:
                raise LoweringError(f"tensor {name!r} is produced twice")
            self.shape_value[name] = shape
            self.block_value[name] = block
            self.shape_node[name] = infer
            self.launch_node[name] = launch
            self.stream_of[name] = stream
            if name in graph.tensors and name not in graph.outputs:
                tensor = graph.tensors[name]
                self.builder.add_tensor_info(block, name, tensor.dims)


def lower(model, name=None, streams=1, fuse=True, limits=None):
    """The ExecuteGraph of `model`: a ComputeGraph, an ONNX ModelProto, ONNX bytes or a path
    to an .onnx file. Raises LoweringError naming the op, node and opset it cannot lower.

    `limits`: a `rtsoa.limits.LoweringLimits` bounding the work (sequence elements resolved,
    op calls emitted); None: its defaults. Going past one is a LoweringError naming the node.

    `fuse`: BatchNormalization folded into the preceding Conv's weights, and MatMul -> Add of a
    bias (-> Relu) chains run as one op (`rtsoa.lowering.fuse`); False keeps every op of the
    model.

    `streams`: ops are issued round-robin on this many device streams; a tensor read on
    another stream than its producer's is ordered by a RecordEvent / StreamWaitEvent pair,
    and its block is freed on the producer's stream after events from every reader stream."""
    if not 1 <= int(streams) <= 64:
        raise ValueError(f"streams must be 1 .. 64, got {streams}")
    with running(check_lowering_limits(limits)):
        return _lower(model, name, streams, fuse)


def _lower(model, name, streams, fuse):
    if not isinstance(model, ComputeGraph):
        from rtsoa.lowering.onnx_import import import_onnx

        model = import_onnx(model)
    for output in model.outputs:
        model.tensor(output)
    ctx = convert(model)
    for kind, names in (("input", model.inputs), ("output", model.outputs)):
        for name in names:
            if model.tensors[name].sequence:  # one no node reads or makes (those name the node)
                raise LoweringError(
                    f"graph {kind} {name!r} is a sequence value; rtsoa resolves sequences at "
                    "lowering, so a model cannot take or return one"
                )
    _load_ops(ctx.calls, fuse)
    calls = fold_and_infer(model, ctx.calls)
    calls = drop_dead(model, calls)
    if fuse:
        from rtsoa.lowering.fuse import fold_batch_norm, fuse_matmul_bias

        calls = fold_batch_norm(model, calls)
        calls = fuse_matmul_bias(model, calls)
    for output in model.outputs:
        tensor = model.tensors[output]
        if tensor.is_constant and not any(output in call.outputs for call in calls):
            source = ctx.fresh_name(f"{output}__constant")
            model.tensors[source] = Tensor(source, tensor.dtype, tensor.dims, tensor.data)
            tensor.data = None
            call = OpCall("Identity", [source], [output], {}, -1)
            call.slots = OPS["Identity"].slots({}, [])
            calls.append(call)
    return _Emitter(model, calls, name or model.name or "model", streams).emit()


def _load_ops(calls, fuse):
    """Compile (or load) the model's ops now, all together on every core, rather than one by
    one as folding meets them (`rtsoa.ops.library`); MatMulBias too when MatMul may fuse."""
    from rtsoa.ops.library import load_ops

    names = {getattr(call, "op", None) for call in calls} & set(OPS)
    if fuse and "MatMul" in names:
        names.add("MatMulBias")
    load_ops(names)


def numpy_dtype(code):
    """The numpy dtype of a DType code."""
    return np.dtype(NUMPY_DTYPES[DType(code)])
