"""rtsoa's jitted functions are cached under one stamp over all jitted package sources, so an
edit to a helper another file inlines can never load stale machine code."""

import shutil

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from subprocess_json import run_json

from rtsoa import _jit
from rtsoa._numba import caching as rtsoa_caching
from rtsoa._numba import lazy_bitcode as _lazy_bitcode
from rtsoa.device import freelists, malloc
from rtsoa.graph import csr


def test_jitted_rtsoa_functions_use_the_package_stamp():
    for function in (malloc.device_malloc, freelists.find_block, csr.in_degrees):
        locator = function._cache._impl._locator
        assert isinstance(locator, _jit.PACKAGE_LOCATORS)
        assert locator.get_source_stamp() == _jit.package_source_stamp()


def test_stamp_covers_every_python_file_of_the_package_but_the_tooling():
    import os

    files = _jit.stamped_files()
    for helper in ("device/freelists.py", "device/bits.py", "device/hazards.py", "device/trace.py"):
        assert helper in files
    assert "_jit.py" in files and "cli/__init__.py" in files and "device/plot.py" in files
    assert "_numba/caching.py" in files
    assert not any(name.startswith("testing" + os.sep) for name in files)
    on_disk = sorted(
        os.path.relpath(os.path.join(root, name), _jit.PACKAGE_DIR)
        for root, _, names in os.walk(_jit.PACKAGE_DIR)
        for name in names
        if name.endswith(".py")
        and "__pycache__" not in root
        and not os.path.relpath(root, _jit.PACKAGE_DIR).startswith("testing")
    )
    assert sorted(files) == on_disk


