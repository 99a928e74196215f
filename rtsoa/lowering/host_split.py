"""Split a ComputeGraph into host steps and a device graph (see `rtsoa.host`).

A node runs on the host when a string tensor or a sequence of maps is among its inputs or
outputs (its op must be one of `rtsoa.host.ops.HOST_OPS`), or its op is one rtsoa runs only
there (`ALWAYS_HOST`: ZipMap, ClassLabels, ...). No host op reads a sequence of maps: it can
only be a model output.
Host steps that read no device result form the prologue; host steps reading a device result
(directly or through other host steps) form the epilogue. A device node reading an epilogue
result would need the device graph split in two around the host step: that is refused here,
naming the host node and the device node, and the model is not lowered.

The device graph takes the numeric graph inputs its nodes read and the prologue results they
read, and returns the numeric graph outputs it makes and the results the epilogue reads.
"""

import numpy as np

from rtsoa.abi.dtypes import DTYPE_OF_NUMPY, DTYPES
from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.host.kinds import STRING, is_map_sequence, kind_name, map_key, map_sequence
from rtsoa.host.ops import ALWAYS_HOST, HOST_OPS
from rtsoa.host.program import HostProgram, HostStep, HostValue
from rtsoa.lowering.compute_graph import ComputeGraph
from rtsoa.lowering.converters import changed_definition
from rtsoa.lowering.ml_labels import split_string_labels

# Definitions of the ai.onnx.ml host ops rtsoa implements (by since_version).
_ML_DEFINITIONS = {"LabelEncoder": (2, 4)}


def split_host_steps(graph):
    """None when `graph` has no string values and no host-only op (lowering goes on as
    before); else (the device ComputeGraph, the HostProgram)."""
    split_string_labels(graph)  # classifiers with string labels: indexes, then a host step
    host = [_runs_on_host(graph, index, node) for index, node in enumerate(graph.nodes)]
    if not any(host) and not any(_is_string(graph, n) for n in graph.inputs + graph.outputs):
        return None  # the common case: nothing changes

    kinds = {}
    prologue, epilogue, device_nodes = [], [], []
    late = set()  # values made by device nodes or epilogue steps
    made_late = {}  # value made by an epilogue step -> that step's description
    for index, node in enumerate(graph.nodes):
        # again: a host step marks its string outputs, which ONNX may not have typed
        if not _runs_on_host(graph, index, node):
            for name in node.inputs:
                if name in made_late:
                    raise LoweringError(
                        f"{made_late[name]}: runs on the host between two parts of the device "
                        f"graph ({_describe(graph, index, node)} reads its result {name!r}); "
                        "rtsoa runs host steps only before or after the device graph"
                    )
            device_nodes.append(node)
            late.update(name for name in node.outputs if name)
            continue
        step = _step(graph, index, node, kinds)
        if any(name in late for name in node.inputs if name):
            epilogue.append(step)
            late.update(step.outputs)
            made_late.update((name, step.where) for name in step.outputs)
        else:
            prologue.append(step)
    return _device_graph(graph, device_nodes, prologue, epilogue, kinds)


def _is_string(graph, name):
    tensor = graph.tensors.get(name) if name else None
    return tensor is not None and tensor.on_host


def _describe(graph, index, node):
    return f"{node.describe(index)} (opset {graph.opset(node.domain)})"


def _runs_on_host(graph, index, node):
    key = (node.domain, node.op_type)
    if key in ALWAYS_HOST:
        return True
    strings = [name for name in node.inputs + node.outputs if _is_string(graph, name)]
    if not strings:
        return False
    if key not in HOST_OPS:
        ops = sorted(op for _, op in HOST_OPS)
        raise LoweringError(
            f"{_describe(graph, index, node)}: {strings[0]!r} is a string tensor, and op "
            f"{node.op_type!r} does not take strings (rtsoa's string ops: {', '.join(ops)})"
        )
    return True


def _kind(graph, name, kinds):
    """The kind of value `name`: STRING, a numpy dtype, or None when unknown."""
    if name in kinds:
        return kinds[name]
    tensor = graph.tensors.get(name)
    if tensor is None:
        return None
    if tensor.string:
        return STRING
    if tensor.maps:
        return map_sequence(tensor.maps)
    if tensor.dtype == DType.UNDEFINED:
        return None
    return np.dtype(DTYPES[DType(tensor.dtype)].numpy)


