"""Depthwise convolution (one input channel per group, any channel multiplier), computed
directly: `conv_loops.conv_run` calls it instead of im2col + GEMM, which for one input channel
is all copy and no reuse (`tests/test_ops_window_fast_paths.py`, asv `bench_cnn`).

The 2-D 3 x 3 kernel without dilation (MobileNet's) has a kernel of its own, `_depthwise_3x3`:
each input plane is laid out once in zero-padded stride phases (`rtsoa.ops.phases`) and each
output plane is one flat loop whose elements sum their nine taps in registers, no branch for
the borders, which LLVM vectorises (on MobileNetV2's 7 x 7 and 14 x 14 planes the row
kernel's checked border taps cost more than the interior). Both kernels add the taps of an
element in (kd, kh, kw) order from zero, skipping those in the padding or adding +0 for them,
which leaves the sum unchanged: the same bits.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_inline_llvm, jit_with_nrt
from rtsoa.ops.phases import (
    copy_rows,
    fill_phases,
    phase_buffer,
    phase_shape,
    phases_fit,
    tap_offsets,
)
from rtsoa.ops.window_layout import G_C, G_D, G_GROUP, G_IN, G_K, G_M, G_N, G_OUT, G_PB, G_S

# outputs per step of `_plane_phases`' flat loop: one AVX-512 vector of float32
CHUNK = 16


@jit_with_nrt
def depthwise_run(x, w, y, geo):
    """A convolution of one input channel per group (depthwise; m_g outputs each), directly:
    each output row accumulates its taps in (kd, kh, kw) order, one strided pass over the row
    per tap, which LLVM vectorises. im2col would build a (taps, positions) matrix per channel
    and multiply it by a 1 x taps row: all copy, no reuse."""
    n_images, c, m, group = geo[G_N], geo[G_C], geo[G_M], geo[G_GROUP]
    m_g = m // group
    square = geo[G_K] == 1 and geo[G_K + 1] == 3 and geo[G_K + 2] == 3 and geo[G_IN] == 1
    if square and geo[G_D + 1] == 1 and geo[G_D + 2] == 1 and geo[G_OUT] == 1 and phases_fit(geo):
        _depthwise_3x3(x, w, y, geo)
        return
    t_d, t_h, t_w = geo[G_IN], geo[G_IN + 1], geo[G_IN + 2]
    n_d, n_h, n_w = geo[G_OUT], geo[G_OUT + 1], geo[G_OUT + 2]
    k_d, k_h, k_w = geo[G_K], geo[G_K + 1], geo[G_K + 2]
    s_d, s_h, s_w = geo[G_S], geo[G_S + 1], geo[G_S + 2]
    taps = k_d * k_h * k_w
    plane = t_d * t_h * t_w
    p = n_d * n_h * n_w
    lows = np.empty(k_w, dtype=np.int64)  # per kw, the output columns whose tap is inside
    highs = np.empty(k_w, dtype=np.int64)
    for kw in range(k_w):
        w0 = kw * geo[G_D + 2] - geo[G_PB + 2]
        low = np.int64(0) if w0 >= 0 else min((-w0 + s_w - 1) // s_w, n_w)
        high = min((t_w - 1 - w0) // s_w + 1, n_w) if t_w - 1 - w0 >= 0 else 0
        lows[kw], highs[kw] = low, max(high, low)
    for n in range(n_images):
        for g in range(group):
            x_base = (n * c + g) * plane
            for j in range(m_g):
                out = g * m_g + j
                w_base = out * taps
                y_base = (n * m + out) * p
                for i_d in range(n_d):
                    for i_h in range(n_h):
                        row = y_base + (i_d * n_h + i_h) * n_w
                        out_row = y[row : row + n_w]
                        out_row[:] = 0
                        for kd in range(k_d):
                            p_d = i_d * s_d - geo[G_PB] + kd * geo[G_D]
                            if p_d < 0 or p_d >= t_d:
                                continue
                            for kh in range(k_h):
                                p_h = i_h * s_h - geo[G_PB + 1] + kh * geo[G_D + 1]
                                if p_h < 0 or p_h >= t_h:
                                    continue
                                source = x_base + (p_d * t_h + p_h) * t_w - geo[G_PB + 2]
                                for kw in range(k_w):
                                    weight = w[w_base + (kd * k_h + kh) * k_w + kw]
                                    low, high = lows[kw], highs[kw]
                                    if high <= low:
                                        continue
                                    # views, so the loops index from 0 and LLVM vectorises
                                    at = source + kw * geo[G_D + 2] + low * s_w
                                    target = out_row[low:high]
                                    if s_w == 1:
                                        taps_row = x[at : at + (high - low)]
                                        for o in range(target.shape[0]):
                                            target[o] += weight * taps_row[o]
                                    else:
                                        taps_row = x[at : at + (high - low - 1) * s_w + 1]
                                        for o in range(target.shape[0]):
                                            target[o] += weight * taps_row[o * s_w]


@jit_inline_ir
def _edge_element(x, x_base, w, w_base, oh, ow, geo, zero):
    """One output element of `_depthwise_3x3`: its taps checked one by one."""
    t_h, t_w = geo[G_IN + 1], geo[G_IN + 2]
    acc = zero
    for kh in range(3):
        ih = oh * geo[G_S + 1] - geo[G_PB + 1] + kh
        if ih < 0 or ih >= t_h:
            continue
        for kw in range(3):
            iw = ow * geo[G_S + 2] - geo[G_PB + 2] + kw
            if iw < 0 or iw >= t_w:
                continue
            acc += w[w_base + kh * 3 + kw] * x[x_base + ih * t_w + iw]
    return acc


@jit_with_nrt
def _depthwise_3x3(x, w, y, geo):
    """`depthwise_run` for a 2-D 3 x 3 kernel without dilation, any stride and padding: each
    input plane is laid out once in zero-padded stride phases (`phases`) and each output plane
    is one flat loop of nine taps (`_plane_phases`). A channel whose weights are not all
    finite takes its taps one by one, skipping those in the padding (`_plane_checked`): a
    padding cell's 0 times an infinite weight would be NaN where the skipped tap gives none."""
    n_images, c, m, group = geo[G_N], geo[G_C], geo[G_M], geo[G_GROUP]
    m_g = m // group
    plane = geo[G_IN + 1] * geo[G_IN + 2]
    n_h, n_w = geo[G_OUT + 1], geo[G_OUT + 2]
    p = n_h * n_w
    rows, pitch = phase_shape(geo)
    buffer = phase_buffer(geo, 0.0, x, CHUNK)
    offsets = tap_offsets(geo)
    count = (n_h - 1) * pitch + n_w  # the flat loop's outputs, to the last row's end
    chunks = (count + CHUNK - 1) // CHUNK
    out = np.empty(chunks * CHUNK, dtype=x.dtype)
    for n in range(n_images):
        for g in range(group):
            x_base = (n * c + g) * plane
            fill_phases(x, x_base, geo, buffer)
            for j in range(m_g):
                channel = g * m_g + j
                y_base = (n * m + channel) * p
                if _finite(w, channel * 9):
                    _plane_phases(buffer, w, channel * 9, out, offsets, geo[G_S + 2], chunks)
                    copy_rows(out, pitch, y, y_base, n_h, n_w)
                else:
                    _plane_checked(x, x_base, w, channel * 9, y, y_base, geo)


