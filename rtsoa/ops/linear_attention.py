"""LinearAttention (opset 27): the recurrent linear-attention update run token by token, as
the ONNX definition and its reference implementation state it.

Inputs: query (B, T, Hq * dk), key (B, T, Hkv * dk), value (B, T, Hkv * dv), optional
past_state (B, Hkv, dk, dv), decay (B, T, Hkv) or (B, T, Hkv * dk), log-space), beta
(B, T, Hkv) or (B, T, 1). Outputs: output (B, T, Hq * dv) and present_state (B, Hkv, dk, dv).
attrs: [q_num_heads, kv_num_heads, rule (LINEAR, GATED, DELTA, GATED_DELTA), scale (a float
slot; 0: 1 / sqrt(dk))]. Per KV head and token, with S the (dk, dv) state:

    gated rules:  S = exp(g) * S                (g per head, or per key feature)
    delta rules:  u = beta * (v - S^T k), else u = v
    S = S + k u^T;  o = scale * q^T S           for each query head of the KV head's group

Query head h reads KV head h // (Hq / Hkv) (the reference's repeat along the head axis). The
state is carried in float64 and every output rounded to float32 once. float32 only: float16 /
bfloat16 models run it through float32 (`rtsoa.lowering.half_precision`), as the reference
computes in float32. Shapes that do not fit are STATUS_OP_BAD_SHAPE; the attributes and which
of decay / beta a rule needs are checked at lowering (`rtsoa.lowering.linear_attention`) and
again here (STATUS_OP_BAD_ATTRIBUTE, STATUS_OP_MISSING_INPUT).
"""

import math

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    OK,
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
from rtsoa.ops.copying import holds
from rtsoa.ops.registry import register_op

Q_HEADS, KV_HEADS, RULE, SCALE = 0, 1, 2, 3
LINEAR, GATED, DELTA, GATED_DELTA = 0, 1, 2, 3
RULES = {"linear": LINEAR, "gated": GATED, "delta": DELTA, "gated_delta": GATED_DELTA}
PAST, DECAY, BETA = 3, 4, 5


@jit_with_nrt
def _geometry(table, n_in, attrs):
    """(status, batch, steps, q_heads, kv_heads, dk, dv, decay width, beta width)."""
    bad = np.int32(STATUS_OP_BAD_SHAPE)
    if attrs.shape[0] < 4:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), 0, 0, 0, 0, 0, 0, 0, 0
    q_heads, kv_heads, rule = attrs[Q_HEADS], attrs[KV_HEADS], attrs[RULE]
    if q_heads <= 0 or kv_heads <= 0 or q_heads % kv_heads != 0 or rule < 0 or rule > 3:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), 0, 0, 0, 0, 0, 0, 0, 0
    gated = rule == GATED or rule == GATED_DELTA
    delta = rule == DELTA or rule == GATED_DELTA
    has_decay = n_in > DECAY and present(table, DECAY)
    has_beta = n_in > BETA and present(table, BETA)
    if gated != has_decay or delta != has_beta:
        return np.int32(STATUS_OP_MISSING_INPUT), 0, 0, 0, 0, 0, 0, 0, 0
    for row in range(3):
        if rank(table, row) != 3:
            return bad, 0, 0, 0, 0, 0, 0, 0, 0
    batch, steps = dim(table, 0, 0), dim(table, 0, 1)
    for row in (1, 2):
        if dim(table, row, 0) != batch or dim(table, row, 1) != steps:
            return bad, 0, 0, 0, 0, 0, 0, 0, 0
    if dim(table, 0, 2) % q_heads != 0 or dim(table, 2, 2) % kv_heads != 0:
        return bad, 0, 0, 0, 0, 0, 0, 0, 0
    dk, dv = dim(table, 0, 2) // q_heads, dim(table, 2, 2) // kv_heads
    if dim(table, 1, 2) != kv_heads * dk:
        return bad, 0, 0, 0, 0, 0, 0, 0, 0
    if n_in > PAST and present(table, PAST):
        if rank(table, PAST) != 4 or dim(table, PAST, 0) != batch:
            return bad, 0, 0, 0, 0, 0, 0, 0, 0
        if dim(table, PAST, 1) != kv_heads or dim(table, PAST, 2) != dk:
            return bad, 0, 0, 0, 0, 0, 0, 0, 0
        if dim(table, PAST, 3) != dv:
            return bad, 0, 0, 0, 0, 0, 0, 0, 0
    widths = np.zeros(2, dtype=np.int64)
    for k, row in enumerate((DECAY, BETA)):
        if n_in > row and present(table, row):
            if rank(table, row) != 3 or dim(table, row, 0) != batch:
                return bad, 0, 0, 0, 0, 0, 0, 0, 0
            width = dim(table, row, 2)
            fits = width == kv_heads or width == (kv_heads * dk if row == DECAY else 1)
            if dim(table, row, 1) != steps or not fits:
                return bad, 0, 0, 0, 0, 0, 0, 0, 0
            widths[k] = width
    return OK, batch, steps, q_heads, kv_heads, dk, dv, widths[0], widths[1]


