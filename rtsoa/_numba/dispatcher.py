"""rtsoa's dispatcher classes: how every jitted rtsoa function is compiled, cached and called.

`RtsoaDispatcher` is Numba's CPU dispatcher with rtsoa's compiler pipeline
(`linking.RecordingCompiler`) and rtsoa's disk cache (`caching.RtsoaFunctionCache`), so what
rtsoa changes about compiling and caching applies to its own functions only.
`InternalDispatcher` adds what functions only jitted code calls need (no CPython wrapper,
constants widened, linking once). `entry_point` is the unchecked fast call of a compiled
overload; `checked_entry_point` is how rtsoa's call sites use it.
"""

import inspect
import types

import numba
from numba.core import types as numba_types
from numba.core.registry import CPUDispatcher

from rtsoa._numba import compat, linking
from rtsoa._numba.caching import RtsoaFunctionCache, is_cached

compat.register(
    "dispatchers",
    "rtsoa",
    [
        "numba.core.registry.CPUDispatcher",
        "numba.core.dispatcher.Dispatcher.enable_caching",
        "numba.core.dispatcher.Dispatcher.get_call_template",
        "numba.core.dispatcher.Dispatcher.add_overload",
        "numba.core.dispatcher.Dispatcher.compile",
        "numba.core.compiler.CompileResult",
        "numba.core.ccallback.CFunc.compile",
        "numba.core.ccallback.CFunc.enable_caching",
    ],
    "rtsoa's dispatcher subclasses, their wrapper-less twins and compiled entry points",
    patch=False,
)

# Options of functions only jitted code calls: no CPython wrapper (nor cfunc wrapper). The
# wrapper is a function that unboxes every argument from Python objects; for a kernel, whose
# argument is the runtime tuple of ~60 arrays, building and optimising it is most of the
# kernel's compile (asv bench_coldstart), and it is never used: kernels run inside loops.
NO_WRAPPER = {"no_cpython_wrapper": True, "no_cfunc_wrapper": True}


class RtsoaDispatcher(CPUDispatcher):
    """Numba's CPU dispatcher compiled by `RecordingCompiler` and cached by
    `RtsoaFunctionCache` (see the module docstring)."""

    def __init__(self, py_func, locals=None, targetoptions=None, pipeline_class=None):
        super().__init__(
            py_func,
            locals={} if locals is None else locals,
            targetoptions={} if targetoptions is None else targetoptions,
            pipeline_class=pipeline_class or linking.RecordingCompiler,
        )

    def enable_caching(self):
        self._cache = RtsoaFunctionCache(self.py_func)

    def add_overload(self, cres):
        super().add_overload(cres)
        if not cres.objectmode and not linking.separately_linked(self):
            linking.link_standalone_for_plain_callers(self, cres)


def rtsoa_cfunc(signature, cache=False, **options):
    """`numba.cfunc(signature, cache=cache, **options)` compiled by rtsoa's pipeline and cached
    by rtsoa's cache, so the functions linked once that it calls are recorded in its entry."""
    from numba.core import sigutils
    from numba.core.ccallback import CFunc

    signature = sigutils.normalize_signature(signature)

    def decorate(function):
        compiled = CFunc(
            function,
            signature,
            locals={},
            options=options,
            pipeline_class=linking.RecordingCompiler,
        )
        if cache:
            compiled._cache = RtsoaFunctionCache(function)
        compiled.compile()
        return compiled

    return decorate


def rtsoa_jit(function, options):
    """What `numba.njit(**options)(function)` does, with `RtsoaDispatcher`."""
    options = dict(options)
    cache = options.pop("cache", False)
    options.setdefault("nopython", True)
    dispatcher = RtsoaDispatcher(function, targetoptions=options)
    if cache:
        dispatcher.enable_caching()
    return dispatcher