def _step(graph, index, node, kinds):
    """The HostStep of `node`, its attributes checked; records its outputs' kinds."""
    where = _describe(graph, index, node)
    opset = graph.opset(node.domain)
    if node.subgraphs:
        raise LoweringError(f"{where}: a host step cannot have subgraph attributes")
    changed = changed_definition(node.op_type, node.domain, opset)
    known = _ML_DEFINITIONS.get(node.op_type) if node.domain == "ai.onnx.ml" else None
    if known is not None:
        changed = _ml_definition(node.op_type, opset, known)
    if changed is not None:
        raise LoweringError(
            f"{where}: op {node.op_type!r} changed in opset {changed}, and rtsoa's host step "
            "implements the definitions before it only"
        )
    inputs = [_kind(graph, name, kinds) if name else None for name in node.inputs]
    for name, kind in zip(node.inputs, inputs, strict=True):
        if is_map_sequence(kind):
            raise LoweringError(f"{where}: input {name!r} is a sequence of maps ({kind})")
    try:
        parameters, outputs = HOST_OPS[(node.domain, node.op_type)].prepare(
            node.attributes, inputs, opset
        )
    except (ValueError, TypeError, KeyError, IndexError) as error:
        raise LoweringError(f"{where}: {error}") from None
    if len(outputs) < len([name for name in node.outputs if name]):
        raise LoweringError(f"{where}: {len(node.outputs)} outputs, the op makes {len(outputs)}")
    for name, kind in zip(node.outputs, outputs, strict=False):
        if not name:
            continue
        declared = _kind(graph, name, {})
        if declared is not None and kind_name(declared) != kind_name(kind):
            raise LoweringError(
                f"{where}: output {name!r} is declared {kind_name(declared)}, the op makes "
                f"{kind_name(kind)}"
            )
        kinds[name] = kind
        tensor = graph.tensor(name)
        if kind == STRING:
            tensor.string = True
        elif is_map_sequence(kind):
            tensor.maps = map_key(kind)
        else:
            tensor.dtype = DTYPE_OF_NUMPY[np.dtype(kind)]
    outputs = tuple(name for name in node.outputs)
    return HostStep(node.op_type, node.domain, tuple(node.inputs), outputs, parameters, where)


def _ml_definition(op, opset, known):
    """The since_version of ai.onnx.ml `op` at `opset` when rtsoa does not implement it."""
    from onnx import defs

    try:
        since = int(defs.get_schema(op, opset, "ai.onnx.ml").since_version)
    except defs.SchemaError:
        return opset
    return None if since in known else since


def _device_graph(graph, device_nodes, prologue, epilogue, kinds):
    """(device ComputeGraph, HostProgram) of a split (see the module docstring)."""
    device_made = {name for node in device_nodes for name in node.outputs if name}
    device_read = {name for node in device_nodes for name in node.inputs if name}
    nested = any(node.subgraphs for node in device_nodes)  # may read any outer value
    prologue_made = {name for step in prologue for name in step.outputs if name}
    device_inputs = [
        name
        for name in graph.inputs
        if device_nodes and not _is_string(graph, name) and (name in device_read or nested)
    ]
    device_inputs += sorted(prologue_made & device_read, key=_order(prologue))
    device_outputs = [name for name in graph.outputs if name in device_made]
    host_made = {name for step in prologue + epilogue for name in step.outputs}
    known = set(graph.inputs) | device_made | host_made
    for name in graph.outputs:
        tensor = graph.tensors.get(name)
        if name not in known and (tensor is None or not tensor.is_constant):
            raise LoweringError(f"graph output {name!r} is made by no node")
    for step in epilogue:
        for name in step.inputs:
            if name in device_made and name not in device_outputs:
                device_outputs.append(name)
    host_read = {name for step in prologue + epilogue for name in step.inputs if name}
    constants = {
        name: tensor.data
        for name, tensor in graph.tensors.items()
        if tensor.is_constant and (name in host_read or name in graph.outputs)
    }
    tensors = {name: tensor for name, tensor in graph.tensors.items() if not tensor.on_host}
    device = ComputeGraph(
        name=graph.name,
        nodes=device_nodes,
        tensors=tensors,
        inputs=device_inputs,
        outputs=device_outputs,
        opsets=dict(graph.opsets),
    )
    program = HostProgram(
        inputs=tuple(_value(graph, name, kinds) for name in graph.inputs),
        outputs=tuple(_value(graph, name, kinds) for name in graph.outputs),
        constants=constants,
        prologue=tuple(prologue),
        epilogue=tuple(epilogue),
        device_inputs=tuple(device_inputs),
        device_outputs=tuple(device_outputs),
    )
    return device, program


def _order(steps):
    """Sort key: the position of a value among the outputs of `steps`."""
    position = {name: k for k, name in enumerate(n for step in steps for n in step.outputs)}
    return position.__getitem__


def _value(graph, name, kinds):
    tensor = graph.tensor(name)
    return HostValue(name, _kind(graph, name, kinds), tensor.dims)
