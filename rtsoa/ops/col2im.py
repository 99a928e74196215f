"""Col2Im (opset 18): sliding blocks of columns summed back into an image (im2col's adjoint).

Inputs: input [N, C * prod(block_shape), L]; image_shape and block_shape, int64 1-D tensors of
one length d (the spatial rank, 1 to MAX_RANK - 2) whose data shape inference reads
(`data_inputs`). attrs: [d_dilations, d_pads, d_strides, dilations..., pads..., strides...]
(a length 0: the attribute is absent, its default used; else it must be d, 2d for pads).
Output [N, C, image_shape...]. With blocks_i = (image_i + pad_begin_i + pad_end_i -
dilation_i (block_i - 1) - 1) / stride_i + 1 per spatial axis, L must be their product (each
at least 1); column l of block element b lands at image position
l_i stride_i - pad_begin_i + b_i dilation_i on each axis, where inside the image, and is added
there in the input's type, blocks in order as onnx.reference sums them. float32 / float64,
int32 / int64. A shape that does not fit fails with STATUS_OP_BAD_SHAPE, a stride or
dilation below 1 or a negative pad with STATUS_OP_BAD_ATTRIBUTE.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    F64,
    I32,
    I64,
    MAX_RANK,
    NUMBERS,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_NEEDS_DATA,
    DType,
    dim,
    dtype,
    int_data,
    numel,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.copying import holds
from rtsoa.ops.registry import register_op

LISTS = ("dilations", "pads", "strides")


@jit_with_nrt
def _geometry(arena, table, attrs):
    """(status, [image, block, dilation, pad_begin, pad_end, stride, blocks] x d rows)."""
    geometry = np.zeros((7, MAX_RANK), dtype=np.int64)
    if rank(table, 0) != 3 or rank(table, 1) != 1 or rank(table, 2) != 1:
        return np.int32(STATUS_OP_BAD_SHAPE), geometry, 0
    d = dim(table, 1, 0)
    if d < 1 or d > MAX_RANK - 2 or dim(table, 2, 0) != d:
        return np.int32(STATUS_OP_BAD_SHAPE), geometry, 0
    if not holds(table, 1) or not holds(table, 2):
        return np.int32(STATUS_OP_NEEDS_DATA), geometry, 0
    if attrs.shape[0] < 3:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), geometry, 0
    n_dilations, n_pads, n_strides = attrs[0], attrs[1], attrs[2]
    for given, wanted in ((n_dilations, d), (n_pads, 2 * d), (n_strides, d)):
        if given != 0 and given != wanted:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), geometry, 0
    if attrs.shape[0] < 3 + n_dilations + n_pads + n_strides:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), geometry, 0
    pads = 3 + n_dilations
    strides = pads + n_pads
    blocks = np.int64(1)
    for i in range(d):
        image = int_data(arena, table, 1, i)
        block = int_data(arena, table, 2, i)
        dilation = attrs[3 + i] if n_dilations > 0 else 1
        begin = attrs[pads + i] if n_pads > 0 else 0
        end = attrs[pads + d + i] if n_pads > 0 else 0
        stride = attrs[strides + i] if n_strides > 0 else 1
        if dilation < 1 or stride < 1 or begin < 0 or end < 0:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), geometry, 0
        if image < 1 or block < 1:
            return np.int32(STATUS_OP_BAD_SHAPE), geometry, 0
        span = image + begin + end - dilation * (block - 1) - 1
        if span < 0:
            return np.int32(STATUS_OP_BAD_SHAPE), geometry, 0
        count = span // stride + 1
        geometry[0, i], geometry[1, i], geometry[2, i] = image, block, dilation
        geometry[3, i], geometry[4, i], geometry[5, i] = begin, end, stride
        geometry[6, i] = count
        blocks *= count
    if blocks != dim(table, 0, 2):
        return np.int32(STATUS_OP_BAD_SHAPE), geometry, 0
    return OK, geometry, d


@jit_with_nrt
def col2im_infer(arena, table, n_in, n_out, attrs, fattrs):
    kind = dtype(table, 0)
    if kind != F32 and kind != F64 and kind != I32 and kind != I64:
        return np.int32(STATUS_OP_BAD_DTYPE)
    status, geometry, d = _geometry(arena, table, attrs)
    if status != 0:
        return status
    block = np.int64(1)
    for i in range(d):
        block *= geometry[1, i]
    if dim(table, 0, 1) % block != 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    set_output(table, n_in, kind, d + 2)
    set_dim(table, n_in, 0, dim(table, 0, 0))
    set_dim(table, n_in, 1, dim(table, 0, 1) // block)
    for i in range(d):
        set_dim(table, n_in, 2 + i, geometry[0, i])
    return OK


@jit_with_nrt
def _fold(x, out, geometry, d, planes, block, columns, image):
    """out[plane] += every column of x[plane] at its image position (see the module)."""
    position = np.zeros(MAX_RANK, dtype=np.int64)
    offset = np.zeros(MAX_RANK, dtype=np.int64)
    for plane in range(planes):
        for b in range(block):
            rest = b
            for i in range(d - 1, -1, -1):
                offset[i] = rest % geometry[1, i]
                rest //= geometry[1, i]
            for column in range(columns):
                rest = column
                inside = True
                for i in range(d - 1, -1, -1):
                    at = rest % geometry[6, i]
                    rest //= geometry[6, i]
                    position[i] = at * geometry[5, i] - geometry[3, i] + offset[i] * geometry[2, i]
                    inside = inside and 0 <= position[i] < geometry[0, i]
                if not inside:
                    continue
                target = np.int64(0)
                for i in range(d):
                    target = target * geometry[0, i] + position[i]
                out[plane * image + target] += x[(plane * block + b) * columns + column]


@jit_with_nrt
def col2im_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = col2im_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    if not holds(table, 0) or not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    _, geometry, d = _geometry(arena, table, attrs)
    planes = dim(table, n_in, 0) * dim(table, n_in, 1)
    block = dim(table, 0, 1) // max(dim(table, n_in, 1), 1)
    columns = dim(table, 0, 2)
    image = numel(table, n_in) // max(planes, 1)
    kind = dtype(table, 0)
    if kind == F32:
        out32 = view(arena, table, n_in, np.float32)
        out32[:] = 0
        _fold(view(arena, table, 0, np.float32), out32, geometry, d, planes, block, columns, image)
    elif kind == F64:
        out64 = view(arena, table, n_in, np.float64)
        out64[:] = 0
        _fold(view(arena, table, 0, np.float64), out64, geometry, d, planes, block, columns, image)
    elif kind == I32:
        outi32 = view(arena, table, n_in, np.int32)
        outi32[:] = 0
        _fold(view(arena, table, 0, np.int32), outi32, geometry, d, planes, block, columns, image)
    else:
        outi64 = view(arena, table, n_in, np.int64)
        outi64[:] = 0
        _fold(view(arena, table, 0, np.int64), outi64, geometry, d, planes, block, columns, image)
    return OK


def list_slots(attributes, names):
    """The lengths of the integer-list attributes `names` (0: absent), then their values."""
    lists = [[int(v) for v in attributes.get(name, [])] for name in names]
    return [len(values) for values in lists] + [v for values in lists for v in values]


def encode_col2im(attributes, inputs):
    """Col2Im slots: the lengths of dilations, pads and strides, then their values."""
    return list_slots(attributes, LISTS)


register_op(
    "Col2Im",
    col2im_infer,
    col2im_compute,
    encode=encode_col2im,
    inputs=(3, 3),
    data_inputs=(1, 2),
    dtypes={0: NUMBERS, 1: frozenset({DType.INT64}), 2: frozenset({DType.INT64})},
)
