"""Out-of-line functions linked once: jitted callers call them by symbol instead of copying them.

Numba links a jitted callee into its caller by copying the callee's LLVM module (and everything
that module already copied from its own callees) into the caller's, then optimising and
compiling the whole result to machine code again. A function called through n levels of
out-of-line calls is therefore optimised and compiled n + 1 times, and the top of a deep tree
(the op library's switch, an executor loop over the device's kernels) compiles everything
below it once more. On a cold cache most of a deep tree's compile went to those repeated
module passes and machine-code generation (`asv_bench/compile_phases.py ops` shows the phases;
asv bench_models.OpLibraryCold the cold compile).

A function compiled with `forceinline=False` by an rtsoa profile (`jit_out_of_line`,
`jit_with_nrt`) is *separately linked* instead: callers declare its symbol and call it, and
the JIT resolves the symbol to the one copy already loaded (the callee is compiled, or loaded
from Numba's disk cache, when a caller is typed, before the caller is compiled). LLVM can no
longer inline such a function into its callers, so a small function on a per-call path (the
device calls every launch makes) belongs in `jit_inline_llvm` instead.

Disk cache. A cached caller refers to its callees by their mangled names, and Numba's mangled
names carry a per-process counter, so a callee recompiled in a later process gets another name.
Every cache entry whose machine code calls separately linked functions therefore records them
(module, qualified name, argument types, mangled name, the callee's cache stamp), and loading
the entry first loads each callee through its own dispatcher (from the cache or by compiling
it) and checks that it is the one recorded: same mangled name, same stamp. Any mismatch, or a
callee that cannot be found, makes the entry a cache miss, so the caller is compiled again
against the callees of this process; a stale entry is never run and an unresolved symbol
never reaches the JIT's linker (which would abort the process). rtsoa's cache
(`rtsoa._numba.caching.RtsoaCacheImpl`) writes and checks these records; Numba's own cache
cannot, so a caller compiled by a plain `numba.njit` dispatcher (a user's kernel calling the
device) is not given the call by symbol: it copies the callee's module, as Numba always does,
and its cache entries stand alone. The same holds through normal linking: a plain caller of
an rtsoa function that itself calls functions by symbol (a user kernel calling the device's
`device_malloc`, which calls `_malloc_slow` by symbol) copies those callees too
(`link_standalone_for_plain_callers`). Which compile a call belongs to is read from the code
library being lowered: `RecordingCompiler`, the pipeline of rtsoa's dispatchers, notes its
libraries. If Numba's internals are not the expected ones (or RTSOA_NUMBA_PATCHES=off),
nothing is separately linked and calls are linked as before.
"""

import importlib
import threading
import weakref

from rtsoa._numba import compat, literal_args

_MARKER = "rtsoa-separately-linked-v1"
_by_name = {}  # (module, qualname) -> dispatcher, or None when the name is ambiguous
_by_symbol = {}  # mangled name -> (module, qualname, argument types, mangled name, stamp)
_libraries = {}  # mangled name -> the code library of that separately linked overload
_loading = threading.local()
_recording = weakref.WeakSet()  # code libraries compiled by rtsoa's dispatchers

INSTALLED = compat.register(
    "separate-linking",
    "rtsoa",
    [
        "numba.core.compiler.Compiler.compile_extra",
        "numba.core.base.BaseContext.active_code_library",
        "numba.core.base.BaseContext.add_linking_libs",
        "numba.core.base.BaseContext.remove_user_function",
        "numba.core.base.BaseContext.declare_function",
        "numba.core.imputils.fix_returning_optional",
        "numba.core.imputils.impl_ret_new_ref",
        "numba.core.imputils.user_function",
        "numba.core.codegen.CPUCodeLibrary.get_llvm_str",
        "numba.core.codegen.CPUCodeLibrary.enable_object_caching",
    ],
    "out-of-line rtsoa functions linked once: their rtsoa callers call them by symbol",
)

from numba.core import cgutils, compiler, imputils  # noqa: E402 - after the table row


class RecordingCompiler(compiler.Compiler):
    """Numba's compiler, noting the code library of each function it compiles: calls lowered
    into one of these libraries may go by symbol (their cache entries record the callees).
    Its pipeline prunes branches on literal arguments (`rtsoa._numba.literal_args`)."""

    def define_pipelines(self):
        return literal_args.add_to(super().define_pipelines())

    def compile_extra(self, func):
        if INSTALLED:
            if self.state.library is None:
                codegen = self.state.targetctx.codegen()
                self.state.library = codegen.create_library(func.__qualname__)
                self.state.library.enable_object_caching()  # as Numba's lowering pass does
            _recording.add(self.state.library)
        return super().compile_extra(func)


def reduce(cres, payload):
    """A cache entry's `payload` (Numba's reduction of `cres`) with its callees' records."""
    if not INSTALLED:
        return payload
    callees = linked_callees(cres.library)
    return (_MARKER, callees, payload) if callees else payload


def unwrap(payload):
    """(Numba's payload of a cache entry `reduce` wrote, its callee records), the callees
    loaded; (None, ()) - a cache miss - when one of them is not the recorded one."""
    if isinstance(payload, tuple) and payload and payload[0] == _MARKER:
        _, callees, payload = payload
        if not INSTALLED or not all(map(_load_callee, callees)):
            return None, ()
        return payload, callees
    return payload, ()


def remember_callees(library, callees):
    """Keep a loaded entry's callee records on its library (its machine code is loaded
    without the module whose declarations `linked_callees` reads)."""
    library._rtsoa_callees = tuple(callees)


