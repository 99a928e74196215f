"""Random ops: RandomUniformLike and Bernoulli, never folded at lowering (`OpDef.random`).

Both draw from splitmix64, a 64-bit counter-based generator (each draw advances a state by a
constant and mixes it), one double in [0, 1) per element from its top 53 bits. With a `seed`
the stream starts from the bits of the seed (a float in ONNX), so a model gives the same
output on every run and every machine; without one each run starts from a fresh draw of
Numba's own generator (seeded from the system's entropy at start-up).

RandomUniformLike (opsets 1-22): attrs [dtype (a DType code, 0: the input's), seeded, seed,
low, high]; an output of the input's shape (only the shape is read), each element
low + (high - low) * u rounded once to the output type (float32 or float64).
Bernoulli (opsets 15-22): attrs [dtype (0: the input's), seeded, seed]; element i is 1 when
u_i < p_i (the input, float32 or float64: so with probability p_i), else 0, in the output
type (bool, any integer, float16, float32 or float64).
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    BOOL,
    F16,
    F32,
    F64,
    FLOATS,
    I8,
    I16,
    I32,
    I64,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    U8,
    U16,
    U32,
    U64,
    copy_shape,
    dtype,
    numel,
    rank,
    set_output,
    view,
)
from rtsoa.ops.copying import holds
from rtsoa.ops.generated import one_bytes
from rtsoa.ops.registry import register_op

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's increment
_UNIT = 1.0 / 9007199254740992.0  # 2^-53: one step of a double in [0, 1)
UNIFORM_TYPES = (F32, F64)
BERNOULLI_TYPES = (BOOL, I8, I16, I32, I64, U8, U16, U32, U64, F16, F32, F64)


@jit_with_nrt
def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@jit_with_nrt
def _start(attrs):
    """The generator's first state: the seed's bits, or a fresh draw of Numba's generator."""
    if attrs[1] != 0:
        return np.uint64(attrs[2])
    return np.uint64(np.random.randint(0, np.iinfo(np.int64).max))


@jit_with_nrt
def _draws(attrs, count):
    """`count` doubles in [0, 1): splitmix64 from `_start(attrs)`."""
    state = _start(attrs)
    out = np.empty(count, dtype=np.float64)
    for i in range(count):
        state += _GOLDEN
        out[i] = np.float64(_mix(state) >> np.uint64(11)) * _UNIT
    return out


@jit_with_nrt
def _output_kind(table, attrs):
    return attrs[0] if attrs[0] != 0 else dtype(table, 0)


@jit_with_nrt
def _same_shape(table, n_in, attrs, kinds):
    """Output 0: the input's shape, the attribute's (or the input's) type among `kinds`."""
    if attrs.shape[0] < 3:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    kind = _output_kind(table, attrs)
    allowed = False
    for k in kinds:
        if k == kind:
            allowed = True
    if not allowed:
        return np.int32(STATUS_OP_BAD_DTYPE)
    copy_shape(table, 0, n_in)
    set_output(table, n_in, kind, rank(table, 0))
    if numel(table, n_in) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    return OK


@jit_with_nrt
def uniform_like_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 5:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    return _same_shape(table, n_in, attrs, UNIFORM_TYPES)


@jit_with_nrt
def uniform_like_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = uniform_like_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    if not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    count = numel(table, n_in)
    values = fattrs[3] + (fattrs[4] - fattrs[3]) * _draws(attrs, count)  # low + (high - low) u
    if dtype(table, n_in) == F32:
        view(arena, table, n_in, np.float32)[:count] = values.astype(np.float32)
    else:
        view(arena, table, n_in, np.float64)[:count] = values
    return OK


@jit_with_nrt
def bernoulli_infer(arena, table, n_in, n_out, attrs, fattrs):
    if dtype(table, 0) != F32 and dtype(table, 0) != F64:
        return np.int32(STATUS_OP_BAD_DTYPE)
    return _same_shape(table, n_in, attrs, BERNOULLI_TYPES)


@jit_with_nrt
def bernoulli_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = bernoulli_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    if not holds(table, n_in) or not holds(table, 0):
        return np.int32(STATUS_OP_BAD_SHAPE)
    count = numel(table, n_in)
    if dtype(table, 0) == F32:
        p = view(arena, table, 0, np.float32)[:count].astype(np.float64)
    else:
        p = view(arena, table, 0, np.float64)[:count].copy()
    hit = _draws(attrs, count) < p
    one = one_bytes(dtype(table, n_in))
    size = one.shape[0]
    out = view(arena, table, n_in, np.uint8)
    for i in range(count):
        for b in range(size):
            out[i * size + b] = one[b] if hit[i] else 0
    return OK


def _seed_slots(attributes):
    """[seeded, seed bits]: the seed float's float64 bits as the generator's first state."""
    if "seed" not in attributes:
        return [0, 0]
    bits = np.array(float(attributes["seed"]), dtype=np.float64).view(np.int64)
    return [1, int(bits)]


def encode_uniform_like(attributes, inputs):
    """RandomUniformLike slots: dtype (a DType code, 0: the input's), seeded, seed, low, high
    (the converter translates ONNX's dtype code and checks it)."""
    return [
        int(attributes.get("dtype", 0)),
        *_seed_slots(attributes),
        float(attributes.get("low", 0.0)),
        float(attributes.get("high", 1.0)),
    ]


def encode_bernoulli(attributes, inputs):
    """Bernoulli slots: dtype (a DType code, 0: the input's), seeded, seed."""
    return [int(attributes.get("dtype", 0)), *_seed_slots(attributes)]


register_op(
    "RandomUniformLike",
    uniform_like_infer,
    uniform_like_compute,
    encode=encode_uniform_like,
    random=True,
)
register_op(
    "Bernoulli",
    bernoulli_infer,
    bernoulli_compute,
    encode=encode_bernoulli,
    dtypes={0: FLOATS},
    random=True,
)
