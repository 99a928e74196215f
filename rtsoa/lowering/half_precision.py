"""float16 and bfloat16 compute through float32, as onnxruntime's CPU provider runs the ops it
has no half-precision kernel for: at fold (`fold.py`) an op call of `WIDENED` that gets
float16 or bfloat16 inputs its op does not take runs on float32 copies of them (a Cast each:
exact, every float16 and bfloat16 value is a float32), and each of its float outputs is
rounded back to the half type once (a Cast: round to nearest, halves to even). Results are
those of the float32 op rounded once per op output, never an accumulation in the narrow type.

Which outputs are rounded back: the type ONNX gave the output where it is known (a float32
`Mean` of LayerNormalization with stash_type 1 stays float32, ArgMax's int64 is written as
it is); where it is not, every output but the ones `_NOT_FLOAT` names. Range (opset 27)
computes in its `stash_type`: float32 (1, the default) or float64 (11); another is refused.
"""

from rtsoa.abi.dtypes import DTYPES
from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.calls import OpCall, describe_call
from rtsoa.ops import OPS

HALF = frozenset((DType.FLOAT16, DType.BFLOAT16))

# The ops run in float32 on float16 / bfloat16 data, by family (docs/models.md lists them).
FAMILIES = {
    "elementwise arithmetic": (
        "Add Sub Mul Div Pow Mod Sum Mean Max Min Neg Abs Sign Sqrt Exp Log Erf Ceil Floor "
        "Round Clip Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh"
    ),
    "comparisons": "Equal Less Greater IsNaN IsInf",
    "activations": (
        "Relu LeakyRelu PRelu Elu Selu Celu Sigmoid HardSigmoid HardSwish Softplus Softsign "
        "Tanh Gelu Mish Swish ThresholdedRelu Shrink"
    ),
    "reductions": "ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ArgMax ArgMin CumSum "
    "CumProd TopK",
    "matrix products": "MatMul MatMulBias Gemm Einsum Det",
    "softmax": "Softmax LogSoftmax",
    "normalizations": "BatchNormalization InstanceNormalization LayerNormalization "
    "RMSNormalization LRN",
    "convolutions and pools": "Conv ConvTranspose FusedConv AveragePool MaxPool "
    "GlobalAveragePool GlobalMaxPool",
    "attention": "Attention LinearAttention RotaryEmbedding",
    "recurrent": "RNN GRU LSTM",
    "resampling": "Resize GridSample AffineGrid",
    "losses": "NegativeLogLikelihoodLoss SoftmaxCrossEntropyLoss",
    "sorting": "Unique",
    "generators": "Range",  # opset 27's stash_type 1 (its default): computed in float32
}
WIDENED = frozenset(name for names in FAMILIES.values() for name in names.split())

_ALL = range(64)
# Outputs that are not of the input's float type, for outputs whose type ONNX does not give.
_NOT_FLOAT = {
    "ArgMax": _ALL,
    "ArgMin": _ALL,
    "Equal": _ALL,
    "Less": _ALL,
    "Greater": _ALL,
    "IsNaN": _ALL,
    "IsInf": _ALL,
    "TopK": (1,),
    "MaxPool": (1,),
    "Unique": (1, 2, 3),
}

_FLOAT32_ONNX = DTYPES[DType.FLOAT32].onnx
_FLOAT64_ONNX = DTYPES[DType.FLOAT64].onnx


def takes(op, position, dtype):
    """Does op `op` take DType `dtype` at input `position` itself? An op that declares no
    element types takes it unless it is one of WIDENED (the normalizations compute in
    float32 / float64 only); an input it declares nothing for takes any."""
    declared = OPS[op].dtypes
    if declared is None:
        return op not in WIDENED  # the normalizations declare none but compute in floats
    allowed = declared.get(position)
    return allowed is None or dtype in allowed


def widens(op, position, dtype):
    """Does lowering run op `op` on a float32 copy of its input `position` of DType `dtype`?"""
    return op in WIDENED and dtype in HALF and not takes(op, position, dtype)


def loaded_kind(op, dtype):
    """The DType input 0 of op `op` has when it runs, given the model's `dtype` there (for
    choosing the entries to compile before folding)."""
    return DType.FLOAT32 if widens(op, 0, dtype) else dtype


def widen(graph, call):
    """The calls that run `call`: [call] itself, or, when it gets a half-precision input its op
    does not take, a Cast to float32 of each half-precision input, the call on those, and a
    Cast back to the half type of each float output (renamed to float32 tensors)."""
    if call.op not in WIDENED:
        return [call]
    kinds = [_dtype(graph, name) for name in call.inputs]
    if not any(widens(call.op, k, kind) for k, kind in enumerate(kinds)):
        return [call]
    wide_type = _wide_type(graph, call)
    half = [k for k, kind in enumerate(kinds) if kind in HALF]  # Clip's bounds, masks too
    before, after = [], []
    inputs = list(call.inputs)
    for position in half:
        name = call.inputs[position]
        wide = _fresh(graph, name)
        before.append(_cast(call, name, wide, DTYPES[wide_type].onnx))
        graph.tensor(wide).dtype = wide_type
        graph.tensor(wide).dims = graph.tensors[name].dims
        inputs[position] = wide
    default = kinds[half[0]]
    outputs = list(call.outputs)
    for position, name in enumerate(call.outputs):
        if not name:
            continue
        kind = _dtype(graph, name)
        if kind == DType.UNDEFINED:
            kind = DType.UNDEFINED if position in _NOT_FLOAT.get(call.op, ()) else default
        if kind in HALF:
            wide = _fresh(graph, name)
            graph.tensor(wide).dims = graph.tensors[name].dims
            outputs[position] = wide
            after.append(_cast(call, wide, name, DTYPES[kind].onnx))
    widened = OpCall(call.op, inputs, outputs, call.attributes, call.node)
    return [*before, widened, *after]


def _wide_type(graph, call):
    """The type `call` computes in: float32, or float64 for a Range whose stash_type says so
    (LoweringError for a stash_type that is neither)."""
    if call.op != "Range":
        return DType.FLOAT32
    stash = int(call.attributes.get("stash_type", _FLOAT32_ONNX))
    if stash not in (_FLOAT32_ONNX, _FLOAT64_ONNX):
        raise LoweringError(
            f"{describe_call(graph, call)}: stash_type {stash} is neither FLOAT (1) nor DOUBLE (11)"
        )
    return DType.FLOAT64 if stash == _FLOAT64_ONNX else DType.FLOAT32


def _dtype(graph, name):
    tensor = graph.tensors.get(name) if name else None
    return DType.UNDEFINED if tensor is None else DType(tensor.dtype)


def _fresh(graph, name):
    """A new tensor name for `name`'s float32 copy."""
    count = 0
    while True:
        count += 1
        fresh = f"{name}__float32__{count}"
        if fresh not in graph.tensors:
            graph.tensor(fresh)
            return fresh


def _cast(call, source, target, onnx_type):
    """A Cast call from `source` to `target` in the place of `call`'s node."""
    attributes = {key: value for key, value in call.attributes.items() if key.startswith("__")}
    attributes["to"] = onnx_type
    return OpCall("Cast", [source], [target], attributes, call.node)
