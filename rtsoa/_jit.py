"""Jit options in one place, so every njit function in rtsoa is compiled the same way.

`cache=True` writes compiled code to disk (Numba's cache directory, or NUMBA_CACHE_DIR), so a
fresh process does not pay the compile again. `boundscheck` stays off: inputs are validated in
Python before any jitted loop sees them.

Cache validity. Numba stamps a cached function with its own source file only, but rtsoa's jitted
functions inline helpers from other files (the allocator inlines the free lists, the hazard
history, the trace ring ...): after such a helper changes, Numba would load stale machine code.
The cache locators `_install_locators` puts first in Numba's list stamp every cached rtsoa
function with one hash over all rtsoa sources that hold jitted code instead, so any change to
any of them recompiles everything that might have inlined it. The generated executor dispatch
module lives outside the package and keys its own cache (see `kernels.dispatch`).

Profiles. Every jitted function of the device (and of the tooling that drives it) is decorated
with one of the named `JitProfile`s below instead of an option literal, so the inlining choice
reads as a decision: `jit_inline_ir`, `jit_inline_llvm`, `jit_out_of_line`, `jit_with_nrt`.
Each states `forceinline` (or `inline`) explicitly: left unset, Numba inherits the flag from
whichever caller compiles the function first.
"""

import hashlib
import operator
import os
import pickle
import types
import warnings

import numba
from numba import njit
from numba.core import caching
from numba.core import types as numba_types
from numba.core.registry import CPUDispatcher

from rtsoa import _lazy_bitcode, _linking

# error_model "numpy": arithmetic follows IEEE / numpy (x / 0.0 is inf or nan, integer x // 0 is
# 0) instead of raising ZeroDivisionError, which compiled ops could not report (see ops.entry).
JIT_OPTIONS = {"cache": True, "nogil": True, "boundscheck": False, "error_model": "numpy"}

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_JIT_MARKERS = (b"jit", b"intrinsic", b"overload")
# Tooling for tests and benchmarks: not part of the product's stamp (editing a workload must not
# recompile the product); its own functions are stamped with the product stamp plus their file.
TOOLING_DIRS = ("testing",)
_stamp = None


def _jitted_sources(package_dir):
    """(relative path, bytes) of the package's source files that hold jitted code, sorted."""
    for root, dirs, files in os.walk(package_dir):
        top = os.path.relpath(root, package_dir) == "."
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not (top and d in TOOLING_DIRS))
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path, "rb") as handle:
                    text = handle.read()
                if any(marker in text for marker in _JIT_MARKERS):
                    yield os.path.relpath(path, package_dir), text


def stamped_files(package_dir=PACKAGE_DIR):
    """The package's source files that hold jitted code (sorted, relative paths)."""
    return [relative for relative, _ in _jitted_sources(package_dir)]


def source_stamp(package_dir=PACKAGE_DIR):
    """SHA-256 over the names and contents of `stamped_files` (the cache stamp): one read each."""
    digest = hashlib.sha256()
    for relative, text in _jitted_sources(package_dir):
        digest.update(relative.encode() + b"\0" + text + b"\0")
    return digest.hexdigest()


def package_source_stamp():
    """`source_stamp` of the installed package, computed once per process."""
    global _stamp
    if _stamp is None:
        _stamp = source_stamp()
    return _stamp


def _is_tooling(path):
    relative = os.path.relpath(os.path.abspath(path), PACKAGE_DIR)
    return relative.split(os.sep, 1)[0] in TOOLING_DIRS


class _PackageStamp:
    """Locator mixin: only rtsoa's own files, stamped with the package-wide source hash (plus
    the file's own source for tooling files, which the package hash leaves out)."""

    def get_source_stamp(self):
        if not _is_tooling(self._py_file):
            return package_source_stamp()
        with open(self._py_file, "rb") as handle:
            own = hashlib.sha256(handle.read()).hexdigest()
        return package_source_stamp() + own

    @classmethod
    def from_function(cls, py_func, py_file):
        if not os.path.abspath(py_file).startswith(PACKAGE_DIR + os.sep):
            return None
        return super().from_function(py_func, py_file)


def _numba_locator(name):  # public names in recent Numba, underscored in older releases
    found = getattr(caching, name, None) or getattr(caching, "_" + name, None)
    if found is None:
        raise AttributeError(name)
    return found


