"""Numba internals stay in `rtsoa._numba`, each listed in its compat table, and importing rtsoa
leaves a user's own `numba.njit` code compiling and caching as Numba alone would."""

import ast
import json
import os
import pathlib
import subprocess
import sys

import numba
import pytest
from subprocess_json import run_json

from rtsoa import _jit
from rtsoa._numba import arrays, bundle, compat, events, symbols, typing_only  # noqa: F401

PACKAGE = pathlib.Path(_jit.PACKAGE_DIR)
# Numba's documented extension API (what its "extending" guide imports) and llvmlite's IR
# builder, which `@intrinsic` code generation uses wherever the intrinsic lives.
PUBLIC = {
    "numba",
    "numba.extending",
    "numba.types",
    "numba.typed",
    "numba.np.numpy_support",
    "numba.core.errors",
    "llvmlite",
    "llvmlite.ir",
}


def _imports(path):
    """(line, imported module or module.name) of every import in the file at `path`."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def _private(name):
    if not name.startswith(("numba.", "llvmlite.")) and name not in ("numba", "llvmlite"):
        return False
    parts = name.split(".")
    # `from numba.core import cgutils` is numba.core.cgutils; `from numba import njit` is public
    return not any(".".join(parts[:depth]) in PUBLIC for depth in (len(parts), len(parts) - 1))


def test_no_module_outside_rtsoa_numba_imports_numba_internals():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_numba" in path.relative_to(PACKAGE).parts:
            continue
        for line, name in _imports(path):
            if _private(name):
                found.append(f"{path.relative_to(PACKAGE)}:{line}: {name}")
    assert not found, "Numba internals belong in rtsoa/_numba:\n" + "\n".join(found)


def test_the_import_rule_catches_internals():
    assert _private("numba.core.caching.Cache") and _private("llvmlite.binding.add_symbol")
    assert _private("numba.core.registry.CPUDispatcher")
    assert _private("numba.core.cgutils") and _private("numba.core.types.Integer")
    assert not _private("numba.types.Integer") and not _private("numba.extending.intrinsic")
    assert not _private("numba.njit") and not _private("llvmlite.ir.IntType")


@pytest.mark.parametrize("name", list(compat.TABLE))
def test_every_internal_rtsoa_depends_on_is_present(name):
    entry = compat.TABLE[name]
    missing = compat.first_missing(entry.requires)
    assert missing is None, (
        f"{'patch' if entry.patch else 'private dependency'} {name!r} needs {missing}, which "
        f"{compat.numba_versions()} does not have; state: {entry.state}"
    )


def test_the_table_prints_with_the_versions():
    done = subprocess.run(
        [sys.executable, "-m", "rtsoa._numba"], capture_output=True, text=True, check=True
    )
    assert f"numba {numba.__version__}" in done.stdout
    for name in compat.TABLE:
        assert name in done.stdout


STATES = """
import json
import rtsoa._jit
from rtsoa._numba import arrays, bundle, compat, events, symbols, typing_only
print(json.dumps({name: [entry.patch, entry.state] for name, entry in compat.TABLE.items()}))
"""


def test_switching_patches_off_skips_every_patch():
    on = run_json(STATES, env=dict(os.environ, RTSOA_NUMBA_PATCHES="on"))
    off = run_json(STATES, env=dict(os.environ, RTSOA_NUMBA_PATCHES="off"))
    assert set(on) == set(off)
    for name, (patch, state) in off.items():
        if patch:
            assert state == "skipped: RTSOA_NUMBA_PATCHES=off", name
            assert on[name][1] == "installed", name
        else:
            assert state == on[name][1] == "used", name


USER_MODULE = """
from numba import njit

@njit(cache=True)
def user(values):
    total = 0
    for value in values:
        total += value
    return total
"""

# What Numba classes and globals a plain njit function goes through, as names and code identity.
OBSERVE = """
import json, sys, os
sys.path.insert(0, sys.argv[1])
import numpy as np
if sys.argv[2] == "rtsoa":
    import rtsoa._jit
    from rtsoa.device import Device
    Device(hbm_bytes=1 << 20).malloc(64)  # compiles or loads rtsoa functions
import user_module
from numba.core import caching, codegen, compiler, dispatcher, targetconfig, errors, callconv

def where(function):
    function = getattr(function, "__func__", function)
    return f"{function.__module__}.{function.__qualname__}"

