"""Attention (ONNX opsets 23 to 25): scaled dot-product attention with its options, float32 /
float64, one fused loop per query row.

Inputs: Q, K, V (all 4-D `(batch, heads, sequence, head size)`, or all 3-D
`(batch, sequence, heads * head size)` with the head counts as attributes), then the optional
attn_mask (bool: True attends; or Q's float type: added to the scores; right-aligned
broadcast to `(batch, q heads, q sequence, total sequence)`, a last dim shorter than the
total sequence padded with False / -inf), past_key and past_value (a KV cache of
`past` positions, given together, prepended to K and V) and nonpad_kv_seqlen (int64
`(batch,)`: keys at or past it are padding). Outputs: Y, then the optional present_key and
present_value (past and new keys / values, 4-D) and the QK output of `qk_matmul_output_mode`:
0 the scaled QK product, 1 after softcap, 2 after the mask / causal / window bias, 3 the
softmax probabilities.

Per query row: scores = (q . k) * scale; softcap * tanh(scores / softcap) when softcap > 0;
plus the bias (mask, then -inf where is_causal forbids `j > i + offset`, where the sliding
window `[p - left, p + right]` around `p = i + offset` excludes, and at padding keys); softmax;
Y = probabilities . V. `offset` is `past` with a cache, `nonpad_kv_seqlen[b] - q sequence` with
that input, else 0. A row whose bias is -inf everywhere (nothing to attend) gives zeros, in Y
and in the mode-3 output. Query head h reads key / value head h // (q heads / kv heads)
(grouped-query attention). Scores, softmax and sums run in float64 whatever the input type or
`softmax_precision` (which may only ask for less precision); the outputs are rounded to Q's
type once.

attrs: [is_causal, q_num_heads, kv_num_heads, qk_matmul_output_mode, scale given, scale,
softcap, left_window_size, right_window_size] (head counts 0 when not given; scale and softcap
as floats).
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    BOOL,
    F32,
    FLOATS,
    I64,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_MISSING_INPUT,
    DType,
    dim,
    dtype,
    present,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.attributes import onnx_float
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import LIMIT, element_count, float_inputs, holds

# attribute slots
IS_CAUSAL, Q_HEADS, KV_HEADS, QK_MODE, HAS_SCALE, SCALE, SOFTCAP, LEFT, RIGHT = range(9)
ATTENTION_SLOTS = 9
# input rows
Q, K, V, MASK, PAST_KEY, PAST_VALUE, NONPAD = range(7)
# geometry fields
G_BATCH, G_QH, G_KVH, G_SQ, G_SKV, G_PAST, G_D, G_DV, G_3D = range(9)
# mask geometry: the mask's dims right-aligned on (batch, heads, q sequence, keys)
M_B, M_H, M_S, M_LAST = range(4)


@jit_with_nrt
def _geometry(table, n_in, attrs):
    """(status, geometry int64[9], mask dims int64[4]) of an Attention call; checks the
    attributes, and every input's dtype and shape against Q, K and V."""
    g = np.zeros(9, dtype=np.int64)
    m = np.ones(4, dtype=np.int64)
    if attrs.shape[0] < ATTENTION_SLOTS or attrs[QK_MODE] < 0 or attrs[QK_MODE] > 3:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), g, m
    if attrs[LEFT] < -1 or attrs[RIGHT] < -1:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), g, m
    status = float_inputs(table, 3)
    if status != 0:
        return status, g, m
    r = rank(table, Q)
    if r != rank(table, K) or r != rank(table, V) or (r != 3 and r != 4):
        return np.int32(STATUS_OP_BAD_SHAPE), g, m
    for row in range(3):
        if element_count(table, row) < 0:
            return np.int32(STATUS_OP_BAD_SHAPE), g, m
    q_heads, kv_heads = attrs[Q_HEADS], attrs[KV_HEADS]
    if q_heads < 0 or kv_heads < 0 or q_heads > LIMIT or kv_heads > LIMIT:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), g, m
    g[G_BATCH] = dim(table, Q, 0)
    if r == 4:
        g[G_QH], g[G_SQ], g[G_D] = dim(table, Q, 1), dim(table, Q, 2), dim(table, Q, 3)
        g[G_KVH], g[G_SKV], g[G_DV] = dim(table, K, 1), dim(table, K, 2), dim(table, V, 3)
        if (q_heads != 0 and q_heads != g[G_QH]) or (kv_heads != 0 and kv_heads != g[G_KVH]):
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), g, m
        if dim(table, K, 3) != g[G_D] or dim(table, V, 1) != g[G_KVH]:
            return np.int32(STATUS_OP_BAD_SHAPE), g, m
        if dim(table, V, 2) != g[G_SKV]:
            return np.int32(STATUS_OP_BAD_SHAPE), g, m
    else:
        if q_heads == 0 or kv_heads == 0:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), g, m
        g[G_3D] = 1
        g[G_QH], g[G_KVH] = q_heads, kv_heads
        g[G_SQ], g[G_SKV] = dim(table, Q, 1), dim(table, K, 1)
        if dim(table, Q, 2) % q_heads != 0 or dim(table, V, 2) % kv_heads != 0:
            return np.int32(STATUS_OP_BAD_SHAPE), g, m
        g[G_D], g[G_DV] = dim(table, Q, 2) // q_heads, dim(table, V, 2) // kv_heads
        if dim(table, K, 2) != kv_heads * g[G_D] or dim(table, V, 1) != g[G_SKV]:
            return np.int32(STATUS_OP_BAD_SHAPE), g, m
    if dim(table, K, 0) != g[G_BATCH] or dim(table, V, 0) != g[G_BATCH]:
        return np.int32(STATUS_OP_BAD_SHAPE), g, m
    if g[G_KVH] == 0 or g[G_QH] % g[G_KVH] != 0:
        return np.int32(STATUS_OP_BAD_SHAPE), g, m
    has_past = n_in > PAST_KEY and present(table, PAST_KEY)
    if has_past != (n_in > PAST_VALUE and present(table, PAST_VALUE)):
        return np.int32(STATUS_OP_MISSING_INPUT), g, m
    if has_past:
        for row, width in ((PAST_KEY, g[G_D]), (PAST_VALUE, g[G_DV])):
            if dtype(table, row) != dtype(table, Q) or rank(table, row) != 4:
                return np.int32(STATUS_OP_BAD_SHAPE), g, m
            if dim(table, row, 0) != g[G_BATCH] or dim(table, row, 1) != g[G_KVH]:
                return np.int32(STATUS_OP_BAD_SHAPE), g, m
            if dim(table, row, 3) != width or dim(table, row, 2) != dim(table, PAST_KEY, 2):
                return np.int32(STATUS_OP_BAD_SHAPE), g, m
        g[G_PAST] = dim(table, PAST_KEY, 2)
    if n_in > NONPAD and present(table, NONPAD):
        if has_past:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), g, m
        if dtype(table, NONPAD) != I64:
            return np.int32(STATUS_OP_BAD_DTYPE), g, m
        if rank(table, NONPAD) != 1 or dim(table, NONPAD, 0) != g[G_BATCH]:
            return np.int32(STATUS_OP_BAD_SHAPE), g, m
    if n_in > MASK and present(table, MASK):
        kind = dtype(table, MASK)
        if kind != BOOL and kind != dtype(table, Q):
            return np.int32(STATUS_OP_BAD_DTYPE), g, m
        mask_rank = rank(table, MASK)
        if mask_rank < 1 or mask_rank > 4:
            return np.int32(STATUS_OP_BAD_SHAPE), g, m
        for axis in range(mask_rank):
            m[4 - mask_rank + axis] = dim(table, MASK, axis)
        wants = (g[G_BATCH], g[G_QH], g[G_SQ])
        for axis in range(3):
            if m[axis] != 1 and m[axis] != wants[axis]:
                return np.int32(STATUS_OP_BAD_SHAPE), g, m
        if m[M_LAST] > g[G_PAST] + g[G_SKV]:
            return np.int32(STATUS_OP_BAD_SHAPE), g, m
    return np.int32(0), g, m