def test_editing_an_inlined_helper_changes_the_stamp(tmp_path):
    copy = tmp_path / "rtsoa"
    shutil.copytree(_jit.PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = _jit.source_stamp(str(copy))
    assert before == _jit.package_source_stamp()
    helper = copy / "device" / "freelists.py"
    helper.write_text(helper.read_text() + "\n# edited\n")
    assert _jit.source_stamp(str(copy)) != before
    helper.write_text(helper.read_text().removesuffix("\n# edited\n"))
    assert _jit.source_stamp(str(copy)) == before
    command_line = copy / "cli" / "__init__.py"
    command_line.write_text(command_line.read_text() + "\n# jit\n")
    assert _jit.source_stamp(str(copy)) != before  # every file counts, whatever its words
    (copy / "testing" / "workloads.py").write_text("# edited\n")
    command_line.write_text(command_line.read_text().removesuffix("\n# jit\n"))
    assert _jit.source_stamp(str(copy)) == before  # the tooling does not


def test_a_stamp_set_later_reaches_functions_defined_before_it():
    """set_package_source_stamp (mutation runs keep the unmutated tree's stamp) re-stamps the
    cache indexes of the functions importing rtsoa already defined: their cached code loads
    under the new stamp only, and again under the old one once it is back."""
    offsets = np.array([0, 2, 3, 3], dtype=np.int32)
    targets = np.array([1, 2, 2], dtype=np.int32)
    np.testing.assert_array_equal(csr.in_degrees(offsets, targets, 3), [0, 1, 2])
    before = _jit.package_source_stamp()
    assert rtsoa_caching.cached_signatures(csr.in_degrees)
    try:
        rtsoa_caching.set_package_source_stamp("0" * 64)
        assert csr.in_degrees._cache._cache_file._source_stamp == "0" * 64
        assert rtsoa_caching.cached_signatures(csr.in_degrees) == []
    finally:
        rtsoa_caching.set_package_source_stamp(before)
    assert rtsoa_caching.cached_signatures(csr.in_degrees)


def test_user_functions_outside_the_package_keep_numbas_locators(tmp_path):
    module = tmp_path / "user_kernels.py"
    module.write_text("from numba import njit\n\n@njit(cache=True)\ndef f(x):\n    return x + 1\n")
    import importlib.util

    spec = importlib.util.spec_from_file_location("user_kernels", module)
    user = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(user)
    assert user.f(1) == 2
    assert not isinstance(user.f._cache._impl._locator, _jit.PACKAGE_LOCATORS)


def test_functions_rtsoa_compiles_outside_the_package_take_the_package_stamp(tmp_path):
    """A test's or a user's function compiled through rtsoa's `jit` inlines rtsoa's helpers, so
    its cached code must go stale when rtsoa changes: its stamp is the package stamp plus its
    own file's source (Numba's own stamp would follow its file alone)."""
    module = tmp_path / "rtsoa_user_kernels.py"
    module.write_text(
        "from rtsoa._jit import jit\nfrom rtsoa.graph import csr\n\n"
        "@jit\ndef degrees(offsets, targets, n):\n    return csr.in_degrees(offsets, targets, n)\n"
    )
    import hashlib
    import importlib.util

    spec = importlib.util.spec_from_file_location("rtsoa_user_kernels", module)
    user = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(user)
    offsets = np.array([0, 1, 1], dtype=np.int32)
    targets = np.array([1], dtype=np.int32)
    np.testing.assert_array_equal(user.degrees(offsets, targets, 2), [0, 1])
    locator = user.degrees._cache._impl._locator
    assert isinstance(locator, _jit.PACKAGE_LOCATORS)
    own = hashlib.sha256(module.read_bytes()).hexdigest()
    assert locator.get_source_stamp() == _jit.package_source_stamp() + own
    before = _jit.package_source_stamp()
    try:
        rtsoa_caching.set_package_source_stamp("0" * 64)  # as if rtsoa had been edited
        assert rtsoa_caching.cached_signatures(user.degrees) == []
    finally:
        rtsoa_caching.set_package_source_stamp(before)
    assert rtsoa_caching.cached_signatures(user.degrees)


def test_unexpected_numba_internals_warn_and_keep_numbas_stamps():
    script = (
        "import warnings, json, numba.core.caching as c\n"
        "c.UserWideCacheLocator = None  # renamed in some Numba release\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    from rtsoa._numba import caching\n"
        "from rtsoa.graph import csr\n"
        "print(json.dumps({'locators': len(caching.PACKAGE_LOCATORS), 'warned': "
        "any('clear rtsoa' in str(w.message) for w in seen), 'kind': "
        "type(csr.in_degrees._cache._impl._locator).__name__}))\n"
    )
    found = run_json(script)
    assert found == {"locators": 0, "warned": True, "kind": found["kind"]}
    assert not found["kind"].startswith("Package")


LAZY_SCRIPT = """
import contextlib, io, json, sys
from rtsoa.cli import main
with contextlib.redirect_stdout(io.StringIO()) as report:
    status = main(["run", sys.argv[1], "--no-progress"])
loaded_only = "numba.np.arraymath" not in sys.modules
from numba import njit
@njit
def total(values):  # a compile after the short loads: Numba's full set-up runs now
    return values.sum()
import numpy as np
print(json.dumps({"status": status, "report": report.getvalue(), "loaded_only": loaded_only,
                  "total": int(total(np.arange(5)))}))
"""

HASHING_MODULE = """
from rtsoa._jit import jit

@jit(cache=True)
def digest(text, values):
    seen = set()
    for value in values:
        seen.add(value)
    return hash(text), len(seen)
"""

HASHING_SCRIPT = """
import json, sys
import numpy as np
import rtsoa._jit  # installs the short cache load
sys.path.insert(0, sys.argv[1])
import hashing_module
print(json.dumps({"digest": list(hashing_module.digest("rtsoa", np.array([3, 1, 3, 2]))),
                  "hits": sum(hashing_module.digest.stats.cache_hits.values()),
                  "arraymath": "numba.np.arraymath" in sys.modules}))
"""


def test_a_warm_process_loads_cached_code_without_numbas_whole_set_up():
    from pathlib import Path

    assert _jit.LAZY_CACHE_REFRESH
    graph = Path(__file__).parents[1] / "datasets" / "random-10k.rtsoa"
    run_json(LAZY_SCRIPT, graph)  # fills the cache if this run has not yet
    warm = run_json(LAZY_SCRIPT, graph)
    assert warm["status"] == 0 and "checksum" in warm["report"], warm["report"]
    assert warm["loaded_only"]  # no compiler set-up (arraymath, scipy) for cached code
    assert warm["total"] == 10


def test_cached_code_that_hashes_loads_on_the_short_path(tmp_path):
    import os

    (tmp_path / "hashing_module.py").write_text(HASHING_MODULE)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONHASHSEED="7")
    first = run_json(HASHING_SCRIPT, tmp_path, env=env)
    second = run_json(HASHING_SCRIPT, tmp_path, env=env)
    assert first["hits"] == 0 and second["hits"] == 1
    assert not second["arraymath"]  # loaded without Numba's whole set-up
    assert second["digest"] == first["digest"] and first["digest"][1] == 3