def _install_locators():
    """Put the package locators first in Numba's list; returns them (empty if this Numba's
    caching internals are not the expected ones: then per-file stamps apply, with a warning)."""
    try:
        impl = _numba_locator("CacheImpl")
        bases = [
            _numba_locator(name)
            for name in ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator")
        ]
        locators = impl._locator_classes
    except AttributeError as missing:
        warnings.warn(
            f"rtsoa: Numba has no caching.{missing}; cached functions keep Numba's per-file "
            "stamps, so clear rtsoa's __pycache__ directories after editing its jitted helpers",
            RuntimeWarning,
            stacklevel=2,
        )
        return ()
    namespace = {"__doc__": _PackageStamp.__doc__, "__module__": __name__}
    installed = tuple(  # NUMBA_CACHE_DIR when set, the in-tree __pycache__, user-wide
        type(f"Package{base.__name__}", (_PackageStamp, base), namespace) for base in bases
    )
    locators[:0] = installed
    return installed


PACKAGE_LOCATORS = _install_locators()


def _install_cheap_flag_lookups():
    """Make Numba's compile-flag objects cheap to hash and compare; returns True if installed.

    Every typing of an `@overload`ed function (`np.empty`, `len`, `max`, ... and rtsoa's own)
    looks its implementation up in a dict keyed by (context, argument types, flags). Numba's
    `TargetConfig.__hash__` and `__eq__` rebuild a dict of all options through their property
    getters on each call, so a cold `rtsoa run datasets/lowered-4k.rtsoa` spent ~12 % of its
    profiled time (9.4 million getter calls, 170,000 comparisons) in them. The hash Numba
    computes depends on the option names only (it sorts the dict's keys), so it is memoised per
    class with the same value; equality compares, for two objects of one class, only the
    options set in either (every other option holds the class's default in both), and asks
    Numba's own comparison for objects of different classes. Results are unchanged: only the
    lookups get cheaper (cold `lowered-4k` in alternated runs: 68.8 / 68.0 s user before,
    62.8 / 65.2 s after). The hash, the same for every object of a class, makes dicts keyed
    by flags compare a key with every other of its class: 188,000 comparisons in a cold
    `lowered-4k`, which fell back to Numba's 22-getter comparison until equality compared the
    set options only. Skipped when Numba's internals are not the expected ones."""
    try:
        from numba.core import targetconfig

        config_class = targetconfig.TargetConfig
        numba_eq = config_class.__eq__
        numba_hash = config_class.__hash__
        if "_values" not in config_class.__init__.__code__.co_names:
            return False  # set options no longer kept in `_values`
    except (ImportError, AttributeError):
        return False
    if getattr(config_class, "_rtsoa_cheap_lookups", False):
        return True
    hashes = {}

    def __hash__(self):
        cls = type(self)
        value = hashes.get(cls)
        if value is None:
            value = hashes[cls] = numba_hash(self)
        return value

    def __eq__(self, other):
        if self is other:
            return True
        if type(self) is not type(other):
            return numba_eq(self, other)
        mine, theirs = self._values, other._values
        if mine == theirs:
            return True
        # options set in neither hold the class's defaults in both: compare only the others
        for name in mine.keys() | theirs.keys():
            if getattr(self, name) != getattr(other, name):
                return False
        return True

    config_class.__hash__ = __hash__
    config_class.__eq__ = __eq__
    config_class._rtsoa_cheap_lookups = True
    return True


CHEAP_FLAG_LOOKUPS = _install_cheap_flag_lookups()


def _install_lazy_cache_refresh():
    """Load cached machine code without first setting up Numba's whole compiler; returns True
    if installed.

    Before each disk-cache load Numba calls `target_context.refresh()`: it imports some twenty
    of its modules (`numba.np.arraymath` among them, whose BLAS check imports scipy.linalg),
    installs every lowering registry and refreshes the typing context. A warm process that
    only loads cached functions needs none of that: about 0.45 s of a warm `rtsoa run
    datasets/random-10k.rtsoa` (~1.0 s -> ~0.55 s). What loaded machine code does need is
    every symbol it may call: Numba's C helpers and exception objects (registered when the
    target context is created), the reference-counting runtime (`rtsys.initialize`) and the
    hash secrets `numba.cpython.hashing` registers when imported; those are set up here.
    The first real compile still runs the full refresh (Numba's compiler calls it), and a load
    that fails on the short path is retried after a full refresh. Skipped when Numba's
    internals are not the expected ones."""
    try:
        import numba.cpython.hashing  # noqa: F401 - registers the hash-secret symbols
        from numba.core.runtime import rtsys

        cache_class = caching.Cache
        numba_load = cache_class.load_overload
        cache_class._load_overload  # noqa: B018 - present in the expected internals
        cache_class._guard_against_spurious_io_errors  # noqa: B018
    except (ImportError, AttributeError):
        return False
    if getattr(cache_class, "_rtsoa_lazy_refresh", False):
        return True

    def load_overload(self, sig, target_context):
        try:
            rtsys.initialize(target_context)
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)
        except Exception:  # noqa: BLE001 - retried the way Numba does it, which reports errors
            return numba_load(self, sig, target_context)

    cache_class.load_overload = load_overload
    cache_class._rtsoa_lazy_refresh = True
    return True


