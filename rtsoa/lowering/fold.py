"""Pass 2 of lowering, fold and infer: in topological order, an op call whose inputs are all
constants is run at lowering time (`rtsoa.ops.host`) and its outputs become constants (Shape of
a tensor with static dims too); otherwise its output shapes are inferred when its inputs'
shapes are static, and left to run time (an OpInferShape kernel) when they are not."""

import math

from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.calls import describe_call
from rtsoa.lowering.dtypes import check_dtypes
from rtsoa.lowering.half_precision import widen
from rtsoa.ops import OPS
from rtsoa.ops.abi import dtype_code
from rtsoa.ops.host import OpError, TensorInfo, infer_shapes, run_numpy

FOLD_LIMIT = 1 << 20  # elements: larger results stay run-time ops (the graph stays small)


def tensor_info(tensor):
    """The TensorInfo of a tensor with a static shape and a known dtype, else None."""
    if tensor.dims is None or not tensor.is_static or tensor.dtype == DType.UNDEFINED:
        return None
    return TensorInfo(int(tensor.dtype), tuple(tensor.dims))


def fold_and_infer(graph, calls):
    """Pass 2: fold constant calls; static shapes where inputs allow. Returns kept calls."""
    kept = []
    for call in calls:
        if getattr(call, "region", False):
            # an If / Loop (rtsoa.lowering.control_flow): its bodies are lowered and folded
            # now that its inputs are known; a constant If condition splices in one branch
            kept.extend(call.fold(graph, fold_and_infer))
            continue
        for part in widen(graph, call):  # float16 / bfloat16 through float32 where needed
            _fold_call(graph, part, kept)
    return kept


def _fold_call(graph, call, kept):
    """Fold `call` if its inputs are constants, else append it to `kept` with its static
    output shapes inferred where its inputs allow."""
    definition = OPS[call.op]
    check_dtypes(graph, call, describe_call)
    tensors = [graph.tensors[name] if name else None for name in call.inputs]
    infos = [None if t is None else tensor_info(t) for t in tensors]
    call.slots = definition.slots(call.attributes, infos)
    constant = not definition.random and all(t is None or t.is_constant for t in tensors)
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
            raise LoweringError(f"{describe_call(graph, call)}: {error}") from None
        # Python ints: an int64 product of huge dims can wrap to a small count
        small = all(math.prod(s.dims) <= FOLD_LIMIT for s in shapes)
        if small:
            try:
                results = run_numpy(call.op, inputs, call.attributes, len(call.outputs))
            except OpError as error:
                raise LoweringError(f"{describe_call(graph, call)}: {error}") from None
            for name, result in zip(call.outputs, results, strict=True):
                if name:
                    tensor = graph.tensor(name)
                    tensor.data = result
                    tensor.dtype = DType(dtype_code(result.dtype))
                    tensor.dims = tuple(int(d) for d in result.shape)
            return
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
            raise LoweringError(f"{describe_call(graph, call)}: {error}") from None
        for name, info in zip(call.outputs, shapes, strict=True):
            if name:
                tensor = graph.tensor(name)
                tensor.dtype = DType(info.dtype)
                tensor.dims = tuple(info.dims)
