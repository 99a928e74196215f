"""Running ops on numpy arrays from Python: constant folding at lowering time, and op tests.

`run_numpy("Add", [a, b])` packs the inputs into an arena, runs the op's shape inference and
compute through the same compiled entry kernels use (compiled on first use), and returns the
outputs as numpy arrays.
`infer_shapes("Add", inputs)` runs shape inference only; an input given as a `TensorInfo`
(dtype code and dims, no data) has no data, so an op that reads it (Reshape's shape) returns
STATUS_OP_NEEDS_DATA.
"""

import math
from typing import NamedTuple

import numpy as np

from rtsoa.errors import OpError
from rtsoa.ops.abi import (
    ABSENT,
    COL_DIMS,
    COL_DTYPE,
    COL_NBYTES,
    COL_OFFSET,
    COL_RANK,
    ITEMSIZE,
    MAX_RANK,
    MODE_COMPUTE,
    MODE_INFER,
    NUMPY_DTYPES,
    RESULT_ROW,
    dtype_code,
    new_table,
)
from rtsoa.ops.library import entry_for, run_op
from rtsoa.ops.registry import OPS, compiled_op_code

ALIGN = 64


class TensorInfo(NamedTuple):
    """What shape inference knows of a tensor: DType code and dims (ints)."""

    dtype: int
    dims: tuple

    @classmethod
    def of(cls, array):
        array = np.asarray(array)
        return cls(int(dtype_code(array.dtype)), tuple(int(d) for d in array.shape))

    @property
    def nbytes(self):
        return math.prod(self.dims) * int(ITEMSIZE[self.dtype])  # Python ints: never wraps


def _aligned(size):
    return (size + ALIGN - 1) // ALIGN * ALIGN


def _fill_row(table, row, info, offset, nbytes):
    if len(info.dims) > MAX_RANK:
        raise ValueError(f"rank {len(info.dims)} above {MAX_RANK}")
    table[row, COL_OFFSET] = offset
    table[row, COL_NBYTES] = nbytes
    table[row, COL_DTYPE] = info.dtype
    table[row, COL_RANK] = len(info.dims)
    table[row, COL_DIMS : COL_DIMS + len(info.dims)] = info.dims


def _row_info(table, row):
    rank = int(table[row, COL_RANK])
    dims = tuple(int(d) for d in table[row, COL_DIMS : COL_DIMS + rank])
    return TensorInfo(int(table[row, COL_DTYPE]), dims)


def _prepare(name, inputs, attributes, n_out):
    op = OPS[name]
    infos = [
        None if x is None else (x if isinstance(x, TensorInfo) else TensorInfo.of(x))
        for x in inputs
    ]
    attrs = op.slots(attributes or {}, infos)
    table = new_table()
    arrays = [None if x is None or isinstance(x, TensorInfo) else np.asarray(x) for x in inputs]
    size = sum(_aligned(a.nbytes) for a in arrays if a is not None)
    arena = np.zeros(max(size, 8), dtype=np.uint8)
    offset = 0
    for row, (info, array) in enumerate(zip(infos, arrays, strict=True)):
        if info is None:
            table[row, COL_OFFSET] = ABSENT
            table[row, COL_RANK] = ABSENT
            continue
        if array is None:
            _fill_row(table, row, info, ABSENT, info.nbytes)
            continue
        data = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
        arena[offset : offset + data.size] = data
        _fill_row(table, row, info, offset, data.size)
        offset += _aligned(data.size)
    return op, attrs, table, arena


def infer_shapes(name, inputs, attributes=None, n_out=1):
    """Output TensorInfos of op `name` on `inputs` (arrays, TensorInfos or None), and its flop
    estimate; raises OpError when the op refuses them."""
    op, attrs, table, arena = _prepare(name, inputs, attributes, n_out)
    n_in = len(inputs)
    status = run_op(MODE_INFER, compiled_op_code(name), arena, table, attrs, n_in, n_out)
    if status != 0:
        raise OpError(name, status)
    return [_row_info(table, n_in + k) for k in range(n_out)], int(table[RESULT_ROW, 0])


def run_numpy(name, inputs, attributes=None, n_out=1, entry=None):
    """Outputs of op `name` on numpy `inputs` (None for an absent optional input); `entry`:
    the entry to run (`rtsoa.ops.library`: the op's name for its generic entry,
    `<op>[<dtype>]` for a variant), else the one `entry_for` picks."""
    op, attrs, table, arena = _prepare(name, inputs, attributes, n_out)
    n_in = len(inputs)
    code = compiled_op_code(name)
    if entry is None:  # one entry for both calls: the full one, which the compute needs
        entry = entry_for(name, (int(table[0, COL_DTYPE]),) if n_in > 0 else ())
    status = run_op(MODE_INFER, code, arena, table, attrs, n_in, n_out, entry)
    if status != 0:
        raise OpError(name, status)
    outputs = [_row_info(table, n_in + k) for k in range(n_out)]
    start = len(arena)
    layout = []
    for info in outputs:
        layout.append(start)
        start += _aligned(info.nbytes)
    grown = np.zeros(max(start, 8), dtype=np.uint8)
    grown[: len(arena)] = arena
    for k, info in enumerate(outputs):
        table[n_in + k, COL_OFFSET] = layout[k]
        table[n_in + k, COL_NBYTES] = info.nbytes
    status = run_op(MODE_COMPUTE, code, grown, table, attrs, n_in, n_out, entry)
    if status != 0:
        raise OpError(name, status)
    results = []
    for k, info in enumerate(outputs):
        data = grown[layout[k] : layout[k] + info.nbytes]
        kind = NUMPY_DTYPES[info.dtype]
        results.append(data.view(kind).reshape(info.dims).copy())
    return results