value = int(user_module.user(np.arange(10)))
cres = next(iter(user_module.user.overloads.values()))
cache = user_module.user._cache
print(json.dumps({
    "value": value,
    "hits": sum(user_module.user.stats.cache_hits.values()),
    "dispatcher": type(user_module.user).__name__,
    "cache": type(cache).__name__,
    "impl": type(cache._impl).__name__,
    "locator": type(cache._impl._locator).__name__,
    "index_file": type(cache._cache_file).__name__,
    "cache_path": cache.cache_path,
    "library": type(cres.library).__name__,
    "locator_classes": [c.__name__ for c in caching.CacheImpl._locator_classes],
    "function_cache_impl": caching.FunctionCache._impl_class.__name__,
    "load_overload": where(caching.Cache.load_overload),
    "load_index": where(caching.IndexDataCacheFile._load_index),
    "unserialize": where(codegen.CPUCodeLibrary._unserialize),
    "module_for_linking": where(codegen.CPUCodeLibrary._get_module_for_linking),
    "reduce": where(caching.CompileResultCacheImpl.reduce),
    "rebuild": where(caching.CompileResultCacheImpl.rebuild),
    "result_rebuild": where(compiler.CompileResult._rebuild),
    "enable_caching": where(dispatcher.Dispatcher.enable_caching),
    "process": {
        "cheap-flag-lookups": where(targetconfig.TargetConfig.__hash__)
        + where(targetconfig.TargetConfig.__eq__),
        "plain-error-messages": type(errors._termcolor_inst).__name__,
        "bundle-argument-attributes": where(callconv.CPUCallConv.decorate_function),
    },
}))
"""


def _observe(tmp_path, mode):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("NUMBA_CACHE_DIR", None)
    return run_json(OBSERVE, tmp_path, mode, env=env)


def test_a_users_njit_code_goes_through_numbas_unchanged_classes(tmp_path):
    (tmp_path / "user_module.py").write_text(USER_MODULE)
    plain = _observe(tmp_path, "plain")  # compiles and caches, rtsoa never imported
    plain_again = _observe(tmp_path, "plain")  # loads
    with_rtsoa = _observe(tmp_path, "rtsoa")  # loads, after rtsoa compiled or loaded its own
    for name in ("a", "b"):
        (tmp_path / "user_module.py").write_text(USER_MODULE + f"\n# {name}\n")
        first = _observe(tmp_path, "rtsoa")  # compiles (edited source) and caches with rtsoa
        assert first["hits"] == 0
    plain_after = _observe(tmp_path, "plain")  # Numba alone loads what it cached with rtsoa
    assert plain_again["hits"] == with_rtsoa["hits"] == plain_after["hits"] == 1
    assert plain["value"] == with_rtsoa["value"] == first["value"] == 45
    assert with_rtsoa["cache_path"] == str(tmp_path / "__pycache__")  # Numba's usual place
    installed = {name for name in plain["process"] if compat.installed(name)}
    for observed in (with_rtsoa, first):
        for key, value in plain.items():
            if key in ("hits", "process"):
                continue
            assert observed[key] == value, key
        for name, value in plain["process"].items():  # process-wide: listed in the table
            assert (observed["process"][name] != value) == (name in installed), name
    assert plain["library"] == "JITCodeLibrary" and plain["cache"] == "FunctionCache"


CALLER_MODULE = """
from numba import njit
from rtsoa._jit import jit, jit_out_of_line

@jit_out_of_line
def leaf(x):
    return x * 2 + 1

@jit(cache=False)
def middle(x):  # linked as usual, calls leaf by symbol
    return leaf(x) - 1

@njit(cache=True)
def caller(x):
    return leaf(x) + 1

@njit(cache=True)
def caller_of_middle(x):
    return middle(x) + 100
"""

CALLER_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import caller_module
print(json.dumps({"value": caller_module.caller(20),
                  "middle": caller_module.caller_of_middle(20),
                  "hits": sum(caller_module.caller.stats.cache_hits.values())
                  + sum(caller_module.caller_of_middle.stats.cache_hits.values())}))
"""


def test_a_users_cached_njit_caller_of_a_function_linked_once_reloads(tmp_path):
    """Numba's cache cannot record callees linked by symbol, so a plain njit caller copies
    them (as Numba always does), also through an rtsoa function linked as usual that calls
    them by symbol: its cache entries load in a later process on their own."""
    (tmp_path / "caller_module.py").write_text(CALLER_MODULE)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    first = run_json(CALLER_SCRIPT, tmp_path, env=env)
    second = run_json(CALLER_SCRIPT, tmp_path, env=env)
    assert first == {"value": 42, "middle": 140, "hits": 0}
    assert second == {"value": 42, "middle": 140, "hits": 2}


def test_the_compat_rows_name_their_scope():
    rows = {name: entry.scope for name, entry in compat.TABLE.items()}
    assert {name for name, scope in rows.items() if scope == "process"} == {
        "cheap-flag-lookups",
        "plain-error-messages",
        "bundle-argument-attributes",
        "jit-symbols",
        "compile-events",  # observes compiles only (batch --timeout)
    }
    assert json.dumps(rows)  # plain data


def test_compile_events_bracket_each_outermost_compile_once():
    """`events.on_compile`: a batch worker's --timeout clock pauses around each compile; a
    callee compiled inside its caller's compile does not pause twice, a call of compiled
    code does not pause at all."""
    calls = []
    events.on_compile(lambda: calls.append("pause"), lambda: calls.append("resume"))
    try:

        @numba.njit
        def callee(x):
            return x + 1

        @numba.njit
        def caller(x):
            return callee(x) * 2

        assert caller(20) == 42
        assert calls == ["pause", "resume"]
        assert caller(1) == 4  # compiled: no event
        assert calls == ["pause", "resume"]
    finally:
        events.on_compile(None, None)

    # the listener is gone: a new compile records nothing
    @numba.njit
    def later(x):
        return x

    later(1)
    assert calls == ["pause", "resume"]