@jit_with_nrt
def attention_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, g, m = _geometry(table, n_in, attrs)
    if status != 0:
        return status
    kind = dtype(table, Q)
    total = g[G_PAST] + g[G_SKV]
    y = n_in
    if g[G_3D] == 1:
        set_output(table, y, kind, 3)
        set_dim(table, y, 0, g[G_BATCH])
        set_dim(table, y, 1, g[G_SQ])
        set_dim(table, y, 2, g[G_QH] * g[G_DV])
    else:
        set_output(table, y, kind, 4)
        set_dim(table, y, 0, g[G_BATCH])
        set_dim(table, y, 1, g[G_QH])
        set_dim(table, y, 2, g[G_SQ])
        set_dim(table, y, 3, g[G_DV])
    rows = (g[G_KVH], g[G_KVH], g[G_QH])
    last = (g[G_D], g[G_DV], total)
    for k in range(1, n_out):
        out = n_in + k
        set_output(table, out, kind, 4)
        set_dim(table, out, 0, g[G_BATCH])
        set_dim(table, out, 1, rows[k - 1])
        set_dim(table, out, 2, total if k < 3 else g[G_SQ])
        set_dim(table, out, 3, last[k - 1])
    return np.int32(0)


@jit_with_nrt
def _strides(three_d, heads, sequence, width):
    """(batch, head, position) strides of a Q / K / V operand (4-D or 3-D layout)."""
    if three_d:
        return sequence * heads * width, width, heads * width
    return heads * sequence * width, sequence * width, width


