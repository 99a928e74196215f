"""DepthToSpace and SpaceToDepth: NCHW tensors whose blocksize x blocksize spatial blocks move
to the channel axis and back. They copy bytes, so they take every element type.

Both take attrs [blocksize, mode] (mode 0: DCR, 1: CRD). With C' = channels / blocksize^2
(DepthToSpace) or the input's channels (SpaceToDepth), element (n, c, h * b + i, w * b + j)
of the spatial side is element (n, d, h, w) of the depth side, where d = (i * b + j) * C' + c
in DCR mode and d = c * b * b + i * b + j in CRD mode. DepthToSpace needs channels divisible
by blocksize^2, SpaceToDepth height and width divisible by blocksize (else STATUS_OP_BAD_SHAPE).
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    dim,
    dtype,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.copying import holds, item_size
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import LIMIT, element_count

DCR, CRD = 0, 1
MODES = {"DCR": DCR, "CRD": CRD}
TO_SPACE, TO_DEPTH = 0, 1


@jit_with_nrt
def _infer(table, n_in, attrs, direction):
    if attrs.shape[0] < 2 or attrs[0] < 1 or attrs[0] > LIMIT or attrs[1] < DCR or attrs[1] > CRD:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    if item_size(table, 0) == 0:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if rank(table, 0) != 4 or element_count(table, 0) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    b = attrs[0]
    n, c, h, w = dim(table, 0, 0), dim(table, 0, 1), dim(table, 0, 2), dim(table, 0, 3)
    set_output(table, n_in, dtype(table, 0), 4)
    set_dim(table, n_in, 0, n)
    if direction == TO_SPACE:
        if c % (b * b) != 0:
            return np.int32(STATUS_OP_BAD_SHAPE)
        set_dim(table, n_in, 1, c // (b * b))
        set_dim(table, n_in, 2, h * b)
        set_dim(table, n_in, 3, w * b)
    else:
        if h % b != 0 or w % b != 0:
            return np.int32(STATUS_OP_BAD_SHAPE)
        set_dim(table, n_in, 1, c * b * b)
        set_dim(table, n_in, 2, h // b)
        set_dim(table, n_in, 3, w // b)
    return OK


@jit_with_nrt
def _move(src, dst, size, b, crd, to_space, n, channels, height, width):
    """Copy between the spatial side [n, channels, height * b, width * b] and the depth side
    [n, channels * b * b, height, width], from the depth side when `to_space`."""
    depth = channels * b * b
    for image in range(n):
        for c in range(channels):
            for i in range(b):
                for j in range(b):
                    d = c * b * b + i * b + j if crd else (i * b + j) * channels + c
                    for h in range(height):
                        for w in range(width):
                            deep = ((image * depth + d) * height + h) * width + w
                            row = h * b + i
                            wide = (
                                ((image * channels + c) * height * b + row) * width * b + w * b + j
                            )
                            source, target = (deep, wide) if to_space else (wide, deep)
                            for k in range(size):
                                dst[target * size + k] = src[source * size + k]


@jit_with_nrt
def _compute(arena, table, n_in, attrs, direction):
    status = _infer(table, n_in, attrs, direction)
    if status != 0:
        return status
    if not (holds(table, 0) and holds(table, n_in)):
        return np.int32(STATUS_OP_BAD_SHAPE)
    b = attrs[0]
    spatial = n_in if direction == TO_SPACE else 0  # the row of shape [n, c, h * b, w * b]
    n, channels = dim(table, spatial, 0), dim(table, spatial, 1)
    height, width = dim(table, spatial, 2) // b, dim(table, spatial, 3) // b
    src = view(arena, table, 0, np.uint8)
    dst = view(arena, table, n_in, np.uint8)
    to_space = direction == TO_SPACE
    size = item_size(table, 0)
    _move(src, dst, size, b, attrs[1] == CRD, to_space, n, channels, height, width)
    return OK


@jit_with_nrt
def depth_to_space_infer(arena, table, n_in, n_out, attrs, fattrs):
    return _infer(table, n_in, attrs, TO_SPACE)


@jit_with_nrt
def depth_to_space_compute(arena, table, n_in, n_out, attrs, fattrs):
    return _compute(arena, table, n_in, attrs, TO_SPACE)


@jit_with_nrt
def space_to_depth_infer(arena, table, n_in, n_out, attrs, fattrs):
    return _infer(table, n_in, attrs, TO_DEPTH)


@jit_with_nrt
def space_to_depth_compute(arena, table, n_in, n_out, attrs, fattrs):
    return _compute(arena, table, n_in, attrs, TO_DEPTH)


def encode_blocks(attributes, inputs):
    """Slots: blocksize (required: 0 if absent, which the op refuses), mode (`MODES`; -1 for
    another name, which the converter refuses first)."""
    mode = attributes.get("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    return [int(attributes.get("blocksize", 0)), MODES.get(mode, -1)]


register_op("DepthToSpace", depth_to_space_infer, depth_to_space_compute, encode=encode_blocks)
register_op("SpaceToDepth", space_to_depth_infer, space_to_depth_compute, encode=encode_blocks)
