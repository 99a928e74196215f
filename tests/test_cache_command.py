"""`rtsoa cache info` / `rtsoa cache clear [NAME]` (`rtsoa.caches`)."""

import json
from pathlib import Path

import numba
import pytest

import rtsoa
from rtsoa import caches
from rtsoa.cli import main


@pytest.fixture
def cache_dirs(tmp_path, monkeypatch):
    """rtsoa's cache dir and lowered dir in `tmp_path`, holding one entry of each kind."""
    root = tmp_path / "cache"
    lowered = tmp_path / "lowered"
    monkeypatch.setenv("RTSOA_CACHE_DIR", str(root))
    monkeypatch.setenv("RTSOA_LOWERED_DIR", str(lowered))
    (root / "__pycache__").mkdir(parents=True)
    (root / "rtsoa_dispatch_abc.py").write_text("x = 1\n")
    (root / "__pycache__" / "rtsoa_dispatch_abc.dispatch-1.py311.nbi").write_bytes(b"i" * 10)
    (root / "rtsoa_checked_abc").write_text("")
    (root / "batch-warm-abc").mkdir()
    (root / "batch-warm-abc" / "done").write_bytes(b"d" * 5)
    (root / "ops-library.lock").write_text("")
    (lowered / "key").mkdir(parents=True)
    (lowered / "key" / "graph.rtsoa").write_bytes(b"g" * 100)
    return root, lowered


def _rows(capsys):
    assert main(["cache", "info", "--json"]) == 0
    return {row["name"]: row for row in json.loads(capsys.readouterr().out)}


def test_info_lists_every_cache_with_where_and_size(cache_dirs, capsys):
    root, lowered = cache_dirs
    rows = _rows(capsys)
    assert list(rows) == list(caches.NAMES)
    assert rows["dispatch"]["entries"] == 2 and rows["dispatch"]["bytes"] == 6 + 10
    assert rows["markers"]["entries"] == 1 and rows["batch"]["bytes"] == 5
    assert rows["lowered"] == {"name": "lowered", "where": str(lowered), "entries": 1, "bytes": 100}
    assert rows["dispatch"]["where"] == str(root)
    # beside the sources (a path through rtsoa), or the user's NUMBA_CACHE_DIR
    assert (numba.config.CACHE_DIR or "rtsoa") in rows["numba"]["where"]
    assert main(["cache", "info"]) == 0
    assert "lowered" in capsys.readouterr().out


def test_clear_one_cache_leaves_the_others(cache_dirs, capsys):
    root, lowered = cache_dirs
    assert main(["cache", "clear", "lowered"]) == 0
    assert "1 entries, 100 bytes" in capsys.readouterr().out
    rows = _rows(capsys)
    assert rows["lowered"]["entries"] == 0 and rows["dispatch"]["entries"] == 2
    assert main(["cache", "clear", "markers"]) == 0
    assert not (root / "rtsoa_checked_abc").exists() and (root / "rtsoa_dispatch_abc.py").exists()
    assert (root / "ops-library.lock").exists()  # locks are not caches


def test_clear_all_but_numba_empties_them(cache_dirs, capsys):
    root, _ = cache_dirs
    for name in ("dispatch", "markers", "lowered", "batch"):
        caches.clear(name)
    rows = _rows(capsys)
    assert all(rows[name]["entries"] == 0 for name in ("dispatch", "markers", "lowered", "batch"))
    assert (root / "ops-library.lock").exists()


def test_an_unknown_cache_is_refused(cache_dirs, capsys):
    with pytest.raises(SystemExit):
        main(["cache", "clear", "nothing"])
    with pytest.raises(ValueError, match="unknown cache"):
        caches.entries("nothing")


def _in_rtsoas_numba_cache(path):
    """Whether `path` is where Numba's own settings put the cache of an rtsoa source: beside
    the sources (a path through the rtsoa package), or with NUMBA_CACHE_DIR set, in a
    directory under it named after one of the package's directories (Numba names each
    `<source directory>_<hash of its path>`)."""
    configured = numba.config.CACHE_DIR
    if not configured:
        return "rtsoa" in str(path)
    package = Path(rtsoa.__file__).parent
    names = {package.name} | {d.name for d in package.rglob("*") if d.is_dir()}
    parent = Path(path).parent
    return parent.parent == Path(configured) and parent.name.rsplit("_", 1)[0] in names


def test_the_numba_cache_is_rtsoas_index_and_data_files_only():
    for path in caches.entries("numba"):
        assert path.suffix in (".nbi", ".nbc")
        assert _in_rtsoas_numba_cache(path), path


def test_clearing_numbas_cache_removes_index_and_data_files_only(tmp_path, monkeypatch):
    from rtsoa._numba import caching

    (tmp_path / "f-1.py311.nbi").write_bytes(b"i")
    (tmp_path / "f-1.py311.1.nbc").write_bytes(b"cc")
    (tmp_path / "module.cpython-311.pyc").write_bytes(b"p")
    monkeypatch.setattr(caching, "package_cache_dirs", lambda: [str(tmp_path)])
    assert caches.clear("numba") == (2, 3)
    assert [p.name for p in tmp_path.iterdir()] == ["module.cpython-311.pyc"]
