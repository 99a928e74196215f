"""AffineGrid (opset 20): the sampling grid of a batch of affine transforms, for GridSample.

Inputs: theta float32 / float64 [N, 2, 3] (2-D) or [N, 3, 4] (3-D), and size (int64, data
read by shape inference) [N, C, H, W] or [N, C, D, H, W]; attrs [align_corners]. The output,
theta's element type, is [N, H, W, 2] or [N, D, H, W, 3]: theta[n] times the homogeneous
point (x, y[, z], 1) of each output position, where a position i of an axis of n points is
-1 + (2 i + 1) / n, or with align_corners -1 + 2 i / (n - 1) (-1 when n is 1, as onnx.reference
and PyTorch have it; onnxruntime gives 1). Coordinates are computed in float64 and rounded once.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    F64,
    FLOATS,
    I64,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_NEEDS_DATA,
    dim,
    dtype,
    has_data,
    numel,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.copying import holds
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import LIMIT, element_count


@jit_with_nrt
def affine_grid_infer(arena, table, n_in, n_out, attrs, fattrs):
    if attrs.shape[0] < 1 or (attrs[0] != 0 and attrs[0] != 1):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    kind = dtype(table, 0)
    if (kind != F32 and kind != F64) or dtype(table, 1) != I64:
        return np.int32(STATUS_OP_BAD_DTYPE)
    if rank(table, 0) != 3 or rank(table, 1) != 1:
        return np.int32(STATUS_OP_BAD_SHAPE)
    spatial = dim(table, 1, 0) - 2
    if spatial != 2 and spatial != 3:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if dim(table, 0, 1) != spatial or dim(table, 0, 2) != spatial + 1:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if not has_data(table, 1):
        return np.int32(STATUS_OP_NEEDS_DATA)
    if not holds(table, 1):
        return np.int32(STATUS_OP_BAD_SHAPE)
    size = view(arena, table, 1, np.int64)
    if size[0] != dim(table, 0, 0):
        return np.int32(STATUS_OP_BAD_SHAPE)
    set_output(table, n_in, kind, spatial + 2)
    set_dim(table, n_in, 0, size[0])
    for a in range(spatial):
        if size[2 + a] < 0 or size[2 + a] > LIMIT:
            return np.int32(STATUS_OP_BAD_SHAPE)
        set_dim(table, n_in, 1 + a, size[2 + a])
    set_dim(table, n_in, spatial + 1, spatial)
    if element_count(table, n_in) < 0:
        return np.int32(STATUS_OP_BAD_SHAPE)
    return OK


@jit_with_nrt
def _position(i, n, align):
    """Normalized coordinate of position `i` of an axis of `n` points."""
    if align:
        return -1.0 if n <= 1 else -1.0 + 2.0 * i / (n - 1)
    return -1.0 + (2.0 * i + 1.0) / n


@jit_with_nrt
def _grid(theta, out, batches, depth, height, width, spatial, align):
    """out[n, (d,) h, w, r] = theta[n, r, :] . (x, y, (z,) 1) in float64."""
    columns = spatial + 1
    o = 0
    point = np.ones(4)
    for n in range(batches):
        base = n * spatial * columns
        for d in range(depth):
            if spatial == 3:
                point[2] = _position(d, depth, align)
            for h in range(height):
                point[1] = _position(h, height, align)
                for w in range(width):
                    point[0] = _position(w, width, align)
                    point[spatial] = 1.0
                    for r in range(spatial):
                        total = 0.0
                        for j in range(columns):
                            total += np.float64(theta[base + r * columns + j]) * point[j]
                        out[o] = total
                        o += 1


@jit_with_nrt
def affine_grid_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = affine_grid_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    if numel(table, n_in) == 0:
        return OK
    if not (holds(table, 0) and holds(table, n_in)):
        return np.int32(STATUS_OP_BAD_SHAPE)
    spatial = rank(table, n_in) - 2
    depth = dim(table, n_in, 1) if spatial == 3 else np.int64(1)
    height, width = dim(table, n_in, spatial - 1), dim(table, n_in, spatial)
    batches = dim(table, n_in, 0)
    align = attrs[0] == 1
    if dtype(table, 0) == F32:
        theta, out = view(arena, table, 0, np.float32), view(arena, table, n_in, np.float32)
        _grid(theta, out, batches, depth, height, width, spatial, align)
    else:
        theta, out = view(arena, table, 0, np.float64), view(arena, table, n_in, np.float64)
        _grid(theta, out, batches, depth, height, width, spatial, align)
    return OK


def encode_affine_grid(attributes, inputs):
    """AffineGrid slots: align_corners (default 0)."""
    return [int(attributes.get("align_corners", 0))]


register_op(
    "AffineGrid",
    affine_grid_infer,
    affine_grid_compute,
    encode=encode_affine_grid,
    inputs=(2, 2),
    data_inputs=(1,),
    dtypes={0: FLOATS},
)
