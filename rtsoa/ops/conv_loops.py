"""The convolutions' loops: im2col (and its adjoint, col2im) and the GEMM, the row tiles
and stride-phase tiles of the column matrix, the epilogue FusedConv applies to each block of Y
(bias, residual, Relu / Clip), and `conv_run` / `conv_transpose_run`, a whole Conv /
ConvTranspose over typed views. `rtsoa.ops.conv` holds the ops themselves (checks, shapes,
entries, the parts its threads share) and says how the loops compute.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_inline_llvm, jit_with_nrt
from rtsoa.ops.abi import ACT_NONE, ACT_RELU
from rtsoa.ops.depthwise import depthwise_run
from rtsoa.ops.elementwise_loops import clip_bounds, clip_value
from rtsoa.ops.packed_gemm import short_gemm
from rtsoa.ops.phases import fill_phases, flat_window, phase_shape, phases_fit, tap_offsets
from rtsoa.ops.window_layout import (
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
)

# im2col matrices larger than this are built and multiplied a tile of output rows at a time,
# so the GEMM reads columns still in cache (DenseNet's 3 x 3 128 -> 32 convs at 56 x 56 build
# 14 MB otherwise)
TILE_BYTES = 1 << 21


@jit_with_nrt
def conv_gemm(a, b, out):
    """out = a @ b on C-contiguous 2-D arrays (`rtsoa.ops.packed_gemm.short_gemm`: rtsoa's own
    GEMM for float32 where it is faster than the BLAS, the BLAS otherwise)."""
    short_gemm(a, b, out)


@jit_with_nrt
def unroll_columns(data, base, channels, geo, cols, scatter, first_row, rows):
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
def _add_clip(row, b, residual, has_bias, has_z, lowest, highest, below, above):
    """row[i] = clip(row[i] + b + residual[i]) in one pass (the bias or the residual as the
    flags say), `clip_bounds`' four values (Relu's are 0, inf, 0, inf), each step in the
    row's dtype as the separate Add and Relu / Clip ops compute it: their bits. One pass
    stores a value computed from the loads, which LLVM vectorises; a Relu pass of its own
    stores back the value it loaded or zero, which LLVM turns into a store under a branch and
    leaves scalar (0.07 against 0.75 ns an element). A loop per case: one loop testing the
    flags inside took 0.075 ns an element against 0.056 for the bias alone."""
    if has_bias and has_z:
        for i in range(row.shape[0]):
            v = row[i] + b
            row[i] = clip_value(v + residual[i], lowest, highest, below, above)
    elif has_bias:
        for i in range(row.shape[0]):
            row[i] = clip_value(row[i] + b, lowest, highest, below, above)
    else:
        for i in range(row.shape[0]):
            row[i] = clip_value(row[i] + residual[i], lowest, highest, below, above)


@jit_with_nrt
def conv_epilogue(y, z, start, first, count, p, bias, has_bias, has_z, act, low, high):
    """Channels `first` .. `first + count - 1` of one image, `count * p` elements of Y from
    `start`: + bias, + Z (the same elements), then Relu or Clip, channel by channel while it is in
    cache; each step in Y's dtype, as the separate Add / Relu / Clip ops compute it."""
    if act == ACT_RELU:  # Relu is Clip to [0, inf]: the same bits, NaN and -0 kept
        low, high = 0.0, np.inf
    lowest, highest, below, above = clip_bounds(y, low, high)
    for j in range(count):
        at = start + j * p
        row = y[at : at + p]  # views indexed from 0: LLVM vectorises the loops
        if act != ACT_NONE and (has_bias or has_z):
            b = bias[first + j] if has_bias else y.dtype.type(0)
            _add_clip(row, b, z[at : at + p], has_bias, has_z, lowest, highest, below, above)
            continue
        if has_bias:
            b = bias[first + j]
            for i in range(p):
                row[i] += b
        if has_z:
            residual = z[at : at + p]
            for i in range(p):
                row[i] += residual[i]
        if act != ACT_NONE:
            for i in range(p):
                row[i] = clip_value(row[i], lowest, highest, below, above)


