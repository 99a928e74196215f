"""Jit options in one place, so every njit function in rtsoa is compiled the same way.

`cache=True` writes compiled code to disk (Numba's cache directory, or NUMBA_CACHE_DIR), so a
fresh process does not pay the compile again. `boundscheck` stays off: inputs are validated in
Python before any jitted loop sees them.

Cache validity. Numba stamps a cached function with its own source file only, but rtsoa's jitted
functions inline helpers from other files: every cached rtsoa function is stamped with one hash
over the package's sources instead (`rtsoa._numba.caching`). The generated executor dispatch
module lives outside the package and keys its own cache (see `kernels.dispatch`).

Numba internals. Everything here compiles through rtsoa's own dispatcher classes
(`rtsoa._numba.dispatcher`), which carry rtsoa's cache and linking; every use of a Numba or
llvmlite internal lives in `rtsoa._numba` (its compat table: `python -m rtsoa._numba`). This
module is the one the rest of rtsoa imports, and re-exports what they use from there.

Profiles. Every jitted function of the device (and of the tooling that drives it) is decorated
with one of the named `JitProfile`s below instead of an option literal, so the inlining choice
reads as a decision: `jit_inline_ir`, `jit_inline_llvm`, `jit_out_of_line`, `jit_with_nrt`.
Each states `forceinline` (or `inline`) explicitly: left unset, Numba inherits the flag from
whichever caller compiles the function first.
"""

import operator
import os
from pathlib import Path

import numpy as np

from rtsoa._numba import flags, messages
from rtsoa._numba.caching import (
    PACKAGE_DIR,
    PACKAGE_LOCATORS,
    SHORT_CACHE_LOAD,
    TOLERANT_CACHE_INDEX,
    TOOLING_DIRS,
    package_source_stamp,
    source_stamp,
    stamped_files,
)
from rtsoa._numba.dispatcher import (
    NO_WRAPPER,
    InternalDispatcher,
    RtsoaDispatcher,
    entry_point,
    internal_jit,
    is_dispatcher,
    python_twin,
    rtsoa_cfunc,
    rtsoa_jit,
)
from rtsoa._numba.lazy_bitcode import INSTALLED as LAZY_BITCODE

__all__ = [
    "JIT_OPTIONS",
    "NO_WRAPPER",
    "PACKAGE_DIR",
    "PACKAGE_LOCATORS",
    "PROFILES",
    "TOOLING_DIRS",
    "EntryCache",
    "InternalDispatcher",
    "JitProfile",
    "RtsoaDispatcher",
    "checked_entry_point",
    "entry_point",
    "is_dispatcher",
    "jit",
    "jit_inline_ir",
    "jit_inline_ir_nrt",
    "jit_inline_llvm",
    "jit_internal",
    "jit_out_of_line",
    "jit_with_nrt",
    "package_source_stamp",
    "python_twin",
    "rtsoa_cfunc",
    "source_stamp",
    "stamped_files",
]

# error_model "numpy": arithmetic follows IEEE / numpy (x / 0.0 is inf or nan, integer x // 0 is
# 0) instead of raising ZeroDivisionError, which compiled ops could not report (see ops.entry).
JIT_OPTIONS = {"cache": True, "nogil": True, "boundscheck": False, "error_model": "numpy"}

# What rtsoa changed in this process (each a row of `rtsoa._numba.compat`).
CHEAP_FLAG_LOOKUPS = flags.INSTALLED
PLAIN_ERROR_MESSAGES = messages.INSTALLED
LAZY_CACHE_REFRESH = SHORT_CACHE_LOAD
assert TOLERANT_CACHE_INDEX in (True, False) and LAZY_BITCODE in (True, False)


