"""The operand-table layout: how a tensor's place, size, dtype and shape travel in int64 rows.

Two layouts, both int64 rows ending in MAX_RANK dims:

- the op operand table (`rtsoa.ops.abi` states the op calling convention over it):
  OPERAND_ROWS rows of [byte offset, byte size, DType code, rank, dims...]. Rows 0 .. n_in - 1
  are an op's inputs, then its outputs; the last row (RESULT_ROW) is where shape inference may
  leave a flop count. Each worker owns two such tables (`WorkerState.table`, `check_table`).
- the shape rows of a lowered model's values (`ValueState.shapes`): [rank, DType code, dims...]
  per value, rank -1 while unknown.
"""

MAX_RANK = 8  # dims a tensor may have (graph tensors, operand rows, shape rows)
RANK_UNKNOWN = -1

# -- the op operand table ---------------------------------------------------------------------
MAX_OPERANDS = 64  # rows of the operand table (plus RESULT_ROW)
# Inputs + outputs of one op (Concat / Sum with more are refused at lowering); rows from here
# to MAX_OPERANDS - 1 are scratch rows an op may use for its own shape bookkeeping.
MAX_OP_OPERANDS = 56
COL_OFFSET = 0  # byte offset of the data in the arena (-1: absent, or data not available)
COL_NBYTES = 1  # byte size
COL_DTYPE = 2  # DType code
COL_RANK = 3  # rank (-1: an absent optional input)
COL_DIMS = 4  # then MAX_RANK dims
ROW_WIDTH = COL_DIMS + MAX_RANK
RESULT_ROW = MAX_OPERANDS  # infer may write the op's flop count to table[RESULT_ROW, 0]
OPERAND_ROWS = MAX_OPERANDS + 1
ABSENT = -1
MODE_INFER = 0  # the op entry's modes: shape inference
MODE_COMPUTE = 1  # ... and compute
# ... and one part of a compute shared by threads (`rtsoa.ops.parts`), the part's index in the
# bits above the low byte; only ops registered with parts=True take it
MODE_PART = 2
# RESULT_ROW's columns after the flop count: the intra-op parts pool of the executor (its
# control block's address, 0: none) and the address of the op entry being launched
POOL_COLUMN = 1
ENTRY_COLUMN = 2

# -- shape rows of a lowered model's values -----------------------------------------------------
SHAPE_RANK = 0  # rank (-1 unknown)
SHAPE_DTYPE = 1  # DType code
SHAPE_DIMS = 2  # then MAX_RANK dims
SHAPE_WIDTH = SHAPE_DIMS + MAX_RANK
