"""Op fusion, a lowering pass between dead-op elimination and emission.

`fold_batch_norm`: Conv -> BatchNormalization (inference, constant parameters) becomes one Conv
whose weights and bias are scaled at lowering, as onnxruntime's ConvBNFusion does:
W' = W * s and B' = (B - mean) * s + bias per output channel, with s = scale / sqrt(var + eps)
computed in float64 and rounded once to the weights' dtype. It applies where the conv's weights
(and bias, if any) and the BatchNormalization's four parameters are constants of the conv's
dtype with one value per output channel, and the conv's result is read by that
BatchNormalization alone and is not a graph output. The folded conv rounds differently from
the two ops (one product of rounded weights instead of a rounded conv then a scaled rounding):
results agree with the unfused ops' within rtol 1e-5 and an absolute 1e-6 of the output's
largest magnitude (`tests/test_lowering_bn_fold.py`), as onnxruntime's own fusion does.

`fuse_matmul_bias`: MatMul -> Add of a bias (-> Relu) becomes one `MatMulBias` op
(`rtsoa/ops/linalg.py`), as onnxruntime fuses MatMul + Add into Gemm and Gemm + Relu into
FusedGemm. Each op of the lowered graph costs its nodes (OpInferShape, AllocMemory, OpLaunch
and the FreeMemory of its result), whatever its size: on small tensors that is most of an
inference. A chain is fused only where the result cannot differ:

- the MatMul's A has a known rank of at least 2 and W a known rank of 2;
- the Add's other operand is a constant bias of W's column count elements, every dim but the
  last 1 and a rank at most A's, so the Add broadcasts nothing into the product's shape;
- the product (and the Add's result, when a Relu is fused) is read by that op alone and is
  not a graph output;
- the dtypes are float32 or float64 (MatMul and Add refuse mixed ones anyway).

The fused op computes the product and the adds in the same order and precision as the ops it
replaces, so its results equal theirs bit for bit (`tests/test_lowering_fusion.py`).

`fuse_conv_activation`: Conv -> Add of a residual -> Relu or Clip becomes one `FusedConv` op
(`rtsoa/ops/conv.py`), as onnxruntime's FusedConv does (its Conv + Add + Relu "Z" input and
Conv + activation), so each image's output is finished while it is in cache and the Add and
the activation cost no nodes. Either the Add or the activation may be missing. A chain is
fused only where the result cannot differ: each intermediate is read by the next op alone and
is not a graph output; the residual has the conv output's dtype and exactly its dims (known
ints, or the same symbols: the Add broadcasts nothing); Clip's bounds are constant scalars of
that dtype or attributes. The fused op adds and clips in the same order and precision as the
ops it replaces: its results equal theirs bit for bit (`tests/test_lowering_conv_fusion.py`).
The fused call takes the place of the chain's last op, where the residual is computed.

`fuse_gemm_activation`: Gemm -> Relu becomes one `FusedGemm` op (`rtsoa/ops/linalg.py`), as
onnxruntime's FusedGemm, where the Gemm is float32 or float64 and its result is read by the
Relu alone and is not a graph output. The Relu runs over the finished Gemm result as the Relu
op does: the same bits (`tests/test_lowering_gemm_fusion.py`).

`fuse_batch_norm_activation`: BatchNormalization -> Relu, where the normalization was not
folded into a conv (DenseNet's, which follow a Concat), becomes one `FusedBatchNormalization`
op (`rtsoa/ops/normalization.py`), as onnxruntime runs a BatchNormalization with its
activation, where the BatchNormalization has one output of float32 or float64, read by the
Relu alone and no graph output. The Relu runs over each rounded result in the same pass: the
same bits as the two ops (`tests/test_lowering_bn_relu_fusion.py`).

`winograd_convolutions`: a 2-D Conv or FusedConv of a 3 x 3 kernel with stride 1, no dilation
and one group, whose weights are a finite constant, of enough channels and (where the input's
height and width are known) output positions to pay for the transforms (`WINOGRAD_CHANNELS`),
becomes one `WinogradConv` op (`rtsoa/ops/winograd.py`) on the weights transformed at lowering
(16 values per kernel instead of 9), with the FusedConv's bias, residual and activation. Its
results differ from the direct convolution's by rounding, within 1e-5 of the output's largest
magnitude (float32), and on inputs holding inf or NaN (see `rtsoa.ops.winograd`); it runs
last, after the fusions that make FusedConv. Over the direct convs, a CNN ran in 0.81-1.09x
the time on one BLAS thread and 0.79-1.03x on two (two runs of asv `bench_cnn.CnnWinograd`:
ResNet-18 / -50, DenseNet-121, Inception-v1; ResNet-50 at 1.09 and 0.86); a fusion list
without "winograd" (`rtsoa lower --no-winograd`, `rtsoa run model.onnx --no-winograd`) keeps
the direct convs, bit for bit and with their non-finite semantics.

`lower(model, fuse=False)` keeps every op as the model has it; `fuse=("batch_norm", ...)`
runs the fusions named (`FUSIONS`).
"""

