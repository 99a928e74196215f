"""rtsoa's jitted functions are cached under one stamp over all jitted package sources, so an
edit to a helper another file inlines can never load stale machine code."""

import shutil
import types

import pytest

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
