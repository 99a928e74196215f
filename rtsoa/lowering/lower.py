"""Lowering: a ComputeGraph (or an ONNX model) into an ExecuteGraph with Init / Main / DeInit.

This module is the driver. The IR, `OpCall` (one op of `rtsoa.ops` on named tensors), is in
`calls.py`; each pass is a module of its own, run in this order:
1. convert (`convert.py`): each node through its converter into op calls; an op nothing
   converts fails here, naming the op, node and opset.
2. fold and infer (`fold.py`): calls on constants run at lowering time, static shapes inferred.
3. dead code (`dead_code.py`): calls nothing reachable from the graph outputs reads go.
4. fuse (`fuse.py`, unless `fuse=False`): BatchNormalization folded into the Conv before it,
   MatMul -> Add (-> Relu) chains run as one op.
5. emit (`emit.py`): the ExecuteGraph; constants uploaded in Init, each call an OpInferShape ->
   AllocMemory -> OpLaunch chain in Main, intermediates freed after their last reader.

A tensor at run time is two values: a SHAPE value and a MEMORY_BLOCK value. A graph input's
SHAPE value is the value just before its block value (the runner fills both).
"""

import sys
import warnings

from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.host.program import HostModel
from rtsoa.limits import check_lowering_limits
from rtsoa.lowering.budget import running
from rtsoa.lowering.calls import OpCall
from rtsoa.lowering.compute_graph import ComputeGraph, Tensor
from rtsoa.lowering.convert import convert
from rtsoa.lowering.dead_code import drop_dead
from rtsoa.lowering.emit import Emitter
from rtsoa.lowering.fold import fold_and_infer
from rtsoa.lowering.fuse import FUSIONS
from rtsoa.lowering.half_precision import loaded_kind
from rtsoa.lowering.host_split import split_host_steps
from rtsoa.lowering.onnx_import import import_onnx
from rtsoa.lowering.sequence_io import element_name
from rtsoa.lowering.subgraphs import identity_call
from rtsoa.ops import OPS
from rtsoa.ops.library import entry_for_infer, load_ops


def lower(model, name=None, streams=1, fuse=True, limits=None):
    """The ExecuteGraph of `model`: a ComputeGraph, an ONNX ModelProto, ONNX bytes or a path
    to an .onnx file. Raises LoweringError naming the op, node and opset it cannot lower.
    A model with string values (or an op rtsoa runs only on the host) lowers to a
    `rtsoa.host.program.HostModel`: its device ops' ExecuteGraph and the host steps around it.

    `limits`: a `rtsoa.limits.LoweringLimits` bounding the work (sequence elements resolved,
    op calls emitted); None: its defaults. Going past one is a LoweringError naming the node.

    `fuse`: True runs every fusion of `rtsoa.lowering.fuse` (FUSIONS: "batch_norm", a
    BatchNormalization folded into the preceding Conv's weights; "batch_norm_activation", one
    not folded, -> Relu as one FusedBatchNormalization; "conv_activation", Conv -> Add
    -> Relu / Clip as one FusedConv; "matmul_bias", MatMul -> Add of a bias (-> Relu) as one
    MatMulBias; "gemm_activation", Gemm -> Relu as one FusedGemm; "winograd", a 3 x 3
    stride-1 Conv / FusedConv of enough channels as one WinogradConv on weights transformed
    at lowering, which rounds differently from the direct conv: see `rtsoa.lowering.fuse`),
    False none (every op of the model kept), or a collection of those names, the ones to run.

    `streams`: ops are issued round-robin on this many device streams; a tensor read on
    another stream than its producer's is ordered by a RecordEvent / StreamWaitEvent pair,
    and its block is freed on the producer's stream after events from every reader stream."""
    if not 1 <= int(streams) <= 64:
        raise ValueError(f"streams must be 1 .. 64, got {streams}")
    fuse = fusions_of(fuse)
    with running(check_lowering_limits(limits)):
        return _lower(model, name, streams, fuse)


def fusions_of(fuse):
    """The fusion names `fuse` selects (see `lower`)."""
    if fuse is True:
        return frozenset(FUSIONS)
    if fuse is False or fuse is None:
        return frozenset()
    if isinstance(fuse, str):
        fuse = (fuse,)
    names = frozenset(fuse)
    unknown = sorted(names - set(FUSIONS))
    if unknown:
        raise ValueError(f"unknown fusion(s) {unknown}; rtsoa's are {list(FUSIONS)}")
    return names


