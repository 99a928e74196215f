"""Bit tricks for jitted code: floor(log2) and lowest set bit as single instructions.

`leading_zeros` / `trailing_zeros` are Numba's intrinsics for LLVM's ctlz / cttz, so a size class
costs one `lzcnt` instead of a chain of compares and branches.
"""

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from rtsoa._jit import jit_inline_ir
from rtsoa._numba.arrays import leading_zeros, trailing_zeros


def llvm_function(module, function_type, name):
    """The function `name` declared in the LLVM `module` (declared now if it is not yet)."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, function_type, name)


@jit_inline_ir
def floor_log2(value):
    """Index of the highest set bit of a positive int64."""
    return 63 - leading_zeros(value)


@jit_inline_ir
def lowest_bit(value):
    """Index of the lowest set bit of a non-zero int64."""
    return trailing_zeros(value)


@intrinsic
def float_bits(typingctx, value):
    """The IEEE-754 bits of a float64 as an int64 (a register move, no memory round trip)."""
    if not isinstance(value, types.Float):
        return None
    signature = types.int64(types.float64)

    def codegen(context, builder, sig, args):
        as_double = context.cast(builder, args[0], sig.args[0], types.float64)
        return builder.bitcast(as_double, ir.IntType(64))

    return signature, codegen


@intrinsic
def assume(typingctx, condition):
    """Tell the optimiser that `condition` holds (`llvm.assume`): it then folds facts such as
    a table's row width into constants. Undefined behaviour if the condition is false, so only
    assume what the state's constructor guarantees."""
    if not isinstance(condition, types.Boolean):
        return None
    signature = types.none(types.boolean)

    def codegen(context, builder, sig, args):
        function_type = ir.FunctionType(ir.VoidType(), [ir.IntType(1)])
        function = llvm_function(builder.module, function_type, "llvm.assume")
        builder.call(function, [args[0]])
        return context.get_dummy_value()

    return signature, codegen