import numpy as np

from rtsoa.abi.registry import Registry
from rtsoa.graph.schema import DType
from rtsoa.lowering.calls import OpCall, set_constant
from rtsoa.ops import winograd
from rtsoa.ops.abi import ACT_CLIP, ACT_NONE, ACT_RELU
from rtsoa.ops.attributes import onnx_float
from rtsoa.ops.registry import OPS

_FLOATS = (DType.FLOAT32, DType.FLOAT64)


def _readers(calls):
    """Tensor name -> the calls reading it (an If / Loop region's outer reads included)."""
    readers = {}
    for call in calls:
        for name in call.inputs:
            if name:
                readers.setdefault(name, []).append(call)
    return readers


def _sole_reader(name, readers, outputs, op):
    """The one call reading `name` if it is an `op` call and `name` is not a graph output."""
    if name in outputs:
        return None
    found = readers.get(name, ())
    if len(found) != 1 or getattr(found[0], "region", False) or found[0].op != op:
        return None
    return found[0]


def _bias_of(graph, add, product, columns, rank):
    """The Add's bias operand if it is a constant that broadcasts along the last axis only."""
    if len(add.inputs) != 2:
        return None
    other = add.inputs[1] if add.inputs[0] == product else add.inputs[0]
    if other == product or product not in add.inputs:
        return None
    tensor = graph.tensors.get(other)
    if tensor is None or not tensor.is_constant:
        return None
    shape = tuple(int(d) for d in np.shape(tensor.data))
    if len(shape) > rank or int(np.prod(shape, dtype=np.int64)) != columns:
        return None
    if shape and (shape[-1] != columns or any(d != 1 for d in shape[:-1])):
        return None
    return other


def fuse_matmul_bias(graph, calls):
    """`calls` with each fusable MatMul -> Add (-> Relu) chain as one MatMulBias call (see the
    module docstring); the fused call takes the MatMul's place, the others are dropped."""
    readers = _readers(calls)
    outputs = set(graph.outputs)
    replaced = {}  # id(call) -> its replacement (None: dropped)
    for call in calls:
        if getattr(call, "region", False) or call.op != "MatMul" or id(call) in replaced:
            continue
        if len(call.inputs) != 2 or len(call.outputs) != 1:
            continue
        a, w = (graph.tensors.get(name) for name in call.inputs)
        (product,) = call.outputs
        if a is None or w is None or a.dims is None or w.dims is None:
            continue
        if len(a.dims) < 2 or len(w.dims) != 2 or a.dtype not in _FLOATS or w.dtype != a.dtype:
            continue
        columns = w.dims[1]
        if not isinstance(columns, int | np.integer):
            continue
        add = _sole_reader(product, readers, outputs, "Add")
        if add is None or id(add) in replaced:
            continue
        bias = _bias_of(graph, add, product, int(columns), len(a.dims))
        if bias is None or graph.tensors[bias].dtype != a.dtype:
            continue
        (result,) = add.outputs
        activation = ACT_NONE
        relu = _sole_reader(result, readers, outputs, "Relu")
        if relu is not None and id(relu) not in replaced:
            activation = ACT_RELU
            replaced[id(relu)] = None
            (result,) = relu.outputs
        replaced[id(add)] = None
        attributes = dict(call.attributes)
        attributes["activation"] = activation
        fused = OpCall(
            "MatMulBias", [call.inputs[0], call.inputs[1], bias], [result], attributes, call.node
        )
        fused.slots = OPS["MatMulBias"].slots(attributes, [])
        replaced[id(call)] = fused
    return _replace(calls, replaced)


def _constant(graph, name, dtype, size):
    """The data of constant tensor `name` if it has `dtype` and `size` elements, else None."""
    tensor = graph.tensors.get(name) if name else None
    if tensor is None or not tensor.is_constant or tensor.dtype != dtype:
        return None
    data = np.asarray(tensor.data)
    return data if data.size == size else None


def _fresh(graph, name):
    candidate, k = name, 0
    while candidate in graph.tensors:
        k += 1
        candidate = f"{name}{k}"
    return candidate


