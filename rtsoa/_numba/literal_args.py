"""Literal arguments as constants: branches on them are pruned before typing.

When jitted code calls a function with a constant (a module-level `int`, `bool`), Numba
compiles that callee for the argument's literal type (`Literal[int](3)`), one specialisation
per value, but still types and compiles every branch of it: its dead-branch pruning folds
conditions on constants and on `None`, not on literal-typed arguments. An op family's compute
(`unary(..., op, kind)`: every activation, every dtype) and the loops it passes `op` to are
such callees, so a Relu entry compiled tanh and erf, and a float32 MatMul the integer paths.

`LiteralArgsAsConstants` runs in rtsoa's pipeline (`linking.RecordingCompiler`) right before
the first dead-branch pruning: each argument whose type is an integer or boolean literal is
bound to an IR constant of its value instead of the argument, which is the same value, so
`if op == RELU:` and `if kind == F32:` are pruned where they are decided, and only the taken
branches are typed, lowered and compiled (`rtsoa.ops.entry`: per-dtype entries). Functions
compiled by plain `numba.njit` dispatchers are not touched (scope "rtsoa"). Without the patch
(RTSOA_NUMBA_PATCHES=off, or a Numba without these internals) every branch compiles, as Numba
does: the same results, a slower cold compile.
"""

from rtsoa._numba import compat

INSTALLED = compat.register(
    "literal-argument-pruning",
    "rtsoa",
    [
        "numba.core.compiler_machinery.FunctionPass",
        "numba.core.compiler_machinery.register_pass",
        "numba.core.compiler_machinery.PassManager.add_pass_after",
        "numba.core.untyped_passes.DeadBranchPrune",
        "numba.core.ir.Arg",
        "numba.core.ir.Const",
        "numba.core.ir_utils.build_definitions",
        "numba.core.types.IntegerLiteral",
        "numba.core.types.BooleanLiteral",
    ],
    "branches on literal (constant) arguments of rtsoa functions pruned before typing",
)

if INSTALLED:
    from numba.core import ir, types
    from numba.core.compiler_machinery import FunctionPass, register_pass
    from numba.core.ir_utils import build_definitions
    from numba.core.untyped_passes import DeadBranchPrune

    @register_pass(mutates_CFG=True, analysis_only=False)
    class LiteralArgsAsConstants(FunctionPass):
        """Binds each integer / boolean literal argument to a constant of its value."""

        _name = "rtsoa_literal_args_as_constants"

        def __init__(self):
            FunctionPass.__init__(self)

        def run_pass(self, state):
            literal = (types.IntegerLiteral, types.BooleanLiteral)
            changed = False
            for block in state.func_ir.blocks.values():
                for statement in block.body:
                    value = getattr(statement, "value", None)
                    if not isinstance(value, ir.Arg) or value.index >= len(state.args):
                        continue
                    argument = state.args[value.index]
                    if isinstance(argument, literal):
                        statement.value = ir.Const(argument.literal_value, value.loc)
                        changed = True
            if changed:
                state.func_ir._definitions = build_definitions(state.func_ir.blocks)
            return changed


def add_to(pipelines):
    """`pipelines` (Numba's pass managers of one compile) with the pass before their first
    dead-branch pruning; unchanged without the patch."""
    if not INSTALLED:
        return pipelines
    for pipeline in pipelines:
        kinds = [pass_class for pass_class, _ in pipeline.passes]
        if DeadBranchPrune in kinds:
            step = (LiteralArgsAsConstants, "literal arguments as constants")
            pipeline.passes.insert(kinds.index(DeadBranchPrune), step)
            pipeline.finalize()
    return pipelines