@jit_with_nrt
def _cache(past, new, cache, g, width):
    """cache[b, h] = past[b, h] followed by new[b, h] (new in Q's layout, 3-D or 4-D)."""
    heads, steps, fresh = g[G_KVH], g[G_PAST], g[G_SKV]
    total = steps + fresh
    nb, nh, ns = _strides(g[G_3D] == 1, heads, fresh, width)
    for b in range(g[G_BATCH]):
        for h in range(heads):
            out = (b * heads + h) * total * width
            start = (b * heads + h) * steps * width
            for k in range(steps * width):
                cache[out + k] = past[start + k]
            out += steps * width
            for s in range(fresh):
                source = b * nb + h * nh + s * ns
                for k in range(width):
                    cache[out + s * width + k] = new[source + k]


@jit_with_nrt
def _run(q, k, v, past_k, past_v, mask, bool_mask, nonpad, y, present_k, present_v, qk, g, m, a):
    """The loop on typed views (absent inputs and outputs are empty arrays); `a` holds
    (is_causal, mode, has mask, is bool, left, right) and the float scale and softcap."""
    is_causal, mode, has_mask, is_bool, left, right, scale, softcap = a
    batch, q_heads, kv_heads, sq, skv = g[G_BATCH], g[G_QH], g[G_KVH], g[G_SQ], g[G_SKV]
    steps, d, dv, three_d = g[G_PAST], g[G_D], g[G_DV], g[G_3D] == 1
    total = steps + skv
    group = q_heads // kv_heads
    qb, qh, qs = _strides(three_d, q_heads, sq, d)
    kb, kh, ks = _strides(three_d, kv_heads, skv, d)
    vb, vh, vs = _strides(three_d, kv_heads, skv, dv)
    yb, yh, ys = _strides(three_d, q_heads, sq, dv)
    raw = np.empty(total, dtype=np.float64)
    scores = np.empty(total, dtype=np.float64)
    bias = np.empty(total, dtype=np.float64)
    weights = np.empty(total, dtype=np.float64)
    row_out = np.empty(dv, dtype=np.float64)
    for b in range(batch):
        offset = np.int64(steps)
        if nonpad.shape[0] > 0:
            offset = nonpad[b] - sq
        for h in range(q_heads):
            kvh = h // group
            for i in range(sq):
                q_at = b * qb + h * qh + i * qs
                mask_at = np.int64(0)
                if has_mask:
                    mask_at = ((b if m[M_B] > 1 else 0) * m[M_H] + (h if m[M_H] > 1 else 0)) * m[
                        M_S
                    ] * m[M_LAST] + (i if m[M_S] > 1 else 0) * m[M_LAST]
                masked_row = True
                for j in range(total):
                    dot = 0.0
                    if j < steps:
                        at = ((b * kv_heads + kvh) * steps + j) * d
                        for t in range(d):
                            dot += np.float64(q[q_at + t]) * np.float64(past_k[at + t])
                    else:
                        at = b * kb + kvh * kh + (j - steps) * ks
                        for t in range(d):
                            dot += np.float64(q[q_at + t]) * np.float64(k[at + t])
                    raw[j] = dot * scale
                    capped = raw[j]
                    if softcap > 0.0:
                        capped = softcap * np.tanh(capped / softcap)
                    add = 0.0
                    if has_mask:
                        if j >= m[M_LAST]:
                            add = -np.inf
                        elif is_bool:
                            if not bool_mask[mask_at + j]:
                                add = -np.inf
                        else:
                            add = np.float64(mask[mask_at + j])
                    position = i + offset
                    if is_causal and j > position:
                        add = -np.inf
                    if left >= 0 and position - j > left:
                        add = -np.inf
                    if right >= 0 and j - position > right:
                        add = -np.inf
                    if nonpad.shape[0] > 0 and j >= nonpad[b]:
                        add = -np.inf
                    bias[j] = add
                    if add != -np.inf:
                        masked_row = False
                    scores[j] = capped + add
                    if mode == 1:
                        raw[j] = capped
                    elif mode == 2:
                        raw[j] = scores[j]
                top = -np.inf
                for j in range(total):
                    top = max(top, scores[j])
                if top == -np.inf:
                    top = 0.0
                norm = 0.0
                for j in range(total):
                    weights[j] = np.exp(scores[j] - top)
                    norm += weights[j]
                if norm == 0.0:
                    norm = 1.0
                for j in range(total):
                    weights[j] = 0.0 if masked_row else weights[j] / norm
                for t in range(dv):
                    row_out[t] = 0.0
                for j in range(total):
                    p = weights[j]
                    if p == 0.0:
                        continue
                    if j < steps:
                        at = ((b * kv_heads + kvh) * steps + j) * dv
                        for t in range(dv):
                            row_out[t] += p * np.float64(past_v[at + t])
                    else:
                        at = b * vb + kvh * vh + (j - steps) * vs
                        for t in range(dv):
                            row_out[t] += p * np.float64(v[at + t])
                out_at = b * yb + h * yh + i * ys
                for t in range(dv):
                    y[out_at + t] = row_out[t]
                if qk.shape[0] > 0:
                    qk_at = ((b * q_heads + h) * sq + i) * total
                    for j in range(total):
                        qk[qk_at + j] = weights[j] if mode == 3 else raw[j]
    if present_k.shape[0] > 0:
        _cache(past_k, k, present_k, g, d)
    if present_v.shape[0] > 0:
        _cache(past_v, v, present_v, g, dv)