def _folded(graph, conv, norm):
    """The Conv call computing `norm`'s output from `conv`'s input, or None if `norm` cannot
    be folded into `conv` (see the module docstring)."""
    if len(conv.inputs) < 2 or len(norm.inputs) != 5 or len(norm.outputs) != 1:
        return None
    attributes = norm.attributes
    if int(attributes.get("training_mode", 0)) or int(attributes.get("spatial", 1)) != 1:
        return None
    weights = graph.tensors.get(conv.inputs[1])
    if weights is None or not weights.is_constant or weights.dtype not in _FLOATS:
        return None
    w = np.asarray(weights.data)
    if w.ndim < 3:
        return None
    channels = w.shape[0]
    bias_name = conv.inputs[2] if len(conv.inputs) > 2 else ""
    if bias_name:
        bias = _constant(graph, bias_name, weights.dtype, channels)
    else:
        bias = np.zeros(channels)
    parameters = [_constant(graph, name, weights.dtype, channels) for name in norm.inputs[1:]]
    if bias is None or any(p is None for p in parameters):
        return None
    scale, shift, mean, var = (p.astype(np.float64).reshape(-1) for p in parameters)
    epsilon = float(attributes.get("epsilon", 1e-5))
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = scale / np.sqrt(var + epsilon)
    if not np.all(np.isfinite(factor)):
        return None  # a zero variance keeps the ops' own inf / nan semantics
    dtype = w.dtype
    shape = (channels,) + (1,) * (w.ndim - 1)
    new_w = (w.astype(np.float64) * factor.reshape(shape)).astype(dtype)
    new_b = ((bias.astype(np.float64).reshape(-1) - mean) * factor + shift).astype(dtype)
    (output,) = norm.outputs
    w_name = _fresh(graph, f"{output}__folded_weights")
    set_constant(graph, w_name, new_w)
    b_name = _fresh(graph, f"{output}__folded_bias")
    set_constant(graph, b_name, new_b)
    fused = OpCall("Conv", [conv.inputs[0], w_name, b_name], [output], conv.attributes, conv.node)
    fused.slots = conv.slots
    return fused


def fold_batch_norm(graph, calls):
    """`calls` with each Conv -> BatchNormalization pair that can be folded (see the module
    docstring) as one Conv with scaled weights and bias, in the Conv's place."""
    readers = _readers(calls)
    outputs = set(graph.outputs)
    replaced = {}  # id(call) -> its replacement (None: dropped)
    for call in calls:
        if getattr(call, "region", False) or call.op != "Conv" or len(call.outputs) != 1:
            continue
        norm = _sole_reader(call.outputs[0], readers, outputs, "BatchNormalization")
        if norm is None or norm.inputs[0] != call.outputs[0]:
            continue
        fused = _folded(graph, call, norm)
        if fused is not None:
            replaced[id(call)] = fused
            replaced[id(norm)] = None
    return _replace(calls, replaced)


def _known_dims(tensor):
    """The tensor's dims if every one is known (an int or a symbol), else None."""
    if tensor is None or tensor.dims is None or any(d is None for d in tensor.dims):
        return None
    return tuple(tensor.dims)


def _residual_of(graph, add, result):
    """The Add's other operand if it has `result`'s dtype and exactly its dims, else None."""
    if len(add.inputs) != 2 or result not in add.inputs:
        return None
    other = add.inputs[1] if add.inputs[0] == result else add.inputs[0]
    if not other or other == result:
        return None
    mine, theirs = graph.tensors.get(result), graph.tensors.get(other)
    dims = _known_dims(mine)
    if dims is None or _known_dims(theirs) != dims or theirs.dtype != mine.dtype:
        return None
    return other


def _scalar(graph, name, dtype):
    """The value of constant scalar `name` of `dtype` as a float, else None."""
    tensor = graph.tensors.get(name)
    if tensor is None or not tensor.is_constant or tensor.dtype != dtype:
        return None
    data = np.asarray(tensor.data)
    return float(data.reshape(-1)[0]) if data.size == 1 else None


def _clip_bounds(graph, clip, dtype):
    """(low, high) of a Clip of `dtype` as the Clip op takes them (an input, else the
    attribute, else the dtype's extremes), or None if an input bound is not a constant."""
    largest = float(np.finfo(np.float32 if dtype == DType.FLOAT32 else np.float64).max)
    bounds = []
    for position, key, default in ((1, "min", -largest), (2, "max", largest)):
        name = clip.inputs[position] if len(clip.inputs) > position else ""
        if name:
            value = _scalar(graph, name, dtype)
            if value is None:
                return None
            bounds.append(value)
        elif key in clip.attributes:
            bounds.append(onnx_float(clip.attributes[key]))
        else:
            bounds.append(default)
    return tuple(bounds)


