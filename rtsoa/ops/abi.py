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
the STATUS_OP_* codes below, and never read or write outside the rows' byte ranges.
Arithmetic follows IEEE / numpy semantics (rtsoa compiles with Numba's numpy error model:
x / 0.0 is inf or nan, not an exception). Any exception that still escapes an op (an
allocation that fails) is caught by the entry and becomes STATUS_OP_EXCEPTION, so a failing op
never reports success.

Ops are compiled once per machine (all of them, into one C-callable entry, `ops.entry`), not
once per model or per executor: kernels call the entry through its address.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir
from rtsoa.graph.schema import MAX_RANK, DType
from rtsoa.kernels.runtime import OPERAND_ROWS, OPERAND_WIDTH
from rtsoa.kernels.tensors import _array_over, itemsize

MAX_OPERANDS = 64  # rows of the operand table (plus RESULT_ROW)
MODE_INFER = 0  # the entry's modes: shape inference
MODE_COMPUTE = 1  # ... and compute
# Inputs + outputs of one op (Concat / Sum with more are refused at lowering); rows from here
# to MAX_OPERANDS - 1 are scratch rows an op may use for its own shape bookkeeping.
MAX_OP_OPERANDS = 56
COL_OFFSET = 0
COL_NBYTES = 1
COL_DTYPE = 2
COL_RANK = 3
COL_DIMS = 4
ROW_WIDTH = COL_DIMS + MAX_RANK
assert (MAX_OPERANDS + 1, ROW_WIDTH) == (OPERAND_ROWS, OPERAND_WIDTH)  # WorkerState's tables
RESULT_ROW = MAX_OPERANDS  # infer may write the op's flop count to table[RESULT_ROW, 0]
ABSENT = -1

# Op statuses: in the kernel-failure range, apart from the device's (1xx).
STATUS_OP_BAD_DTYPE = 2001  # an input dtype the op does not support, or mismatched dtypes
STATUS_OP_BAD_SHAPE = 2002  # incompatible shapes (broadcast, inner dimensions, ...)
STATUS_OP_BAD_ATTRIBUTE = 2003  # an attribute value the op cannot use
STATUS_OP_NEEDS_DATA = 2004  # infer needs an input's data that is not available (lowering time)
STATUS_OP_RANK = 2005  # a result would have more than MAX_RANK dimensions
STATUS_OP_UNKNOWN = 2006  # an op code the entry does not know
STATUS_OP_BAD_INDEX = 2007  # an index input out of range (Gather, ...)
STATUS_OP_MISSING_INPUT = 2008  # a required input is absent
STATUS_OP_TOO_LARGE = 2009  # a result's size overflows int64 bytes
STATUS_OP_ARITY = 2010  # input / output counts outside what the op takes
STATUS_OP_EXCEPTION = 2011  # an exception escaped the op's compiled code (the entry caught it)

OP_STATUS_NAMES = {
    STATUS_OP_BAD_DTYPE: "unsupported or mismatched input dtype",
    STATUS_OP_BAD_SHAPE: "incompatible input shapes",
    STATUS_OP_BAD_ATTRIBUTE: "bad attribute value",
    STATUS_OP_NEEDS_DATA: "shape depends on input data not available",
    STATUS_OP_RANK: f"result rank above {MAX_RANK}",
    STATUS_OP_UNKNOWN: "unknown op code",
    STATUS_OP_BAD_INDEX: "index out of range",
    STATUS_OP_MISSING_INPUT: "a required input is absent",
    STATUS_OP_TOO_LARGE: "result too large",
    STATUS_OP_ARITY: "input or output count the op does not take",
    STATUS_OP_EXCEPTION: (
        "an exception was raised inside the op's compiled code (for example a MemoryError from "
        "a host-side buffer too large to allocate); its outputs were not written"
    ),
}

# Bytes per element by DType code (0 for UNDEFINED).
ITEMSIZE = np.zeros(len(DType), dtype=np.int64)
for _dtype, _size in (
    (DType.FLOAT32, 4),
    (DType.FLOAT64, 8),
    (DType.FLOAT16, 2),
    (DType.INT8, 1),
    (DType.INT16, 2),
    (DType.INT32, 4),
    (DType.INT64, 8),
    (DType.UINT8, 1),
    (DType.BOOL, 1),
):
    ITEMSIZE[_dtype] = _size

F32 = np.int64(DType.FLOAT32)
F64 = np.int64(DType.FLOAT64)
I32 = np.int64(DType.INT32)
I64 = np.int64(DType.INT64)
U8 = np.int64(DType.UINT8)
I8 = np.int64(DType.INT8)
I16 = np.int64(DType.INT16)
F16 = np.int64(DType.FLOAT16)
BOOL = np.int64(DType.BOOL)

# Element type sets for the ops' declared dtypes (`register_op(..., dtypes=...)`).
FLOATS = frozenset({DType.FLOAT32, DType.FLOAT64})
NUMBERS = FLOATS | {DType.INT32, DType.INT64}
SMALL_INTEGERS = frozenset({DType.INT8, DType.INT16, DType.UINT8})

NUMPY_DTYPES = {
    DType.FLOAT32: np.float32,
    DType.FLOAT64: np.float64,
    DType.FLOAT16: np.float16,
    DType.INT8: np.int8,
    DType.INT16: np.int16,
    DType.INT32: np.int32,
    DType.INT64: np.int64,
    DType.UINT8: np.uint8,
    DType.BOOL: np.bool_,
}
DTYPE_OF_NUMPY = {np.dtype(v): k for k, v in NUMPY_DTYPES.items()}


def dtype_code(numpy_dtype):
    """The DType code of a numpy dtype (KeyError if rtsoa has none)."""
    return DTYPE_OF_NUMPY[np.dtype(numpy_dtype)]


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
    return _array_over(arena, table[row, COL_OFFSET], np.int64(1), (count,), numpy_dtype)


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
