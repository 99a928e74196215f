"""The compat table: every Numba / llvmlite internal rtsoa depends on, and what became of it.

Each row is one patch (a change to how Numba compiles or loads rtsoa's functions) or one private
dependency (an internal rtsoa reads without changing it), with the attributes it needs. A patch
is installed only when every one of them exists, and then says so; otherwise it reports
`skipped: <reason>` and its fallback runs (what Numba does without the patch), so a Numba
release that renames an internal a patch needs makes rtsoa slower, never wrong. A private
dependency has no fallback: a missing one reads `missing: <reason>` (and
tests/test_numba_compat.py fails naming it and the Numba version). With RTSOA_NUMBA_PATCHES=off
every patch is skipped, which is how CI runs the fallbacks (`.ci/run`).

Scope says who sees a patch: "rtsoa" patches live in rtsoa's own dispatcher and cache classes
(subclasses of Numba's), so a user's `numba.njit` code compiles and caches as if rtsoa were not
imported; "process" patches change a Numba class every compile in the process uses, and stay
only because their measured gain is large (see docs/numba-upstream.md, which proposes them to
Numba).

    python -m rtsoa._numba   # prints the table with the Numba and llvmlite versions
"""

import importlib
import os
from dataclasses import dataclass, field

from rtsoa.abi.registry import Registry

PATCHES_ENV = "RTSOA_NUMBA_PATCHES"


@dataclass
class Entry:
    """One row of the table: a patch (`patch=True`) or a private dependency."""

    name: str
    scope: str  # "rtsoa": rtsoa's subclasses only; "process": a Numba class everyone uses
    requires: tuple  # dotted paths that must resolve ("numba.core.caching.Cache.load_overload")
    purpose: str
    patch: bool = True
    state: str = "not loaded"
    missing: str = field(default=None, repr=False)


TABLE = Registry("compat entry")  # name -> Entry, in registration order


def patches_enabled():
    """False when RTSOA_NUMBA_PATCHES is off / 0 / false / no: every patch uses its fallback."""
    value = os.environ.get(PATCHES_ENV, "on").strip().lower()
    return value not in ("off", "0", "false", "no")


def resolve(path):
    """The object a dotted path names, importing modules as needed; AttributeError if absent."""
    parts = path.split(".")
    found = importlib.import_module(parts[0])
    for depth, part in enumerate(parts[1:], start=2):
        if hasattr(found, part):
            found = getattr(found, part)
            continue
        try:
            found = importlib.import_module(".".join(parts[:depth]))
        except ImportError:
            raise AttributeError(f"{path} (no {part})") from None
    return found


def first_missing(requires):
    """The first of the dotted paths `requires` that does not resolve, or None."""
    for path in requires:
        try:
            resolve(path)
        except (AttributeError, ImportError):
            return path
    return None


def numba_versions():
    """'numba X, llvmlite Y' of this process."""
    import llvmlite
    import numba

    return f"numba {numba.__version__}, llvmlite {llvmlite.__version__}"


def register(name, scope, requires, purpose, patch=True):
    """Add a row (once per name) and decide it: returns True when a patch may be installed (or
    a private dependency is present). The caller installs it, or runs its fallback."""
    entry = TABLE.get(name)
    if entry is None:
        entry = TABLE.add(name, Entry(name, scope, tuple(requires), purpose, patch))
    entry.missing = first_missing(entry.requires)
    if entry.patch and not patches_enabled():
        entry.state = f"skipped: {PATCHES_ENV}=off"
        return False
    if entry.missing is not None:
        import numba

        absent = f"numba {numba.__version__} has no {entry.missing}"
        entry.state = f"skipped: {absent}" if entry.patch else f"missing: {absent}"
        return False
    entry.state = "installed" if entry.patch else "used"
    return True


def skip(name, reason):
    """Mark an installed row skipped after all (its installer found something unexpected)."""
    TABLE[name].state = f"skipped: {reason}"


def installed(name):
    """Whether the row `name` is installed (or, for a private dependency, present)."""
    entry = TABLE.get(name)
    return entry is not None and entry.state in ("installed", "used")


def report():
    """The table as text: one line per row, then the versions."""
    rows = [("name", "kind", "scope", "state")]
    for entry in TABLE.values():
        kind = "patch" if entry.patch else "private"
        rows.append((entry.name, kind, entry.scope, entry.state))
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    lines = [
        "".join(cell.ljust(width + 2) for cell, width in zip(row, widths, strict=False)) + row[3]
        for row in rows
    ]
    lines.append(numba_versions() + f"; {PATCHES_ENV}={'on' if patches_enabled() else 'off'}")
    return "\n".join(lines)