def _lower(model, name, streams, fuse):
    owned = not isinstance(model, ComputeGraph)  # the import is the lowering's own
    if owned:
        model = import_onnx(model)
    split = split_host_steps(model)
    if split is not None:  # string values: host steps around a device graph (rtsoa.host)
        device, program = split
        return HostModel(_lower(device, name, streams, fuse), program)
    for output in model.outputs:
        model.tensor(output)
    ctx = convert(model)
    for name in model.inputs:
        if model.tensors[name].sequence:  # one no node reads (those name the node)
            raise LoweringError(
                f"graph input {name!r} is a sequence value; rtsoa resolves sequences at "
                "lowering: run the model through rtsoa.InferenceSession, which lowers it for "
                "each run's sequence (rtsoa.lowering.sequence_io)"
            )
    _load_ops(model, ctx.calls)
    calls = fold_and_infer(model, ctx.calls)
    calls += _sequence_outputs(model)
    calls = drop_dead(model, calls)
    for fusion, run in FUSIONS.items():  # in this order: a folded BatchNormalization's conv fuses
        if fusion in fuse:
            calls = run(model, calls)
    for output in model.outputs:
        tensor = model.tensors[output]
        if tensor.is_constant and not any(output in call.outputs for call in calls):
            source = ctx.fresh_name(f"{output}__constant")
            model.tensors[source] = Tensor(source, tensor.dtype, tensor.dims, tensor.data)
            tensor.data = None
            call = OpCall("Identity", [source], [output], {}, -1)
            call.slots = OPS["Identity"].slots({}, [])
            calls.append(call)
    if owned:
        _release_unread_constants(model, calls)
    return Emitter(model, calls, name or model.name or "model", streams).emit()


def _release_unread_constants(model, calls):
    """Drop the data of the constants no call reads any more (a folded BatchNormalization's
    Conv weights and parameters, the inputs of dead or folded calls), so that a model's
    weights are not held twice while its graph is emitted. Only for a graph the lowering
    imported itself: a caller's ComputeGraph keeps its tensors."""
    keep = {name for call in calls for name in call.inputs if name}
    keep.update(model.inputs)
    keep.update(model.outputs)
    for tensor_name, tensor in model.tensors.items():
        if tensor.data is not None and tensor_name not in keep:
            tensor.data = None


def _sequence_outputs(model):
    """Identity calls returning each sequence graph output as its elements, tensor outputs
    `y[0]` .. `y[n-1]` in its place (`rtsoa.lowering.sequence_io` regroups them)."""
    calls, outputs = [], []
    for name in model.outputs:
        tensor = model.tensors[name]
        if not tensor.sequence:
            outputs.append(name)
            continue
        if tensor.elements is None:
            raise LoweringError(f"graph output {name!r}: a sequence not known at lowering")
        for index, element in enumerate(tensor.elements):
            target = element_name(name, index)
            if target in model.tensors:
                raise LoweringError(
                    f"graph output {name!r}: its element {index} would be returned as "
                    f"{target!r}, which names a value of the model already"
                )
            calls.append(identity_call(model, element, target, -1))
            outputs.append(target)
    model.outputs[:] = outputs
    return calls


def _load_ops(model, calls):
    """Compile (or load) what lowering runs of the model's ops now, all together on every
    core, rather than one by one as shape inference meets them (`rtsoa.ops.library`): each
    op's shape inference, from its full entry where that is compiled already (the variant for
    the one dtype its input 0 has in the model, where it has variants), else from its
    infer-only entry. The computes wait: folding compiles those of the ops it folds, and
    loading the lowered graph those of the ops it runs, so an op that fusion replaces (a
    MatMul, Add and Relu that become one MatMulBias) costs no compute compile, and a fused op
    no compile at all unless fusion makes it."""
    kinds = {}
    for call in calls:
        name = getattr(call, "op", None)
        if name in OPS:
            source = call.inputs[0] if call.inputs else ""
            tensor = model.tensors.get(source) if source else None
            kind = -1 if tensor is None else int(loaded_kind(name, DType(tensor.dtype)))
            kinds.setdefault(name, set()).add(kind)
    load_ops(entry_for_infer(name, dtypes) for name, dtypes in kinds.items())


_MOVED = {  # name -> module it moved to; the old place warns and still works for one version
    "OPSET_KEY": "calls",
    "op_call": "calls",
    "set_constant": "calls",
    "LoweringContext": "convert",
    "convert_node": "convert",
    "FOLD_LIMIT": "fold",
}


def __getattr__(name):
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"rtsoa.lowering.lower.{name} is deprecated: use rtsoa.lowering.{module}.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(sys.modules[f"rtsoa.lowering.{module}"], name)
