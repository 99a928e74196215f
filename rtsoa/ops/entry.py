"""The one compiled entry of all compute ops, and how kernels and Python call it.

`entry` is a C-callable function (`numba.cfunc`, cached on disk) holding the generated switch
over every registered op (`rtsoa/ops/switch.py`). An exception that escapes an op (Numba's
cfunc wrapper would print it as "Exception ignored" and return 0, success) is caught here and
returned as STATUS_OP_EXCEPTION. Kernels do not link it into their own code:
they call it through its address (`call_entry`), so the ops are compiled once per machine and
version, not again inside every executor loop that dispatches to an op kernel.

    status = call_entry(address, mode, code, arena, table, attrs, fattrs, n_in, n_out)

`mode` is MODE_INFER or MODE_COMPUTE. `run_op` is the same call from Python (lowering-time
shape inference and constant folding).
"""

import numpy as np
from numba import carray, types

from rtsoa._jit import JIT_OPTIONS, jit_out_of_line, rtsoa_cfunc
from rtsoa.ops import switch
from rtsoa.ops.abi import (
    COL_RANK,
    MAX_OP_OPERANDS,
    MAX_OPERANDS,
    MODE_COMPUTE,
    MODE_INFER,
    ROW_WIDTH,
    STATUS_OP_ARITY,
    STATUS_OP_EXCEPTION,
    STATUS_OP_MISSING_INPUT,
    STATUS_OP_UNKNOWN,
)
from rtsoa.ops.call import call_entry

_SIGNATURE = types.int32(
    types.int64,  # mode
    types.int64,  # op code
    types.CPointer(types.uint8),  # arena
    types.int64,  # arena bytes
    types.CPointer(types.int64),  # operand table, (MAX_OPERANDS + 1, ROW_WIDTH)
    types.CPointer(types.int64),  # attribute slots
    types.CPointer(types.float64),  # the same slots as float64
    types.int64,  # attribute count
    types.int64,  # inputs
    types.int64,  # outputs
)


@rtsoa_cfunc(_SIGNATURE, cache=True, nopython=True, error_model=JIT_OPTIONS["error_model"])
def entry(
    mode, code, arena_data, arena_bytes, table_data, attrs_data, fattrs_data, count, n_in, n_out
):
    """Run op `code`'s infer (mode 0) or compute (mode 1) on C pointers."""
    arena = carray(arena_data, (arena_bytes,))
    table = carray(table_data, (MAX_OPERANDS + 1, ROW_WIDTH))
    attrs = carray(attrs_data, (count,))
    fattrs = carray(fattrs_data, (count,))
    low, high, out_low, out_high = switch.arity(code)
    if n_in < low or n_in > high or n_out < out_low or n_out > out_high:
        return np.int32(STATUS_OP_ARITY)
    if n_in + n_out > MAX_OP_OPERANDS:
        return np.int32(STATUS_OP_ARITY)
    for row in range(low):
        if table[row, COL_RANK] < 0:
            return np.int32(STATUS_OP_MISSING_INPUT)
    status = np.int32(STATUS_OP_UNKNOWN)
    try:
        if mode == MODE_INFER:
            status = switch.infer(code, arena, table, n_in, n_out, attrs, fattrs)
        elif mode == MODE_COMPUTE:
            status = switch.compute(code, arena, table, n_in, n_out, attrs, fattrs)
    except Exception:  # Numba catches any exception class here; the message is not available
        status = np.int32(STATUS_OP_EXCEPTION)
    return status


def entry_address():
    """The address of `entry` in this process (compiles or loads it on first use)."""
    return int(entry.address)


@jit_out_of_line
def _run_op(address, mode, code, arena, table, attrs, n_in, n_out):
    return call_entry(address, mode, code, arena, table, attrs, attrs.view(np.float64), n_in, n_out)


def run_op(mode, code, arena, table, attrs, n_in, n_out):
    """Python-side call of the entry (lowering: static shapes, constant folding). `arena` a
    uint8 array, `table` from `abi.new_table()`, `attrs` int64 slots."""
    arena = np.ascontiguousarray(arena, dtype=np.uint8).reshape(-1)
    if arena.size == 0:
        arena = np.zeros(8, dtype=np.uint8)
    attrs = np.ascontiguousarray(attrs, dtype=np.int64)
    if attrs.size == 0:
        attrs = np.zeros(1, dtype=np.int64)
    if table.shape != (MAX_OPERANDS + 1, ROW_WIDTH) or table.dtype != np.int64:
        raise ValueError("table must come from rtsoa.ops.abi.new_table()")
    if not (0 <= n_in and 0 <= n_out and n_in + n_out <= MAX_OPERANDS):
        raise ValueError(f"{n_in} inputs + {n_out} outputs exceed {MAX_OPERANDS} operands")
    return int(
        _run_op(
            np.int64(entry_address()),
            np.int64(mode),
            np.int64(code),
            arena,
            table,
            attrs,
            np.int64(n_in),
            np.int64(n_out),
        )
    )
