"""Emission of ONNX If / Loop regions onto the execute graph's control-flow nodes.

If (in the enclosing graph P, then one BRANCH subgraph per branch, else first):

    cond producer -> TensorToInt (condition read) -> SwitchNotify -> BranchPivot (else) -> ...
                                                                  -> BranchPivot (then) -> ...
    ... branch ops (InferShape -> Alloc -> Launch, Frees of branch tensors) -> BranchDone
    BranchDone (either) -> WaitAnyone -> SelectTensor per output -> consumers

    The switch continues on successor `condition` only (`notify`), so exactly one branch runs
    and the join fires once. Each branch frees its own tensors; its results are not freed but
    moved by SelectTensor (same condition value) into the If's outputs, which the enclosing
    scope frees after their last reader like any tensor. So whichever branch ran, every block
    is freed once.

Loop (the While construct of rtsoa.kernels.control_flow, with ONNX's condition):

    Identity copies of the initial values into the loop state S (the Loop's outputs) ->
    trip count / condition (ConstInt, or TensorToInt when computed at run time) -> Enter ->
    WaitAnyone (head) -> LoopContinue -> CondSwitchNotify -> body (LOOP_BODY) | Exit
    body: [iteration number: ConstTensor -> AllocMemory -> IntToTensor] -> body ops ->
    [TensorToInt of the body's condition] -> per carried value: FreeMemory(S_j) after the
    body's readers of S_j, MoveTensor(result_j -> S_j) -> frees of body tensors ->
    LoopIncrement -> BranchDone -> head (back edge)

    A carried value may change shape every iteration: each iteration's result is a new block
    sized by its shape kernel at run time, and MoveTensor re-binds S_j to it.

Scoping, for both: nodes of a subgraph take edges only from its pivot and from each other
(a node with a predecessor outside would be counted down by an untaken branch or a previous
iteration). So everything a region reads from the enclosing scope is ordered before its
switch / Enter, the enclosing scope's producers are hidden from the calls emitted inside, and
the readers inside are replaced by the region's join / Exit: an enclosing tensor read in a
region is freed only after the region is over. Region nodes run on stream 0; tensors produced
on other streams are synchronised (an event pair) before the region.
"""

from rtsoa.graph.schema import DType, GraphKind
from rtsoa.kernels import REGISTRY


def _control(
    emitter, kernel, graph, priority, inputs=(), attributes=(), wait_anyone=False, outputs=None
):
    """A control node on stream 0 in `graph` (`outputs`: options of its outputs creator);
    returns (node, output values)."""
    info = REGISTRY[kernel]
    node, values = REGISTRY.add_node(
        emitter.builder,
        kernel,
        output_options=outputs,
        graph=graph,
        priority=priority,
        stream=0,
        worker=info.worker,
        inputs=inputs,
        attributes=attributes,
        wait_anyone=wait_anyone,
    )
    emitter.node_stream[node] = 0
    emitter.node_graph[node] = graph
    emitter.priority[node] = priority
    return node, values


class _Scope:
    """The enclosing scope hidden while a subgraph's calls are emitted."""

    def __init__(self, emitter, graph):
        self.emitter = emitter
        self.graph = graph
        self.outer_graph = emitter.region_graph
        self.launch_node = emitter.launch_node
        self.shape_node = emitter.shape_node
        self.reader_counts = {name: len(readers) for name, readers in emitter.readers.items()}
        self.first_node = emitter.builder.num_nodes
        emitter.launch_node = {}
        emitter.shape_node = {}
        emitter.region_graph = graph

    def free_locals(self, priority, keep=()):
        """FreeMemory, in the subgraph, of each tensor it produced (but `keep`), after its
        producer and its readers (all inside the subgraph)."""
        emitter = self.emitter
        for name, producer in list(emitter.launch_node.items()):
            if name in keep:
                continue
            free, _ = emitter.node(
                "FreeMemory", GraphKind.MAIN, priority, [emitter.block_value[name]], stream=0
            )
            emitter.priority[free] = priority
            emitter.edge(producer, free)
            for reader in emitter.readers.get(name, []):
                emitter.edge(reader, free)

    def seal(self, pivot):
        """Edges from `pivot` to the subgraph's nodes without a predecessor; returns its
        leaves (nodes without a successor; the pivot alone if it is empty)."""
        emitter = self.emitter
        nodes = [
            node
            for node in range(self.first_node, emitter.builder.num_nodes)
            if emitter.node_graph.get(node) == self.graph and node != pivot
        ]
        for node in nodes:
            if node not in emitter.linked_to:
                emitter.edge(pivot, node)
        return [node for node in nodes if node not in emitter.linked_from] or [pivot]

    def close(self, end):
        """Restore the enclosing scope; its tensors read inside are read by `end` (the join
        or the loop's Exit) instead, so their frees wait for the whole region."""
        emitter = self.emitter
        local = emitter.launch_node
        emitter.launch_node = self.launch_node
        emitter.shape_node = self.shape_node
        emitter.region_graph = self.outer_graph
        for name, readers in emitter.readers.items():
            if name in local:
                continue
            before = self.reader_counts.get(name, 0)
            if len(readers) > before:
                del readers[before:]
                readers.append(end)
        return local


