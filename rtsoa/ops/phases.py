"""Stride phases of a padded 2-D plane: the layout the direct 3 x 3 depthwise Conv and MaxPool
compute on, so that every output of a plane is one element of one flat, branch-free loop.

A 2-D window op reads input element (s_h * oh - pad_h + kh * d_h, s_w * ow - pad_w + kw * d_w)
for output (oh, ow) and tap (kh, kw). Split the padded input by the remainders of its row and
column modulo the strides: phase (a, b) holds the elements (s_h * i + a - pad_h,
s_w * j + b - pad_w), i < `rows`, j < `pitch`, one after another with row pitch `pitch`, the
cells outside the input holding the op's padding value (0 for a convolution, -inf for MaxPool).
Tap (kh, kw) then reads, for output flat index f = oh * pitch + ow, the element at f plus a
constant: phase ((kh * d_h) % s_h, (kw * d_w) % s_w) at row (kh * d_h) // s_h, column
(kw * d_w) // s_w. The loop over f is contiguous loads at fixed offsets, which LLVM vectorises;
the columns ow >= n_w of each row are computed and dropped (`copy_rows`).

The padding cells are the same for every plane of one geometry: `phase_buffer` fills them
once, `fill_phases` writes a plane's inside cells only. The per-plane helpers are inlined
(`jit_inline_llvm`): on 7 x 7 planes a call per plane and helper cost as much as the taps.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_inline_llvm, jit_with_nrt
from rtsoa.ops.window_layout import G_D, G_IN, G_K, G_OUT, G_PB, G_S

# column stride 2 with phase rows this long or longer fills both column phases in one loop
# (`_fill_column_pairs`); on 7 x 7 outputs the split loops were as fast
PAIRED_PITCH = 12


@jit_with_nrt
def flat_window(geo):
    """Whether the geometry's window is 2-D (or 1-D): one depth position, no depth padding."""
    return geo[G_IN] == 1 and geo[G_K] == 1 and geo[G_OUT] == 1 and geo[G_PB] == 0


@jit_inline_llvm
def phase_shape(geo):
    """(rows, pitch) of each phase: the output rows and columns plus the farthest tap's reach
    in phase rows and columns."""
    reach_h = (geo[G_K + 1] - 1) * geo[G_D + 1] // geo[G_S + 1]
    reach_w = (geo[G_K + 2] - 1) * geo[G_D + 2] // geo[G_S + 2]
    return geo[G_OUT + 1] + reach_h, geo[G_OUT + 2] + reach_w


@jit_inline_llvm
def phases_fit(geo):
    """Whether one plane's phases stay within a few times the plane: strides up to 8 and a
    layout of at most 4 x the plane (+ 64 Ki cells). Geometries a model could mean harm
    with (huge strides, pads or kernels: the layout's size would overflow or exhaust memory)
    take the per-window paths, which visit only the taps inside the input."""
    s_h, s_w = geo[G_S + 1], geo[G_S + 2]
    if s_h > 8 or s_w > 8:
        return False
    rows, pitch = phase_shape(geo)
    if rows > (1 << 24) or pitch > (1 << 24):
        return False
    return s_h * s_w * rows * pitch <= 4 * geo[G_IN + 1] * geo[G_IN + 2] + (1 << 16)


@jit_with_nrt
def phase_buffer(geo, padding, dtype_of, slack):
    """The phases of one plane and `slack` cells after them, every cell holding `padding` (of
    `dtype_of`'s dtype): a flat loop run in whole chunks reads up to a chunk past its end."""
    rows, pitch = phase_shape(geo)
    count = geo[G_S + 1] * geo[G_S + 2] * rows * pitch + slack
    buffer = np.empty(count, dtype=dtype_of.dtype)
    buffer[:] = padding
    return buffer


