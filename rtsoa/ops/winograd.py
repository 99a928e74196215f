"""WinogradConv: a 2-D 3 x 3 convolution of stride 1 by Winograd's minimal filtering
F(2 x 2, 3 x 3), what lowering makes of a Conv / FusedConv whose weights are constants
(`rtsoa.lowering.fuse`, fusion "winograd").

Inputs: X (N, C, H, W), U (16, M, C) the weights transformed at lowering (`transform_weights`:
U[4 i + j, m, c] = (G g G^T)[i, j] for the 3 x 3 kernel g of output channel m and input channel
c, in float64 rounded once), then FusedConv's optional bias B (M) and residual Z (N, M, OH, OW),
all of one dtype, float32 or float64. Attribute slots: the pads (top, left, bottom, right), then
FusedConv's activation and Clip bounds. Output (N, M, OH, OW), OH = H + top + bottom - 2,
OW = W + left + right - 2.

Each 4 x 4 input tile d (at rows 2 th - top.., columns 2 tw - left.., zero outside X) is
transformed to V = B^T d B, sixteen GEMMs multiply U[k] (M x C) by V[k] (C x tiles), and each
4 x 4 product tile m gives a 2 x 2 output tile A^T m A; then, per output channel, the bias, the
residual and the activation as FusedConv applies them. That is 16 products per 2 x 2 outputs
where the direct convolution takes 36, on GEMMs as wide as a block of tile rows: on ResNet-18's
and DenseNet-121's 3 x 3 layers from 14 x 14 up, 0.48-0.73x the time of im2col + GEMM on one
BLAS thread (asv `bench_ops_nn.WinogradVersusOnnxruntime`), 0.58-1.02x on two (measured by
hand: OpenBLAS splits the direct conv's one large GEMM better than these sixteen small ones).
The tiles go in blocks of tile rows, the GEMMs' width (`BLOCK_TILES`).

The input is laid out once per image in its two column phases (even and odd padded columns),
so every transform is a loop over contiguous elements that LLVM vectorises.

Accuracy: the transforms add and subtract the products of a tile, so results differ from the
direct convolution by rounding. The stated bound, float32: every output within 1e-5 of the
output's largest magnitude (the model tests' relative tolerance against onnxruntime);
`tests/test_ops_winograd.py` holds the op to it against a float64 convolution and against
onnxruntime, and reports the largest error it sees (about 2e-7 on random data). Where an
input element is inf or NaN, every output of the 2 x 2 tiles whose 4 x 4 input tile holds it is
NaN (or inf), also those whose 3 x 3 window does not reach it; lower with `fuse` without
"winograd" for the direct convolution's exact non-finite semantics.
"""

import numpy as np

