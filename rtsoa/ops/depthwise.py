"""Depthwise convolution (one input channel per group, any channel multiplier), computed
directly: `conv._conv_run` calls it instead of im2col + GEMM, which for one input channel is all
copy and no reuse (`tests/test_ops_window_fast_paths.py`, asv `bench_cnn`)."""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.window_layout import G_C, G_D, G_GROUP, G_IN, G_K, G_M, G_N, G_OUT, G_PB, G_S


@jit_with_nrt
def depthwise_run(x, w, y, geo):
    """A convolution of one input channel per group (depthwise; m_g outputs each), directly:
    each output row accumulates its taps in (kd, kh, kw) order, one strided pass over the row
    per tap, which LLVM vectorises. im2col would build a (taps, positions) matrix per channel
    and multiply it by a 1 x taps row: all copy, no reuse."""
    n_images, c, m, group = geo[G_N], geo[G_C], geo[G_M], geo[G_GROUP]
    m_g = m // group
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
