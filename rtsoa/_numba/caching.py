"""rtsoa's disk cache: Numba's function cache, subclassed, for rtsoa's dispatchers only.

`RtsoaFunctionCache` is what `RtsoaDispatcher.enable_caching` installs; a plain `numba.njit`
function keeps Numba's `FunctionCache`, its locators and its loading untouched. Against Numba's
cache it changes four things, each a row of the compat table (`rtsoa._numba.compat`) with a
fallback to Numba's behaviour:

* package-stamp: rtsoa's jitted functions inline helpers from other files (the allocator
  inlines the free lists, the hazard history, the trace ring ...), while Numba stamps a cached
  function with its own source file only and would load stale machine code after a helper
  changed. rtsoa's locators stamp every function its dispatchers cache (in the package, and in
  tests, benchmarks or a user's files, which inline rtsoa's helpers as well) with one hash
  over the package's sources (`source_stamp`), so any edit recompiles everything that might
  have inlined it.
* short-cache-load: before each load Numba calls `target_context.refresh()`, which imports some
  twenty of its modules (scipy.linalg among them) and installs every lowering registry: about
  0.45 s of a warm `rtsoa run datasets/random-10k.rtsoa` (~1.0 s -> ~0.55 s). Loaded machine
  code needs only the symbols it calls: Numba's C helpers (registered when the target context
  is created), the reference-counting runtime (`rtsys.initialize`) and the hash secrets
  `numba.cpython.hashing` registers; a load that fails on the short path is retried Numba's way.
* tolerant-cache-index: an index naming a module this process cannot import (an argument type
  a benchmark module defined) reads as empty, a cache miss, instead of failing the load.
* lazy-bitcode and separate-linking: see `rtsoa._numba.lazy_bitcode` and `rtsoa._numba.linking`.
"""

import hashlib
import os
import pickle
import warnings
import weakref

from rtsoa._numba import compat, lazy_bitcode, linking

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Tooling for tests and benchmarks: not part of the product's stamp (editing a workload must not
# recompile the product); its own functions are stamped with the product stamp plus their file.
TOOLING_DIRS = ("testing",)
_stamp = None
_caches = weakref.WeakSet()  # every RtsoaFunctionCache: set_package_source_stamp re-stamps them


def _package_sources(package_dir):
    """(relative path, bytes) of every .py file of the package outside the tooling dirs."""
    for root, dirs, files in os.walk(package_dir):
        top = os.path.relpath(root, package_dir) == "."
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not (top and d in TOOLING_DIRS))
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path, "rb") as handle:
                    yield os.path.relpath(path, package_dir), handle.read()


def stamped_files(package_dir=PACKAGE_DIR):
    """The files the cache stamp covers: every .py file of the package but the tooling dirs
    (sorted, relative paths)."""
    return [relative for relative, _ in _package_sources(package_dir)]


def source_stamp(package_dir=PACKAGE_DIR):
    """SHA-256 over the names and contents of `stamped_files` (the cache stamp): one read each."""
    digest = hashlib.sha256()
    for relative, text in _package_sources(package_dir):
        digest.update(relative.encode() + b"\0" + text + b"\0")
    return digest.hexdigest()


def package_source_stamp():
    """`source_stamp` of the installed package, computed once per process."""
    global _stamp
    if _stamp is None:
        _stamp = source_stamp()
    return _stamp


def set_package_source_stamp(stamp):
    """Use `stamp` as the package stamp (mutation runs reuse the unmutated tree's stamp), for
    the functions already defined too: importing rtsoa defines most of them, and each one's
    cache index took the stamp of that moment."""
    global _stamp
    _stamp = stamp
    for cache in list(_caches):
        cache.stamp_index()


def _is_tooling(path):
    relative = os.path.relpath(os.path.abspath(path), PACKAGE_DIR)
    return relative.split(os.sep, 1)[0] in TOOLING_DIRS


class _PackageStamp:
    """Locator mixin: every function compiled through rtsoa's dispatchers, stamped with the
    package-wide source hash. rtsoa's own files take that hash alone; tooling files (which the
    package hash leaves out) and files outside the package (tests, benchmarks, a user's
    kernels: they inline rtsoa's helpers too) take it plus the file's own source, so editing
    rtsoa invalidates their cached machine code as well."""

    def get_source_stamp(self):
        inside = os.path.abspath(self._py_file).startswith(PACKAGE_DIR + os.sep)
        if inside and not _is_tooling(self._py_file):
            return package_source_stamp()
        with open(self._py_file, "rb") as handle:
            own = hashlib.sha256(handle.read()).hexdigest()
        return package_source_stamp() + own


_CACHING = "numba.core.caching."
_BASE_LOCATORS = ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator")

if compat.register(
    "package-stamp",
    "rtsoa",
    [_CACHING + "CacheImpl._locator_classes"]
    + [_CACHING + name + ".from_function" for name in _BASE_LOCATORS],
    "functions compiled by rtsoa stamped with one hash over the package's sources",
):
    from numba.core import caching as _numba_caching

    # NUMBA_CACHE_DIR when set, the in-tree __pycache__, user-wide; then Numba's own list
    PACKAGE_LOCATORS = tuple(
        type(
            f"Package{base.__name__}",
            (_PackageStamp, base),
            {"__doc__": _PackageStamp.__doc__, "__module__": __name__},
        )
        for base in (getattr(_numba_caching, name) for name in _BASE_LOCATORS)
    )