@jit_with_nrt
def linear_attention_infer(arena, table, n_in, n_out, attrs, fattrs):
    for row in range(n_in):
        if present(table, row) and dtype(table, row) != F32:
            return np.int32(STATUS_OP_BAD_DTYPE)
    status, batch, steps, q_heads, kv_heads, dk, dv, _, _ = _geometry(table, n_in, attrs)
    if status != 0:
        return status
    set_output(table, n_in, F32, 3)
    set_dim(table, n_in, 0, batch)
    set_dim(table, n_in, 1, steps)
    set_dim(table, n_in, 2, q_heads * dv)
    if n_out > 1:
        row = n_in + 1
        set_output(table, row, F32, 4)
        for axis, size in enumerate((batch, kv_heads, dk, dv)):
            set_dim(table, row, axis, size)
    return OK


@jit_with_nrt
def _recur(q, k, v, past, decay, beta, out, state_out, geometry, rule, scale):
    """Every batch row and KV head through the tokens (see the module docstring)."""
    batch, steps, q_heads, kv_heads, dk, dv, decay_width, beta_width = geometry
    group = q_heads // kv_heads
    gated = rule == GATED or rule == GATED_DELTA
    delta = rule == DELTA or rule == GATED_DELTA
    state = np.zeros((dk, dv), dtype=np.float64)
    update = np.zeros(dv, dtype=np.float64)
    for b in range(batch):
        for g in range(kv_heads):
            base = (b * kv_heads + g) * dk * dv
            for i in range(dk):
                for m in range(dv):
                    state[i, m] = past[base + i * dv + m] if past.shape[0] > 0 else 0.0
            for t in range(steps):
                token = b * steps + t
                if gated:
                    for i in range(dk):
                        column = g if decay_width == kv_heads else g * dk + i
                        factor = math.exp(np.float64(decay[token * decay_width + column]))
                        for m in range(dv):
                            state[i, m] *= factor
                key = token * kv_heads * dk + g * dk
                value = token * kv_heads * dv + g * dv
                rate = 1.0
                if delta:
                    rate = np.float64(beta[token * beta_width + (g if beta_width > 1 else 0)])
                for m in range(dv):
                    u = np.float64(v[value + m])
                    if delta:
                        retrieved = 0.0
                        for i in range(dk):
                            retrieved += state[i, m] * k[key + i]
                        u = rate * (u - retrieved)
                    update[m] = u
                for i in range(dk):
                    for m in range(dv):
                        state[i, m] += np.float64(k[key + i]) * update[m]
                for h in range(g * group, (g + 1) * group):
                    query = token * q_heads * dk + h * dk
                    target = token * q_heads * dv + h * dv
                    for m in range(dv):
                        total = 0.0
                        for i in range(dk):
                            total += np.float64(q[query + i]) * state[i, m]
                        out[target + m] = np.float32(scale * total)
            if state_out.shape[0] > 0:
                for i in range(dk):
                    for m in range(dv):
                        state_out[base + i * dv + m] = np.float32(state[i, m])
    return OK


@jit_with_nrt
def _optional(arena, table, n_in, row):
    """Optional input `row`'s float32 data, or an empty array when it is absent."""
    if n_in > row and present(table, row):
        return view(arena, table, row, np.float32)
    return view(arena, table, 0, np.float32)[:0]


@jit_with_nrt
def linear_attention_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = linear_attention_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    for row in range(n_in + n_out):
        if (row >= n_in or present(table, row)) and not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    status, batch, steps, q_heads, kv_heads, dk, dv, decay_width, beta_width = _geometry(
        table, n_in, attrs
    )
    scale = fattrs[SCALE]
    if scale == 0.0:
        scale = 1.0 / math.sqrt(dk) if dk > 0 else np.inf
    state_out = view(arena, table, 0, np.float32)[:0]
    if n_out > 1:
        state_out = view(arena, table, n_in + 1, np.float32)
    return _recur(
        view(arena, table, 0, np.float32),
        view(arena, table, 1, np.float32),
        view(arena, table, 2, np.float32),
        _optional(arena, table, n_in, PAST),
        _optional(arena, table, n_in, DECAY),
        _optional(arena, table, n_in, BETA),
        view(arena, table, n_in, np.float32),
        state_out,
        (batch, steps, q_heads, kv_heads, dk, dv, decay_width, beta_width),
        attrs[RULE],
        scale,
    )


def encode_linear_attention(attributes, inputs):
    """LinearAttention slots: q_num_heads, kv_num_heads, the rule's code (-1: unknown, which
    the op refuses), scale (0.0: 1 / sqrt(dk))."""
    rule = attributes.get("update_rule", "gated_delta")
    rule = rule.decode() if isinstance(rule, bytes) else str(rule)
    return [
        int(attributes.get("q_num_heads", 0)),
        int(attributes.get("kv_num_heads", 0)),
        RULES.get(rule, -1),
        float(attributes.get("scale", 0.0)),
    ]


_FLOAT32 = frozenset({DType.FLOAT32})
register_op(
    "LinearAttention",
    linear_attention_infer,
    linear_attention_compute,
    encode=encode_linear_attention,
    inputs=(3, 6),
    outputs=(1, 2),
    dtypes={row: _FLOAT32 for row in range(6)},
)
