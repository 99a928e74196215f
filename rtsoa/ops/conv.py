"""Convolutions: Conv (im2col + BLAS GEMM) and ConvTranspose (BLAS GEMM + col2im), 1-D to 3-D.

Both run on float32 / float64 (X, W and the optional bias B of one dtype). Every spatial op
(these, and the pools in `pooling`) sees its window as 3-D: a 1-D or 2-D op gets leading
spatial dims of size 1 (kernel 1, stride 1, no padding), so one geometry function and one loop
per family serve every rank. `encode_window` lays the ONNX attributes out right-aligned in the
3 slots of each list, and records each list's length for `window_geometry` to check against
the input's spatial rank.

Conv: for each image and group, the input patches are unrolled into a (Cg*K, P) matrix (K
kernel elements, P output positions) and Y[n, group] = W[group] @ cols is one `np.dot` (the
BLAS scipy exposes); a 1x1 kernel with stride 1 and no padding multiplies the input directly.
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
    COL_NBYTES,
    COL_OFFSET,
    F32,
    F64,
    RESULT_ROW,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_MISSING_INPUT,
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
from rtsoa.ops.depthwise import depthwise_run
from rtsoa.ops.registry import register_op
from rtsoa.ops.window_layout import (  # noqa: F401  (re-exported to the windowed ops)
    AUTO_PAD,
    AUTO_PADS,
    CEIL_MODE,
    CONV,
    CONV_TRANSPOSE,
    COUNT_INCLUDE_PAD,
    DILATIONS,
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
    GROUP,
    KERNEL,
    N_DILATIONS,
    N_KERNEL,
    N_OUTPUT_PADDING,
    N_OUTPUT_SHAPE,
    N_PADS,
    N_STRIDES,
    NOTSET,
    OUTPUT_PADDING,
    OUTPUT_SHAPE,
    PADS_BEGIN,
    PADS_END,
    POOL,
    SAME_LOWER,
    SAME_UPPER,
    STORAGE_ORDER,
    STRIDES,
    UNKNOWN_PAD,
    VALID,
    WINDOW_SLOTS,
)

LIMIT = np.int64(1) << 31  # largest accepted dim / attribute value
MAX_ELEMENTS = np.int64(1) << 58  # largest accepted element count of one tensor
MAX_SCRATCH = np.int64(1) << 32  # largest im2col / col2im matrix (elements) a Conv allocates

# FusedConv's activation, in the slots after the window's: activation, Clip's low, Clip's high
ACT_NONE, ACT_RELU, ACT_CLIP = 0, 1, 2
FUSED_ACTIVATION = WINDOW_SLOTS
FUSED_LOW = WINDOW_SLOTS + 1
FUSED_HIGH = WINDOW_SLOTS + 2
FUSED_SLOTS = WINDOW_SLOTS + 3
RESIDUAL = 3  # FusedConv's input row of Z


def _right_aligned(values, default):
    """The last 3 values of a list, right-aligned in 3 slots after `default`s."""
    values = [int(v) for v in values][-3:]
    return [default] * (3 - len(values)) + values


def encode_window(attributes, inputs):
    """Slots of Conv / ConvTranspose / MaxPool / AveragePool attributes (see the slot names)."""
    pads = list(attributes.get("pads", []))
    half = len(pads) // 2
    auto_pad = attributes.get("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode("utf-8", "replace")
    slots = [0] * WINDOW_SLOTS
    slots[AUTO_PAD] = AUTO_PADS.get(auto_pad, UNKNOWN_PAD)
    slots[GROUP] = int(attributes.get("group", 1))
    slots[CEIL_MODE] = int(attributes.get("ceil_mode", 0))
    slots[COUNT_INCLUDE_PAD] = int(attributes.get("count_include_pad", 0))
    slots[STORAGE_ORDER] = int(attributes.get("storage_order", 0))
    lists = (
        (N_KERNEL, KERNEL, "kernel_shape", 1),
        (N_STRIDES, STRIDES, "strides", 1),
        (N_DILATIONS, DILATIONS, "dilations", 1),
        (N_OUTPUT_PADDING, OUTPUT_PADDING, "output_padding", 0),
        (N_OUTPUT_SHAPE, OUTPUT_SHAPE, "output_shape", 1),
    )
    for length_slot, first, name, default in lists:
        values = list(attributes.get(name, []))
        slots[length_slot] = len(values)
        slots[first : first + 3] = _right_aligned(values, default)
    slots[N_PADS] = half if len(pads) % 2 == 0 else -1
    slots[PADS_BEGIN : PADS_BEGIN + 3] = _right_aligned(pads[:half], 0)
    slots[PADS_END : PADS_END + 3] = _right_aligned(pads[half:], 0)
    return slots


@jit_with_nrt
def element_count(table, row):
    """Element count of operand `row`, or -1 if it is MAX_ELEMENTS or more (or a dim is
    negative); overflow-safe, and 0 for any zero dim however large the others."""
    empty = False
    for axis in range(rank(table, row)):
        if dim(table, row, axis) < 0:
            return np.int64(-1)
        empty = empty or dim(table, row, axis) == 0
    if empty:
        return np.int64(0)
    count = np.int64(1)
    for axis in range(rank(table, row)):
        size = dim(table, row, axis)
        if count >= MAX_ELEMENTS // size:
            return np.int64(-1)
        count *= size
    return count


@jit_inline_ir
def _times(a, b):
    """a * b for counts, or -1 if either is -1 or the product reaches MAX_ELEMENTS."""
    if a < 0 or b < 0 or (a > 0 and b >= MAX_ELEMENTS // a):
        return np.int64(-1)
    return a * b


@jit_inline_ir
def _list_ok(attrs, length_slot, spatial, also):
    """An attribute list is absent or has one value per spatial dim (or `also` values)."""
    length = attrs[length_slot]
    return length == 0 or length == spatial or length == also


@jit_with_nrt
def window_geometry(table, attrs, kind):
    """(status, geometry) of a Conv / pool / ConvTranspose on rows 0 (X) and 1 (W, not pools),
    from the attribute slots; checks every value it will index with."""
    geo = np.zeros(GEOMETRY, dtype=np.int64)
    if attrs.shape[0] < WINDOW_SLOTS:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), geo
    x_rank = rank(table, 0)
    spatial = x_rank - 2
    if spatial < 1 or spatial > 3:
        return np.int32(STATUS_OP_BAD_SHAPE), geo
    for axis in range(x_rank):
        if dim(table, 0, axis) < 0 or dim(table, 0, axis) >= LIMIT:
            return np.int32(STATUS_OP_BAD_SHAPE), geo
    if not (
        _list_ok(attrs, N_KERNEL, spatial, spatial)
        and _list_ok(attrs, N_STRIDES, spatial, spatial)
        and _list_ok(attrs, N_DILATIONS, spatial, spatial)
        and _list_ok(attrs, N_PADS, spatial, spatial)
        and _list_ok(attrs, N_OUTPUT_PADDING, spatial, spatial)
        and _list_ok(attrs, N_OUTPUT_SHAPE, spatial, spatial + 2)
    ):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), geo
    auto_pad = attrs[AUTO_PAD]
    group = attrs[GROUP] if kind != POOL else np.int64(1)
    if auto_pad < NOTSET or auto_pad > VALID or group < 1 or group >= LIMIT:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), geo
    if kind == POOL and (attrs[CEIL_MODE] < 0 or attrs[CEIL_MODE] > 1 or attrs[N_KERNEL] == 0):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), geo
    n = dim(table, 0, 0)
    c = dim(table, 0, 1)
    m = c
    if kind != POOL:
        if rank(table, 1) != x_rank:
            return np.int32(STATUS_OP_BAD_SHAPE), geo
        for axis in range(x_rank):
            if dim(table, 1, axis) < 0 or dim(table, 1, axis) >= LIMIT:
                return np.int32(STATUS_OP_BAD_SHAPE), geo
        if kind == CONV:  # W: (M, C / group, k...)
            m = dim(table, 1, 0)
            if dim(table, 1, 1) * group != c or m % group != 0:
                return np.int32(STATUS_OP_BAD_SHAPE), geo
        else:  # W: (C, M / group, k...)
            m = dim(table, 1, 1) * group
            if dim(table, 1, 0) != c or c % group != 0:
                return np.int32(STATUS_OP_BAD_SHAPE), geo
    geo[G_N] = n
    geo[G_C] = c
    geo[G_M] = m
    geo[G_GROUP] = group
    if element_count(table, 0) < 0 or (kind != POOL and element_count(table, 1) < 0):
        return np.int32(STATUS_OP_TOO_LARGE), geo
    total = n * m
    for s in range(3):
        axis = s - (3 - spatial)  # spatial axis of X, negative for the leading size-1 dims
        if axis < 0:  # a leading dim of size 1: kernel 1, stride 1, no padding
            for first in (G_IN, G_K, G_S, G_D, G_OUT):
                geo[first + s] = 1
            continue
        size = dim(table, 0, 2 + axis)
        k = attrs[KERNEL + s]
        if kind != POOL:
            k_w = dim(table, 1, 2 + axis)
            if attrs[N_KERNEL] != 0 and k != k_w:
                return np.int32(STATUS_OP_BAD_SHAPE), geo
            k = k_w
        stride = attrs[STRIDES + s]
        dilation = attrs[DILATIONS + s]
        pb = attrs[PADS_BEGIN + s]
        pe = attrs[PADS_END + s]
        extra = attrs[OUTPUT_PADDING + s]
        if kind == CONV_TRANSPOSE and k < 1:
            return np.int32(STATUS_OP_BAD_SHAPE), geo
        if not (
            0 <= k < LIMIT
            and 1 <= stride < LIMIT
            and 1 <= dilation < LIMIT
            and 0 <= pb < LIMIT
            and 0 <= pe < LIMIT
            and 0 <= extra < LIMIT
            and 1 <= attrs[OUTPUT_SHAPE + s] < LIMIT
        ):
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), geo
        if k < 1:  # a zero-size kernel: W has a 0 spatial dim
            return np.int32(STATUS_OP_BAD_SHAPE), geo
        reach = (k - 1) * dilation + 1
        if kind == CONV_TRANSPOSE:
            if extra >= stride and extra >= dilation:
                return np.int32(STATUS_OP_BAD_ATTRIBUTE), geo
            full = stride * (size - 1) + extra + reach
            if attrs[N_OUTPUT_SHAPE] != 0 or auto_pad == SAME_UPPER or auto_pad == SAME_LOWER:
                out = attrs[OUTPUT_SHAPE + s] if attrs[N_OUTPUT_SHAPE] != 0 else size * stride
                padding = full - out
                if auto_pad == SAME_UPPER:
                    pb = padding // 2
                    pe = padding - pb
                else:
                    pe = padding // 2
                    pb = padding - pe
            elif auto_pad == VALID:
                pb = np.int64(0)
                pe = np.int64(0)
            out = full - pb - pe
        elif auto_pad == SAME_UPPER or auto_pad == SAME_LOWER:
            out = (size + stride - 1) // stride
            needed = max((out - 1) * stride + reach - size, 0)
            pb = needed // 2 if auto_pad == SAME_UPPER else (needed + 1) // 2
            pe = needed - pb
        else:
            if auto_pad == VALID:
                pb = np.int64(0)
                pe = np.int64(0)
            span = size + pb + pe - reach
            if span < 0:
                return np.int32(STATUS_OP_BAD_SHAPE), geo
            if kind == POOL and attrs[CEIL_MODE] == 1:
                out = (span + stride - 1) // stride + 1
                if (out - 1) * stride >= size + pb:  # the last window starts in the padding
                    out -= 1
            else:
                out = span // stride + 1
        if out < 1 or out >= LIMIT:
            return np.int32(STATUS_OP_BAD_SHAPE), geo
        geo[G_IN + s] = size
        geo[G_K + s] = k
        geo[G_S + s] = stride
        geo[G_D + s] = dilation
        geo[G_PB + s] = pb
        geo[G_PE + s] = pe
        geo[G_OUT + s] = out
        if total > 0 and out >= MAX_ELEMENTS // total:
            return np.int32(STATUS_OP_TOO_LARGE), geo
        total *= out
    taps = _times(_times(geo[G_K], geo[G_K + 1]), geo[G_K + 2])
    plane = _times(_times(geo[G_IN], geo[G_IN + 1]), geo[G_IN + 2])
    positions = _times(_times(geo[G_OUT], geo[G_OUT + 1]), geo[G_OUT + 2])
    # the scratch matrices: (c / group * taps, positions) for Conv, (m / group * taps, plane)
    # for ConvTranspose; a pool has none
    scratch = _times(_times(c // group, taps), positions)
    if kind == CONV_TRANSPOSE:
        scratch = _times(_times(m // group, taps), plane)
    if plane < 0 or positions < 0 or (kind != POOL and (scratch < 0 or scratch > MAX_SCRATCH)):
        return np.int32(STATUS_OP_TOO_LARGE), geo
    return np.int32(0), geo


@jit_with_nrt
def window_output(table, out_row, kind_code, geo, spatial):
    """Output row `out_row`: (N, M, out spatial dims) of dtype `kind_code`."""
    set_output(table, out_row, kind_code, spatial + 2)
    set_dim(table, out_row, 0, geo[G_N])
    set_dim(table, out_row, 1, geo[G_M])
    for axis in range(spatial):
        set_dim(table, out_row, 2 + axis, geo[G_OUT + 3 - spatial + axis])


@jit_inline_ir
def holds(table, row, count, size):
    """Does operand `row` have data of at least `count` elements of `size` bytes?"""
    return table[row, COL_OFFSET] >= 0 and table[row, COL_NBYTES] >= count * size


@jit_with_nrt
def float_inputs(table, n_in):
    """Status: inputs 0 .. n_in - 1 that are present are all float32, or all float64."""
    kind = dtype(table, 0)
    if kind != F32 and kind != F64:
        return np.int32(STATUS_OP_BAD_DTYPE)
    for row in range(1, n_in):
        if present(table, row) and dtype(table, row) != kind:
            return np.int32(STATUS_OP_BAD_DTYPE)
    return np.int32(0)


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
def _unroll(data, base, channels, geo, cols, scatter):
    """im2col (scatter False): cols[(c, kd, kh, kw), (od, oh, ow)] = the element of `data`
    (Conv's input, channels from flat offset `base`) that each kernel tap reads at each output
    position, 0 in the padding. col2im (scatter True, ConvTranspose): the adjoint, with the
    roles of input and output swapped: adds cols[(m, kd, kh, kw), (id, ih, iw)] into `data`
    (ConvTranspose's output) at the position each tap reaches, which may be outside."""
    loop = G_IN if scatter else G_OUT  # positions the columns enumerate
    target = G_OUT if scatter else G_IN  # positions of `data`
    n_d, n_h, n_w = geo[loop], geo[loop + 1], geo[loop + 2]
    t_d, t_h, t_w = geo[target], geo[target + 1], geo[target + 2]
    s_d, s_h, s_w = geo[G_S], geo[G_S + 1], geo[G_S + 2]
    plane = t_d * t_h * t_w
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
                        for i_h in range(n_h):
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
                            elif not inside:
                                cols[o : o + n_w] = 0
                            else:
                                cols[o : o + low] = 0
                                if s_w == 1:
                                    cols[o + low : o + high] = data[row + low : row + high]
                                else:
                                    for j in range(low, high):
                                        cols[o + j] = data[row + j * s_w]
                                cols[o + high : o + n_w] = 0
                            o += n_w


@jit_with_nrt
def _epilogue(y, z, start, first, count, p, bias, has_bias, has_z, act, low, high):
    """Channels `first` .. `first + count - 1` of one image, `count * p` elements of Y from
    `start`: + bias, + Z (the same elements), then Relu or Clip, channel by channel while it is in
    cache; each step in Y's dtype, as the separate Add / Relu / Clip ops compute it."""
    zero = y.dtype.type(0)
    for j in range(count):
        at = start + j * p
        row = y[at : at + p]  # views indexed from 0: LLVM vectorises the loops
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
def _conv_run(x, w, bias, has_bias, z, has_z, act, low, high, y, geo):
    n_images, c, m, group = geo[G_N], geo[G_C], geo[G_M], geo[G_GROUP]
    c_g = c // group
    m_g = m // group
    taps = geo[G_K] * geo[G_K + 1] * geo[G_K + 2]
    k = c_g * taps
    plane = geo[G_IN] * geo[G_IN + 1] * geo[G_IN + 2]
    p = geo[G_OUT] * geo[G_OUT + 1] * geo[G_OUT + 2]
    pointwise = taps == 1 and p == plane
    for s in range(3):
        if geo[G_S + s] != 1 or geo[G_PB + s] != 0 or geo[G_PE + s] != 0:
            pointwise = False
    depthwise = c_g == 1 and group > 1
    cols = np.empty(0 if pointwise or depthwise else k * p, dtype=x.dtype)
    finish_blocks = not depthwise and k != 0 and m_g != 0  # else once Y is whole
    if k == 0 or m_g == 0:
        y[:] = 0
    elif depthwise:
        depthwise_run(x, w, y, geo)
    else:
        for n in range(n_images):
            for g in range(group):
                x_base = (n * c + g * c_g) * plane
                if pointwise:
                    source = x[x_base : x_base + k * p]
                else:
                    _unroll(x, x_base, c_g, geo, cols, False)
                    source = cols
                y_base = (n * m + g * m_g) * p
                _gemm(
                    w[g * m_g * k : (g + 1) * m_g * k].reshape((m_g, k)),
                    source.reshape((k, p)),
                    y[y_base : y_base + m_g * p].reshape((m_g, p)),
                )
                if finish_blocks:
                    _epilogue(y, z, y_base, g * m_g, m_g, p, bias, has_bias, has_z, act, low, high)
    if not finish_blocks:
        for n in range(n_images):
            _epilogue(y, z, n * m * p, 0, m, p, bias, has_bias, has_z, act, low, high)


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
                _unroll(y, (n * m + g * m_g) * p, m_g, geo, cols, True)
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


@jit_with_nrt
def _conv_compute(arena, table, n_in, attrs, fattrs, kind, fused):
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
    size = 4 if dtype(table, 0) == F32 else 8
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
    if size == 4:
        x = view(arena, table, 0, np.float32)
        w = view(arena, table, 1, np.float32)
        b = view(arena, table, bias_row, np.float32)
        z = view(arena, table, z_row, np.float32)
        y = view(arena, table, n_in, np.float32)
        if kind == CONV:
            _conv_run(x, w, b, has_bias, z, has_z, act, low, high, y, geo)
        else:
            _conv_transpose_run(x, w, b, has_bias, y, geo)
    else:
        x = view(arena, table, 0, np.float64)
        w = view(arena, table, 1, np.float64)
        b = view(arena, table, bias_row, np.float64)
        z = view(arena, table, z_row, np.float64)
        y = view(arena, table, n_in, np.float64)
        if kind == CONV:
            _conv_run(x, w, b, has_bias, z, has_z, act, low, high, y, geo)
        else:
            _conv_transpose_run(x, w, b, has_bias, y, geo)
    return np.int32(0)


@jit_with_nrt
def conv_compute(arena, table, n_in, n_out, attrs, fattrs):
    return _conv_compute(arena, table, n_in, attrs, fattrs, CONV, False)


@jit_with_nrt
def conv_transpose_compute(arena, table, n_in, n_out, attrs, fattrs):
    return _conv_compute(arena, table, n_in, attrs, fattrs, CONV_TRANSPOSE, False)


@jit_with_nrt
def fused_conv_infer(arena, table, n_in, n_out, attrs, fattrs):
    status = _conv_infer(table, n_in, attrs, CONV)
    if status != 0:
        return status
    return _fused_checks(table, n_in, attrs, fattrs)[0]


@jit_with_nrt
def fused_conv_compute(arena, table, n_in, n_out, attrs, fattrs):
    return _conv_compute(arena, table, n_in, attrs, fattrs, CONV, True)


def encode_fused_conv(attributes, inputs):
    """FusedConv slots: the window's, then activation (ACT_*), Clip's low and high bounds."""
    return encode_window(attributes, inputs) + [
        int(attributes.get("activation", ACT_NONE)),
        float(attributes.get("clip_min", 0.0)),
        float(attributes.get("clip_max", 0.0)),
    ]


register_op("Conv", conv_infer, conv_compute, encode=encode_window, inputs=(2, 3))
register_op(
    "ConvTranspose",
    conv_transpose_infer,
    conv_transpose_compute,
    encode=encode_window,
    inputs=(2, 3),
)
register_op(
    "FusedConv",
    fused_conv_infer,
    fused_conv_compute,
    encode=encode_fused_conv,
    inputs=(2, 4),
    doc="Conv (+ a residual Z) then an optional Relu / Clip: the lowering's fusion of Conv -> "
    "Add -> Relu / Clip",
)
