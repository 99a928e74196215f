"""The compute-op ABI: how an op's shape inference and compute see their tensors.

Every op of a lowered model (Conv, Add, Reshape, ...) is two njit functions with one signature,

    infer(arena, table, n_in, n_out, attrs, fattrs) -> int32 status
    compute(arena, table, n_in, n_out, attrs, fattrs) -> int32 status

- `arena`: uint8[:], the bytes tensors live in (the device's HBM arena at run time; a numpy
  buffer at lowering time, for constant folding and static shapes).
- `table`: int64[MAX_OPERANDS + 1, ROW_WIDTH], the operand table. Rows 0 .. n_in - 1 are the
  inputs in the op's argument order, rows n_in .. n_in + n_out - 1 the outputs, and the last
  row (RESULT_ROW) is where `infer` may leave a flop count. Each row: byte offset of the data
  in `arena` (-1: absent optional input, or data not available), its byte size, DType code,
  rank (-1: absent), then MAX_RANK dims.
- `attrs`: int64[:], the op's attribute slots as its `encode` laid them out; `fattrs` the
  same slots viewed as float64 (a float attribute k is `fattrs[k]`).

The entry checks the counts against the op's registration (`inputs`, `outputs`) and that
its required inputs are present before calling it, so an op checks only its optional ones.
`infer` reads the input rows (dims, dtypes; and the data of the inputs listed in the op's
`data_inputs`, which the executor makes available) and writes each output row's dtype, rank
and dims (the caller computes byte sizes and allocates). `compute` reads the inputs' data and
writes the outputs'; the output rows hold what `infer` wrote. Both return STATUS_OK or one of
the STATUS_OP_* codes (`rtsoa.abi.status.OpStatus`), and never read or write outside the
rows' byte ranges.
Arithmetic follows IEEE / numpy semantics (rtsoa compiles with Numba's numpy error model:
x / 0.0 is inf or nan, not an exception). Any exception that still escapes an op (an
allocation that fails) is caught by the entry and becomes STATUS_OP_EXCEPTION, so a failing op
never reports success.

Each op is compiled once per machine into a C-callable entry of its own (`rtsoa.ops.entry`),
the first time a graph uses it, not once per model or per executor: the op kernels call it
through the graph's table of entry addresses (`rtsoa.ops.library.op_addresses`).
"""

import numpy as np

from rtsoa._jit import jit_inline_ir

# The layout, the statuses and the dtype table are defined in rtsoa.abi; ops import them here.
from rtsoa.abi.dtypes import (  # noqa: F401 - re-exported for ops
    DTYPE_OF_NUMPY,
    ITEMSIZE,
    NUMPY_DTYPES,
    DType,
    dtype_code,
)
from rtsoa.abi.operands import (  # noqa: F401 - re-exported for ops
    ABSENT,
    COL_DIMS,
    COL_DTYPE,
    COL_NBYTES,
    COL_OFFSET,
    COL_RANK,
    ENTRY_COLUMN,
    MAX_OP_OPERANDS,
    MAX_OPERANDS,
    MAX_RANK,
    MODE_COMPUTE,
    MODE_INFER,
    MODE_PART,
    POOL_COLUMN,
    RESULT_ROW,
    ROW_WIDTH,
)
from rtsoa.abi.status import (  # noqa: F401 - re-exported for ops
    STATUS_OK,
    STATUS_OP_ARITY,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_EXCEPTION,
    STATUS_OP_MISSING_INPUT,
    STATUS_OP_NEEDS_DATA,
    STATUS_OP_RANK,
    STATUS_OP_TOO_LARGE,
    STATUS_OP_UNKNOWN,
)
from rtsoa.abi.views import array_over, itemsize

F32 = np.int64(DType.FLOAT32)
F64 = np.int64(DType.FLOAT64)
I32 = np.int64(DType.INT32)
I64 = np.int64(DType.INT64)
U8 = np.int64(DType.UINT8)
I8 = np.int64(DType.INT8)
I16 = np.int64(DType.INT16)
F16 = np.int64(DType.FLOAT16)
BOOL = np.int64(DType.BOOL)
U16 = np.int64(DType.UINT16)
U32 = np.int64(DType.UINT32)
U64 = np.int64(DType.UINT64)