@jit_with_nrt
def tap_offsets(geo):
    """Where each tap (kh, kw), row-major, reads in the phases, relative to the output's flat
    index (uint64, one per tap)."""
    rows, pitch = phase_shape(geo)
    s_h, s_w = geo[G_S + 1], geo[G_S + 2]
    offsets = np.empty(geo[G_K + 1] * geo[G_K + 2], dtype=np.uint64)
    for kh in range(geo[G_K + 1]):
        for kw in range(geo[G_K + 2]):
            reach_h, reach_w = kh * geo[G_D + 1], kw * geo[G_D + 2]
            phase = (reach_h % s_h) * s_w + reach_w % s_w
            at = phase * rows * pitch + (reach_h // s_h) * pitch + reach_w // s_w
            offsets[kh * geo[G_K + 2] + kw] = at
    return offsets


@jit_inline_ir
def inside_range(start, step, size, count):
    """(low, high): the j < `count` whose position start + j * step lies in [0, size)."""
    low = np.int64(0) if start >= 0 else min((-start + step - 1) // step, count)
    high = min((size - 1 - start) // step + 1, count) if size - 1 - start >= 0 else 0
    return low, max(low, high)


@jit_inline_llvm
def fill_phases(x, x_base, geo, buffer):
    """Write the plane of `x` from flat offset `x_base` into the inside cells of `buffer`."""
    rows, pitch = phase_shape(geo)
    if geo[G_S + 2] == 2 and pitch >= PAIRED_PITCH:
        _fill_column_pairs(x, x_base, geo, buffer, rows, pitch)
        return
    t_h, t_w = geo[G_IN + 1], geo[G_IN + 2]
    s_h, s_w = geo[G_S + 1], geo[G_S + 2]
    stride = np.uint64(s_w)
    for a in range(s_h):
        for b in range(s_w):
            base = (a * s_w + b) * rows * pitch
            column = b - geo[G_PB + 2]  # the input column of the phase's column 0
            low, high = inside_range(column, s_w, t_w, pitch)
            for i in range(rows):
                row = s_h * i + a - geo[G_PB + 1]
                if row < 0 or row >= t_h:
                    continue
                # unsigned indices: no negative-index wrap, so LLVM vectorises the copies
                source = np.uint64(x_base + row * t_w + column + low * s_w)
                target = np.uint64(base + i * pitch + low)
                if s_w == 1:
                    for j in range(high - low):
                        buffer[target + np.uint64(j)] = x[source + np.uint64(j)]
                else:
                    for j in range(high - low):
                        buffer[target + np.uint64(j)] = x[source + np.uint64(j) * stride]


@jit_inline_llvm
def _fill_column_pairs(x, x_base, geo, buffer, rows, pitch):
    """`fill_phases` for column stride 2: both column phases of an input row in one loop over
    the phase columns inside the input in both, which reads the row's pairs contiguously
    (LLVM vectorises it with shuffles; a loop per phase reads every other element, a gather,
    5x slower on MobileNetV2's 112 x 112 planes), then the few columns inside in one phase.
    Input row by input row, each into its phase row, through views of the row and of the two
    phase rows (with `_copy_pair_edges`' tests for the edge columns: 0.21 ms on MobileNetV2's
    96 x 112 x 112 input, where the loop over flat offsets and edge loops took 0.33)."""
    t_h, t_w = geo[G_IN + 1], geo[G_IN + 2]
    s_h, pad_h, pad_w = geo[G_S + 1], geo[G_PB + 1], geo[G_PB + 2]
    low_even, high_even = inside_range(-pad_w, 2, t_w, pitch)
    low_odd, high_odd = inside_range(1 - pad_w, 2, t_w, pitch)
    both_low = max(low_even, low_odd)
    both_high = max(both_low, min(high_even, high_odd))
    cells = rows * pitch  # one phase
    for row in range(t_h):  # the phase row (a, i) of input row s_h * i + a - pad_h
        i, a = divmod(row + pad_h, s_h)
        if i >= rows:  # below the rows any output reads
            break
        even = a * 2 * cells + i * pitch
        odd = even + cells
        start = x_base + row * t_w - pad_w  # phase column j reads start + 2 * j (+ 1)
        _copy_pair_edges(x, start, buffer, even, low_even, high_even, both_low, both_high)
        _copy_pair_edges(x, start + 1, buffer, odd, low_odd, high_odd, both_low, both_high)
        pairs = x[start + 2 * both_low : start + 2 * both_high]  # inside: start + 2 * both_low >= 0
        to_even = buffer[even + both_low : even + both_high]
        to_odd = buffer[odd + both_low : odd + both_high]
        for j in range(both_high - both_low):
            to_even[j] = pairs[2 * j]
            to_odd[j] = pairs[2 * j + 1]


@jit_inline_ir
def _copy_pair_edges(x, start, buffer, target, low, high, both_low, both_high):
    """The columns of one phase row inside the input in this phase alone: [low, high) but
    [both_low, both_high). The two phases' inside ranges start and end at most one column
    apart (their first input columns are one apart, each takes every other one), so there is
    at most one such column at each end: tests, not loops (a loop per end, vectorised with
    its checks, cost more than the row's pairs: 0.38 against 0.18 ms on MobileNetV2's
    96 x 112 x 112 input)."""
    if low < min(both_low, high):
        buffer[target + low] = x[start + 2 * low]
    last = high - 1
    if last >= max(both_high, low):
        buffer[target + last] = x[start + 2 * last]


@jit_inline_llvm
def copy_rows(out, pitch, y, y_base, n_h, n_w):
    """y[y_base + oh * n_w + ow] = out[oh * pitch + ow]: the outputs of a flat loop, without the
    columns past each row's end."""
    for oh in range(n_h):
        source = np.uint64(oh * pitch)
        target = np.uint64(y_base + oh * n_w)
        for ow in range(n_w):
            y[target + np.uint64(ow)] = out[source + np.uint64(ow)]
