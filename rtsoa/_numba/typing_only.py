"""Numba's type inference alone: the return type a dispatcher's function would have, with no
code generated (kernel conformance, `rtsoa.kernels.conformance`)."""

from rtsoa._numba import compat

compat.register(
    "typing-only-pipeline",
    "rtsoa",
    [
        "numba.core.compiler.CompilerBase.define_pipelines",
        "numba.core.compiler.DefaultPassBuilder.define_untyped_pipeline",
        "numba.core.compiler.Flags",
        "numba.core.compiler.compile_extra",
        "numba.core.compiler_machinery.FunctionPass",
        "numba.core.compiler_machinery.register_pass",
        "numba.core.typed_passes.NopythonTypeInference",
    ],
    "kernels typed without code generation (kernel conformance)",
    patch=False,
)

from numba.core import compiler  # noqa: E402 - after the table row
from numba.core.compiler_machinery import FunctionPass, register_pass  # noqa: E402
from numba.core.errors import NumbaError  # noqa: E402
from numba.core.typed_passes import NopythonTypeInference  # noqa: E402

__all__ = ["NumbaError", "return_type"]


@register_pass(mutates_CFG=False, analysis_only=True)
class _StopAfterTyping(FunctionPass):
    """Ends the pipeline after type inference: its result is the inferred return type."""

    _name = "rtsoa_stop_after_typing"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        state.cr = state.return_type  # a result ends Numba's pipeline loop
        return False


class _TypingOnly(compiler.CompilerBase):
    """Numba's untyped passes and type inference, nothing after."""

    def define_pipelines(self):
        pipeline = compiler.DefaultPassBuilder.define_untyped_pipeline(self.state, "typing")
        pipeline.add_pass(NopythonTypeInference, "nopython frontend")
        pipeline.add_pass(_StopAfterTyping, "stop after typing")
        pipeline.finalize()
        return [pipeline]


def return_type(function, argument_types, reference_counting=None):
    """The return type Numba infers for the dispatcher `function` called with
    `argument_types`, under its own options (`reference_counting` overrides its NRT flag)."""
    flags = compiler.Flags()
    function.targetdescr.options.parse_as_flags(flags, function.targetoptions)
    if reference_counting is not None:
        flags.nrt = reference_counting
    return compiler.compile_extra(
        function.targetdescr.typing_context,
        function.targetdescr.target_context,
        function.py_func,
        args=argument_types,
        return_type=None,
        flags=flags,
        locals=function.locals,
        pipeline_class=_TypingOnly,
    )
