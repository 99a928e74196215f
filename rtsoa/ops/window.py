"""The window geometry every spatial op shares (Conv, ConvTranspose, FusedConv, the pools): the
attribute slots `encode_window` writes (laid out in `window_layout`), `window_geometry` that
checks them against the input's shape and derives the 3-D geometry, and the size checks the
ops run before they index (`element_count`, `holds`, `float_inputs`).

A 1-D or 2-D op gets leading spatial dims of size 1 (kernel 1, stride 1, no padding), so one
geometry function and one loop per family serve every rank. `encode_window` lays the ONNX
attributes out right-aligned in the 3 slots of each list, and records each list's length for
`window_geometry` to check against the input's spatial rank.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_with_nrt
from rtsoa.ops.abi import (
    COL_NBYTES,
    COL_OFFSET,
    F32,
    F64,
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
)
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
def _list_ok(attrs, length_slot, spatial):
    """An attribute list is absent or has one value per spatial dim (output_shape too: with N
    and C in front onnxruntime refuses it)."""
    length = attrs[length_slot]
    return length == 0 or length == spatial


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
        _list_ok(attrs, N_KERNEL, spatial)
        and _list_ok(attrs, N_STRIDES, spatial)
        and _list_ok(attrs, N_DILATIONS, spatial)
        and _list_ok(attrs, N_PADS, spatial)
        and _list_ok(attrs, N_OUTPUT_PADDING, spatial)
        and _list_ok(attrs, N_OUTPUT_SHAPE, spatial)
    ):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), geo
    auto_pad = attrs[AUTO_PAD]
    group = attrs[GROUP] if kind != POOL else np.int64(1)
    if auto_pad < NOTSET or auto_pad > VALID or group < 1 or group >= LIMIT:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), geo
    if kind != POOL and auto_pad != NOTSET and attrs[N_PADS] != 0:
        # pads with auto_pad: the definition forbids it, onnxruntime refuses a Conv or a
        # ConvTranspose that has both (its pools let auto_pad win, as rtsoa's do)
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
            out = full - pb - pe  # VALID: no pads (refused with auto_pad above)
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