LAZY_CACHE_REFRESH = _install_lazy_cache_refresh()


def _install_tolerant_cache_index():
    """Read a cache index that names a module this process cannot import as empty (a cache
    miss) instead of failing; returns True if installed.

    A cached function's index pickles the argument types of every overload compiled. A
    function called with a type that a user's module defines (a kernel registry in a script,
    asv's benchmark modules) gets an index entry naming that module, and every later process
    without it failed to unpickle the whole index: `ModuleNotFoundError: No module named
    'benchmarks'` from `checksum.fold` in a test run after the asv benchmarks had run in the
    same tree. Such an index now reads as empty: the function compiles and writes an index
    of its own. Skipped when Numba's internals are not the expected ones."""
    try:
        index_class = caching.IndexDataCacheFile
        numba_load_index = index_class._load_index
    except AttributeError:
        return False
    if getattr(index_class, "_rtsoa_tolerant", False):
        return True

    def _load_index(self):
        try:
            return numba_load_index(self)
        except (ImportError, AttributeError, pickle.UnpicklingError, EOFError):
            return {}

    index_class._load_index = _load_index
    index_class._rtsoa_tolerant = True
    return True


TOLERANT_CACHE_INDEX = _install_tolerant_cache_index()


def _install_plain_error_messages():
    """Give Numba's error messages no terminal markup when its colour scheme is the default
    `no_color`; returns True if installed.

    Typing tries candidate signatures and templates in turn, and every failed try builds a
    `TypingError` whose message Numba marks up: with colorama installed, even the `no_color`
    theme wraps and unwraps stdout / stderr for each message (colorama `init` / `deinit`) to
    add a bold escape. Compiling `device_malloc` cold built ~11,850 such messages, none shown.
    A user's own `NUMBA_COLOR_SCHEME` is kept."""
    from numba.core import config, errors

    if config.COLOR_SCHEME != "no_color" or not hasattr(errors, "HighlightColorScheme"):
        return False

    class PlainColorScheme(errors._DummyColorScheme):
        def code(self, msg):
            return msg

        errmsg = filename = indicate = highlight = reset = code

    errors._termcolor_inst = PlainColorScheme()
    return True


PLAIN_ERROR_MESSAGES = _install_plain_error_messages()
LAZY_BITCODE = _lazy_bitcode.install()  # cached entries load without parsing their bitcode


def jit(fn=None, **overrides):
    """`numba.njit` with rtsoa's options; usable as `@jit` or `@jit(fastmath=True)`."""
    options = {**JIT_OPTIONS, **overrides}
    if fn is None:
        return njit(**options)
    return njit(**options)(fn)


class JitProfile:
    """A named set of jit options: `@profile` compiles a function with rtsoa's options plus
    `overrides`. The profile's docstring says when to use it."""

    def __init__(self, name, doc, wrapperless=False, **overrides):
        self.name = name
        self.__doc__ = doc
        self.options = {**JIT_OPTIONS, **overrides}
        self.wrapperless = wrapperless  # compiled for jitted callers (see InternalDispatcher)

    def __call__(self, fn):
        if self.wrapperless:
            return jit_internal(fn, **self.options)
        return njit(**self.options)(fn)

    def __repr__(self):
        return f"<JitProfile {self.name} {self.options}>"


jit_inline_ir = JitProfile(
    "jit_inline_ir",
    "Small no-allocation helpers inlined at Numba IR level into every caller (re-typed there).",
    _nrt=False,
    inline="always",
)
jit_inline_llvm = JitProfile(
    "jit_inline_llvm",
    "Big hot-path bodies typed once, then inlined by LLVM (alwaysinline) into their callers.",
    wrapperless=True,
    _nrt=False,
    forceinline=True,
)
jit_out_of_line = JitProfile(
    "jit_out_of_line",
    "Real calls without the reference-counting runtime: cold paths and entry points. Linked "
    "once: callers call it by symbol (`rtsoa._linking`), so LLVM never inlines it.",
    wrapperless=True,
    _nrt=False,
    forceinline=False,
)
jit_with_nrt = JitProfile(
    "jit_with_nrt",
    "Real calls that create or return arrays, so they need the reference-counting runtime. "
    "Linked once, like `jit_out_of_line`.",
    wrapperless=True,
    forceinline=False,
)
jit_inline_ir_nrt = JitProfile(
    "jit_inline_ir_nrt",
    "Inlined at Numba IR level like `jit_inline_ir`, for a body that calls functions needing the "
    "reference-counting runtime (the op switch's top level, inlined into the op entry).",
    inline="always",
)
PROFILES = (jit_inline_ir, jit_inline_llvm, jit_out_of_line, jit_with_nrt, jit_inline_ir_nrt)