def _order_before(emitter, names, target, priority):
    """`target` (a switch or Enter, stream 0) after the producers of `names`."""
    for name in names:
        launch = emitter.launch_node.get(name)
        emitter.edge(emitter.shape_node.get(name), target)
        emitter.edge(launch, target)
        stream = emitter.stream_of.get(name, 0)
        if launch is not None and stream != 0:
            emitter.sync(launch, 0, target, stream, priority)


def _read_int(emitter, name, graph, priority):
    """TensorToInt of tensor `name` after its producer; returns (node, INT value)."""
    node, (value,) = _control(
        emitter,
        "TensorToInt",
        graph,
        priority,
        inputs=[emitter.shape_value[name], emitter.block_value[name]],
    )
    _order_before(emitter, [name], node, priority)
    emitter.readers.setdefault(name, []).append(node)
    return node, value


def _emit_calls(emitter, calls):
    for call in calls:
        index = emitter.next_index
        emitter.next_index += 1
        if getattr(call, "region", False):
            call.emit(emitter, index)
        else:
            emitter.call(index, call)


def _publish(emitter, name, shape, block, node):
    """Tensor `name` of the enclosing scope is (shape, block), ready after `node`."""
    emitter.shape_value[name] = shape
    emitter.block_value[name] = block
    emitter.shape_node[name] = node
    emitter.launch_node[name] = node
    emitter.stream_of[name] = 0
    tensor = emitter.graph.tensors.get(name)
    if tensor is not None and name not in emitter.graph.outputs:
        emitter.builder.add_tensor_info(block, name, tensor.dims)


def emit_if(emitter, index, region):
    """The nodes of an IfRegion (see the module docstring)."""
    priority = index * 10 + 9
    graph = emitter.region_graph
    streams, emitter.streams = emitter.streams, 1  # region calls on stream 0
    read, flag = _read_int(emitter, region.condition, graph, priority)
    switch, _ = _control(emitter, "SwitchNotify", graph, priority, inputs=[flag])
    emitter.edge(read, switch)
    _order_before(emitter, region.inputs[1:], switch, priority)
    join, _ = _control(emitter, "WaitAnyone", graph, priority, wait_anyone=True)
    pairs = []
    for calls, results in region.branches:  # successor k of the switch is branch k
        subgraph = emitter.builder.add_subgraph(GraphKind.BRANCH, parent=graph)
        pivot, _ = _control(emitter, "BranchPivot", subgraph, priority)
        emitter.edge(switch, pivot)
        scope = _Scope(emitter, subgraph)
        _emit_calls(emitter, calls)
        scope.free_locals(priority, keep=set(results))
        leaves = scope.seal(pivot)
        done, _ = _control(emitter, "BranchDone", subgraph, priority)
        for leaf in leaves:
            emitter.edge(leaf, done)
        emitter.edge(done, join)
        scope.close(join)
        pairs.append([(emitter.shape_value[name], emitter.block_value[name]) for name in results])
    for k, name in enumerate(region.outputs):
        inputs = [flag]
        for branch in pairs:
            inputs += list(branch[k])
        dtype = {"dtype": emitter.graph.tensors[name].dtype}
        select, (shape, block) = _control(
            emitter, "SelectTensor", graph, priority, inputs, outputs=dtype
        )
        emitter.edge(join, select)
        _publish(emitter, name, shape, block, select)
    emitter.streams = streams


def _int_value(emitter, name, static, graph, priority):
    """(node, INT value) of a trip count / condition: ConstInt when static, else read."""
    if static is None:
        return _read_int(emitter, name, graph, priority)
    node, (value,) = _control(emitter, "ConstInt", graph, priority, attributes=[int(static)])
    return node, value