def _serialized(dispatcher, *args):
    """(object code, bitcode) of a fresh compile of `dispatcher` for `args`' types."""
    dispatcher.compile(tuple(numba.typeof(a) for a in args))
    (cres,) = dispatcher.overloads.values()
    name, kind, (obj, bitcode) = cres.library.serialize_using_object_code()
    assert kind == "object"
    return obj, bitcode


def _bitcode_symbols(bitcode):
    """The symbols Numba's own load notes for an entry (its walk over the parsed module)."""
    import llvmlite.binding as ll

    module = ll.parse_bitcode(bitcode)
    return {
        g.name
        for group in (module.functions, module.global_variables)
        for g in group
        if not g.is_declaration
    }


def test_elf_symbols_are_numbas_defined_symbols_less_llvms_private_tables():
    from numba import njit

    @njit
    def mixed(values, k):  # a switch (LLVM may build a lookup table), a constant array, a loop
        table = np.array([3.0, 1.0, 4.0, 1.0, 5.0])
        total = 0.0
        for v in values:
            if k == 0:
                total += v
            elif k == 1:
                total -= v
            elif k == 2:
                total *= 2
            else:
                total += table[int(v) % 5]
        return total

    obj, bitcode = _serialized(mixed, np.arange(4.0), 3)
    ours = _lazy_bitcode.elf_defined_symbols(obj)
    theirs = _bitcode_symbols(bitcode)
    assert ours == {s for s in theirs if not s.startswith("switch.table.")}
    assert any(s.startswith("_ZN") for s in ours)  # the function itself is among them