def linked_callees(library):
    """The separately linked functions `library`'s machine code calls, as cache records."""
    recorded = getattr(library, "_rtsoa_callees", None)
    if recorded is not None:
        return recorded
    found = []
    for function in library._final_module.functions:
        if function.is_declaration:
            record = _by_symbol.get(function.name)
            if record is not None:
                found.append(record)
    return tuple(sorted(found, key=lambda record: record[3]))


def _stamp(dispatcher):
    cache = getattr(dispatcher, "_cache", None)
    locator = getattr(getattr(cache, "_impl", None), "locator", None)
    return locator.get_source_stamp() if locator is not None else None


def _load_callee(record):
    """Load (or compile) the callee of one cache record; True if it is the recorded one."""
    module, qualname, argtypes, mangled, stamp = record
    key = (module, qualname, argtypes)
    loading = getattr(_loading, "keys", None)
    if loading is None:
        loading = _loading.keys = set()
    if key in loading:
        return False  # a cycle of cached callers: compile instead of recursing
    dispatcher = _by_name.get((module, qualname))
    if dispatcher is None and (module, qualname) not in _by_name:
        try:
            importlib.import_module(module)
        except ImportError:
            return False
        dispatcher = _by_name.get((module, qualname))
    if dispatcher is None or _stamp(dispatcher) != stamp:
        return False
    loading.add(key)
    try:
        dispatcher.compile(argtypes)
    except Exception:  # noqa: BLE001 - whatever stops the callee, the caller is recompiled
        return False
    finally:
        loading.discard(key)
    compiled = dispatcher.overloads.get(argtypes)
    return compiled is not None and compiled.fndesc.mangled_name == mangled


def register(dispatcher):
    """Note a separately linked dispatcher by name (called when it is created). Two
    dispatchers of one module and qualified name (functions made by a factory) cannot be told
    apart by a cache record, so such a name is linked as usual."""
    key = (dispatcher.py_func.__module__, dispatcher.py_func.__qualname__)
    _by_name[key] = None if key in _by_name else dispatcher


def separately_linked(dispatcher):
    """Whether calls to `dispatcher` from jitted code go by symbol (see the module docstring)."""
    if not INSTALLED:
        return False
    key = (dispatcher.py_func.__module__, dispatcher.py_func.__qualname__)
    return _by_name.get(key) is dispatcher


def link_by_symbol(dispatcher, cres):
    """Make jitted callers of the overload `cres` call it by symbol: replaces the call that
    Numba registered for it (which copies `cres.library` into every caller)."""
    fndesc = cres.fndesc
    args = tuple(cres.signature.args)
    _by_symbol[fndesc.mangled_name] = (
        dispatcher.py_func.__module__,
        dispatcher.py_func.__qualname__,
        args,
        fndesc.mangled_name,
        _stamp(dispatcher),
    )
    _libraries[fndesc.mangled_name] = cres.library
    context = dispatcher.targetctx
    context.remove_user_function(cres.entry_point)
    call = _call_by_symbol(fndesc, cres.library)
    context._defns[cres.entry_point].append(call, call.signature)


def _callee_closure(library):
    """The libraries of the separately linked functions `library` calls by symbol, and of
    those they call, and so on: what a plain caller must copy besides `library`."""
    found = []
    pending = [library]
    seen = set()
    while pending:
        for record in linked_callees(pending.pop()):
            callee = _libraries.get(record[3])
            if callee is not None and record[3] not in seen:
                seen.add(record[3])
                found.append(callee)
                pending.append(callee)
    return tuple(found)


def _link_for(context, library):
    """Link `library` into the library being lowered as Numba does; for a caller that is not
    rtsoa's (its cache cannot record callees), with every callee it calls by symbol too."""
    if context.active_code_library in _recording:
        context.add_linking_libs((library,))
    else:
        context.add_linking_libs((library, *_callee_closure(library)))


def link_standalone_for_plain_callers(dispatcher, cres):
    """For an overload of an rtsoa function that is linked as usual but calls functions by
    symbol: replace Numba's call so that a plain caller also copies those callees."""
    if not INSTALLED or not linked_callees(cres.library):
        return
    context = dispatcher.targetctx
    numba_call = imputils.user_function(cres.fndesc, ())

    def call(context, builder, sig, args):
        value = numba_call(context, builder, sig, args)
        _link_for(context, cres.library)
        return value

    call.signature = numba_call.signature
    call.libs = ()
    context.remove_user_function(cres.entry_point)
    context._defns[cres.entry_point].append(call, call.signature)


def _call_by_symbol(fndesc, library):
    """Numba's `imputils.user_function` without the library to link, for callers rtsoa
    compiles: the call declares the callee's symbol, which the JIT resolves to the callee's
    loaded machine code. Other callers link `library`, as Numba's own call does."""

    def call(context, builder, sig, args):
        if context.active_code_library not in _recording:
            _link_for(context, library)
        function = context.declare_function(builder.module, fndesc)
        status, value = context.call_conv.call_function(
            builder, function, fndesc.restype, fndesc.argtypes, args
        )
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        value = imputils.fix_returning_optional(context, builder, sig, status, value)
        if value.type != context.get_value_type(sig.return_type):
            raise TypeError(f"function returned {value.type} but expect {sig.return_type}")
        return imputils.impl_ret_new_ref(context, builder, fndesc.restype, value)

    call.signature = fndesc.argtypes
    call.libs = ()
    return call
