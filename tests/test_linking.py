"""Separately linked functions (`rtsoa._numba.linking`): callers call an out-of-line function by
symbol instead of copying its code, and a cached caller loads only against the very callees it
was compiled with (else it is compiled again: never a stale call, never an unresolved symbol)."""

import os
import sys
import textwrap

import pytest
from subprocess_json import run_json

from rtsoa import _jit
from rtsoa._numba import linking as _linking
from rtsoa.device import malloc, streams

MODULE = textwrap.dedent(
    """
    from rtsoa._jit import jit, jit_out_of_line

    @jit_out_of_line
    def leaf(x):
        return x * 3 + 1

    @jit_out_of_line
    def middle(x):
        return leaf(x) + leaf(x + 1)

    @jit(cache=True)
    def top(x):
        return middle(x) + leaf(x)
    """
)

SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    if sys.argv[2] == "shift":  # later compiles get other mangled names than the cached ones
        from numba.core import bytecode
        for _ in range(1000):
            next(bytecode.FunctionIdentity._unique_ids)
    import linked_module as m
    result = m.top(5)
    print(json.dumps({
        "result": result,
        "hits": sum(m.top.stats.cache_hits.values()),
        "misses": sum(m.top.stats.cache_misses.values()),
    }))
    """
)


def _library(dispatcher):
    (compiled,) = dispatcher.overloads.values()
    return compiled.library


def _defined_and_declared(library):
    functions = list(library._final_module.functions)
    return (
        {f.name for f in functions if not f.is_declaration},
        {f.name for f in functions if f.is_declaration},
    )


@pytest.fixture
def module_dir(tmp_path):
    (tmp_path / "linked_module.py").write_text(MODULE)
    return tmp_path


def _run(module_dir, cache_dir, mode="plain"):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir))
    return run_json(SCRIPT, module_dir, mode, env=env, timeout=300)


def test_the_device_functions_are_separately_linked():
    assert _linking.INSTALLED
    for function in (malloc._malloc_slow, streams.stream_synchronize, streams.event_query):
        assert _linking.separately_linked(function)
    for function in (malloc.device_malloc, streams.event_record):  # inlined by LLVM
        assert not _linking.separately_linked(function)


def test_a_caller_declares_its_out_of_line_callees_instead_of_copying_them(module_dir):
    sys.path.insert(0, str(module_dir))
    try:
        import linked_module as m
    finally:
        sys.path.remove(str(module_dir))
    assert m.top(5) == 9 * 5 + 6
    ((leaf_cres,), (middle_cres,)) = m.leaf.overloads.values(), m.middle.overloads.values()
    leaf_symbol, middle_symbol = leaf_cres.fndesc.mangled_name, middle_cres.fndesc.mangled_name
    defined, declared = _defined_and_declared(_library(m.top))
    assert {leaf_symbol, middle_symbol} <= declared
    assert not {leaf_symbol, middle_symbol} & defined
    # the cache record names both callees, with their mangled names and stamps
    records = _linking.linked_callees(_library(m.top))
    assert {(r[1], r[3]) for r in records} == {("leaf", leaf_symbol), ("middle", middle_symbol)}
    assert all(r[0] == "linked_module" and r[4] is not None for r in records)


def test_a_cached_caller_loads_in_a_fresh_process(module_dir, tmp_path):
    cache = tmp_path / "cache"
    first = _run(module_dir, cache)
    assert first == {"result": 51, "hits": 0, "misses": 1}
    second = _run(module_dir, cache)
    assert second == {"result": 51, "hits": 1, "misses": 0}


def test_a_cached_caller_whose_callee_was_recompiled_is_compiled_again(module_dir, tmp_path):
    cache = tmp_path / "cache"
    assert _run(module_dir, cache)["result"] == 51
    leaf_entries = [p for p in cache.rglob("*") if p.is_file() and ".leaf-" in p.name]
    assert leaf_entries
    for path in leaf_entries:  # the callee alone is no longer cached: it compiles anew,
        path.unlink()  # under another mangled name than the cached callers recorded
    again = _run(module_dir, cache, "shift")
    assert again == {"result": 51, "hits": 0, "misses": 1}
    assert _run(module_dir, cache) == {"result": 51, "hits": 1, "misses": 0}


def test_a_record_that_does_not_match_loads_nothing(module_dir):
    sys.path.insert(0, str(module_dir))
    try:
        import linked_module as m
    finally:
        sys.path.remove(str(module_dir))
    m.top(1)
    (record,) = [r for r in _linking.linked_callees(_library(m.top)) if r[1] == "leaf"]
    assert _linking._load_callee(record)
    module, qualname, argtypes, mangled, stamp = record
    assert not _linking._load_callee((module, qualname, argtypes, mangled + "x", stamp))
    assert not _linking._load_callee((module, qualname, argtypes, mangled, "another stamp"))
    assert not _linking._load_callee(("no_such_module_here", qualname, argtypes, mangled, stamp))
    assert not _linking._load_callee((module, "no_such_function", argtypes, mangled, stamp))


def test_two_functions_of_one_name_are_linked_as_usual():
    made = []
    for offset in (1, 2):

        def twin(x, offset=offset):
            return x + offset

        made.append(_jit.jit_out_of_line(twin))
    assert not any(_linking.separately_linked(function) for function in made)
    first = made[0]

    @_jit.jit
    def caller(x):
        return first(x)

    assert caller(1) == 2
    _, declared = _defined_and_declared(_library(caller))
    (callee,) = first.overloads.values()
    assert callee.fndesc.mangled_name not in declared  # copied in (and inlined), as Numba links
    assert _linking.linked_callees(_library(caller)) == ()


def test_nothing_is_separately_linked_without_the_cache_hook(monkeypatch):
    monkeypatch.setattr(_linking, "INSTALLED", False)
    assert not _linking.separately_linked(malloc._malloc_slow)