from rtsoa._jit import jit_inline_llvm, jit_with_nrt
from rtsoa.ops.abi import (
    ACT_CLIP,
    ACT_NONE,
    ACT_RELU,
    F32,
    F64,
    FLOATS,
    RESULT_ROW,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_TOO_LARGE,
    dim,
    dtype,
    present,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.broadcast import same_shape
from rtsoa.ops.conv_loops import conv_epilogue
from rtsoa.ops.parts import NOT_SHARED, array_at, is_part, part_index, parts_for, run_parts, task
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import LIMIT, MAX_ELEMENTS, MAX_SCRATCH, holds

# attribute slots: pads (top, left, bottom, right), then FusedConv's activation and Clip bounds
PAD_TOP, PAD_LEFT, PAD_BOTTOM, PAD_RIGHT = 0, 1, 2, 3
ACTIVATION, CLIP_LOW, CLIP_HIGH = 4, 5, 6
SLOTS = 7
BIAS, RESIDUAL = 2, 3  # input rows
# tiles per block of tile rows (at least one row): the GEMMs' width. 64 -> 64 channels on
# 56 x 56 (28 tiles a row), OPENBLAS_NUM_THREADS=1: 8 rows (224 tiles) 1.62 ms, 9 rows 2.03 ms,
# the whole plane 5.97 ms; 128 -> 32 on 56 x 56 alike; on 28 x 28 and smaller planes whole
# planes (196 tiles or fewer) were as fast as any split
BLOCK_TILES = 224

# F(2 x 2, 3 x 3): Y = A^T [(G g G^T) * (B^T d B)] A
_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def transform_weights(weights):
    """U (16, M, C) of a (M, C, 3, 3) weight array: G g G^T per kernel, in float64, rounded
    once to the weights' dtype."""
    w = np.asarray(weights)
    u = np.einsum("ik,mckl,jl->ijmc", _G, w.astype(np.float64), _G)
    return np.ascontiguousarray(u.reshape(16, w.shape[0], w.shape[1]).astype(w.dtype))


def encode_winograd(attributes, inputs):
    """Slots: pads (top, left, bottom, right), activation (`rtsoa.ops.abi.ACT_*`), Clip's low
    and high."""
    pads = [int(p) for p in attributes.get("pads", (0, 0, 0, 0))]
    return (
        pads[:4]
        + [0] * (4 - len(pads[:4]))
        + [
            int(attributes.get("activation", ACT_NONE)),
            float(attributes.get("clip_min", 0.0)),
            float(attributes.get("clip_max", 0.0)),
        ]
    )


@jit_with_nrt
def _checks(table, n_in, attrs):
    """(status, N, C, H, W, M, OH, OW) of a WinogradConv's operands and slots."""
    zero = np.int64(0)
    bad = (zero, zero, zero, zero, zero, zero, zero)
    if attrs.shape[0] < SLOTS:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), bad
    for slot in range(4):
        if attrs[slot] < 0 or attrs[slot] >= LIMIT:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), bad
    act = attrs[ACTIVATION]
    if act != ACT_NONE and act != ACT_RELU and act != ACT_CLIP:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), bad
    kind = dtype(table, 0)
    if kind != F32 and kind != F64:
        return np.int32(STATUS_OP_BAD_DTYPE), bad
    for row in range(1, n_in):
        if present(table, row) and dtype(table, row) != kind:
            return np.int32(STATUS_OP_BAD_DTYPE), bad
    if rank(table, 0) != 4 or rank(table, 1) != 3 or dim(table, 1, 0) != 16:
        return np.int32(STATUS_OP_BAD_SHAPE), bad
    for axis in range(4):
        if dim(table, 0, axis) < 0 or dim(table, 0, axis) >= LIMIT:
            return np.int32(STATUS_OP_BAD_SHAPE), bad
    n, c, h, w = dim(table, 0, 0), dim(table, 0, 1), dim(table, 0, 2), dim(table, 0, 3)
    m = dim(table, 1, 1)
    if dim(table, 1, 2) != c or m < 0 or m >= LIMIT:
        return np.int32(STATUS_OP_BAD_SHAPE), bad
    oh = h + attrs[PAD_TOP] + attrs[PAD_BOTTOM] - 2
    ow = w + attrs[PAD_LEFT] + attrs[PAD_RIGHT] - 2
    if oh < 1 or ow < 1 or oh >= LIMIT or ow >= LIMIT:
        return np.int32(STATUS_OP_BAD_SHAPE), bad
    if (
        n_in > BIAS
        and present(table, BIAS)
        and (rank(table, BIAS) != 1 or dim(table, BIAS, 0) != m)
    ):
        return np.int32(STATUS_OP_BAD_SHAPE), bad
    # im2col's scratch bound (Conv's): the phases and blocks here are smaller than its matrix
    positions = oh * ow
    if positions >= MAX_ELEMENTS // max(n * m, 1) or c * 9 > MAX_SCRATCH // positions:
        return np.int32(STATUS_OP_TOO_LARGE), bad
    if n * c * h >= MAX_ELEMENTS // max(w, 1):
        return np.int32(STATUS_OP_TOO_LARGE), bad
    return np.int32(0), (n, c, h, w, m, oh, ow)


