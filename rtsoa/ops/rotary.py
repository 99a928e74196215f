"""RotaryEmbedding (opset 23): rotate pairs of each head's first `rotary_embedding_dim`
features by the angle of the token's position.

Inputs: X, [batch, heads, seq, head] (4-D) or [batch, seq, heads * head] (3-D, with
num_heads); cos_cache and sin_cache, [max_position, rot / 2] when position_ids ([batch, seq],
int64) is given, else [batch, seq, rot / 2]. attrs: [interleaved, num_heads (0: not given),
rotary_embedding_dim (0: the whole head)]. The pairs are (x[i], x[i + rot / 2]), or (x[2i],
x[2i + 1]) when interleaved: (x1, x2) -> (cos x1 - sin x2, sin x1 + cos x2), in X's type;
features from rot on are copied. Output: X's shape. A position outside [0, max_position)
fails with STATUS_OP_BAD_INDEX. float32 / float64.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    F64,
    FLOATS,
    I64,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
    DType,
    copy_shape,
    dim,
    dtype,
    present,
    rank,
    view,
)
from rtsoa.ops.copying import holds
from rtsoa.ops.registry import register_op

INTERLEAVED, NUM_HEADS, ROTARY_DIM = 0, 1, 2


@jit_with_nrt
def _geometry(table, n_in, attrs):
    """(status, batch, heads, seq, head, rot)."""
    bad = np.int32(STATUS_OP_BAD_SHAPE)
    if attrs.shape[0] < 3 or attrs[INTERLEAVED] < 0 or attrs[INTERLEAVED] > 1:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), 0, 0, 0, 0, 0
    r = rank(table, 0)
    if r == 4:
        batch, heads, seq = dim(table, 0, 0), dim(table, 0, 1), dim(table, 0, 2)
        head = dim(table, 0, 3)
    elif r == 3 and attrs[NUM_HEADS] > 0 and dim(table, 0, 2) % attrs[NUM_HEADS] == 0:
        batch, seq, heads = dim(table, 0, 0), dim(table, 0, 1), attrs[NUM_HEADS]
        head = dim(table, 0, 2) // heads
    else:
        return bad, 0, 0, 0, 0, 0
    rot = attrs[ROTARY_DIM] if attrs[ROTARY_DIM] > 0 else head
    if rot % 2 != 0 or rot > head or attrs[ROTARY_DIM] < 0:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), 0, 0, 0, 0, 0
    half = rot // 2
    with_positions = n_in > 3 and present(table, 3)
    for row in (1, 2):
        if with_positions:
            if rank(table, row) != 2 or dim(table, row, 1) != half:
                return bad, 0, 0, 0, 0, 0
        elif rank(table, row) != 3 or dim(table, row, 2) != half:
            return bad, 0, 0, 0, 0, 0
        elif dim(table, row, 0) != batch or dim(table, row, 1) != seq:
            return bad, 0, 0, 0, 0, 0
    if with_positions:
        if rank(table, 3) != 2 or dim(table, 3, 0) != batch or dim(table, 3, 1) != seq:
            return bad, 0, 0, 0, 0, 0
        if dim(table, 1, 0) != dim(table, 2, 0):
            return bad, 0, 0, 0, 0, 0
    return OK, batch, heads, seq, head, rot


@jit_with_nrt
def rotary_infer(arena, table, n_in, n_out, attrs, fattrs):
    kind = dtype(table, 0)
    if (kind != F32 and kind != F64) or dtype(table, 1) != kind or dtype(table, 2) != kind:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if n_in > 3 and present(table, 3) and dtype(table, 3) != I64:
        return np.int32(STATUS_OP_BAD_DTYPE)
    status, _, _, _, _, _ = _geometry(table, n_in, attrs)
    if status != 0:
        return status
    copy_shape(table, 0, n_in)
    return OK


@jit_with_nrt
def _rotate(x, cos, sin, positions, out, dims, four_d, interleaved, max_position):
    """Every head of every token (see the module docstring); status."""
    batch, heads, seq, head, rot = dims
    half = rot // 2
    for b in range(batch):
        for s in range(seq):
            row = b * seq + s
            if positions.shape[0] > 0:
                row = positions[b * seq + s]
                if row < 0 or row >= max_position:
                    return np.int32(STATUS_OP_BAD_INDEX)
            for h in range(heads):
                if four_d:
                    base = ((b * heads + h) * seq + s) * head
                else:
                    base = ((b * seq + s) * heads + h) * head
                for i in range(half):
                    first = base + 2 * i if interleaved else base + i
                    second = first + 1 if interleaved else first + half
                    c, n = cos[row * half + i], sin[row * half + i]
                    x1, x2 = x[first], x[second]
                    out[first] = c * x1 - n * x2
                    out[second] = n * x1 + c * x2
                for i in range(rot, head):
                    out[base + i] = x[base + i]
    return OK


@jit_inline_ir
def _run_as(arena, table, n_in, attrs, dims, kind):
    with_positions = n_in > 3 and present(table, 3)
    positions = view(arena, table, 3 if with_positions else 0, np.int64)
    if not with_positions:
        positions = positions[:0]
    return _rotate(
        view(arena, table, 0, kind),
        view(arena, table, 1, kind),
        view(arena, table, 2, kind),
        positions,
        view(arena, table, n_in, kind),
        dims,
        rank(table, 0) == 4,
        attrs[INTERLEAVED] == 1,
        dim(table, 1, 0),
    )


@jit_with_nrt.keeping_literals("kind")
def rotary_compute(arena, table, n_in, n_out, attrs, fattrs, kind):
    status = rotary_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    for row in range(n_in + n_out):
        if (row >= n_in or present(table, row)) and not holds(table, row):
            return np.int32(STATUS_OP_BAD_SHAPE)
    _, batch, heads, seq, head, rot = _geometry(table, n_in, attrs)
    dims = (batch, heads, seq, head, rot)
    if kind == F32:
        return _run_as(arena, table, n_in, attrs, dims, np.float32)
    if kind == F64:
        return _run_as(arena, table, n_in, attrs, dims, np.float64)
    return np.int32(STATUS_OP_BAD_DTYPE)


def encode_rotary(attributes, inputs):
    """RotaryEmbedding slots: interleaved, num_heads, rotary_embedding_dim (default 0)."""
    return [
        int(attributes.get("interleaved", 0)),
        int(attributes.get("num_heads", 0)),
        int(attributes.get("rotary_embedding_dim", 0)),
    ]


register_op(
    "RotaryEmbedding",
    rotary_infer,
    rotary_compute,
    encode=encode_rotary,
    inputs=(3, 4),
    dtypes={0: FLOATS, 1: FLOATS, 2: FLOATS, 3: frozenset({DType.INT64})},
    variants=True,
)