def _activation_of(graph, result, readers, outputs, dtype):
    """(call, attributes) of a Relu or a Clip reading `result` alone, else (None, {})."""
    relu = _sole_reader(result, readers, outputs, "Relu")
    if relu is not None:
        return relu, {"activation": ACT_RELU}
    clip = _sole_reader(result, readers, outputs, "Clip")
    if clip is not None and clip.inputs[0] == result:
        bounds = _clip_bounds(graph, clip, dtype)
        if bounds is not None:
            low, high = bounds
            return clip, {"activation": ACT_CLIP, "clip_min": low, "clip_max": high}
    return None, {}


def fuse_conv_activation(graph, calls):
    """`calls` with each fusable Conv -> Add (-> Relu / Clip) and Conv -> Relu / Clip chain as
    one FusedConv call, in the place of the chain's last call (see the module docstring)."""
    readers = _readers(calls)
    outputs = set(graph.outputs)
    replaced = {}  # id(call) -> its replacement (None: dropped)
    for call in calls:
        if getattr(call, "region", False) or call.op != "Conv" or id(call) in replaced:
            continue
        if not 2 <= len(call.inputs) <= 3 or len(call.outputs) != 1:
            continue
        (result,) = call.outputs
        tensor = graph.tensors.get(result)
        if tensor is None or tensor.dtype not in _FLOATS:
            continue
        chain, residual = [call], ""
        add = _sole_reader(result, readers, outputs, "Add")
        if add is not None and id(add) not in replaced:
            residual = _residual_of(graph, add, result) or ""
            if residual:
                chain.append(add)
                (result,) = add.outputs
        activation, attributes = _activation_of(graph, result, readers, outputs, tensor.dtype)
        if activation is not None and id(activation) not in replaced:
            chain.append(activation)
            (result,) = activation.outputs
        else:
            attributes = {}
        if len(chain) == 1:
            continue
        attributes = {**call.attributes, **attributes}
        inputs = list(call.inputs)
        if residual:
            inputs = (inputs + [""])[:3] + [residual]
        fused = OpCall("FusedConv", inputs, [result], attributes, call.node)
        fused.slots = OPS["FusedConv"].slots(attributes, [])
        for member in chain[:-1]:
            replaced[id(member)] = None
        replaced[id(chain[-1])] = fused
    return _replace(calls, replaced)


def _fuse_relu(graph, calls, op, fused_op):
    """`calls` with each `op` call of one float output read by a Relu alone (and no graph
    output) as one `fused_op` call, its attributes plus activation Relu, in the Relu's place."""
    readers = _readers(calls)
    outputs = set(graph.outputs)
    replaced = {}  # id(call) -> its replacement (None: dropped)
    for call in calls:
        if getattr(call, "region", False) or call.op != op or len(call.outputs) != 1:
            continue
        (result,) = call.outputs
        tensor = graph.tensors.get(result)
        if tensor is None or tensor.dtype not in _FLOATS:
            continue
        relu = _sole_reader(result, readers, outputs, "Relu")
        if relu is None or id(relu) in replaced:
            continue
        attributes = {**call.attributes, "activation": ACT_RELU}
        fused = OpCall(fused_op, list(call.inputs), list(relu.outputs), attributes, call.node)
        fused.slots = OPS[fused_op].slots(attributes, [])
        replaced[id(call)] = None
        replaced[id(relu)] = fused
    return _replace(calls, replaced)


def fuse_gemm_activation(graph, calls):
    """`calls` with each fusable Gemm -> Relu pair as one FusedGemm call in the Relu's place
    (see the module docstring)."""
    return _fuse_relu(graph, calls, "Gemm", "FusedGemm")


def fuse_batch_norm_activation(graph, calls):
    """`calls` with each BatchNormalization -> Relu pair (the normalization not folded into a
    conv) as one FusedBatchNormalization call in the Relu's place (see the module docstring)."""
    return _fuse_relu(graph, calls, "BatchNormalization", "FusedBatchNormalization")


