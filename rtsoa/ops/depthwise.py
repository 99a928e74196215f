"""Depthwise convolution (one input channel per group, any channel multiplier), computed
directly: `conv._conv_run` calls it instead of im2col + GEMM, which for one input channel is all
copy and no reuse (`tests/test_ops_window_fast_paths.py`, asv `bench_cnn`).

The 2-D 3 x 3 kernel without dilation (MobileNet's) has a kernel of its own, `_depthwise_3x3`:
each output element sums its nine taps in registers (no array view per row and tap, whose
reference counting cost more than the arithmetic on 7 x 7 and 14 x 14 planes), with unsigned
indices so LLVM vectorises the interior columns. Both kernels add the taps of an element in
(kd, kh, kw) order, skipping those in the padding, from zero: the same bits.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_with_nrt
from rtsoa.ops.window_layout import G_C, G_D, G_GROUP, G_IN, G_K, G_M, G_N, G_OUT, G_PB, G_S


@jit_with_nrt
def depthwise_run(x, w, y, geo):
    """A convolution of one input channel per group (depthwise; m_g outputs each), directly:
    each output row accumulates its taps in (kd, kh, kw) order, one strided pass over the row
    per tap, which LLVM vectorises. im2col would build a (taps, positions) matrix per channel
    and multiply it by a 1 x taps row: all copy, no reuse."""
    n_images, c, m, group = geo[G_N], geo[G_C], geo[G_M], geo[G_GROUP]
    m_g = m // group
    square = geo[G_K] == 1 and geo[G_K + 1] == 3 and geo[G_K + 2] == 3 and geo[G_IN] == 1
    if square and geo[G_D + 1] == 1 and geo[G_D + 2] == 1 and geo[G_OUT] == 1:
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
    """One output element of `_depthwise_3x3` near the padding: its taps checked one by one."""
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
    """`depthwise_run` for a 2-D 3 x 3 kernel without dilation, any stride and padding."""
    n_images, c, m, group = geo[G_N], geo[G_C], geo[G_M], geo[G_GROUP]
    m_g = m // group
    t_h, t_w = geo[G_IN + 1], geo[G_IN + 2]
    n_h, n_w = geo[G_OUT + 1], geo[G_OUT + 2]
    s_h, s_w = geo[G_S + 1], geo[G_S + 2]
    pad_h, pad_w = geo[G_PB + 1], geo[G_PB + 2]
    plane, p = t_h * t_w, n_h * n_w
    zero = y.dtype.type(0)
    # the output columns whose three taps all lie inside the row: [lo, hi)
    lo = min((pad_w + s_w - 1) // s_w, n_w)
    hi = min((t_w - 3 + pad_w) // s_w + 1, n_w) if t_w - 3 + pad_w >= 0 else 0
    hi = max(hi, lo)
    one, two = np.uint64(1), np.uint64(2)
    stride = np.uint64(s_w)
    for n in range(n_images):
        for g in range(group):
            x_base = (n * c + g) * plane
            for j in range(m_g):
                out = g * m_g + j
                w_base = out * 9
                y_base = (n * m + out) * p
                w0, w1, w2 = w[w_base], w[w_base + 1], w[w_base + 2]
                w3, w4, w5 = w[w_base + 3], w[w_base + 4], w[w_base + 5]
                w6, w7, w8 = w[w_base + 6], w[w_base + 7], w[w_base + 8]
                for oh in range(n_h):
                    ih = oh * s_h - pad_h
                    row = y_base + oh * n_w
                    if ih < 0 or ih + 2 >= t_h:  # a tap row in the padding: checked taps
                        for ow in range(n_w):
                            y[row + ow] = _edge_element(x, x_base, w, w_base, oh, ow, geo, zero)
                        continue
                    for ow in range(lo):
                        y[row + ow] = _edge_element(x, x_base, w, w_base, oh, ow, geo, zero)
                    for ow in range(hi, n_w):
                        y[row + ow] = _edge_element(x, x_base, w, w_base, oh, ow, geo, zero)
                    # unsigned indices: no negative-index wrap, so the loop vectorises
                    r0 = np.uint64(x_base + ih * t_w + lo * s_w - pad_w)
                    r1 = r0 + np.uint64(t_w)
                    r2 = r1 + np.uint64(t_w)
                    target = np.uint64(row + lo)
                    for o in range(hi - lo):
                        at = np.uint64(o) * stride
                        acc = zero
                        acc += w0 * x[r0 + at]
                        acc += w1 * x[r0 + at + one]
                        acc += w2 * x[r0 + at + two]
                        acc += w3 * x[r1 + at]
                        acc += w4 * x[r1 + at + one]
                        acc += w5 * x[r1 + at + two]
                        acc += w6 * x[r2 + at]
                        acc += w7 * x[r2 + at + one]
                        acc += w8 * x[r2 + at + two]
                        y[target + np.uint64(o)] = acc
