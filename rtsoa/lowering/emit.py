"""Pass 4 of lowering, emit: the ExecuteGraph of the op calls left.

Constants the calls read are uploaded in Init (ConstTensor -> AllocMemory -> UploadConstant)
and released in DeInit; each call becomes OpInferShape -> AllocMemory (per output) -> OpLaunch
in Main, and each intermediate tensor is freed (FreeMemory) after its last reader. Priorities
follow the reference: the launch of call i gets i * 10 + 9, its shape and allocation nodes the
launch they feed, a free the largest priority of the launches it waits for. If / Loop regions
emit themselves through `rtsoa.lowering.regions`.
"""

import numpy as np

from rtsoa.errors import LoweringError
from rtsoa.graph.builder import GraphBuilder
from rtsoa.graph.schema import DType, GraphKind, Placement, ValueKind
from rtsoa.kernels import REGISTRY
from rtsoa.ops import OPS, op_code, op_names
from rtsoa.ops.abi import dtype_code


class Emitter:
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
        offset, length = self.builder.add_constant(data, copy=False)
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
        # weights by name (rtsoa.runtime.external_weights)
        self.builder.add_tensor_info(block, tensor.name, dims)
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