# Element type sets for the ops' declared dtypes (`register_op(..., dtypes=...)`).
FLOATS = frozenset({DType.FLOAT32, DType.FLOAT64})
NUMBERS = FLOATS | {DType.INT32, DType.INT64}
SMALL_INTEGERS = frozenset({DType.INT8, DType.INT16, DType.UINT8})
UNSIGNED = frozenset({DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64})

OK = np.int32(STATUS_OK)  # what an op's infer / compute returns on success

# The activation a fused op applies to its result, in its "activation" attribute slot, as the
# lowering's fusions write it (`rtsoa.lowering.fuse`): FusedConv and WinogradConv take all three
# (Clip's bounds in the slots after), FusedGemm, MatMulBias and FusedBatchNormalization the
# first two.
ACT_NONE, ACT_RELU, ACT_CLIP = 0, 1, 2


# -- reading the table (inlined into ops) ----------------------------------------------------


@jit_inline_ir
def present(table, row):
    """Is operand `row` present (an optional input may be absent)?"""
    return table[row, COL_RANK] >= 0


@jit_inline_ir
def rank(table, row):
    """Rank of operand `row`."""
    return table[row, COL_RANK]


@jit_inline_ir
def dim(table, row, axis):
    """Size of dimension `axis` (0-based, non-negative) of operand `row`."""
    return table[row, COL_DIMS + axis]


@jit_inline_ir
def dtype(table, row):
    """DType code of operand `row`."""
    return table[row, COL_DTYPE]


@jit_inline_ir
def numel(table, row):
    """Element count of operand `row` (1 for a scalar)."""
    count = np.int64(1)
    for axis in range(table[row, COL_RANK]):
        count *= table[row, COL_DIMS + axis]
    return count


@jit_inline_ir
def has_data(table, row):
    """Is operand `row`'s data readable (always at run time; at lowering time only for
    constants)?"""
    return table[row, COL_OFFSET] >= 0


@jit_inline_ir
def view(arena, table, row, numpy_dtype):
    """Operand `row`'s data as a flat C-contiguous array of `numpy_dtype` (no copy, no
    reference counting). The caller checked the row's dtype; the element count is the row's
    byte size over the item size, so the view never leaves the row's bytes."""
    count = table[row, COL_NBYTES] // itemsize(numpy_dtype)
    return array_over(arena, table[row, COL_OFFSET], np.int64(1), (count,), numpy_dtype)


@jit_inline_ir
def int_data(arena, table, row, k):
    """Element `k` of an INT64 or INT32 operand as int64 (shape inputs of Reshape, Slice, ...)."""
    if table[row, COL_DTYPE] == I32:
        return np.int64(view(arena, table, row, np.int32)[k])
    return view(arena, table, row, np.int64)[k]


# -- writing output rows -------------------------------------------------------------------------


@jit_inline_ir
def set_output(table, row, dtype_code_, rank_):
    """Start output row `row`: dtype and rank (dims follow with `set_dim`)."""
    table[row, COL_DTYPE] = dtype_code_
    table[row, COL_RANK] = rank_


@jit_inline_ir
def set_dim(table, row, axis, size):
    """Set dimension `axis` of row `row`."""
    table[row, COL_DIMS + axis] = size


@jit_inline_ir
def copy_shape(table, source, target):
    """Output `target` gets `source`'s dtype, rank and dims."""
    for column in range(COL_DTYPE, ROW_WIDTH):
        table[target, column] = table[source, column]


@jit_inline_ir
def normalize_axis(axis, rank_):
    """A possibly negative axis as 0 .. rank - 1, or -1 if out of range."""
    if axis < 0:
        axis += rank_
    if axis < 0 or axis >= rank_:
        return np.int64(-1)
    return np.int64(axis)


def new_table():
    """A zeroed operand table (Python side: lowering, tests)."""
    return np.zeros((MAX_OPERANDS + 1, ROW_WIDTH), dtype=np.int64)