@jit_inline_llvm
def _finite(w, w_base):
    """Whether the nine weights from `w_base` are all finite."""
    for k in range(9):
        if not np.isfinite(w[w_base + k]):
            return False
    return True


@jit_inline_llvm
def _nine_taps(data, at, weights, zero):
    """From `zero`, weights[k] * data[at[k]] added in k's order: one output element."""
    acc = zero
    acc += weights[0] * data[at[0]]
    acc += weights[1] * data[at[1]]
    acc += weights[2] * data[at[2]]
    acc += weights[3] * data[at[3]]
    acc += weights[4] * data[at[4]]
    acc += weights[5] * data[at[5]]
    acc += weights[6] * data[at[6]]
    acc += weights[7] * data[at[7]]
    acc += weights[8] * data[at[8]]
    return acc


@jit_inline_llvm
def _plane_phases(buffer, w, w_base, out, offsets, stride, chunks):
    """One output plane of `_depthwise_3x3` from the phases of its input plane (`offsets`:
    `phases.tap_offsets`), its first `chunks` * CHUNK flat outputs into `out`: per element,
    from +0, the nine taps in (kh, kw) order, the padding cells adding 0 * w (+0 or -0, which
    leave a sum begun at +0 unchanged), so the sums equal the in-order sums of the taps
    inside. With column stride 1 each tap row reads one phase row at offsets 0, 1, 2; with
    stride 2 the even phase at 0, 1 and the odd one at 0: three or six pointers, few enough
    for LLVM's runtime alias checks, so the loop vectorises (nine unrelated offsets, as larger
    strides have, are too many). The elements go in chunks of CHUNK, a constant trip count
    LLVM vectorises whole: a loop to the plane's own end left a scalar remainder as long as
    the vector part on MobileNetV2's 7 x 7 and 14 x 14 planes (`benchmarks.cnn_layers`); the
    outputs past the plane's end read the buffer's slack and are dropped."""
    weights = (w[w_base], w[w_base + 1], w[w_base + 2], w[w_base + 3], w[w_base + 4])
    weights = weights + (w[w_base + 5], w[w_base + 6], w[w_base + 7], w[w_base + 8])
    e0, d0, f0 = offsets[0], offsets[1], offsets[2]
    e1, d1, f1 = offsets[3], offsets[4], offsets[5]
    e2, d2, f2 = offsets[6], offsets[7], offsets[8]
    one, two = np.uint64(1), np.uint64(2)
    zero = out.dtype.type(0)
    for chunk in range(chunks):
        first = np.uint64(chunk * CHUNK)
        if stride == 1:
            for lane in range(CHUNK):
                u = first + np.uint64(lane)
                at = (u + e0, u + e0 + one, u + e0 + two, u + e1, u + e1 + one, u + e1 + two)
                at = at + (u + e2, u + e2 + one, u + e2 + two)
                out[u] = _nine_taps(buffer, at, weights, zero)
        elif stride == 2:
            for lane in range(CHUNK):
                u = first + np.uint64(lane)
                at = (u + e0, u + d0, u + e0 + one, u + e1, u + d1, u + e1 + one)
                at = at + (u + e2, u + d2, u + e2 + one)
                out[u] = _nine_taps(buffer, at, weights, zero)
        else:
            for lane in range(CHUNK):
                u = first + np.uint64(lane)
                at = (u + e0, u + d0, u + f0, u + e1, u + d1, u + f1, u + e2, u + d2, u + f2)
                out[u] = _nine_taps(buffer, at, weights, zero)


@jit_with_nrt
def _plane_checked(x, x_base, w, w_base, y, y_base, geo):
    """One output plane of `_depthwise_3x3`, each element's taps checked one by one."""
    zero = y.dtype.type(0)
    n_w = geo[G_OUT + 2]
    for oh in range(geo[G_OUT + 1]):
        for ow in range(n_w):
            y[y_base + oh * n_w + ow] = _edge_element(x, x_base, w, w_base, oh, ow, geo, zero)
