"""FlexAttention (ai.onnx.preview, opset 1) composed at lowering, as its reference computes it:

    Q' = Q * sqrt(scale), K' = K * sqrt(scale)   (sqrt(scale) in Q's element type)
    scores = Q' K'^T  (Q's type) -> softmax_precision -> score_mod -> Softmax(axis -1)
    -> prob_mod -> probs V (V made softmax_precision) -> V's element type

with query head h reading KV head h // (Hq / Hkv): Q is viewed as (B, Hkv, G * L, E), so one
MatMul per KV head serves its group, and the result viewed back as (B, Hq, L, .). The modifier
subgraphs (one input, one output of its shape) are lowered inline. softmax_precision defaults
to float32 (float64 for float64 inputs).

Refused at lowering, naming the node: inputs not of rank 4 where known, head counts not known
at lowering or not dividing, a default scale whose head size is not known, a softmax_precision
that is not a float type, a modifier subgraph without exactly one input and one output.
"""

import numpy as np

from rtsoa.abi.dtypes import DTYPE_OF_ONNX, DTYPES, NUMPY_DTYPES
from rtsoa.errors import LoweringError
from rtsoa.graph.schema import DType
from rtsoa.lowering.converters import register_converter
from rtsoa.lowering.subgraphs import convert_subgraph

DOMAIN = "ai.onnx.preview"
_PRECISIONS = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.FLOAT64)


def _refuse(ctx, node, what):
    raise LoweringError(f"{ctx.describe(node)}: {what}")


def _static_dim(ctx, node, name, role, axis):
    dims = ctx.tensor(name).dims
    if dims is not None and len(dims) != 4:
        _refuse(ctx, node, f"{role} must be rank 4, not {list(dims)}")
    if dims is None or not isinstance(dims[axis], int):
        _refuse(ctx, node, f"dimension {axis} of {role} {name!r} must be known at lowering")
    return int(dims[axis])


@register_converter("FlexAttention", domain=DOMAIN, since=1)
def flex_attention(ctx, node):
    """FlexAttention as the ops above."""
    query, key, value = node.inputs[:3]
    kind = ctx.tensor(query).dtype
    if kind not in _PRECISIONS:
        _refuse(ctx, node, "Q's element type must be known at lowering and a float type")
    q_heads = _static_dim(ctx, node, query, "Q", 1)
    kv_heads = _static_dim(ctx, node, key, "K", 1)
    if kv_heads <= 0 or q_heads % kv_heads != 0:
        _refuse(ctx, node, f"Q's {q_heads} heads are not a multiple of K's {kv_heads}")
    scale = node.attributes.get("scale")
    if scale is None:
        scale = 1.0 / np.sqrt(_static_dim(ctx, node, query, "Q", 3))
    precision = _precision(ctx, node, kind)
    root = np.array(np.sqrt(np.float32(scale)), dtype=NUMPY_DTYPES[kind])
    factor = ctx.fresh_name("flex_scale")
    ctx.set_constant(factor, root)
    scaled_q, scaled_k = ctx.fresh_name("flex_q"), ctx.fresh_name("flex_k")
    ctx.emit("Mul", [query, factor], [scaled_q])
    ctx.emit("Mul", [key, factor], [scaled_k])
    key_t = ctx.fresh_name("flex_kt")
    ctx.emit("Transpose", [scaled_k], [key_t], {"perm": [0, 1, 3, 2]})
    heads = (q_heads, kv_heads)
    grouped = _regroup(ctx, scaled_q, kv_heads, *heads)
    scores = _regroup(ctx, _matmul(ctx, grouped, key_t, "flex_scores"), q_heads, *heads)
    scores = _cast(ctx, scores, kind, precision)
    scores = _modify(ctx, node, "score_mod", scores)
    probs = ctx.fresh_name("flex_probs")
    ctx.emit("Softmax", [scores], [probs], {"axis": -1})
    probs = _modify(ctx, node, "prob_mod", probs)
    values = _cast(ctx, value, ctx.tensor(value).dtype, precision)
    grouped = _regroup(ctx, probs, kv_heads, *heads)
    out = _regroup(ctx, _matmul(ctx, grouped, values, "flex_out"), q_heads, *heads)
    value_kind = ctx.tensor(value).dtype
    if value_kind == precision:
        ctx.emit("Identity", [out], node.outputs[:1])
    else:
        ctx.emit("Cast", [out], node.outputs[:1], {"to": DTYPES[value_kind].onnx})


def _precision(ctx, node, kind):
    code = node.attributes.get("softmax_precision")
    if code is None:
        return DType.FLOAT64 if kind == DType.FLOAT64 else DType.FLOAT32
    precision = DTYPE_OF_ONNX.get(int(code))
    if precision not in _PRECISIONS:
        _refuse(ctx, node, f"softmax_precision {code} is not FLOAT, FLOAT16, BFLOAT16 or DOUBLE")
    return precision


def _regroup(ctx, name, heads, q_heads, kv_heads):
    """`name` (B, H, rows, cols) viewed with `heads` heads, its rows scaled to match; itself
    when every KV head has one query head."""
    if q_heads == kv_heads:
        return name
    shape = ctx.fresh_name("flex_heads")
    ctx.set_constant(shape, np.array([0, heads, -1, 0], dtype=np.int64))
    regrouped = ctx.fresh_name("flex_grouped")
    ctx.emit("Reshape", [name, shape], [regrouped])
    return regrouped


def _matmul(ctx, left, right, label):
    result = ctx.fresh_name(label)
    ctx.emit("MatMul", [left, right], [result])
    return result


def _cast(ctx, name, kind, precision):
    if kind == precision:
        return name
    cast = ctx.fresh_name("flex_cast")
    ctx.emit("Cast", [name], [cast], {"to": DTYPES[precision].onnx})
    return cast


def _modify(ctx, node, attribute, name):
    """The modifier subgraph `attribute` applied to `name`, lowered inline; `name` itself
    without one."""
    graph = node.subgraphs.get(attribute)
    if graph is None:
        return name
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        _refuse(ctx, node, f"{attribute} must take one input and give one output")
    where = f"{ctx.describe(node)} {attribute}"
    calls, outputs = convert_subgraph(
        ctx.graph, graph, f"{attribute}", {graph.inputs[0]: name}, where, ctx.node_index
    )
    ctx.calls.extend(calls)
    return outputs[0]
