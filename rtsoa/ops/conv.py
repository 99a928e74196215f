"""Convolutions: Conv (im2col + BLAS GEMM) and ConvTranspose (BLAS GEMM + col2im), 1-D to 3-D.

Both run on float32 / float64 (X, W and the optional bias B of one dtype). Every spatial op
(these, and the pools in `pooling`) sees its window as 3-D, through the geometry of `window`.

Conv: for each image and group, the input patches are unrolled into a (Cg*K, P) matrix (K
kernel elements, P output positions) and Y[n, group] = W[group] @ cols is one `np.dot` (the
BLAS scipy exposes); a 1x1 kernel with stride 1 and no padding multiplies the input directly.
A 2-D kernel of several taps whose matrix fits `TILE_BYTES`, or whose column stride is above
1 over few input channels (a stem), with few output channels per group (see `_conv_run`),
builds it from the input's zero-padded stride phases (`rtsoa.ops.phases`), one contiguous
copy per row, with `pitch` >= P / n_h columns per output row of which Y keeps the first n_w
(`_phase_tile`); each kept column holds the same elements as im2col's, so its dot products
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

from rtsoa._jit import jit_inline_ir, jit_inline_llvm, jit_with_nrt
from rtsoa.ops.abi import (
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
from rtsoa.ops.broadcast import same_shape
from rtsoa.ops.depthwise import depthwise_run
from rtsoa.ops.parts import NOT_SHARED, array_at, is_part, part_index, parts_for, run_parts, task
from rtsoa.ops.phases import fill_phases, flat_window, phase_shape, phases_fit, tap_offsets
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
    G_D,
    G_GROUP,
    G_IN,
    G_K,
    G_M,
    G_N,
    G_OUT,
    G_PB,
    G_PE,
    G_S,
    GEOMETRY,
    WINDOW_SLOTS,
)

# im2col matrices larger than this are built and multiplied a tile of output rows at a time,
# so the GEMM reads columns still in cache (DenseNet's 3 x 3 128 -> 32 convs at 56 x 56 build
# 14 MB otherwise)
TILE_BYTES = 1 << 21
# FusedConv's activation, in the slots after the window's: activation, Clip's low, Clip's high
ACT_NONE, ACT_RELU, ACT_CLIP = 0, 1, 2
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


# -- loops (specialised per dtype only) -----------------------------------------------------------


@jit_with_nrt
def _gemm(a, b, out):
    """out = a @ b on C-contiguous 2-D arrays (BLAS)."""
    np.dot(a, b, out)


@jit_with_nrt
def _unroll(data, base, channels, geo, cols, scatter, first_row, rows):
    """im2col (scatter False): cols[(c, kd, kh, kw), (od, oh, ow)] = the element of `data`
    (Conv's input, channels from flat offset `base`) that each kernel tap reads at each output
    position, 0 in the padding. col2im (scatter True, ConvTranspose): the adjoint, with the
    roles of input and output swapped: adds cols[(m, kd, kh, kw), (id, ih, iw)] into `data`
    (ConvTranspose's output) at the position each tap reaches, which may be outside. Only the
    `rows` rows (oh, or ih) from `first_row` are enumerated: a tile of the columns."""
    loop = G_IN if scatter else G_OUT  # positions the columns enumerate
    target = G_OUT if scatter else G_IN  # positions of `data`
    n_d, n_w = geo[loop], geo[loop + 2]
    t_d, t_h, t_w = geo[target], geo[target + 1], geo[target + 2]
    s_d, s_h, s_w = geo[G_S], geo[G_S + 1], geo[G_S + 2]
    plane = t_d * t_h * t_w
    zero = cols.dtype.type(0)
    step = np.uint64(s_w)
    o = np.int64(0)
    for c in range(channels):
        data_c = base + c * plane
        for kd in range(geo[G_K]):
            for kh in range(geo[G_K + 1]):
                for kw in range(geo[G_K + 2]):
                    w0 = kw * geo[G_D + 2] - geo[G_PB + 2]
                    # the columns j whose position w0 + j * s_w is inside [0, t_w)
                    low = np.int64(0) if w0 >= 0 else min((-w0 + s_w - 1) // s_w, n_w)
                    high = min((t_w - 1 - w0) // s_w + 1, n_w) if t_w - 1 - w0 >= 0 else 0
                    high = max(high, low)
                    for i_d in range(n_d):
                        p_d = i_d * s_d - geo[G_PB] + kd * geo[G_D]
                        for i_h in range(first_row, first_row + rows):
                            p_h = i_h * s_h - geo[G_PB + 1] + kh * geo[G_D + 1]
                            inside = 0 <= p_d < t_d and 0 <= p_h < t_h
                            row = data_c + (p_d * t_h + p_h) * t_w + w0
                            if scatter:
                                if inside and s_w == 1:  # unit stride: a loop LLVM vectorizes
                                    for j in range(low, high):
                                        data[row + j] += cols[o + j]
                                elif inside:
                                    for j in range(low, high):
                                        data[row + j * s_w] += cols[o + j]
                            else:  # explicit loops, unsigned indices: no array view per
                                # row (its reference counting cost more than a short row's
                                # copy) and no negative-index wrap, so LLVM vectorises them
                                start = np.uint64(o)
                                first, last = (low, high) if inside else (n_w, n_w)
                                for j in range(first):
                                    cols[start + np.uint64(j)] = zero
                                at = start + np.uint64(first)
                                source = np.uint64(row + first * s_w)
                                if s_w == 1:
                                    for j in range(last - first):
                                        cols[at + np.uint64(j)] = data[source + np.uint64(j)]
                                else:
                                    for j in range(last - first):
                                        cols[at + np.uint64(j)] = data[source + np.uint64(j) * step]
                                for j in range(last, n_w):
                                    cols[start + np.uint64(j)] = zero
                            o += n_w


@jit_inline_llvm
def _add_relu(row, b, residual, has_bias, has_z):
    """row[i] = Relu(row[i] + b + residual[i]) in one pass (the bias or the residual as the
    flags say), each step in the row's dtype as the separate Add and Relu ops compute it.
    One pass stores a value computed from the loads, which LLVM vectorises; a Relu pass of its
    own stores back the value it loaded or zero, which LLVM turns into a store under a branch
    and leaves scalar (0.07 against 0.75 ns an element). A loop per case: one loop testing the
    flags inside took 0.075 ns an element against 0.056 for the bias alone."""
    zero = row.dtype.type(0)
    if has_bias and has_z:
        for i in range(row.shape[0]):
            v = row[i] + b
            v = v + residual[i]
            row[i] = zero if v < zero else v  # NaN and -0 stay as they are, as Relu has them
    elif has_bias:
        for i in range(row.shape[0]):
            v = row[i] + b
            row[i] = zero if v < zero else v
    else:
        for i in range(row.shape[0]):
            v = row[i] + residual[i]
            row[i] = zero if v < zero else v


@jit_with_nrt
def _epilogue(y, z, start, first, count, p, bias, has_bias, has_z, act, low, high):
    """Channels `first` .. `first + count - 1` of one image, `count * p` elements of Y from
    `start`: + bias, + Z (the same elements), then Relu or Clip, channel by channel while it is in
    cache; each step in Y's dtype, as the separate Add / Relu / Clip ops compute it."""
    zero = y.dtype.type(0)
    for j in range(count):
        at = start + j * p
        row = y[at : at + p]  # views indexed from 0: LLVM vectorises the loops
        if act == ACT_RELU and (has_bias or has_z):
            _add_relu(row, bias[first + j] if has_bias else zero, z[at : at + p], has_bias, has_z)
            continue
        if has_bias:
            b = bias[first + j]
            for i in range(p):
                row[i] += b
        if has_z:
            residual = z[at : at + p]
            for i in range(p):
                row[i] += residual[i]
        if act == ACT_RELU:
            for i in range(p):  # NaN and -0 stay as they are, as Relu has them
                if row[i] < 0:
                    row[i] = zero
        elif act == ACT_CLIP:
            for i in range(p):  # Clip's comparisons in float64, as the Clip op makes them
                v = np.float64(row[i])
                if v < low:
                    v = low
                if v > high:
                    v = high
                row[i] = v


@jit_with_nrt
def _conv_tile(x, x_base, c_g, geo, cols, weights, tile, y, y_base, first, rows):
    """Output rows `first` .. of one image and group of a 2-D conv: im2col of those rows, the
    GEMM into `tile`, copied into Y's rows of each output channel."""
    m_g, k = weights.shape
    n_h, n_w = geo[G_OUT + 1], geo[G_OUT + 2]
    count = min(rows, n_h - first)
    width = count * n_w
    _unroll(x, x_base, c_g, geo, cols, False, first, count)
    part = tile[: m_g * width].reshape((m_g, width))
    _gemm(weights, cols[: k * width].reshape((k, width)), part)
    p = n_h * n_w
    for j in range(m_g):
        at = np.uint64(y_base + j * p + first * n_w)
        source = np.uint64(j * width)
        for i in range(width):
            y[at + np.uint64(i)] = tile[source + np.uint64(i)]


@jit_with_nrt
def _phase_tile(buffer, span, offsets, geo, cols, weights, tile, y, y_base, first, rows):
    """Output rows `first` .. of one image and group of a 2-D conv from the stride phases of
    its input channels (`buffer`, `span` elements per channel; `phases`): each row of the
    column matrix is one contiguous copy of a channel's phases from a tap's offset, the GEMM
    computes each output row's `pitch` columns, and the first n_w of them go to Y. im2col's
    rows are as many pieces as output rows, a few elements each on 14 x 14 and 7 x 7 planes,
    where building them cost more than the GEMM (DenseNet's 3 x 3 128 -> 32 convs)."""
    m_g, k = weights.shape
    _, pitch = phase_shape(geo)
    n_h, n_w = geo[G_OUT + 1], geo[G_OUT + 2]
    count = min(rows, n_h - first)
    width = count * pitch
    taps = offsets.shape[0]
    start = np.uint64(first * pitch)
    for channel in range(k // taps):
        for t in range(taps):
            source = np.uint64(channel * span) + offsets[t] + start
            target = np.uint64((channel * taps + t) * width)
            for j in range(width):
                cols[target + np.uint64(j)] = buffer[source + np.uint64(j)]
    part = tile[: m_g * width].reshape((m_g, width))
    _gemm(weights, cols[: k * width].reshape((k, width)), part)
    p = n_h * n_w
    for j in range(m_g):
        for r in range(count):
            at = np.uint64(y_base + j * p + (first + r) * n_w)
            source = np.uint64(j * width + r * pitch)
            for i in range(n_w):
                y[at + np.uint64(i)] = tile[source + np.uint64(i)]


@jit_inline_ir
def _sizes(geo):
    """(images, C, M, groups, C and M per group, kernel taps, K = C per group x taps, input
    plane, output positions) of a conv's geometry."""
    n_images, c, m, group = geo[G_N], geo[G_C], geo[G_M], geo[G_GROUP]
    c_g = c // group
    taps = geo[G_K] * geo[G_K + 1] * geo[G_K + 2]
    plane = geo[G_IN] * geo[G_IN + 1] * geo[G_IN + 2]
    p = geo[G_OUT] * geo[G_OUT + 1] * geo[G_OUT + 2]
    return n_images, c, m, group, c_g, m // group, taps, c_g * taps, plane, p


@jit_with_nrt
def _conv_plan(geo, itemsize):
    """How `_conv_run` computes a conv: (pointwise: a 1 x 1 conv multiplying the input directly,
    depthwise, phased: columns built from stride phases, rows: output rows per im2col tile
    (n_h: one tile), width: the column matrix's columns per output row, span: phase cells per
    channel, 0 unless phased)."""
    n_images, c, m, group, c_g, m_g, taps, k, plane, p = _sizes(geo)
    pointwise = taps == 1 and p == plane
    for s in range(3):
        if geo[G_S + s] != 1 or geo[G_PB + s] != 0 or geo[G_PE + s] != 0:
            pointwise = False
    depthwise = c_g == 1 and group > 1
    # 2-D kernels of several taps whose column matrix stays in cache and whose GEMM is short
    # (few output channels): built from the input's stride phases. The phases' extra columns
    # cost m_g GEMM products each, which ResNet's 256- and 512-channel 3 x 3 layers lost
    # (bench_cnn); larger matrices keep im2col's row tiles (DenseNet-121's 56 x 56 layers),
    # but for a column stride above 1 over few input channels (the CNNs' stems: 3 x 224 x 224
    # images, 7 x 7 or 3 x 3 kernels, stride 2), whose im2col rows gather every other
    # element, and whose phases are small: row tiles of the phase-built matrix.
    n_h, n_w = geo[G_OUT + 1], geo[G_OUT + 2]
    phase_rows, pitch = phase_shape(geo)
    span = geo[G_S + 1] * geo[G_S + 2] * phase_rows * pitch  # phase cells per channel
    phased = not depthwise and taps > 1 and p > 0 and flat_window(geo) and phases_fit(geo)
    small = k * p * itemsize <= TILE_BYTES
    strided = geo[G_S + 2] > 1 and c_g * span * itemsize <= TILE_BYTES // 2
    phased = phased and (small or strided) and m_g * (pitch - n_w) <= 16 * n_w
    width = pitch if phased else n_w  # the column matrix's columns per output row
    # im2col in tiles of output rows where the whole matrix would leave the cache (2-D only)
    rows = n_h
    if not (pointwise or depthwise) and geo[G_OUT] == 1 and k * p * itemsize > TILE_BYTES:
        rows = max(1, min(n_h, TILE_BYTES // max(k * width * itemsize, 1)))
    span = span if phased else 0
    return pointwise, depthwise, phased, rows, width, span


@jit_with_nrt
def _conv_run(x, w, bias, has_bias, z, has_z, act, low, high, y, geo):
    n_images, c, m, group, c_g, m_g, taps, k, plane, p = _sizes(geo)
    n_h = geo[G_OUT + 1]
    pointwise, depthwise, phased, rows, width, span = _conv_plan(geo, x.itemsize)
    _, pitch = phase_shape(geo)
    tiled = rows < n_h
    cols = np.empty(0 if pointwise or depthwise else k * rows * width * geo[G_OUT], dtype=x.dtype)
    tile = np.empty(m_g * rows * width if tiled or phased else 0, dtype=x.dtype)
    # one group's phases, zero-padded, and `pitch` more zeros: the last tap of the last
    # channel reads up to reach_w // s_w cells past its phases, for columns Y drops
    buffer = np.zeros(c_g * span + pitch if phased else 0, dtype=x.dtype)
    offsets = tap_offsets(geo) if phased else np.zeros(0, dtype=np.uint64)
    finish_blocks = not depthwise and k != 0 and m_g != 0  # else once Y is whole
    if k == 0 or m_g == 0:
        y[:] = 0
    elif depthwise:
        depthwise_run(x, w, y, geo)
    else:
        for n in range(n_images):
            for g in range(group):
                x_base = (n * c + g * c_g) * plane
                y_base = (n * m + g * m_g) * p
                weights = w[g * m_g * k : (g + 1) * m_g * k].reshape((m_g, k))
                if phased:
                    for channel in range(c_g):
                        at = channel * span
                        fill_phases(x, x_base + channel * plane, geo, buffer[at : at + span])
                    for first in range(0, n_h, rows):
                        _phase_tile(
                            buffer, span, offsets, geo, cols, weights, tile, y, y_base, first, rows
                        )
                elif tiled:
                    for first in range(0, n_h, rows):
                        _conv_tile(x, x_base, c_g, geo, cols, weights, tile, y, y_base, first, rows)
                else:
                    if pointwise:
                        source = x[x_base : x_base + k * p]
                    else:
                        _unroll(x, x_base, c_g, geo, cols, False, 0, n_h)
                        source = cols
                    _gemm(
                        weights,
                        source.reshape((k, p)),
                        y[y_base : y_base + m_g * p].reshape((m_g, p)),
                    )
                if finish_blocks:
                    _epilogue(y, z, y_base, g * m_g, m_g, p, bias, has_bias, has_z, act, low, high)
    if not finish_blocks:
        for n in range(n_images):
            _epilogue(y, z, n * m * p, 0, m, p, bias, has_bias, has_z, act, low, high)


# -- a conv shared by threads (`rtsoa.ops.parts`) -------------------------------------------------

# its phases: depthwise planes; phase buffer channels, output rows (phased or im2col tiles);
# im2col channels, GEMM output channels
P_DEPTHWISE, P_FILL, P_ROWS, P_UNROLL, P_GEMM = 0, 1, 2, 3, 4
CONV_GRAIN = 1 << 20  # multiply-adds worth a part of their own (~25 us at 80 GFLOP/s)
DEPTHWISE_GRAIN = 1 << 17  # a depthwise conv's (each tap a load: ~1 ns per output of 9 taps)
M_BLOCK = 16  # a GEMM part's output channels are whole multiples of this (the BLAS kernel's)


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
    `_conv_run` on a disjoint piece of Y (or of the phase buffer / column matrix, `user[1]`
    its address and `user[2]` its elements), the block (image, group) `user[0]`, with each
    Y element's products summed in `_conv_run`'s order (only the BLAS's blocking may differ)."""
    n_images, c, m, group, c_g, m_g, taps, k, plane, p = _sizes(geo)
    n_h, n_w = geo[G_OUT + 1], geo[G_OUT + 2]
    pointwise, depthwise, phased, rows, width, span = _conv_plan(geo, x.itemsize)
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
            _epilogue(
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
                _phase_tile(shared, span, offsets, geo, cols, weights, tile, y, y_base, row, count)
            else:
                _conv_tile(x, x_base, c_g, geo, cols, weights, tile, y, y_base, row, count)
        for j in range(m_g):  # each channel's rows of this part
            at = y_base + j * p + first * n_w
            _epilogue(
                y, z, at, g * m_g + j, 1, (end - first) * n_w, bias, has_bias, has_z, act, low, high
            )
    elif phase == P_UNROLL:
        first, end = _share(c_g, index, parts, 1)
        _unroll(
            x, x_base + first * plane, end - first, geo, shared[first * taps * p :], False, 0, n_h
        )
    else:  # P_GEMM: output channels
        first, end = _share(m_g, index, parts, M_BLOCK)
        if end > first:
            source = x[x_base : x_base + k * p] if pointwise else shared[: k * p]
            _gemm(
                weights[first:end],
                source.reshape((k, p)),
                y[y_base + first * p : y_base + end * p].reshape((end - first, p)),
            )
            _epilogue(
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
    """`_conv_run`'s conv in phases whose parts the threads of the table's pool share: depthwise
    by planes; per image and group, the phase buffer by channels then output rows (phased),
    output rows (im2col tiles), or the column matrix by channels then the GEMM by output
    channels (whole im2col, 1 x 1)."""
    n_images, c, m, group, c_g, m_g, taps, k, plane, p = _sizes(geo)
    n_h = geo[G_OUT + 1]
    pointwise, depthwise, phased, rows, width, span = _conv_plan(geo, x.itemsize)
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
                status = _conv_phase(call, *args, P_GEMM, gemm_parts, user, cols)
        if status != 0:
            return status
    return status


@jit_with_nrt
def _conv_go(call, x, w, bias, has_bias, z, has_z, act, low, high, y, geo, mode):
    """A Conv / FusedConv launch (`mode` MODE_COMPUTE: shared by the pool's threads where it is
    large enough, else `_conv_run`) or one part of one (MODE_PART)."""
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
        _conv_run(x, w, bias, has_bias, z, has_z, act, low, high, y, geo)
        return np.int64(0)
    return _conv_shared(call, x, w, bias, has_bias, z, has_z, act, low, high, y, geo, parts)


@jit_with_nrt
def _conv_transpose_run(x, w, bias, has_bias, y, geo):
    n_images, c, m, group = geo[G_N], geo[G_C], geo[G_M], geo[G_GROUP]
    c_g = c // group
    m_g = m // group
    taps = geo[G_K] * geo[G_K + 1] * geo[G_K + 2]
    rows = m_g * taps
    plane = geo[G_IN] * geo[G_IN + 1] * geo[G_IN + 2]
    p = geo[G_OUT] * geo[G_OUT + 1] * geo[G_OUT + 2]
    y[:] = 0
    w_t = np.empty(rows * c_g, dtype=x.dtype)  # one group's W, transposed to (m_g * taps, c_g)
    cols = np.empty(rows * plane, dtype=x.dtype)
    if c_g > 0 and rows > 0:
        for g in range(group):
            w_g = w[g * c_g * rows : (g + 1) * c_g * rows]
            for i in range(c_g):
                for j in range(rows):
                    w_t[j * c_g + i] = w_g[i * rows + j]
            for n in range(n_images):
                x_base = (n * c + g * c_g) * plane
                _gemm(
                    w_t.reshape((rows, c_g)),
                    x[x_base : x_base + c_g * plane].reshape((c_g, plane)),
                    cols.reshape((rows, plane)),
                )
                _unroll(y, (n * m + g * m_g) * p, m_g, geo, cols, True, 0, geo[G_IN + 1])
    if has_bias:
        for n in range(n_images):
            _epilogue(y, y, n * m * p, 0, m, p, bias, True, False, ACT_NONE, 0.0, 0.0)


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
            _conv_transpose_run(x, w, b, has_bias, y, geo)
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
            _conv_transpose_run(x, w, b, has_bias, y, geo)
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