@jit_with_nrt
def conv_tile(x, x_base, c_g, geo, cols, weights, tile, y, y_base, first, rows):
    """Output rows `first` .. of one image and group of a 2-D conv: im2col of those rows, the
    GEMM into `tile`, copied into Y's rows of each output channel."""
    m_g, k = weights.shape
    n_h, n_w = geo[G_OUT + 1], geo[G_OUT + 2]
    count = min(rows, n_h - first)
    width = count * n_w
    unroll_columns(x, x_base, c_g, geo, cols, False, first, count)
    part = tile[: m_g * width].reshape((m_g, width))
    conv_gemm(weights, cols[: k * width].reshape((k, width)), part)
    p = n_h * n_w
    for j in range(m_g):
        at = np.uint64(y_base + j * p + first * n_w)
        source = np.uint64(j * width)
        for i in range(width):
            y[at + np.uint64(i)] = tile[source + np.uint64(i)]


@jit_with_nrt
def phase_tile(buffer, span, offsets, geo, cols, weights, tile, y, y_base, first, rows):
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
    conv_gemm(weights, cols[: k * width].reshape((k, width)), part)
    p = n_h * n_w
    for j in range(m_g):
        for r in range(count):
            at = np.uint64(y_base + j * p + (first + r) * n_w)
            source = np.uint64(j * width + r * pitch)
            for i in range(n_w):
                y[at + np.uint64(i)] = tile[source + np.uint64(i)]


@jit_inline_ir
def conv_sizes(geo):
    """(images, C, M, groups, C and M per group, kernel taps, K = C per group x taps, input
    plane, output positions) of a conv's geometry."""
    n_images, c, m, group = geo[G_N], geo[G_C], geo[G_M], geo[G_GROUP]
    c_g = c // group
    taps = geo[G_K] * geo[G_K + 1] * geo[G_K + 2]
    plane = geo[G_IN] * geo[G_IN + 1] * geo[G_IN + 2]
    p = geo[G_OUT] * geo[G_OUT + 1] * geo[G_OUT + 2]
    return n_images, c, m, group, c_g, m // group, taps, c_g * taps, plane, p


@jit_with_nrt
def conv_plan(geo, itemsize):
    """How `conv_run` computes a conv: (pointwise: a 1 x 1 conv multiplying the input directly,
    depthwise, phased: columns built from stride phases, rows: output rows per im2col tile
    (n_h: one tile), width: the column matrix's columns per output row, span: phase cells per
    channel, 0 unless phased)."""
    n_images, c, m, group, c_g, m_g, taps, k, plane, p = conv_sizes(geo)
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
def conv_run(x, w, bias, has_bias, z, has_z, act, low, high, y, geo):
    n_images, c, m, group, c_g, m_g, taps, k, plane, p = conv_sizes(geo)
    n_h = geo[G_OUT + 1]
    pointwise, depthwise, phased, rows, width, span = conv_plan(geo, x.itemsize)
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
                        phase_tile(
                            buffer, span, offsets, geo, cols, weights, tile, y, y_base, first, rows
                        )
                elif tiled:
                    for first in range(0, n_h, rows):
                        conv_tile(x, x_base, c_g, geo, cols, weights, tile, y, y_base, first, rows)
                else:
                    if pointwise:
                        source = x[x_base : x_base + k * p]
                    else:
                        unroll_columns(x, x_base, c_g, geo, cols, False, 0, n_h)
                        source = cols
                    conv_gemm(
                        weights,
                        source.reshape((k, p)),
                        y[y_base : y_base + m_g * p].reshape((m_g, p)),
                    )
                if finish_blocks:
                    conv_epilogue(
                        y, z, y_base, g * m_g, m_g, p, bias, has_bias, has_z, act, low, high
                    )
    if not finish_blocks:
        for n in range(n_images):
            conv_epilogue(y, z, n * m * p, 0, m, p, bias, has_bias, has_z, act, low, high)


@jit_with_nrt
def conv_transpose_run(x, w, bias, has_bias, y, geo):
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
                conv_gemm(
                    w_t.reshape((rows, c_g)),
                    x[x_base : x_base + c_g * plane].reshape((c_g, plane)),
                    cols.reshape((rows, plane)),
                )
                unroll_columns(y, (n * m + g * m_g) * p, m_g, geo, cols, True, 0, geo[G_IN + 1])
    if has_bias:
        for n in range(n_images):
            conv_epilogue(y, y, n * m * p, 0, m, p, bias, True, False, ACT_NONE, 0.0, 0.0)