def cache_dir():
    """rtsoa's cache directory: $RTSOA_CACHE_DIR, else ~/.cache/rtsoa. The generated modules
    (kernel dispatch, op entries) and rtsoa's other caches live under it."""
    configured = os.environ.get("RTSOA_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "rtsoa"


def jit(fn=None, **overrides):
    """`numba.njit` with rtsoa's options and dispatcher class; usable as `@jit` or
    `@jit(fastmath=True)`."""
    options = {**JIT_OPTIONS, **overrides}
    if fn is None:
        return lambda function: rtsoa_jit(function, options)
    return rtsoa_jit(fn, options)


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
        return rtsoa_jit(fn, self.options)

    def keeping_literals(self, *names):
        """This profile (a wrapper-less one), the parameters `names` kept literal: a jitted
        caller's constant for them (an op family's `op`, a per-dtype entry's `kind`) gives a
        compile of its own in which branches on it are pruned before typing
        (`rtsoa._numba.literal_args`); other parameters are widened as usual."""
        if not self.wrapperless:
            raise ValueError(f"{self.name}: only wrapper-less profiles keep literal arguments")

        def decorate(fn):
            return jit_internal(fn, **self.options, literal_args=names)

        return decorate

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
    "once: callers call it by symbol (`rtsoa._numba.linking`), so LLVM never inlines it.",
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


def jit_internal(fn=None, **overrides):
    """`jit` for a function only jitted code calls: no CPython wrapper (see `NO_WRAPPER`);
    returns an `InternalDispatcher`. Usable as `@jit_internal` or `@jit_internal(...)`."""
    options = {**JIT_OPTIONS, **NO_WRAPPER, **overrides, "nopython": True}
    keeps_literals = options.pop("literal_args", False)  # True, or the parameter names
    linked_once = options.get("forceinline") is False  # a real call: link it once (by symbol)

    def decorate(function):
        return internal_jit(function, options, keeps_literals, linked_once)

    return decorate if fn is None else decorate(fn)


def _fingerprint(value):
    """What fixes the Numba type of an argument that is not an owner: an array's dtype,
    dimensions, layout and flags; any other value's Python type."""
    if isinstance(value, np.ndarray):
        flags_ = value.flags
        return (
            type(value),
            value.dtype,
            value.ndim,
            flags_.c_contiguous,
            flags_.f_contiguous,
            flags_.writeable,
            flags_.aligned,
        )
    return type(value)


def checked_entry_point(dispatcher, args):
    """`entry_point(dispatcher, args)` wrapped to check, on every call, that its arguments
    have the types of `args` (`_fingerprint`): a TypeError instead of memory read as the
    wrong type. For call sites that cannot keep their arguments' objects (EntryCache can)."""
    entry = entry_point(dispatcher, args)
    expected = tuple(map(_fingerprint, args))

    def checked(*arguments):
        if tuple(map(_fingerprint, arguments)) != expected:
            raise TypeError(_type_change(dispatcher, expected, arguments))
        return entry(*arguments)

    return checked


def _type_change(dispatcher, expected, arguments):
    name = getattr(getattr(dispatcher, "py_func", dispatcher), "__qualname__", dispatcher)
    for position, (before, argument) in enumerate(zip(expected, arguments, strict=False)):
        if _fingerprint(argument) != before:
            return (
                f"{name}: argument {position} has another type than the compiled entry was "
                f"made for ({before!r} expected, got {_fingerprint(argument)!r})"
            )
    return f"{name}: {len(arguments)} arguments, the compiled entry takes {len(expected)}"


class EntryCache:
    """Entry points (`entry_point`) kept next to the objects they were made for, made on
    first use and all dropped when one of those objects is replaced.

    The entry unboxes its arguments without checking their types, so the types are checked
    here: the `owners` by identity (an entry is only reused with the very objects it was
    made for), every other argument by `_fingerprint` on each call (a TypeError names it).
    `call` serves the common case: one owner object first (a device's state), int64 scalars
    after it, which must be Python ints within int64 (`Device` checks them first, so `call`
    does not), so every call of one function has the one signature."""

    def __init__(self):
        self._owners = ()
        self._owned = frozenset()  # ids of the owners and of the members of owner tuples
        self._entries = {}

    def entry(self, owners, key, function, args):
        """The entry of `function` for `args`, kept under `key` while every object of the
        tuple `owners` is the one it was made with (a tuple owner's members count as owners:
        a tuple cannot change); the other arguments must keep their types (TypeError
        otherwise)."""
        if len(owners) != len(self._owners) or not all(map(operator.is_, owners, self._owners)):
            self._owners = owners
            self._owned = _owned_ids(owners)
            self._entries = {}
        others = tuple(arg for arg in args if id(arg) not in self._owned)
        kinds = tuple(map(_fingerprint, others))
        found = self._entries.get(key)
        if found is None:
            found = self._entries[key] = (entry_point(function, args), kinds)
        elif found[1] != kinds:
            raise TypeError(_type_change(function, found[1], others))
        return found[0]

    def call(self, function, owner, *scalars):
        args = (owner, *scalars)
        owners = self._owners
        if len(owners) == 1 and owners[0] is owner:
            found = self._entries.get(function)
            if found is not None:  # scalars: Device checked them
                return found[0](*args)
        return self.entry((owner,), function, function, args)(*args)


def _owned_ids(owners):
    owned = set()
    for owner in owners:
        owned.add(id(owner))
        if isinstance(owner, tuple):
            owned.update(map(id, owner))
    return frozenset(owned)