@jit_with_nrt
def _view_or_empty(arena, table, row, usable, kind):
    """Operand `row` as `kind`, or an empty view (of Q's bytes) when `usable` is false."""
    if usable:
        return view(arena, table, row, kind)
    return view(arena, table, Q, kind)[:0]


@jit_with_nrt
def _typed(arena, table, n_in, n_out, g, m, a, kind):
    """Views of every operand as `kind` (Q's type; absent ones empty), then the loop."""
    has_past = n_in > PAST_KEY and present(table, PAST_KEY)
    has_mask, is_bool = a[2], a[3]
    _run(
        view(arena, table, Q, kind),
        view(arena, table, K, kind),
        view(arena, table, V, kind),
        _view_or_empty(arena, table, PAST_KEY, has_past, kind),
        _view_or_empty(arena, table, PAST_VALUE, has_past, kind),
        _view_or_empty(arena, table, MASK, has_mask and not is_bool, kind),
        _view_or_empty(arena, table, MASK, has_mask and is_bool, np.bool_),
        _view_or_empty(arena, table, NONPAD, n_in > NONPAD and present(table, NONPAD), np.int64),
        view(arena, table, n_in, kind),
        _view_or_empty(arena, table, n_in + 1, n_out > 1, kind),
        _view_or_empty(arena, table, n_in + 2, n_out > 2, kind),
        _view_or_empty(arena, table, n_in + 3, n_out > 3, kind),
        g,
        m,
        a,
    )


@jit_with_nrt
def attention_compute(arena, table, n_in, n_out, attrs, fattrs):
    status, g, m = _geometry(table, n_in, attrs)
    if status != 0:
        return status
    item = 4 if dtype(table, Q) == F32 else 8
    for row in range(n_in + n_out):
        if row < n_in and not present(table, row):
            continue
        size = item
        if row == MASK and dtype(table, MASK) == BOOL:
            size = 1
        elif row == NONPAD and row < n_in:
            size = 8
        if not holds(table, row, element_count(table, row), size):
            return np.int32(STATUS_OP_BAD_SHAPE)
    has_mask = n_in > MASK and present(table, MASK)
    is_bool = has_mask and dtype(table, MASK) == BOOL
    scale = 1.0 / np.sqrt(np.float64(max(g[G_D], 1)))
    if attrs[HAS_SCALE] != 0:
        scale = fattrs[SCALE]
    a = (
        attrs[IS_CAUSAL] != 0,
        attrs[QK_MODE],
        has_mask,
        is_bool,
        attrs[LEFT],
        attrs[RIGHT],
        np.float64(scale),
        np.float64(fattrs[SOFTCAP]),
    )
    if item == 4:
        _typed(arena, table, n_in, n_out, g, m, a, np.float32)
    else:
        _typed(arena, table, n_in, n_out, g, m, a, np.float64)
    return np.int32(0)


def encode_attention(attributes, inputs):
    """Attention slots (see the module docstring)."""
    has_scale = "scale" in attributes
    return [
        int(attributes.get("is_causal", 0)),
        int(attributes.get("q_num_heads", 0)),
        int(attributes.get("kv_num_heads", 0)),
        int(attributes.get("qk_matmul_output_mode", 0)),
        int(has_scale),
        onnx_float(attributes["scale"]) if has_scale else 0.0,
        onnx_float(attributes.get("softcap", 0.0)),
        int(attributes.get("left_window_size", -1)),
        int(attributes.get("right_window_size", -1)),
    ]


register_op(
    "Attention",
    attention_infer,
    attention_compute,
    encode=encode_attention,
    inputs=(3, 7),
    outputs=(1, 4),
    dtypes={
        0: FLOATS,
        1: FLOATS,
        2: FLOATS,
        3: FLOATS | {DType.BOOL},
        4: FLOATS,
        5: FLOATS,
        6: frozenset({DType.INT64}),
    },
)