def emit_loop(emitter, index, region):
    """The nodes of a LoopRegion (see the module docstring)."""
    priority = index * 10 + 9
    graph = emitter.region_graph
    streams, emitter.streams = emitter.streams, 1
    starts = []
    for copy in region.copies:  # the loop state: copies of the initial values, stream 0
        emitter.call(emitter.next_index, copy)
        emitter.next_index += 1
        starts.append(emitter.launch_node[copy.outputs[0]])
    limits = [
        _int_value(emitter, region.trip, region.static_trip, graph, priority),
        _int_value(emitter, region.condition, region.static_first, graph, priority),
    ]
    if region.static_next is not None:
        node, (value,) = _control(emitter, "ConstInt", graph, priority, [], [region.static_next])
        limits.append((node, value))
    enter, (counter,) = _control(emitter, "Enter", graph, priority)
    for node in starts + [node for node, _ in limits]:
        emitter.edge(node, enter)
    _order_before(emitter, region.body_reads, enter, priority)
    head, _ = _control(emitter, "WaitAnyone", graph, priority, wait_anyone=True)
    cond_graph = emitter.builder.add_subgraph(GraphKind.LOOP_COND, parent=graph)
    body_graph = emitter.builder.add_subgraph(GraphKind.LOOP_BODY, parent=graph)
    exit_node, _ = _control(emitter, "Exit", graph, priority)
    scope = _Scope(emitter, body_graph)
    pivot, _ = _control(emitter, "BranchPivot", body_graph, priority)
    if region.iteration:
        _iteration_tensor(emitter, region.iteration, counter, body_graph, priority)
    _emit_calls(emitter, region.calls)
    if region.static_next is None:
        _, next_value = _read_int(emitter, region.next_condition, body_graph, priority)
    else:
        next_value = limits[2][1]
    for state, result in zip(region.outputs, region.results, strict=True):
        _rebind(emitter, scope, state, result, body_graph, priority)
    scope.free_locals(priority, keep=set(region.results))
    leaves = scope.seal(pivot)
    increment, _ = _control(emitter, "LoopIncrement", body_graph, priority, [counter])
    for leaf in leaves:
        emitter.edge(leaf, increment)
    done, _ = _control(emitter, "BranchDone", body_graph, priority)
    emitter.edge(increment, done)
    scope.close(exit_node)
    values = [counter, limits[0][1], limits[1][1], next_value]
    cont, (flag,) = _control(emitter, "LoopContinue", cond_graph, priority, values)
    switch, _ = _control(emitter, "CondSwitchNotify", cond_graph, priority, [flag])
    emitter.edge(enter, head)
    emitter.edge(head, cont)
    emitter.edge(cont, switch)
    emitter.edge(switch, pivot)  # successor 0: run the body
    emitter.edge(switch, exit_node)  # successor 1: leave the loop
    emitter.edge(done, head)  # the back edge
    emitter.builder.has_loops = True
    for state in region.outputs:
        emitter.shape_node[state] = exit_node
        emitter.launch_node[state] = exit_node
    emitter.streams = streams


def _iteration_tensor(emitter, name, counter, graph, priority):
    """The body's iteration-number tensor (int64 scalar) written from the counter."""
    shape_node, (shape,) = _control(
        emitter, "ConstTensor", graph, priority, attributes=[int(DType.INT64), 0]
    )
    alloc, (block,) = emitter.node(
        "AllocMemory", GraphKind.MAIN, priority, [shape], [0], outputs={"dtype": DType.INT64}
    )
    emitter.priority[alloc] = priority
    write, _ = _control(emitter, "IntToTensor", graph, priority, [counter, shape, block])
    emitter.edge(shape_node, alloc)
    emitter.edge(alloc, write)
    emitter.shape_value[name] = shape
    emitter.block_value[name] = block
    emitter.shape_node[name] = shape_node
    emitter.launch_node[name] = write


def _rebind(emitter, scope, state, result, graph, priority):
    """Free the loop state's block after the body's readers, then move the result into it."""
    free, _ = emitter.node(
        "FreeMemory", GraphKind.MAIN, priority, [emitter.block_value[state]], stream=0
    )
    emitter.priority[free] = priority
    before = scope.reader_counts.get(state, 0)
    for reader in emitter.readers.get(state, [])[before:]:
        emitter.edge(reader, free)
    move, _ = _control(
        emitter,
        "MoveTensor",
        graph,
        priority,
        [
            emitter.shape_value[result],
            emitter.block_value[result],
            emitter.shape_value[state],
            emitter.block_value[state],
        ],
    )
    emitter.edge(free, move)
    emitter.edge(emitter.shape_node.get(result), move)
    emitter.edge(emitter.launch_node.get(result), move)
    for reader in emitter.readers.get(result, []):
        emitter.edge(reader, move)