class InternalDispatcher(RtsoaDispatcher):
    """A dispatcher compiled without a CPython wrapper, for functions jitted code calls.

    Jitted callers compile and link it as usual. A call from Python (a test, a tool) goes to a
    twin compiled with a wrapper on first use instead of jumping to the wrapper that does not
    exist (which would crash the process). The twin is the same code under another qualified
    name, so its disk-cache entries never mix with the wrapper-less ones (Numba's cache index
    does not record the wrapper flags)."""

    _python_twin = None
    # Whether jitted callers' constant arguments stay literal types. Numba compiles one
    # specialisation per literal value a jitted caller passes (`f(x, True)` and `f(x, False)`
    # are two compiles of `f` and of everything it calls with that argument): 335 of the 823
    # signatures a full test run cached had a literal argument (op codes, hazard kinds, a
    # `device_malloc(dev, 0, 64, 1)` that compiled the allocator tree a second time). Types
    # are widened to their plain type instead, so one compile serves every constant; LLVM
    # still folds a constant where the callee is inlined. `@jit_internal(literal_args=True)`
    # keeps them all; `literal_args=("op", "kind")` those parameters only (a compile per op
    # or dtype of a family, whose other branches are pruned: `literal_args`).
    keeps_literals = False

    literal_positions = frozenset()  # positions and names of the parameters kept literal

    def get_call_template(self, args, kws):
        if self.keeps_literals is not True:
            kept = self.literal_positions
            args = tuple(a if k in kept else numba_types.unliteral(a) for k, a in enumerate(args))
            kws = {k: v if k in kept else numba_types.unliteral(v) for k, v in kws.items()}
        return super().get_call_template(args, kws)

    def add_overload(self, cres):
        super().add_overload(cres)
        if not cres.objectmode and linking.separately_linked(self):
            linking.link_by_symbol(self, cres)

    def __call__(self, *args, **kwargs):
        return python_twin(self)(*args, **kwargs)


def python_twin(dispatcher):
    """The twin of an `InternalDispatcher` that Python calls (made on first use)."""
    twin = dispatcher._python_twin
    if twin is not None:
        return twin
    function = dispatcher.py_func
    copy = types.FunctionType(
        function.__code__,
        function.__globals__,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )
    copy.__qualname__ = function.__qualname__ + "__python"
    copy.__module__ = function.__module__
    copy.__doc__ = function.__doc__
    options = {k: v for k, v in dispatcher.targetoptions.items() if k not in NO_WRAPPER}
    options["cache"] = is_cached(dispatcher)
    twin = dispatcher._python_twin = rtsoa_jit(copy, options)
    return twin


def internal_jit(function, options, keeps_literals, linked_once):
    """An `InternalDispatcher` of `function` for `options` (with "cache"); `linked_once`
    registers it to be linked by symbol."""
    options = dict(options)
    cache = options.pop("cache", False)
    dispatcher = InternalDispatcher(function, targetoptions=options)
    dispatcher.keeps_literals = keeps_literals
    if keeps_literals and keeps_literals is not True:
        names = list(inspect.signature(function).parameters)
        unknown = [name for name in keeps_literals if name not in names]
        if unknown:
            raise ValueError(f"{function.__qualname__} has no parameter(s) {unknown}")
        positions = {names.index(name) for name in keeps_literals}
        dispatcher.literal_positions = frozenset(keeps_literals) | positions
    if linked_once:
        linking.register(dispatcher)
    if cache:
        dispatcher.enable_caching()
    return dispatcher


def is_dispatcher(value):
    """Whether `value` is a Numba CPU dispatcher (an njit function, rtsoa's or a user's)."""
    return isinstance(value, CPUDispatcher)


def entry_point(dispatcher, args):
    """The compiled CPython entry of `dispatcher` for the Numba types of `args`: calling it
    skips the dispatcher's type resolution, which for a tuple of many arrays (a device's
    state: 34 arrays) costs far more than the call (asv bench_model_api). The entry unboxes
    its arguments as those types WITHOUT checking them: called with arguments of other types
    it reads memory wrongly. rtsoa's call sites use
    `checked_entry_point` (rtsoa._jit), which checks the types where the entry is made."""
    if not isinstance(dispatcher, CPUDispatcher):
        return dispatcher  # plain Python (RTSOA_PURE_PYTHON_DEVICE=1, NUMBA_DISABLE_JIT=1)
    target = dispatcher
    if isinstance(dispatcher, InternalDispatcher):
        target = python_twin(dispatcher)
    signature = tuple(numba.typeof(arg) for arg in args)
    target.compile(signature)
    return target.overloads[signature].entry_point
