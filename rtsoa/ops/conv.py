"""Convolutions: Conv (im2col + BLAS GEMM) and ConvTranspose (BLAS GEMM + col2im), 1-D to 3-D.

Both run on float32 / float64 (X, W and the optional bias B of one dtype). Every spatial op
(these, and the pools in `pooling`) sees its window as 3-D, through the geometry of `window`.

Conv: for each image and group, the input patches are unrolled into a (Cg*K, P) matrix (K
kernel elements, P output positions) and Y[n, group] = W[group] @ cols is one GEMM
(`conv_loops.conv_gemm`: rtsoa's packed float32 GEMM where it is faster, else the BLAS scipy
exposes); a 1x1 kernel with stride 1 and no padding multiplies the input directly.
A 2-D kernel of several taps whose matrix fits `TILE_BYTES`, or whose column stride is above
1 over few input channels (a stem), with few output channels per group (see `conv_run`),
builds it from the input's zero-padded stride phases (`rtsoa.ops.phases`), one contiguous
copy per row, with `pitch` >= P / n_h columns per output row of which Y keeps the first n_w
(`phase_tile`); each kept column holds the same elements as im2col's, so its dot products
are the same.
ConvTranspose: cols = W[group]^T @ X[n, group], then cols are added into Y (col2im).

FusedConv (X, W, B?, Z?): what lowering makes of Conv -> Add (a residual Z of the output's
shape) -> Relu / Clip (constant bounds), as onnxruntime's FusedConv does (`rtsoa.lowering.fuse`).
The bias, the residual and the activation are applied to each image and group's block of Y
right after its GEMM, while the block is in cache, in the order and precision of the ops they
replace, so the results equal the unfused ops' bit for bit. Conv is FusedConv without Z and
without activation.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_with_nrt
from rtsoa.ops.abi import (
    ACT_CLIP,
    ACT_NONE,
    ACT_RELU,
    F32,
    FLOATS,
    MODE_COMPUTE,
    RESULT_ROW,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_MISSING_INPUT,
    dim,
    dtype,
    present,
    rank,
    view,
)
from rtsoa.ops.blas import gemm_fits
from rtsoa.ops.broadcast import same_shape
from rtsoa.ops.conv_loops import (  # noqa: F401 - TILE_BYTES re-exported (the tests' tile size)
    TILE_BYTES,
    conv_epilogue,
    conv_gemm,
    conv_plan,
    conv_run,
    conv_sizes,
    conv_tile,
    conv_transpose_run,
    phase_tile,
    unroll_columns,
)
from rtsoa.ops.depthwise import depthwise_run
from rtsoa.ops.packed_gemm import short_gemm_at
from rtsoa.ops.parts import (
    NOT_SHARED,
    array_at,
    is_part,
    part_index,
    parts_for,
    pool_gemm,
    run_parts,
    task,
)
from rtsoa.ops.phases import fill_phases, phase_shape, tap_offsets
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import (
    encode_window,
    float_inputs,
    holds,
    window_geometry,
    window_output,
)
from rtsoa.ops.window_layout import (
    CONV,
    CONV_TRANSPOSE,
    G_C,
    G_GROUP,
    G_IN,
    G_K,
    G_M,
    G_N,
    G_OUT,
    GEOMETRY,
    WINDOW_SLOTS,
)

# FusedConv's slots after the window's: activation (conv_loops.ACT_*), Clip's low, Clip's high
FUSED_ACTIVATION = WINDOW_SLOTS
FUSED_LOW = WINDOW_SLOTS + 1
FUSED_HIGH = WINDOW_SLOTS + 2
FUSED_SLOTS = WINDOW_SLOTS + 3
RESIDUAL = 3  # FusedConv's input row of Z


@jit_with_nrt
def _conv_checks(table, n_in, attrs, kind):
    """(status, geometry) of Conv / ConvTranspose: dtypes, W present, bias of shape (M)."""
    if n_in < 2 or not present(table, 0) or not present(table, 1):
        return np.int32(STATUS_OP_MISSING_INPUT), np.zeros(GEOMETRY, dtype=np.int64)
    status = float_inputs(table, n_in)
    if status != 0:
        return status, np.zeros(GEOMETRY, dtype=np.int64)
    status, geo = window_geometry(table, attrs, kind)
    if status != 0:
        return status, geo
    if n_in > 2 and present(table, 2) and (rank(table, 2) != 1 or dim(table, 2, 0) != geo[G_M]):
        return np.int32(STATUS_OP_BAD_SHAPE), geo
    return np.int32(0), geo


@jit_with_nrt
def _conv_infer(table, n_in, attrs, kind):
    status, geo = _conv_checks(table, n_in, attrs, kind)
    if status != 0:
        return status
    window_output(table, n_in, dtype(table, 0), geo, rank(table, 0) - 2)
    kernel = geo[G_K] * geo[G_K + 1] * geo[G_K + 2]
    if kind == CONV:
        positions = geo[G_OUT] * geo[G_OUT + 1] * geo[G_OUT + 2]
    else:
        positions = geo[G_IN] * geo[G_IN + 1] * geo[G_IN + 2]
    table[RESULT_ROW, 0] = 2 * geo[G_N] * geo[G_M] * positions * kernel * geo[G_C] // geo[G_GROUP]
    return np.int32(0)


@jit_with_nrt
def conv_infer(arena, table, n_in, n_out, attrs, fattrs):
    return _conv_infer(table, n_in, attrs, CONV)


@jit_with_nrt
def conv_transpose_infer(arena, table, n_in, n_out, attrs, fattrs):
    return _conv_infer(table, n_in, attrs, CONV_TRANSPOSE)


# -- a conv shared by threads (`rtsoa.ops.parts`) -------------------------------------------------

# its phases: depthwise planes; phase buffer channels, output rows (phased or im2col tiles);
# im2col channels, GEMM output channels, GEMM columns (output positions)
P_DEPTHWISE, P_FILL, P_ROWS, P_UNROLL, P_GEMM, P_COLUMNS = 0, 1, 2, 3, 4, 5
CONV_GRAIN = 1 << 20  # multiply-adds worth a part of their own (~25 us at 80 GFLOP/s)
DEPTHWISE_GRAIN = 1 << 17  # a depthwise conv's (each tap a load: ~1 ns per output of 9 taps)
M_BLOCK = 16  # a GEMM part's output channels are whole multiples of this (the BLAS kernel's)
# a GEMM of at most COLUMN_MAX_M output channels, or of fewer blocks of M_BLOCK than the pool
# has threads, is split by columns instead, in whole multiples of COLUMN_BLOCK, when each part
# gets at least COLUMN_PART columns. MobileNetV2's 1 x 1 convs on two threads (cnn_layers
# --threads 2, ms): 32 x 112 x 112 -> 16 0.42 -> 0.23, 144 x 56 x 56 -> 24 0.43 -> 0.27,
# 192 x 28 x 28 -> 32 0.29 -> 0.24; with more output channels columns lost (32 x 28 x 28 ->
# 192: 0.31 -> 0.43)
COLUMN_MAX_M = 64
COLUMN_BLOCK = 64
COLUMN_PART = 256


@jit_inline_ir
def _share(count, index, parts, block):
    """[first, end) of part `index` of `count` items in `parts` parts, each boundary rounded
    up to a multiple of `block` (parts may be empty)."""
    first = min(count, (index * count // parts + block - 1) // block * block)
    end = min(count, ((index + 1) * count // parts + block - 1) // block * block)
    if index + 1 >= parts:
        end = count
    return first, end


@jit_with_nrt
def _conv_part(x, w, bias, has_bias, z, has_z, act, low, high, y, geo, phase, index, parts, user):
    """Part `index` of `parts` of `phase` of `_conv_shared`'s conv: the same loops as
    `conv_run` on a disjoint piece of Y (or of the phase buffer / column matrix, `user[1]`
    its address and `user[2]` its elements; `user[3]` the BLAS GEMM's address for
    P_COLUMNS), the block (image, group) `user[0]`, with each Y element's products summed in
    `conv_run`'s order (only the BLAS's blocking may differ)."""
    n_images, c, m, group, c_g, m_g, taps, k, plane, p = conv_sizes(geo)
    n_h, n_w = geo[G_OUT + 1], geo[G_OUT + 2]
    pointwise, depthwise, phased, rows, width, span = conv_plan(geo, x.itemsize)
    if phase == P_DEPTHWISE:  # (image, channel) planes, each image's run of them at once
        first, end = _share(n_images * group, index, parts, 1)
        q = first
        while q < end:
            n, g0 = q // group, q % group
            count = min(group - g0, end - q)
            piece = geo.copy()
            piece[G_N] = 1
            piece[G_C] = count
            piece[G_GROUP] = count
            piece[G_M] = count * m_g
            y_start = (n * m + g0 * m_g) * p
            depthwise_run(
                x[(n * c + g0) * plane : (n * c + g0 + count) * plane],
                w[g0 * m_g * taps : (g0 + count) * m_g * taps],
                y[y_start : y_start + count * m_g * p],
                piece,
            )
            conv_epilogue(
                y, z, y_start, g0 * m_g, count * m_g, p, bias, has_bias, has_z, act, low, high
            )
            q += count
        return np.int64(0)
    n, g = user[0] // group, user[0] % group
    x_base = (n * c + g * c_g) * plane
    y_base = (n * m + g * m_g) * p
    weights = w[g * m_g * k : (g + 1) * m_g * k].reshape((m_g, k))
    shared = array_at(user[1], user[2], x.dtype)
    if phase == P_FILL:
        first, end = _share(c_g, index, parts, 1)
        for channel in range(first, end):
            at = channel * span
            fill_phases(x, x_base + channel * plane, geo, shared[at : at + span])
    elif phase == P_ROWS:  # output rows, with their own column matrix and GEMM tile
        first, end = _share(n_h, index, parts, 1)
        step = min(rows, max(end - first, 1))
        cols = np.empty(k * step * width, dtype=x.dtype)
        tile = np.empty(m_g * step * width, dtype=x.dtype)
        offsets = tap_offsets(geo) if phased else np.zeros(0, dtype=np.uint64)
        for row in range(first, end, step):
            count = min(step, end - row)
            if phased:
                phase_tile(shared, span, offsets, geo, cols, weights, tile, y, y_base, row, count)
            else:
                conv_tile(x, x_base, c_g, geo, cols, weights, tile, y, y_base, row, count)
        for j in range(m_g):  # each channel's rows of this part
            at = y_base + j * p + first * n_w
            conv_epilogue(
                y, z, at, g * m_g + j, 1, (end - first) * n_w, bias, has_bias, has_z, act, low, high
            )
    elif phase == P_UNROLL:
        first, end = _share(c_g, index, parts, 1)
        unroll_columns(
            x, x_base + first * plane, end - first, geo, shared[first * taps * p :], False, 0, n_h
        )
    elif phase == P_COLUMNS:  # output positions: columns of X (or the column matrix) and Y
        first, end = _share(p, index, parts, COLUMN_BLOCK)
        if end > first:
            source, at = (x, x_base) if pointwise else (shared, np.int64(0))
            short_gemm_at(
                user[3], w, g * m_g * k, k, source, at + first, p, y, y_base + first, p,
                m_g, end - first, k,
            )  # fmt: skip
            for j in range(m_g):  # each channel's columns of this part
                conv_epilogue(
                    y, z, y_base + j * p + first, g * m_g + j, 1, end - first,
                    bias, has_bias, has_z, act, low, high,
                )  # fmt: skip
    else:  # P_GEMM: output channels
        first, end = _share(m_g, index, parts, M_BLOCK)
        if end > first:
            source = x[x_base : x_base + k * p] if pointwise else shared[: k * p]
            conv_gemm(
                weights[first:end],
                source.reshape((k, p)),
                y[y_base + first * p : y_base + end * p].reshape((end - first, p)),
            )
            conv_epilogue(
                y, z, y_base + first * p, g * m_g + first, end - first, p,
                bias, has_bias, has_z, act, low, high,
            )  # fmt: skip
    return np.int64(0)


@jit_with_nrt
def _conv_phase(
    call, x, w, bias, has_bias, z, has_z, act, low, high, y, geo, phase, parts, user, scratch
):
    """One phase of `_conv_shared`: its parts on the pool, or one after the other here when
    another op has the pool (the same parts: the same bits, whoever computes them).
    `scratch` (the array `user` points to) stays alive until every part is done."""
    arena, table, attrs, fattrs, n_in, n_out = call
    status = run_parts(arena, table, attrs, fattrs, n_in, n_out, phase, parts, user)
    if status == NOT_SHARED:
        status = np.int64(0)
        for index in range(parts):
            status = _conv_part(
                x, w, bias, has_bias, z, has_z, act, low, high, y, geo, phase, index, parts, user
            )
    return status + 0 * scratch.shape[0]


@jit_with_nrt
def _conv_shared(call, x, w, bias, has_bias, z, has_z, act, low, high, y, geo, parts):
    """`conv_run`'s conv in phases whose parts the threads of the table's pool share: depthwise
    by planes; per image and group, the phase buffer by channels then output rows (phased),
    output rows (im2col tiles), or the column matrix by channels then the GEMM by output
    channels (whole im2col, 1 x 1), or by columns (output positions) when it has at most
    COLUMN_MAX_M output channels or fewer blocks of M_BLOCK than the pool has threads: those
    parts multiply blocks of X in place, with X's row length as the BLAS's leading dimension
    (`rtsoa.ops.blas`)."""
    n_images, c, m, group, c_g, m_g, taps, k, plane, p = conv_sizes(geo)
    n_h = geo[G_OUT + 1]
    pointwise, depthwise, phased, rows, width, span = conv_plan(geo, x.itemsize)
    args = (x, w, bias, has_bias, z, has_z, act, low, high, y, geo)
    none = np.zeros(0, dtype=x.dtype)
    zero = np.int64(0)
    if depthwise:
        user = (zero, zero, zero, zero)
        return _conv_phase(call, *args, P_DEPTHWISE, min(parts, n_images * group), user, none)
    _, pitch = phase_shape(geo)
    buffer = np.zeros(c_g * span + pitch if phased else 0, dtype=x.dtype)
    cols = np.empty(0 if pointwise or phased or rows < n_h else k * p, dtype=x.dtype)
    status = zero
    for block in range(n_images * group):
        if phased:
            user = (np.int64(block), np.int64(buffer.ctypes.data), np.int64(buffer.size), zero)
            status = _conv_phase(call, *args, P_FILL, min(parts, c_g), user, buffer)
            if status == 0:
                status = _conv_phase(call, *args, P_ROWS, min(parts, n_h), user, buffer)
        elif rows < n_h:
            user = (np.int64(block), zero, zero, zero)
            status = _conv_phase(call, *args, P_ROWS, min(parts, n_h), user, none)
        else:
            user = (np.int64(block), np.int64(cols.ctypes.data), np.int64(cols.size), zero)
            if not pointwise:
                status = _conv_phase(call, *args, P_UNROLL, min(parts, c_g), user, cols)
            if status == 0:
                gemm_parts = min(parts, (m_g + M_BLOCK - 1) // M_BLOCK)
                gemm = pool_gemm(call[1], x.itemsize)
                if (
                    (gemm_parts < parts or m_g <= COLUMN_MAX_M)
                    and p >= COLUMN_PART * parts
                    and gemm != 0
                    and gemm_fits(m_g, p, k, k, p, p)
                ):
                    user = (user[0], user[1], user[2], gemm)
                    status = _conv_phase(call, *args, P_COLUMNS, parts, user, cols)
                else:
                    status = _conv_phase(call, *args, P_GEMM, gemm_parts, user, cols)
        if status != 0:
            return status
    return status


@jit_with_nrt
def _conv_go(call, x, w, bias, has_bias, z, has_z, act, low, high, y, geo, mode):
    """A Conv / FusedConv launch (`mode` MODE_COMPUTE: shared by the pool's threads where it is
    large enough, else `conv_run`) or one part of one (MODE_PART)."""
    table = call[1]
    if is_part(mode):
        phase, parts, user = task(table)
        index = part_index(mode)
        args = (x, w, bias, has_bias, z, has_z, act, low, high, y, geo)
        return _conv_part(*args, phase, index, parts, user)
    m, group = geo[G_M], geo[G_GROUP]
    taps = geo[G_K] * geo[G_K + 1] * geo[G_K + 2]
    k = geo[G_C] // group * taps
    p = geo[G_OUT] * geo[G_OUT + 1] * geo[G_OUT + 2]
    parts = np.int64(1)
    if k > 0 and m // group > 0 and p > 0:
        depthwise = geo[G_C] == group and group > 1
        grain = DEPTHWISE_GRAIN if depthwise else CONV_GRAIN
        parts = parts_for(table, geo[G_N] * m * k * p, grain)
    if parts < 2:
        conv_run(x, w, bias, has_bias, z, has_z, act, low, high, y, geo)
        return np.int64(0)
    return _conv_shared(call, x, w, bias, has_bias, z, has_z, act, low, high, y, geo, parts)


@jit_with_nrt
def _fused_checks(table, n_in, attrs, fattrs):
    """(status, activation, low, high) of FusedConv's slots and of its Z against the output's
    shape (Z's dtype is checked with X's by `_conv_checks`)."""
    if attrs.shape[0] < FUSED_SLOTS:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), ACT_NONE, 0.0, 0.0
    act = attrs[FUSED_ACTIVATION]
    if act != ACT_NONE and act != ACT_RELU and act != ACT_CLIP:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), ACT_NONE, 0.0, 0.0
    if n_in > RESIDUAL and present(table, RESIDUAL) and not same_shape(table, RESIDUAL, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE), ACT_NONE, 0.0, 0.0
    return np.int32(0), act, fattrs[FUSED_LOW], fattrs[FUSED_HIGH]


@jit_with_nrt.keeping_literals("kind", "fused", "element")
def _conv_compute(arena, table, n_in, n_out, attrs, fattrs, kind, fused, element, mode):
    status, geo = _conv_checks(table, n_in, attrs, kind)
    if status != 0:
        return status
    act, low, high = ACT_NONE, 0.0, 0.0
    if fused:
        status, act, low, high = _fused_checks(table, n_in, attrs, fattrs)
        if status != 0:
            return status
    n_images, c, m, group = geo[G_N], geo[G_C], geo[G_M], geo[G_GROUP]
    taps = geo[G_K] * geo[G_K + 1] * geo[G_K + 2]
    x_count = n_images * c * geo[G_IN] * geo[G_IN + 1] * geo[G_IN + 2]
    y_count = n_images * m * geo[G_OUT] * geo[G_OUT + 1] * geo[G_OUT + 2]
    w_count = m * (c // group) * taps
    has_bias = n_in > 2 and present(table, 2)
    has_z = fused and n_in > RESIDUAL and present(table, RESIDUAL)
    size = 4 if element == F32 else 8
    if not (
        holds(table, 0, x_count, size)
        and holds(table, 1, w_count, size)
        and holds(table, n_in, y_count, size)
        and (not has_bias or holds(table, 2, m, size))
        and (not has_z or holds(table, RESIDUAL, y_count, size))
    ):
        return np.int32(STATUS_OP_BAD_SHAPE)
    bias_row = 2 if has_bias else 0
    z_row = RESIDUAL if has_z else 0
    if element == F32:
        x = view(arena, table, 0, np.float32)
        w = view(arena, table, 1, np.float32)
        b = view(arena, table, bias_row, np.float32)
        z = view(arena, table, z_row, np.float32)
        y = view(arena, table, n_in, np.float32)
        if kind == CONV:
            call = (arena, table, attrs, fattrs, n_in, n_out)
            return np.int32(
                _conv_go(call, x, w, b, has_bias, z, has_z, act, low, high, y, geo, mode)
            )
        else:
            conv_transpose_run(x, w, b, has_bias, y, geo)
    else:
        x = view(arena, table, 0, np.float64)
        w = view(arena, table, 1, np.float64)
        b = view(arena, table, bias_row, np.float64)
        z = view(arena, table, z_row, np.float64)
        y = view(arena, table, n_in, np.float64)
        if kind == CONV:
            call = (arena, table, attrs, fattrs, n_in, n_out)
            return np.int32(
                _conv_go(call, x, w, b, has_bias, z, has_z, act, low, high, y, geo, mode)
            )
        else:
            conv_transpose_run(x, w, b, has_bias, y, geo)
    return np.int32(0)


@jit_with_nrt.keeping_literals("element")
def conv_compute(arena, table, n_in, n_out, attrs, fattrs, element, mode):
    return _conv_compute(arena, table, n_in, n_out, attrs, fattrs, CONV, False, element, mode)


@jit_with_nrt.keeping_literals("element")
def conv_transpose_compute(arena, table, n_in, n_out, attrs, fattrs, element):
    return _conv_compute(
        arena, table, n_in, n_out, attrs, fattrs, CONV_TRANSPOSE, False, element, MODE_COMPUTE
    )


@jit_with_nrt
def fused_conv_infer(arena, table, n_in, n_out, attrs, fattrs):
    status = _conv_infer(table, n_in, attrs, CONV)
    if status != 0:
        return status
    return _fused_checks(table, n_in, attrs, fattrs)[0]


@jit_with_nrt.keeping_literals("element")
def fused_conv_compute(arena, table, n_in, n_out, attrs, fattrs, element, mode):
    return _conv_compute(arena, table, n_in, n_out, attrs, fattrs, CONV, True, element, mode)


def encode_fused_conv(attributes, inputs):
    """FusedConv slots: the window's, then activation (ACT_*), Clip's low and high bounds."""
    return encode_window(attributes, inputs) + [
        int(attributes.get("activation", ACT_NONE)),
        float(attributes.get("clip_min", 0.0)),
        float(attributes.get("clip_max", 0.0)),
    ]


# per-dtype entries (variants): the compute takes input 0's dtype code as `element`
_FLOAT_VARIANTS = {"dtypes": {0: FLOATS}, "variants": True}
register_op(
    "Conv",
    conv_infer,
    conv_compute,
    encode=encode_window,
    inputs=(2, 3),
    parts=True,
    **_FLOAT_VARIANTS,
)
register_op(
    "ConvTranspose",
    conv_transpose_infer,
    conv_transpose_compute,
    encode=encode_window,
    inputs=(2, 3),
    **_FLOAT_VARIANTS,
)
register_op(
    "FusedConv",
    fused_conv_infer,
    fused_conv_compute,
    encode=encode_fused_conv,
    inputs=(2, 4),
    parts=True,
    **_FLOAT_VARIANTS,
    doc="Conv (+ a residual Z) then an optional Relu / Clip: the lowering's fusion of Conv -> "
    "Add -> Relu / Clip",
)