@given(st.binary(max_size=400), st.integers(0, 399), st.binary(min_size=1, max_size=8))
@settings(max_examples=300, deadline=None)
def test_elf_reader_refuses_what_it_cannot_read_cleanly(junk, position, patch):
    from numba import njit

    if not hasattr(test_elf_reader_refuses_what_it_cannot_read_cleanly, "obj"):
        test_elf_reader_refuses_what_it_cannot_read_cleanly.obj = _serialized(
            njit(lambda x: x + 1), 1.0
        )[0]
    obj = test_elf_reader_refuses_what_it_cannot_read_cleanly.obj
    assert _lazy_bitcode.elf_defined_symbols(junk) is None or junk[:4] == b"\x7fELF"
    for damaged in (obj[: position * len(obj) // 400], obj[:position] + patch + obj[position:]):
        found = _lazy_bitcode.elf_defined_symbols(damaged)  # a set or None, never an exception
        assert found is None or isinstance(found, set)


def _elf_header(section_offset, sections=1, entry_size=64):
    import struct

    header = bytearray(b"\x7fELF\x02\x01" + bytes(122))
    header[0x28:0x30] = struct.pack("<Q", section_offset)
    header[0x3A:0x3C] = struct.pack("<H", entry_size)
    header[0x3C:0x3E] = struct.pack("<H", sections)
    return header


def test_elf_reader_refuses_offsets_beyond_any_buffer():
    """Offsets near 2**64 (which numpy cannot even take as an offset: OverflowError, found by
    the fuzz test above on CI) and tables pointing past the end read as None."""
    import struct

    assert _lazy_bitcode.elf_defined_symbols(bytes(_elf_header(2**64 - 1))) is None
    assert _lazy_bitcode.elf_defined_symbols(bytes(_elf_header(2**63))) is None
    assert _lazy_bitcode.elf_defined_symbols(bytes(_elf_header(64, entry_size=40))) is None
    symtab = _elf_header(64)  # one section at 64: a symbol table whose data lies far away
    section = bytearray(64)
    section[4:8] = struct.pack("<I", 2)  # SHT_SYMTAB
    section[24:32] = struct.pack("<Q", 2**64 - 8)  # its offset
    section[32:40] = struct.pack("<Q", 48)  # its size
    section[56:64] = struct.pack("<Q", 24)  # its entry size
    symtab[64:128] = section
    assert _lazy_bitcode.elf_defined_symbols(bytes(symtab)) is None


LINKING_MODULE = """
from rtsoa._jit import jit

@jit(cache=True)
def callee(x):
    return x * 3 + 1
"""

LINKING_SCRIPT = """
import json, sys
import rtsoa._jit  # installs the lazy bitcode load
sys.path.insert(0, sys.argv[1])
from numba import njit
import linking_module

direct = linking_module.callee(5)
library = next(iter(linking_module.callee.overloads.values())).library
lazy_before = "_rtsoa_bitcode" in library.__dict__

@njit  # not cached: compiled here, it copies the callee's module, so that module is parsed now
def caller(x):
    return linking_module.callee(x) + 1

value = caller(4)
print(json.dumps({"value": value, "direct": direct, "lazy_before": lazy_before,
                  "lazy_after": "_rtsoa_bitcode" in library.__dict__,
                  "hits": sum(linking_module.callee.stats.cache_hits.values())}))
"""


def test_a_lazily_loaded_entry_still_links_into_a_new_caller(tmp_path):
    import os

    assert _jit.LAZY_BITCODE
    (tmp_path / "linking_module.py").write_text(LINKING_MODULE)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    first = run_json(LINKING_SCRIPT, tmp_path, env=env)
    second = run_json(LINKING_SCRIPT, tmp_path, env=env)
    assert first["hits"] == 0 and second["hits"] == 1
    assert second["value"] == first["value"] == 14 and second["direct"] == 16
    assert second["lazy_before"]  # loaded without parsing its bitcode
    assert not second["lazy_after"]  # the caller's compile asked for the module: parsed then


def test_an_index_naming_a_module_this_process_lacks_reads_as_a_cache_miss(tmp_path):
    """An index pickled with a type from a user's module (asv's `benchmarks`, a script's kernel
    registry) made every later process without that module fail to load the function."""
    import pickle
    import sys

    assert _jit.TOLERANT_CACHE_INDEX
    module = tmp_path / "gone_module_of_user_types.py"
    module.write_text("class UserType:\n    pass\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import gone_module_of_user_types

        payload = pickle.dumps(("stamp", {(gone_module_of_user_types.UserType(),): "x.nbc"}))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("gone_module_of_user_types")
    module.unlink()
    index = rtsoa_caching._TolerantIndexFile.__new__(rtsoa_caching._TolerantIndexFile)
    index._index_path = str(tmp_path / "f.nbi")
    index._version = numba.__version__
    index._source_stamp = "stamp"
    with open(index._index_path, "wb") as handle:
        pickle.dump(index._version, handle)
        handle.write(payload)
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(payload)  # what Numba's own _load_index ran into
    assert index._load_index() == {}
