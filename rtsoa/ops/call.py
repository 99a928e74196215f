"""`call_entry`: calling the compiled op entry (`rtsoa.ops.entry`) through its address.

Kernels get the address at run time (`rt.graph.functions[FUNCTION_OPS]`), so the op library is
never linked into (and compiled again with) the executor loops. This module imports nothing of
the op library itself, so the kernel modules can import it cheaply.
"""

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from rtsoa._numba.arrays import make_array


@intrinsic
def call_entry(typingctx, address, mode, code, arena, table, attrs, fattrs, n_in, n_out):
    """Call the op entry at `address` (an int64) on arrays: the arena (uint8[:]), the operand
    table (int64[MAX_OPERANDS + 1, ROW_WIDTH], C order), the attribute slots (int64[:]) and their
    float64 view; returns its int32 status. The caller checked shapes and contiguity."""
    arrays = (arena, table, attrs, fattrs)
    if not all(isinstance(array, types.Array) for array in arrays):
        return None
    signature = types.int32(address, mode, code, arena, table, attrs, fattrs, n_in, n_out)

    def codegen(context, builder, signature, arguments):
        address_value, mode_value, code_value = arguments[:3]
        arena_value, table_value, attrs_value, fattrs_value = arguments[3:7]
        n_in_value, n_out_value = arguments[7:9]
        i64 = ir.IntType(64)
        kinds = signature.args

        def data(index, value):
            array = make_array(kinds[index])(context, builder, value)
            return array

        arena_array = data(3, arena_value)
        table_array = data(4, table_value)
        attrs_array = data(5, attrs_value)
        fattrs_array = data(6, fattrs_value)
        function_type = ir.FunctionType(
            ir.IntType(32),
            [
                i64,
                i64,
                ir.IntType(8).as_pointer(),
                i64,
                i64.as_pointer(),
                i64.as_pointer(),
                ir.DoubleType().as_pointer(),
                i64,
                i64,
                i64,
            ],
        )
        pointer = builder.inttoptr(address_value, function_type.as_pointer())

        def as64(value, kind):
            return context.cast(builder, value, kind, types.int64)

        return builder.call(
            pointer,
            [
                as64(mode_value, kinds[1]),
                as64(code_value, kinds[2]),
                builder.bitcast(arena_array.data, ir.IntType(8).as_pointer()),
                builder.extract_value(arena_array.shape, 0),
                builder.bitcast(table_array.data, i64.as_pointer()),
                builder.bitcast(attrs_array.data, i64.as_pointer()),
                builder.bitcast(fattrs_array.data, ir.DoubleType().as_pointer()),
                builder.extract_value(attrs_array.shape, 0),
                as64(n_in_value, kinds[7]),
                as64(n_out_value, kinds[8]),
            ],
        )

    return signature, codegen


@intrinsic
def call_entry_raw(
    typingctx, address, mode, arena, arena_bytes, table, attrs, fattrs, count, n_in, n_out
):
    """`call_entry` on raw addresses (int64): what a helper thread of `rtsoa.ops.parts` has of
    the call it shares (the arena, its bytes, the operand table, the attribute slots as int64
    and float64, their count). The op code argument is 0 (an op's own entry does not read it)."""
    values = (address, mode, arena, arena_bytes, table, attrs, fattrs, count, n_in, n_out)
    if not all(isinstance(value, types.Integer) for value in values):
        return None
    signature = types.int32(*values)

    def codegen(context, builder, signature, arguments):
        i64 = ir.IntType(64)
        pointers = {
            2: ir.IntType(8).as_pointer(),
            4: i64.as_pointer(),
            5: i64.as_pointer(),
            6: ir.DoubleType().as_pointer(),
        }
        parameters = [i64, i64] + [pointers.get(index, i64) for index in range(2, 10)]
        function_type = ir.FunctionType(ir.IntType(32), parameters)  # mode, code, then as given
        widened = [
            context.cast(builder, value, kind, types.int64)
            for value, kind in zip(arguments, signature.args, strict=True)
        ]
        pointer = builder.inttoptr(widened[0], function_type.as_pointer())
        values = [widened[1], ir.Constant(i64, 0)]  # mode, the op code
        for index in range(2, 10):
            value = widened[index]
            if index in pointers:
                value = builder.inttoptr(value, pointers[index])
            values.append(value)
        return builder.call(pointer, values)

    return signature, codegen