# Options of functions only jitted code calls: no CPython wrapper (nor cfunc wrapper). The
# wrapper is a function that unboxes every argument from Python objects; for a kernel, whose
# argument is the runtime tuple of ~60 arrays, building and optimising it is ~80 % of the
# kernel's compile (1.2 s -> 0.2 s measured), and it is never used: kernels run inside loops.
NO_WRAPPER = {"no_cpython_wrapper": True, "no_cfunc_wrapper": True}


class InternalDispatcher(CPUDispatcher):
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
    # keeps them, for a function whose typing needs the value (none does today).
    keeps_literals = False

    def get_call_template(self, args, kws):
        if not self.keeps_literals:
            args = tuple(numba_types.unliteral(a) for a in args)
            kws = {k: numba_types.unliteral(v) for k, v in kws.items()}
        return super().get_call_template(args, kws)

    def add_overload(self, cres):
        super().add_overload(cres)
        if not cres.objectmode and _linking.separately_linked(self):
            _linking.link_by_symbol(self, cres)

    def __call__(self, *args, **kwargs):
        twin = self._python_twin
        if twin is None:
            twin = self._python_twin = _python_twin(self)
        return twin(*args, **kwargs)


def _python_twin(dispatcher):
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
    options.pop("nopython", None)
    twin = njit(**options)(copy)
    if dispatcher._cache.__class__.__name__ != "NullCache":
        twin.enable_caching()
    return twin


def jit_internal(fn=None, **overrides):
    """`jit` for a function only jitted code calls: no CPython wrapper (see `NO_WRAPPER`);
    returns an `InternalDispatcher`. Usable as `@jit_internal` or `@jit_internal(...)`."""
    options = {**JIT_OPTIONS, **NO_WRAPPER, **overrides, "nopython": True}
    cache = options.pop("cache")
    keeps_literals = bool(options.pop("literal_args", False))

    def decorate(function):  # what numba.njit does, with this dispatcher class
        dispatcher = InternalDispatcher(py_func=function, locals={}, targetoptions=options)
        dispatcher.keeps_literals = keeps_literals
        if options.get("forceinline") is False:  # a real call: link it once (by symbol)
            _linking.register(dispatcher)
        if cache:
            dispatcher.enable_caching()
        return dispatcher

    return decorate if fn is None else decorate(fn)


def entry_point(dispatcher, args):
    """The compiled CPython entry of `dispatcher` for the Numba types of `args`: calling it
    skips the dispatcher's type resolution, which for a tuple of many arrays (a device's
    state: 34 arrays, 3.4 us of the 3.8 us a `stream_synchronize` call took) costs far more
    than the call. The entry unboxes its arguments as those types without checking them, so
    it may only be called with arguments of exactly these types: callers keep it next to the
    objects it was made for (see `EntryCache`)."""
    if not isinstance(dispatcher, CPUDispatcher):
        return dispatcher  # plain Python (RTSOA_PURE_PYTHON_DEVICE=1, NUMBA_DISABLE_JIT=1)
    target = dispatcher
    if isinstance(dispatcher, InternalDispatcher):
        if dispatcher._python_twin is None:
            dispatcher._python_twin = _python_twin(dispatcher)
        target = dispatcher._python_twin
    signature = tuple(numba.typeof(arg) for arg in args)
    target.compile(signature)
    return target.overloads[signature].entry_point


class EntryCache:
    """Entry points (`entry_point`) kept next to the objects they were made for, made on
    first use and all dropped when one of those objects is replaced. `call` serves the
    common case: one owner object first (a device's state), int64 scalars after it, which
    must be Python ints within int64 (`Device` checks them first), so every call of one
    function has the one signature."""

    def __init__(self):
        self._owners = ()
        self._entries = {}

    def entry(self, owners, key, function, args):
        """The entry of `function` for `args`, kept under `key` while every object of the
        tuple `owners` is the one it was made with."""
        if len(owners) != len(self._owners) or not all(map(operator.is_, owners, self._owners)):
            self._owners = owners
            self._entries = {}
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = entry_point(function, args)
        return entry

    def call(self, function, owner, *scalars):
        args = (owner, *scalars)
        return self.entry((owner,), function, function, args)(*args)
