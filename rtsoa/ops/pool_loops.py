"""The window loops of MaxPool and AveragePool (`rtsoa.ops.pooling` checks the operands and
calls `pool_planes`, or `pool_run` for MaxPool's Indices): the per-window loop, which visits only
the taps inside the input; the row kernel, a strided pass per tap; and the fast paths of the
common kernels, which give the row kernel's bits: MaxPool over overlapping windows on stride
phases (`rtsoa.ops.phases`), 3 x 3 MaxPool separably straight from the input, and 2 x 2
stride-2 pools from row pairs.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_inline_llvm, jit_with_nrt
from rtsoa.ops.phases import (
    copy_rows,
    fill_phases,
    flat_window,
    inside_range,
    phase_buffer,
    phase_shape,
    phases_fit,
)
from rtsoa.ops.window_layout import G_C, G_D, G_IN, G_K, G_N, G_OUT, G_PB, G_PE, G_S

MAX, AVERAGE = 0, 1
MAX3_BLOCK = 1 << 13  # `_max_pool_3x3`'s row maxima per pass (32 KiB of float32)


@jit_inline_ir
def _taps_before(start, taps, dilation, end):
    """How many of the taps start + t * dilation fall before `end` (the padded input's end)."""
    if start >= end:
        return np.int64(0)
    return min(taps, (end - 1 - start) // dilation + 1)


@jit_inline_ir
def _taps_inside(start, taps, dilation, size):
    """(first, end): the taps t of start + t * dilation inside [0, size)."""
    first = np.int64(0) if start >= 0 else min((-start + dilation - 1) // dilation, taps)
    end = min(taps, (size - 1 - start) // dilation + 1) if size - 1 - start >= 0 else 0
    return first, max(first, end)


@jit_with_nrt.keeping_literals("op")
def pool_run(op, x, y, indices, geo, include_pad, column_major):
    """MaxPool with its Indices (or AveragePool), one window at a time over every image
    plane; without Indices `_pool_rows` computes the same values faster."""
    in_d, in_h, in_w = geo[G_IN], geo[G_IN + 1], geo[G_IN + 2]
    out_d, out_h, out_w = geo[G_OUT], geo[G_OUT + 1], geo[G_OUT + 2]
    k_d, k_h, k_w = geo[G_K], geo[G_K + 1], geo[G_K + 2]
    d_d, d_h, d_w = geo[G_D], geo[G_D + 1], geo[G_D + 2]
    plane = in_d * in_h * in_w
    want_indices = indices.shape[0] > 0
    o = np.int64(0)
    for p in range(geo[G_N] * geo[G_C]):
        x_p = p * plane
        for od in range(out_d):
            s_d = od * geo[G_S] - geo[G_PB]
            for oh in range(out_h):
                s_h = oh * geo[G_S + 1] - geo[G_PB + 1]
                for ow in range(out_w):
                    s_w = ow * geo[G_S + 2] - geo[G_PB + 2]
                    value = -np.inf if op == MAX else 0.0  # the maximum, or the sum
                    best_at = np.int64(-1)
                    count = np.int64(0)
                    # only the taps inside the input (a huge padded kernel costs nothing)
                    first_d, last_d = _taps_inside(s_d, k_d, d_d, in_d)
                    first_h, last_h = _taps_inside(s_h, k_h, d_h, in_h)
                    first_w, last_w = _taps_inside(s_w, k_w, d_w, in_w)
                    for kd in range(first_d, last_d):
                        i_d = s_d + kd * d_d
                        for kh in range(first_h, last_h):
                            i_h = s_h + kh * d_h
                            for kw in range(first_w, last_w):
                                at = (i_d * in_h + i_h) * in_w + s_w + kw * d_w
                                if op != MAX:
                                    value += x[x_p + at]
                                    count += 1
                                elif (
                                    best_at < 0
                                    or x[x_p + at] > value
                                    or (x[x_p + at] != x[x_p + at] and value == value)
                                ):
                                    value = x[x_p + at]
                                    best_at = at
                    if op == MAX:
                        y[o] = value
                        if want_indices:
                            if column_major and best_at >= 0:
                                best_at = (best_at % in_w) * in_h + best_at // in_w % in_h
                            indices[o] = x_p + best_at if best_at >= 0 else -1
                    else:
                        if include_pad:  # the taps inside the padded input
                            count = (
                                _taps_before(s_d, k_d, d_d, in_d + geo[G_PE])
                                * _taps_before(s_h, k_h, d_h, in_h + geo[G_PE + 1])
                                * _taps_before(s_w, k_w, d_w, in_w + geo[G_PE + 2])
                            )
                        y[o] = value / count if count > 0 else 0.0
                    o += 1


@jit_with_nrt.keeping_literals("op")
def _pool_rows(op, x, y, geo, include_pad):
    """MaxPool without Indices, or AveragePool, one output row at a time: each tap is a
    strided pass over the row, which LLVM vectorises where the stride is 1 (the per-window
    loop of `pool_run` branches on every tap). The same taps in the same order per output,
    accumulated in float64 as `pool_run` does, so the results are identical."""
    in_d, in_h, in_w = geo[G_IN], geo[G_IN + 1], geo[G_IN + 2]
    out_d, out_h, out_w = geo[G_OUT], geo[G_OUT + 1], geo[G_OUT + 2]
    k_d, k_h, k_w = geo[G_K], geo[G_K + 1], geo[G_K + 2]
    d_d, d_h, d_w = geo[G_D], geo[G_D + 1], geo[G_D + 2]
    step = geo[G_S + 2]
    stride = np.uint64(step)
    plane = in_d * in_h * in_w
    row = np.empty(out_w, dtype=np.float64)  # AveragePool's sums, in float64 as `pool_run`
    top = np.empty(out_w, dtype=x.dtype)  # MaxPool's maxima (exact in the input's dtype)
    taps_w = np.zeros(out_w, dtype=np.int64)  # taps inside the input, per output column
    lows = np.empty(k_w, dtype=np.int64)  # per kw, the output columns whose tap is inside
    highs = np.empty(k_w, dtype=np.int64)  # (computed once: two divisions per tap and row
    for kw in range(k_w):  # cost more than a short row's compares)
        low, high = inside_range(kw * d_w - geo[G_PB + 2], step, in_w, out_w)
        taps_w[low:high] += 1
        lows[kw], highs[kw] = low, high
    o = np.int64(0)
    for p in range(geo[G_N] * geo[G_C]):
        x_p = p * plane
        for od in range(out_d):
            s_d = od * geo[G_S] - geo[G_PB]
            first_d, last_d = _taps_inside(s_d, k_d, d_d, in_d)
            for oh in range(out_h):
                s_h = oh * geo[G_S + 1] - geo[G_PB + 1]
                first_h, last_h = _taps_inside(s_h, k_h, d_h, in_h)
                for j in range(out_w):
                    row[j] = 0.0
                    top[j] = -np.inf
                for kd in range(first_d, last_d):
                    for kh in range(first_h, last_h):
                        base = x_p + ((s_d + kd * d_d) * in_h + s_h + kh * d_h) * in_w
                        for kw in range(k_w):
                            w0 = kw * d_w - geo[G_PB + 2]
                            low, high = lows[kw], highs[kw]
                            # unsigned indices, no views (their reference counting cost more
                            # than a short row): no negative-index wrap, LLVM vectorises
                            at = np.uint64(base + w0 + low * step)
                            first = np.uint64(low)
                            if op == MAX:
                                for j in range(high - low):
                                    at_j = np.uint64(j)
                                    v = x[at + at_j * stride]
                                    best = top[first + at_j]
                                    # no short-circuit `or`: a select LLVM vectorises
                                    top[first + at_j] = v if (v > best) | (v != v) else best
                            else:
                                for j in range(high - low):
                                    at_j = np.uint64(j)
                                    row[first + at_j] += x[at + at_j * stride]
                if op == MAX:
                    for j in range(out_w):
                        y[o + j] = top[j]
                else:
                    taps_dh = (last_d - first_d) * (last_h - first_h)
                    for j in range(out_w):
                        count = taps_dh * taps_w[j]
                        if include_pad:
                            ow = j * step - geo[G_PB + 2]
                            count = (
                                _taps_before(s_d, k_d, d_d, in_d + geo[G_PE])
                                * _taps_before(s_h, k_h, d_h, in_h + geo[G_PE + 1])
                                * _taps_before(ow, k_w, d_w, in_w + geo[G_PE + 2])
                            )
                        y[o + j] = row[j] / count if count > 0 else 0.0
                o += out_w


@jit_with_nrt
def _overlapping(geo):
    """Whether `_max_pool_phases` takes the pool: a 2-D or 1-D window whose windows overlap
    (a kernel longer than its stride), so that the phases' one copy of each plane serves
    several taps; windows side by side read each element once in `_pool_rows` already."""
    overlap = geo[G_K + 1] > geo[G_S + 1] or geo[G_K + 2] > geo[G_S + 2]
    return flat_window(geo) and overlap and phases_fit(geo)


@jit_inline_ir
def _row_taps_fit(geo):
    """Whether `_pool_rows` takes the pool: it passes over every column tap of the kernel
    (k_w of them, with two arrays of k_w), so a kernel far wider than the input (a huge
    `kernel_shape` over huge pads: a model could mean harm with it) takes `pool_run`, which
    visits only the taps inside the input."""
    return geo[G_K + 2] <= 2 * geo[G_IN + 2] + 16


@jit_inline_llvm
def _max_of(out, previous, source, count):
    """out[f] = the max of previous[f] and source[f], f < count, in `_pool_rows`' select: a NaN
    in source replaces, a NaN in previous stays, of equal values previous's stays. `out` is
    never `previous`: LLVM turns `a[f] = v if ... else a[f]` into a store under a branch,
    which it does not vectorise (1.0 ns an element against 0.17 into another array)."""
    for f in range(count):
        v = source[f]
        best = previous[f]
        # no short-circuit `or`: a select LLVM vectorises
        out[f] = v if (v > best) | (v != v) else best


@jit_inline_llvm
def _max_of_taps(out, ping, pong, cells, starts, count):
    """out[f] = the max over the taps of cells[starts[t] + f], t in order (`_max_of`'s
    select), through the scratch arrays `ping` and `pong` (at least `count` cells each)."""
    taps = starts.shape[0]
    first = starts[0]
    if taps == 1:
        source = cells[first : first + count]
        for f in range(count):
            out[f] = source[f]
        return
    previous = cells[first : first + count]
    for t in range(1, taps):
        target = out if t == taps - 1 else (ping if t % 2 == 1 else pong)
        at = starts[t]
        _max_of(target, previous, cells[at : at + count], count)
        previous = target[:count]


@jit_with_nrt
def _max_pool_phases(x, y, geo):
    """MaxPool without Indices of a 2-D or 1-D window (`phases.flat_window`): each plane laid
    out once in stride phases padded with -inf (`rtsoa.ops.phases`), then separably: the
    maxima over each window row's k_w taps, flat passes over every phase row (`across`),
    then over the k_h rows' maxima, flat passes over the output rows, each pass a select into
    another array, which LLVM vectorises: k_w - 1 passes per row phase and k_h - 1 in all,
    where the taps one by one took k_h * k_w - 1. The taps in `_pool_rows`' row-major order
    with its select, so the results are the same bits: the last NaN of a window in row-major
    order is the last NaN of the last row holding one, and of equal maxima (+0 and -0) the
    first in row-major order is the first of the first row reaching the maximum. A padding
    cell's -inf never wins and an all-padding window gives -inf, as there."""
    rows, pitch = phase_shape(geo)
    n_h, n_w = geo[G_OUT + 1], geo[G_OUT + 2]
    s_h, s_w = geo[G_S + 1], geo[G_S + 2]
    k_h, k_w = geo[G_K + 1], geo[G_K + 2]
    phase = rows * pitch  # cells per phase
    plane = geo[G_IN + 1] * geo[G_IN + 2]
    p = n_h * n_w
    buffer = phase_buffer(geo, -np.inf, x, 0)
    across = np.empty(s_h * phase, dtype=x.dtype)  # per row phase: its rows' window-row maxima
    wide = (rows - 1) * pitch + n_w  # a phase's flat cells up to its last row's last output
    count = (n_h - 1) * pitch + n_w
    ping = np.empty(wide, dtype=x.dtype)
    pong = np.empty(wide, dtype=x.dtype)
    top = np.empty(n_h * pitch, dtype=x.dtype)
    columns = np.empty((s_h, k_w), dtype=np.int64)  # per row phase, where each column tap reads
    for a in range(s_h):
        for kw in range(k_w):
            reach = kw * geo[G_D + 2]
            columns[a, kw] = (a * s_w + reach % s_w) * phase + reach // s_w
    lines = np.empty(k_h, dtype=np.int64)  # where each row tap reads in `across`
    for kh in range(k_h):
        reach = kh * geo[G_D + 1]
        lines[kh] = (reach % s_h) * phase + (reach // s_h) * pitch
    for index in range(geo[G_N] * geo[G_C]):
        fill_phases(x, index * plane, geo, buffer)
        for a in range(s_h):
            row_max = across[a * phase : a * phase + wide]
            _max_of_taps(row_max, ping, pong, buffer, columns[a], wide)
        _max_of_taps(top, ping, pong, across, lines, count)
        copy_rows(top, pitch, y, index * p, n_h, n_w)


@jit_inline_ir
def _max3_fits(geo):
    """Whether `_max_pool_3x3` takes the pool: a 2-D 3 x 3 window without dilation, strides 1
    or 2, begin pads of at most 2, and the row's outputs the input columns over the column
    stride (n_w * s_w = W: the outputs of consecutive rows are then one flat pass over the
    input, ResNet's 3 x 3 / 2 over even sizes and Inception's 3 x 3 / 1)."""
    if not flat_window(geo) or geo[G_K + 1] != 3 or geo[G_K + 2] != 3:
        return False
    if geo[G_D + 1] != 1 or geo[G_D + 2] != 1 or geo[G_PB + 1] > 2 or geo[G_PB + 2] > 2:
        return False
    s_h, s_w = geo[G_S + 1], geo[G_S + 2]
    return 1 <= s_h <= 2 and 1 <= s_w <= 2 and geo[G_OUT + 2] * s_w == geo[G_IN + 2]


@jit_inline_ir
def _later_max(best, v):
    """`_pool_rows`' select of MaxPool's taps in order: a NaN replaces, a larger value
    replaces, of equal values (+0 and -0) the earlier stays."""
    return v if (v > best) | (v != v) else best


@jit_inline_llvm
def _row_maxima(x, h, first, end, s_w, pad_w):
    """h[f] = the maximum of x[s_w * f - pad_w + t], t = 0, 1, 2, in order, for first <= f <
    end: one flat pass over consecutive rows (an output near a row's ends reads the
    neighbouring row; `_edge_maxima` rewrites those). Stride 2 carries the last tap into the
    next output's first, so each input is loaded once, as pairs (LLVM vectorises it with
    shuffles; a third load per output, two apart, became a gather, 4x slower)."""
    if end <= first:
        return
    if s_w == 1:
        source = x[first - pad_w : end - pad_w + 2]
        target = h[first:end]
        for f in range(end - first):
            target[f] = _later_max(_later_max(source[f], source[f + 1]), source[f + 2])
        return
    previous = x[2 * first - pad_w]
    pairs = x[2 * first - pad_w + 1 : 2 * end - pad_w + 1]
    target = h[first:end]
    for f in range(end - first):
        odd = pairs[2 * f + 1]
        target[f] = _later_max(_later_max(previous, pairs[2 * f]), odd)
        previous = odd


@jit_inline_llvm
def _edge_maxima(x, h, rows, geo, ow):
    """Column ow of the row maxima of `rows` rows, an output with a tap outside its row: the
    taps inside in order (none: -inf, as `_pool_rows` gives), column by column over the rows
    (the same taps for every row: no test per element)."""
    t_w, n_w, s_w = geo[G_IN + 2], geo[G_OUT + 2], geo[G_S + 2]
    start = s_w * ow - geo[G_PB + 2]
    first, end = max(0, -start), min(3, t_w - start)
    source = np.uint64(start + first)
    step, width = np.uint64(t_w), np.uint64(n_w)
    target = np.uint64(ow)
    one, two = np.uint64(1), np.uint64(2)
    taps = end - first
    for r in range(rows):
        at = np.uint64(r)
        if taps >= 3:
            top = _later_max(x[source + at * step], x[source + at * step + one])
            top = _later_max(top, x[source + at * step + two])
        elif taps == 2:
            top = _later_max(x[source + at * step], x[source + at * step + one])
        elif taps == 1:
            top = x[source + at * step]
        else:
            top = -np.inf
        h[target + at * width] = top


@jit_inline_llvm
def _column_maxima(h, y, source, target, n, pitch, taps):
    """y[target + j] = the maximum of h[source + t * pitch + j] over the first `taps` of three
    rows, in order (none: -inf), j < n. Unsigned indices: a signed `pitch + j` could wrap, and
    its test per element kept LLVM from vectorising (4x slower)."""
    at, to, step = np.uint64(source), np.uint64(target), np.uint64(pitch)
    if taps == 3:
        for j in range(n):
            i = np.uint64(j)
            top = _later_max(h[at + i], h[at + step + i])
            y[to + i] = _later_max(top, h[at + step + step + i])
    elif taps == 2:
        for j in range(n):
            i = np.uint64(j)
            y[to + i] = _later_max(h[at + i], h[at + step + i])
    elif taps == 1:
        for j in range(n):
            i = np.uint64(j)
            y[to + i] = h[at + i]
    else:
        for j in range(n):
            y[to + np.uint64(j)] = -np.inf


@jit_with_nrt
def _max_pool_3x3(x, y, geo):
    """MaxPool without Indices of a 3 x 3 window (`_max3_fits`), separably: the maxima of each
    output column's three taps along every input row (`_row_maxima`: one flat pass over a
    block of planes, whose rows are consecutive since W = n_w * s_w), then of each output
    row's three rows of those (with row stride 1, one flat pass over the rows whose taps are
    all inside: over the block's planes when each plane has as many output rows as input
    rows, its edge rows then rewritten). The taps in `_pool_rows`' row-major order with its
    select, grouped by rows as `_max_pool_phases` groups them, so the results are the same
    bits. Each input is read once and nothing is copied (the phases' layout copied each
    plane, then passed over it once per tap: 0.28 against 0.11 ms on ResNet's 64 x 112 x
    112)."""
    planes = geo[G_N] * geo[G_C]
    t_h, t_w = geo[G_IN + 1], geo[G_IN + 2]
    n_h, n_w = geo[G_OUT + 1], geo[G_OUT + 2]
    s_h, s_w, pad_h = geo[G_S + 1], geo[G_S + 2], geo[G_PB + 1]
    # the outputs whose three taps lie inside their row: column s_w * ow - pad_w in [0, W - 2)
    low, high = inside_range(-geo[G_PB + 2], s_w, t_w - 2, n_w)
    # with row stride 1, the output rows whose three rows lie inside: one flat pass
    above, below = inside_range(-pad_h, 1, t_h - 2, n_h) if s_h == 1 else (n_h, n_h)
    per_plane = t_h * n_w
    block = max(1, MAX3_BLOCK // max(per_plane, 1))  # planes per pass, their maxima in cache
    h = np.empty(min(block, planes) * per_plane, dtype=x.dtype)
    for first in range(0, planes, block):
        count = min(block, planes - first)
        xs = x[first * t_h * t_w : (first + count) * t_h * t_w]
        rows = count * t_h
        if high > low:  # from the first row's first inside output to the last row's last
            _row_maxima(xs, h, low, (rows - 1) * n_w + high, s_w, geo[G_PB + 2])
        for ow in range(min(low, n_w)):
            _edge_maxima(xs, h, rows, geo, ow)
        for ow in range(max(low, high), n_w):
            _edge_maxima(xs, h, rows, geo, ow)
        if below > above and t_h == n_h:  # one pass over the block's rows (row stride 1)
            n = ((count - 1) * n_h + below - above) * n_w  # the planes' edge rows rewritten below
            _column_maxima(h, y, (above - pad_h) * n_w, (first * n_h + above) * n_w, n, n_w, 3)
        for q in range(count):
            plane_y = (first + q) * n_h * n_w
            if below > above and t_h != n_h:
                source = q * per_plane + (above - pad_h) * n_w
                n = (below - above) * n_w
                _column_maxima(h, y, source, plane_y + above * n_w, n, n_w, 3)
            for oh in range(n_h):
                if above <= oh < below:
                    continue
                top = s_h * oh - pad_h  # the input row of the window's first row
                begin, end = max(0, -top), min(3, t_h - top)  # its rows inside the input
                source = q * per_plane + (top + begin) * n_w
                taps = max(0, end - begin)
                _column_maxima(h, y, source, plane_y + oh * n_w, n_w, n_w, taps)


@jit_inline_ir
def _pairs_fit(geo):
    """Whether `_pool_2x2` takes the pool: a 2-D 2 x 2 window of stride 2, no dilation, no
    padding, every window inside the input (VGG's and U-Net's MaxPool, DenseNet's
    AveragePool)."""
    if not flat_window(geo) or geo[G_K + 1] != 2 or geo[G_K + 2] != 2:
        return False
    if geo[G_S + 1] != 2 or geo[G_S + 2] != 2 or geo[G_D + 1] != 1 or geo[G_D + 2] != 1:
        return False
    if geo[G_PB + 1] != 0 or geo[G_PB + 2] != 0 or geo[G_PE + 1] != 0 or geo[G_PE + 2] != 0:
        return False
    return 2 * geo[G_OUT + 1] <= geo[G_IN + 1] and 2 * geo[G_OUT + 2] <= geo[G_IN + 2]


@jit_with_nrt.keeping_literals("op")
def _pool_2x2(op, x, y, geo):
    """A pool of `_pairs_fit`'s geometry, one output row from its two input rows' pairs in
    one loop (LLVM vectorises the pairs' loads with shuffles), where `_pool_rows` made a
    strided pass per tap (a gather: 0.33 against 0.06 ms on DenseNet's 128 x 56 x 56). The
    taps in `_pool_rows`' order with its arithmetic, so the same bits: MaxPool's select;
    AveragePool's float64 sum from +0 (a window of -0 gives +0) over 4."""
    t_h, t_w = geo[G_IN + 1], geo[G_IN + 2]
    n_h, n_w = geo[G_OUT + 1], geo[G_OUT + 2]
    for p in range(geo[G_N] * geo[G_C]):
        for oh in range(n_h):
            at = (p * t_h + 2 * oh) * t_w
            upper = x[at : at + 2 * n_w]
            lower = x[at + t_w : at + t_w + 2 * n_w]
            out = y[(p * n_h + oh) * n_w : (p * n_h + oh + 1) * n_w]
            if op == MAX:
                for j in range(n_w):
                    top = _later_max(upper[2 * j], upper[2 * j + 1])
                    top = _later_max(_later_max(top, lower[2 * j]), lower[2 * j + 1])
                    out[j] = top
            else:
                for j in range(n_w):
                    total = np.float64(0.0) + upper[2 * j] + upper[2 * j + 1]
                    out[j] = (total + lower[2 * j] + lower[2 * j + 1]) / 4


@jit_with_nrt.keeping_literals("op")
def pool_planes(op, x, y, geo, include_pad, first, count):
    """Planes (image, channel) `first` .. `first + count - 1` of a pool without Indices:
    the same loops on views from the first plane, with a geometry of `count` planes."""
    plane = geo[G_IN] * geo[G_IN + 1] * geo[G_IN + 2]
    p = geo[G_OUT] * geo[G_OUT + 1] * geo[G_OUT + 2]
    piece = geo.copy()
    piece[G_N] = 1
    piece[G_C] = count
    xs = x[first * plane : (first + count) * plane]
    ys = y[first * p : (first + count) * p]
    if op == MAX and _max3_fits(piece):
        _max_pool_3x3(xs, ys, piece)
    elif op == MAX and _overlapping(piece):
        _max_pool_phases(xs, ys, piece)
    elif _pairs_fit(piece):
        _pool_2x2(op, xs, ys, piece)
    elif _row_taps_fit(piece):
        _pool_rows(op, xs, ys, piece, include_pad)
    else:
        pool_run(op, xs, ys, np.zeros(0, dtype=np.int64), piece, include_pad, False)
