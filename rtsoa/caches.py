"""rtsoa's caches on disk: where each lives, how big it is, and clearing them (`rtsoa cache`).

- numba: machine code of rtsoa's jitted functions, Numba's .nbi index and .nbc data files (in
  the package's __pycache__ directories, or under NUMBA_CACHE_DIR). Each entry that calls
  functions linked once carries its callee records (`rtsoa._numba.linking`), so clearing them
  clears the records too.
- dispatch: the generated executor dispatch modules and their own Numba cache.
- ops: the generated entry module of each op compiled (`rtsoa.ops.entry`), its marker, lock
  and Numba cache.
- markers: the kernel-conformance markers (`rtsoa.kernels.conformance`).
- lowered: lowered models (`rtsoa.lowering.cache`).
- batch: the warm-up records of batch workers (`rtsoa.batch.worker`).

Clearing only deletes files: the next run compiles (or lowers) again and writes them anew.
"""

import os
import shutil
from pathlib import Path

NAMES = ("numba", "dispatch", "ops", "markers", "lowered", "batch")


def _numba_files():
    from rtsoa._numba.caching import package_cache_dirs

    for directory in map(Path, package_cache_dirs()):
        if directory.is_dir():
            yield from sorted(p for p in directory.iterdir() if p.suffix in (".nbi", ".nbc"))


def _in_cache_dir(*patterns):
    from rtsoa.kernels.dispatch import cache_dir

    directory = cache_dir()
    if directory.is_dir():
        for pattern in patterns:
            yield from sorted(directory.glob(pattern))


def _ops():
    from rtsoa.ops.library import entries_numba_dir, ops_dir

    directory, machine = ops_dir(), entries_numba_dir()
    if directory.is_dir():
        yield from sorted(path for path in directory.iterdir() if path != machine)
    if machine.is_dir():
        yield from sorted(machine.iterdir())


def _lowered():
    from rtsoa.lowering.cache import lowered_dir

    directory = lowered_dir()
    if directory.is_dir():
        yield from sorted(directory.iterdir())


def _where():
    """{name: (the directory or directories it lives in, as text)}."""
    from rtsoa._numba.caching import package_cache_dirs
    from rtsoa.kernels.dispatch import cache_dir
    from rtsoa.lowering.cache import lowered_dir
    from rtsoa.ops.library import ops_dir

    dirs = package_cache_dirs()
    common = os.path.commonpath(dirs) if dirs else ""
    return {
        "numba": f"{len(dirs)} directories under {common}",
        "dispatch": str(cache_dir()),
        "ops": str(ops_dir()),
        "markers": str(cache_dir()),
        "lowered": str(lowered_dir()),
        "batch": str(cache_dir()),
    }


def entries(name):
    """The files and directories of the cache `name` (one of NAMES)."""
    found = {
        "numba": _numba_files,
        "dispatch": lambda: _in_cache_dir("rtsoa_dispatch_*.py", "__pycache__/rtsoa_dispatch_*"),
        "ops": _ops,
        "markers": lambda: _in_cache_dir("rtsoa_checked_*"),
        "lowered": _lowered,
        "batch": lambda: _in_cache_dir("batch-warm-*"),
    }
    if name not in found:
        raise ValueError(f"unknown cache {name!r}: one of {', '.join(NAMES)}")
    return list(found[name]())


def _size(path):
    if path.is_dir() and not path.is_symlink():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.exists() else 0


def info():
    """[{name, where, entries, bytes}] for every cache."""
    where = _where()
    rows = []
    for name in NAMES:
        found = entries(name)
        rows.append(
            {
                "name": name,
                "where": where[name],
                "entries": len(found),
                "bytes": sum(map(_size, found)),
            }
        )
    return rows


def clear(name=None):
    """Delete the cache `name` (all when None); returns (entries, bytes) removed."""
    removed = freed = 0
    for each in NAMES if name is None else (name,):
        for path in entries(each):
            freed += _size(path)
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed += 1
    return removed, freed
