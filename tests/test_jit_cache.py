"""rtsoa's jitted functions are cached under one stamp over all jitted package sources, so an
edit to a helper another file inlines can never load stale machine code."""

import shutil
import types

import pytest
from subprocess_json import run_json

from rtsoa import _jit
from rtsoa.device import allocator, freelists
from rtsoa.graph import csr


def test_jitted_rtsoa_functions_use_the_package_stamp():
    for function in (allocator.device_malloc, freelists.find_block, csr.in_degrees):
        locator = function._cache._impl._locator
        assert isinstance(locator, _jit.PACKAGE_LOCATORS)
        assert locator.get_source_stamp() == _jit.package_source_stamp()


def test_stamp_covers_every_file_with_jitted_code_and_only_those():
    files = _jit.stamped_files()
    for helper in ("device/freelists.py", "device/bits.py", "device/hazards.py", "device/trace.py"):
        assert helper in files
    assert "_jit.py" in files
    assert "cli.py" not in files and "device/plot.py" not in files


def test_editing_an_inlined_helper_changes_the_stamp(tmp_path):
    copy = tmp_path / "rtsoa"
    shutil.copytree(_jit.PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = _jit.source_stamp(str(copy))
    assert before == _jit.package_source_stamp()
    helper = copy / "device" / "freelists.py"
    helper.write_text(helper.read_text() + "\n# edited\n")
    assert _jit.source_stamp(str(copy)) != before
    (copy / "cli.py").write_text((copy / "cli.py").read_text() + "\n# edited\n")
    helper.write_text(helper.read_text().removesuffix("\n# edited\n"))
    assert _jit.source_stamp(str(copy)) == before  # files without jitted code do not count


def test_user_functions_outside_the_package_keep_numbas_locators(tmp_path):
    module = tmp_path / "user_kernels.py"
    module.write_text("from numba import njit\n\n@njit(cache=True)\ndef f(x):\n    return x + 1\n")
    import importlib.util

    spec = importlib.util.spec_from_file_location("user_kernels", module)
    user = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(user)
    assert user.f(1) == 2
    assert not isinstance(user.f._cache._impl._locator, _jit.PACKAGE_LOCATORS)


def test_unexpected_numba_internals_warn_and_keep_numbas_stamps(monkeypatch):
    monkeypatch.setattr(_jit, "caching", types.SimpleNamespace())  # no CacheImpl at all
    with pytest.warns(RuntimeWarning, match="clear rtsoa's __pycache__"):
        assert _jit._install_locators() == ()


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
from numba import njit

@njit(cache=True)
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