# where a conv becomes a WinogradConv: 32 or more input and output channels, 4,096 or more
# (input, output) channel pairs, and, where the input's height and width are known, 144 or more
# output positions. On one thread (asv `bench_ops_nn`), Winograd ran 0.72-0.90x the direct
# conv's time from 14 x 14 up with 128 -> 32 channels or more, but 1.1-1.85x with 16 or 32
# channels on 14 x 14, and 0.75-1.11x on 7 x 7 planes (GEMMs 16 tiles wide)
WINOGRAD_CHANNELS = 32
WINOGRAD_PAIRS = 4096
WINOGRAD_PLANE = 144
_SAME_PADS = {"SAME_UPPER", "SAME_LOWER"}


def _winograd_pads(attributes):
    """The 4 pads (top, left, bottom, right) of a 2-D 3 x 3 conv of stride 1, no dilation and
    one group, else None."""
    if int(attributes.get("group", 1)) != 1:
        return None
    for name in ("strides", "dilations"):
        if (
            any(int(v) != 1 for v in attributes.get(name, (1, 1)))
            or len(attributes.get(name, (1, 1))) != 2
        ):
            return None
    if list(attributes.get("kernel_shape", (3, 3))) != [3, 3]:
        return None
    auto_pad = attributes.get("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode("utf-8", "replace")
    if auto_pad in _SAME_PADS:  # stride 1, kernel 3: one cell on each side, whatever the size
        return [1, 1, 1, 1]
    if auto_pad == "VALID":
        return [0, 0, 0, 0]
    if auto_pad != "NOTSET":
        return None
    pads = [int(p) for p in attributes.get("pads", (0, 0, 0, 0))]
    return pads if len(pads) == 4 and min(pads) >= 0 else None


def winograd_convolutions(graph, calls):
    """`calls` with each Conv / FusedConv that Winograd's F(2 x 2, 3 x 3) can compute (see the
    module docstring) as one WinogradConv call on transformed weights, in its place."""
    transformed = {}  # weights name -> its transform's name
    replaced = {}
    for call in calls:
        if getattr(call, "region", False) or call.op not in ("Conv", "FusedConv"):
            continue
        if len(call.inputs) < 2 or len(call.outputs) != 1:
            continue
        x, weights = (graph.tensors.get(name) for name in call.inputs[:2])
        if x is None or weights is None or not weights.is_constant:
            continue
        if x.dims is None or len(x.dims) != 4 or weights.dtype not in _FLOATS:
            continue
        if x.dtype != weights.dtype:
            continue
        w = np.asarray(weights.data)
        if w.ndim != 4 or w.shape[2:] != (3, 3) or min(w.shape[:2]) < WINOGRAD_CHANNELS:
            continue
        pads = _winograd_pads(call.attributes)
        if pads is None or w.shape[0] * w.shape[1] < WINOGRAD_PAIRS:
            continue
        height, width = x.dims[2:]
        if isinstance(height, int | np.integer) and isinstance(width, int | np.integer):
            rows, columns = height + pads[0] + pads[2] - 2, width + pads[1] + pads[3] - 2
            if max(rows, 0) * max(columns, 0) < WINOGRAD_PLANE:
                continue
        if not np.all(np.isfinite(w)):
            continue
        name = transformed.get(call.inputs[1])
        if name is None:
            name = _fresh(graph, f"{call.inputs[1]}__winograd")
            set_constant(graph, name, winograd.transform_weights(w))
            transformed[call.inputs[1]] = name
        attributes = {
            key: call.attributes[key]
            for key in ("activation", "clip_min", "clip_max")
            if key in call.attributes
        }
        attributes["pads"] = pads
        inputs = [call.inputs[0], name] + list(call.inputs[2:])
        fused = OpCall("WinogradConv", inputs, list(call.outputs), attributes, call.node)
        fused.slots = OPS["WinogradConv"].slots(attributes, [])
        replaced[id(call)] = fused
    return _replace(calls, replaced)


def _replace(calls, replaced):
    """`calls` with each call in `replaced` swapped for its replacement (None: dropped)."""
    if not replaced:
        return calls
    kept = []
    for call in calls:
        if id(call) in replaced:
            if replaced[id(call)] is not None:
                kept.append(replaced[id(call)])
        else:
            kept.append(call)
    return kept


# The fusions `lower(model, fuse=...)` runs, by name, in the order they run; `fuse=True` runs
# every one.
FUSIONS = Registry.of(
    "fusion",
    {
        "batch_norm": fold_batch_norm,
        "batch_norm_activation": fuse_batch_norm_activation,
        "conv_activation": fuse_conv_activation,
        "matmul_bias": fuse_matmul_bias,
        "gemm_activation": fuse_gemm_activation,
        "winograd": winograd_convolutions,
    },
)