@jit_with_nrt
def winograd_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, shape = _checks(table, n_in, attrs)
    if status != 0:
        return status
    n, c, h, w, m, oh, ow = shape
    set_output(table, n_in, dtype(table, 0), 4)
    set_dim(table, n_in, 0, n)
    set_dim(table, n_in, 1, m)
    set_dim(table, n_in, 2, oh)
    set_dim(table, n_in, 3, ow)
    if n_in > RESIDUAL and present(table, RESIDUAL) and not same_shape(table, RESIDUAL, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    table[RESULT_ROW, 0] = 2 * n * m * oh * ow * 9 * c  # the direct convolution's flops
    return np.int32(0)


@jit_with_nrt
def _phases(x, x_base, c, h, w, top, left, even, odd, rows, half):
    """Image `x_base`'s channels, zero-padded, into `even` / `odd` (`rows` x `half` per channel):
    padded column 2 j into even, 2 j + 1 into odd."""
    even[:] = 0
    odd[:] = 0
    for channel in range(c):
        for i in range(h):
            r = i + top
            if r >= rows:
                break
            source = x[x_base + (channel * h + i) * w : x_base + (channel * h + i + 1) * w]
            at = (channel * rows + r) * half
            e = even[at : at + half]
            o = odd[at : at + half]
            for j in range(min(w, 2 * half - left)):
                q = j + left
                if q % 2 == 0:
                    e[q // 2] = source[j]
                else:
                    o[q // 2] = source[j]


@jit_inline_llvm
def _rows(plane, at, half, out):
    """B^T over four padded rows from `at` (`half` each): out's four rows (d0 - d2, d1 + d2,
    d2 - d1, d1 - d3)."""
    d0 = plane[at : at + half]
    d1 = plane[at + half : at + 2 * half]
    d2 = plane[at + 2 * half : at + 3 * half]
    d3 = plane[at + 3 * half : at + 4 * half]
    q0 = out[0:half]
    q1 = out[half : 2 * half]
    q2 = out[2 * half : 3 * half]
    q3 = out[3 * half : 4 * half]
    for j in range(half):
        q0[j] = d0[j] - d2[j]
        q1[j] = d1[j] + d2[j]
        q2[j] = d2[j] - d1[j]
        q3[j] = d1[j] - d3[j]


@jit_with_nrt
def _transform_inputs(even, odd, c, rows, half, first, count, tiles_w, v, width, re, ro):
    """V[k, c, t] (`width` tiles per (k, c) row) of tile rows `first` .. `first + count - 1`:
    B^T over the rows of each phase, then B over the columns of even and odd phases."""
    for channel in range(c):
        for r in range(count):
            at = (channel * rows + 2 * (first + r)) * half
            _rows(even, at, half, re)
            _rows(odd, at, half, ro)
            for i in range(4):
                a = re[i * half : (i + 1) * half]  # padded columns 2 j
                b = ro[i * half : (i + 1) * half]  # padded columns 2 j + 1
                base = ((4 * i) * c + channel) * width + r * tiles_w
                step = c * width
                v0 = v[base : base + tiles_w]
                v1 = v[base + step : base + step + tiles_w]
                v2 = v[base + 2 * step : base + 2 * step + tiles_w]
                v3 = v[base + 3 * step : base + 3 * step + tiles_w]
                for j in range(tiles_w):
                    v0[j] = a[j] - a[j + 1]
                    v1[j] = b[j] + a[j + 1]
                    v2[j] = a[j + 1] - b[j]
                    v3[j] = b[j] - b[j + 1]


@jit_with_nrt
def _transform_outputs(products, m, width, count, tiles_w, first, y, y_base, oh, ow, s, ev, od):
    """A^T over each 4 x 4 product tile of output channel `m`'s tile rows into Y's rows."""
    channels = products.shape[0] // (16 * width)
    for r in range(count):
        at = r * tiles_w
        for j in range(4):
            base = (j * channels + m) * width + at
            step = 4 * channels * width
            a0 = products[base : base + tiles_w]
            a1 = products[base + step : base + step + tiles_w]
            a2 = products[base + 2 * step : base + 2 * step + tiles_w]
            a3 = products[base + 3 * step : base + 3 * step + tiles_w]
            top = s[j * tiles_w : (j + 1) * tiles_w]
            bottom = s[(4 + j) * tiles_w : (5 + j) * tiles_w]
            for t in range(tiles_w):
                top[t] = a0[t] + a1[t] + a2[t]
                bottom[t] = a1[t] - a2[t] - a3[t]
        row = 2 * (first + r)
        for half_row in range(2):
            if row + half_row >= oh:
                break
            b = half_row * 4 * tiles_w
            q0 = s[b : b + tiles_w]
            q1 = s[b + tiles_w : b + 2 * tiles_w]
            q2 = s[b + 2 * tiles_w : b + 3 * tiles_w]
            q3 = s[b + 3 * tiles_w : b + 4 * tiles_w]
            for t in range(tiles_w):
                ev[t] = q0[t] + q1[t] + q2[t]
                od[t] = q1[t] - q2[t] - q3[t]
            start = y_base + (row + half_row) * ow
            out = y[start : start + ow]
            for t in range(ow // 2):
                out[2 * t] = ev[t]
                out[2 * t + 1] = od[t]
            if ow % 2 == 1:
                out[ow - 1] = ev[ow // 2]


@jit_with_nrt
def _winograd_rows(x, u, bias, has_bias, z, has_z, act, low, high, y, shape, n, phases, start, end):
    """Tile rows `start` .. `end - 1` of image `n` from its column phases (`phases`: even, odd),
    in blocks of tile rows: the input transform, the sixteen GEMMs, the output transform and
    FusedConv's epilogue per output channel."""
    n_images, c, h, w, m, oh, ow = shape
    even, odd = phases
    tiles_h, tiles_w = (oh + 1) // 2, (ow + 1) // 2
    rows, half = 2 * tiles_h + 2, tiles_w + 1  # padded rows, columns per phase
    block = max(1, min(tiles_h, BLOCK_TILES // tiles_w))
    width_max = block * tiles_w
    v = np.empty(16 * c * width_max, dtype=x.dtype)
    products = np.empty(16 * m * width_max, dtype=x.dtype)
    re = np.empty(4 * half, dtype=x.dtype)
    ro = np.empty(4 * half, dtype=x.dtype)
    s = np.empty(8 * tiles_w, dtype=x.dtype)
    ev = np.empty(tiles_w, dtype=x.dtype)
    od = np.empty(tiles_w, dtype=x.dtype)
    p = oh * ow
    for first in range(start, end, block):
        count = min(block, end - first)
        width = count * tiles_w
        _transform_inputs(even, odd, c, rows, half, first, count, tiles_w, v, width, re, ro)
        for k in range(16):
            np.dot(
                u[k * m * c : (k + 1) * m * c].reshape((m, c)),
                v[k * c * width : (k + 1) * c * width].reshape((c, width)),
                products[k * m * width : (k + 1) * m * width].reshape((m, width)),
            )
        done = products[: 16 * m * width]
        last = min(2 * (first + count), oh)
        for channel in range(m):
            y_base = (n * m + channel) * p
            _transform_outputs(
                done, channel, width, count, tiles_w, first, y, y_base, oh, ow, s, ev, od
            )
            begin = y_base + 2 * first * ow
            conv_epilogue(
                y, z, begin, channel, 1, (last - 2 * first) * ow,
                bias, has_bias, has_z, act, low, high,
            )  # fmt: skip


@jit_with_nrt
def _phase_channels(x, shape, pads, n, phases, first, end):
    """Channels `first` .. `end - 1` of image `n` into its column phases (`_phases`)."""
    n_images, c, h, w, m, oh, ow = shape
    even, odd = phases
    rows, half = 2 * ((oh + 1) // 2) + 2, (ow + 1) // 2 + 1
    at, to = first * rows * half, end * rows * half
    x_base = (n * c + first) * h * w
    _phases(x, x_base, end - first, h, w, pads[0], pads[1], even[at:to], odd[at:to], rows, half)


@jit_with_nrt
def _winograd_run(x, u, bias, has_bias, z, has_z, act, low, high, y, shape, pads):
    n_images, c, h, w, m, oh, ow = shape
    tiles_h = (oh + 1) // 2
    cells = c * (2 * tiles_h + 2) * ((ow + 1) // 2 + 1)
    phases = (np.empty(cells, dtype=x.dtype), np.empty(cells, dtype=x.dtype))
    for n in range(n_images):
        _phase_channels(x, shape, pads, n, phases, 0, c)
        _winograd_rows(
            x, u, bias, has_bias, z, has_z, act, low, high, y, shape, n, phases, 0, tiles_h
        )


# the phases of a WinogradConv shared by threads (`rtsoa.ops.parts`): an image's column
# phases by channels, then its tile rows
W_PHASES, W_ROWS = 0, 1
WINOGRAD_GRAIN = 1 << 19  # multiply-adds (of the 16 GEMMs) worth a part of their own


@jit_with_nrt
def _winograd_part(
    x, u, bias, has_bias, z, has_z, act, low, high, y, shape, pads, phase, index, parts, user
):
    """Part `index` of `parts` of `phase` for image `user[0]`, its phases at `user[1]`, `user[2]`
    (`user[3]` elements each)."""
    n_images, c, h, w, m, oh, ow = shape
    phases = (array_at(user[1], user[3], x.dtype), array_at(user[2], user[3], x.dtype))
    n = user[0]
    if phase == W_PHASES:
        first, end = index * c // parts, (index + 1) * c // parts
        _phase_channels(x, shape, pads, n, phases, first, end)
    else:
        tiles_h = (oh + 1) // 2
        first, end = index * tiles_h // parts, (index + 1) * tiles_h // parts
        _winograd_rows(
            x, u, bias, has_bias, z, has_z, act, low, high, y, shape, n, phases, first, end
        )
    return np.int64(0)


@jit_with_nrt
def _winograd_go(call, x, u, bias, has_bias, z, has_z, act, low, high, y, shape, pads, mode):
    """A WinogradConv launch (shared by the pool's threads where it is large enough) or one
    part of one (MODE_PART)."""
    table = call[1]
    if is_part(mode):
        phase, parts, user = task(table)
        return _winograd_part(
            x, u, bias, has_bias, z, has_z, act, low, high, y, shape, pads, phase,
            part_index(mode), parts, user,
        )  # fmt: skip
    n_images, c, h, w, m, oh, ow = shape
    tiles_h = (oh + 1) // 2
    work = 16 * m * c * tiles_h * ((ow + 1) // 2)
    parts = parts_for(table, work, WINOGRAD_GRAIN) if c > 0 and m > 0 and oh > 0 and ow > 0 else 1
    if parts < 2:
        _winograd_run(x, u, bias, has_bias, z, has_z, act, low, high, y, shape, pads)
        return np.int64(0)
    arena, table, attrs, fattrs, n_in, n_out = call
    cells = c * (2 * tiles_h + 2) * ((ow + 1) // 2 + 1)
    even = np.empty(cells, dtype=x.dtype)
    odd = np.empty(cells, dtype=x.dtype)
    args = (x, u, bias, has_bias, z, has_z, act, low, high, y, shape, pads)
    for n in range(n_images):
        user = (np.int64(n), np.int64(even.ctypes.data), np.int64(odd.ctypes.data), np.int64(cells))
        for phase, count in ((W_PHASES, min(parts, c)), (W_ROWS, min(parts, tiles_h))):
            status = run_parts(arena, table, attrs, fattrs, n_in, n_out, phase, count, user)
            if status == NOT_SHARED:  # another op has the pool: the same parts here
                status = np.int64(0)
                for index in range(count):
                    status = _winograd_part(*args, phase, index, count, user)
            if status != 0:
                return status + 0 * (even.shape[0] + odd.shape[0])
    return np.int64(0) + 0 * (even.shape[0] + odd.shape[0])  # the phases alive until here


@jit_with_nrt
def _typed_run(call, rows, has_bias, has_z, act, low, high, shape, pads, kind, mode):
    """`_winograd_go` on the operands viewed as `kind` (np.float32 or np.float64); `rows`:
    the bias's and the residual's rows (0 where absent)."""
    arena, table, attrs, fattrs, n_in, n_out = call
    x = view(arena, table, 0, kind)
    u = view(arena, table, 1, kind)
    bias = view(arena, table, rows[0], kind)
    z = view(arena, table, rows[1], kind)
    y = view(arena, table, n_in, kind)
    return _winograd_go(call, x, u, bias, has_bias, z, has_z, act, low, high, y, shape, pads, mode)


@jit_with_nrt.keeping_literals("element")
def winograd_compute(arena, table, n_in, n_out, attrs, fattrs, element, mode):
    status, shape = _checks(table, n_in, attrs)
    if status != 0:
        return status
    n, c, h, w, m, oh, ow = shape
    has_bias = n_in > BIAS and present(table, BIAS)
    has_z = n_in > RESIDUAL and present(table, RESIDUAL)
    if has_z and not same_shape(table, RESIDUAL, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    size = 4 if element == F32 else 8
    y_count = n * m * oh * ow
    if not (
        holds(table, 0, n * c * h * w, size)
        and holds(table, 1, 16 * m * c, size)
        and holds(table, n_in, y_count, size)
        and (not has_bias or holds(table, BIAS, m, size))
        and (not has_z or holds(table, RESIDUAL, y_count, size))
    ):
        return np.int32(STATUS_OP_BAD_SHAPE)
    pads = (attrs[PAD_TOP], attrs[PAD_LEFT])
    act, low, high = attrs[ACTIVATION], fattrs[CLIP_LOW], fattrs[CLIP_HIGH]
    rows = (BIAS if has_bias else 0, RESIDUAL if has_z else 0)
    call = (arena, table, attrs, fattrs, n_in, n_out)
    if element == F32:
        status = _typed_run(
            call, rows, has_bias, has_z, act, low, high, shape, pads, np.float32, mode
        )
    else:
        status = _typed_run(
            call, rows, has_bias, has_z, act, low, high, shape, pads, np.float64, mode
        )
    return np.int32(status)


register_op(
    "WinogradConv",
    winograd_infer,
    winograd_compute,
    encode=encode_winograd,
    inputs=(2, 4),
    dtypes={0: FLOATS},
    variants=True,
    parts=True,
    doc="a 2-D 3 x 3 stride-1 Conv / FusedConv by Winograd's F(2 x 2, 3 x 3) on weights "
    "transformed at lowering: the lowering's fusion 'winograd'",
)