else:
    PACKAGE_LOCATORS = ()
    if compat.patches_enabled():
        warnings.warn(
            f"rtsoa: {compat.TABLE['package-stamp'].state}; cached functions keep Numba's "
            "per-file stamps, so clear rtsoa's __pycache__ directories (`rtsoa cache clear`) "
            "after editing its jitted helpers",
            RuntimeWarning,
            stacklevel=2,
        )

SHORT_CACHE_LOAD = compat.register(
    "short-cache-load",
    "rtsoa",
    [
        _CACHING + "Cache._load_overload",
        _CACHING + "Cache._guard_against_spurious_io_errors",
        "numba.core.runtime.rtsys.initialize",
        "numba.cpython.hashing",
    ],
    "cached machine code loaded without refreshing Numba's whole target context",
)
TOLERANT_CACHE_INDEX = compat.register(
    "tolerant-cache-index",
    "rtsoa",
    [_CACHING + "IndexDataCacheFile._load_index", _CACHING + "Cache.__init__"],
    "a cache index naming a module this process cannot import reads as a cache miss",
)
compat.register(
    "cache-classes",
    "rtsoa",
    [
        _CACHING + "FunctionCache._impl_class",
        _CACHING + "CompileResultCacheImpl.reduce",
        _CACHING + "CompileResultCacheImpl.rebuild",
        _CACHING + "IndexDataCacheFile.__init__",
        "numba.core.codegen.CPUCodegen.magic_tuple",
        "numba.core.registry.cpu_target",
    ],
    "rtsoa's cache subclasses and the cache-index reads of `cached_signatures`",
    patch=False,
)

from numba.core import caching as _numba_caching  # noqa: E402 - after the table says it exists


class _TolerantIndexFile(_numba_caching.IndexDataCacheFile):
    def _load_index(self):
        try:
            return super()._load_index()
        except (ImportError, AttributeError, pickle.UnpicklingError, EOFError):
            return {}


class RtsoaCacheImpl(_numba_caching.CompileResultCacheImpl):
    """Numba's compile-result cache with rtsoa's locators first, entries that record their
    separately linked callees, and loads that keep the bitcode unparsed."""

    _locator_classes = list(PACKAGE_LOCATORS) + list(
        getattr(_numba_caching.CompileResultCacheImpl, "_locator_classes", ())
    )

    def reduce(self, cres):
        return linking.reduce(cres, super().reduce(cres))

    def rebuild(self, target_context, payload):
        payload, callees = linking.unwrap(payload)
        if payload is None:
            return None  # a cache miss: the caller is compiled against today's callees
        rebuilt = lazy_bitcode.rebuild(target_context, payload)
        if rebuilt is None:
            rebuilt = super().rebuild(target_context, payload)
        linking.remember_callees(rebuilt.library, callees)
        return rebuilt


class RtsoaFunctionCache(_numba_caching.FunctionCache):
    """The cache of an rtsoa dispatcher (see the module docstring)."""

    _impl_class = RtsoaCacheImpl

    def __init__(self, py_func):
        super().__init__(py_func)
        self.stamp_index()
        _caches.add(self)

    def stamp_index(self):
        """Read and write the index under the locator's stamp as it is now."""
        index_class = (
            _TolerantIndexFile if TOLERANT_CACHE_INDEX else _numba_caching.IndexDataCacheFile
        )
        self._cache_file = index_class(
            cache_path=self._cache_path,
            filename_base=self._impl.filename_base,
            source_stamp=self._impl.locator.get_source_stamp(),
        )

    def load_overload(self, sig, target_context):
        if not SHORT_CACHE_LOAD:
            return super().load_overload(sig, target_context)
        try:
            _prepare_short_load(target_context)
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)
        except Exception:  # noqa: BLE001 - retried the way Numba does it, which reports errors
            return super().load_overload(sig, target_context)


def _prepare_short_load(target_context):
    import numba.cpython.hashing  # noqa: F401 - registers the hash-secret symbols
    from numba.core.runtime import rtsys

    rtsys.initialize(target_context)


def is_cached(dispatcher):
    """Whether `dispatcher` keeps its compiled code in a disk cache."""
    cache = getattr(dispatcher, "_cache", None)
    return cache is not None and not isinstance(cache, _numba_caching.NullCache)


def cached_signatures(dispatcher):
    """The argument types `dispatcher`'s disk cache holds for these sources and this machine
    (empty when it has no cache or its index was written for other sources)."""
    from numba.core.registry import cpu_target

    if not is_cached(dispatcher):
        return []
    magic = cpu_target.target_context.codegen().magic_tuple()
    index = dispatcher._cache._cache_file._load_index()
    return [key[0] for key in index if key[1] == magic]


def cache_path(dispatcher):
    """The directory `dispatcher`'s disk cache writes to, or None without a cache."""
    return dispatcher._cache.cache_path if is_cached(dispatcher) else None


def _probe():
    """A stand-in function for asking Numba's locators where a source file's cache goes."""


def package_cache_dirs():
    """The directories Numba's cache writes rtsoa's functions to (one per package directory
    with sources, as rtsoa's locators choose it: NUMBA_CACHE_DIR, the in-tree __pycache__ or
    the user-wide cache)."""
    found = set()
    for root, dirs, files in os.walk(PACKAGE_DIR):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        sources = sorted(name for name in files if name.endswith(".py"))
        if not sources:
            continue
        path = os.path.join(root, sources[0])
        for locator_class in RtsoaCacheImpl._locator_classes:
            locator = locator_class.from_function(_probe, path)
            if locator is not None:
                found.add(locator.get_cache_path())
                break
    return sorted(found)
