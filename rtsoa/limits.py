"""What fits: byte sizes as people write them, the machine's memory, and refusing a request
that would not fit before anything is allocated.

rtsoa sizes its big arrays once, up front: a generated graph from its node and edge counts, the
simulated device's tables from its sizes, `rtsoa run`'s timing array from `--repeat`. Each of
those places estimates what it is about to allocate and calls `check_fits`, which raises
`TooLargeError` with the estimate instead of letting numpy fail halfway with MemoryError (or
the kernel's out-of-memory killer end the process after the pages are touched).

Lowering is bounded the same way, in work rather than bytes (`LoweringLimits`): a model of a
few bytes can ask for millions of op calls (a SplitToSequence of a long tensor is one op per
element), so a lowering counts what it resolves and refuses to go past the limits.
"""

import os
import re
from fractions import Fraction
from pathlib import Path
from typing import NamedTuple

from rtsoa.errors import TooLargeError

# Binary multiples for every spelling: memory sizes are powers of two (KB = KiB, as JEDEC and
# most memory tools write them).
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(e[+-]?[0-9]+)?\s*([kmgt]?)(ib|b)?", re.I)
INT64_MAX = (1 << 63) - 1


def parse_size(text):
    """Bytes from a size as people write it: '4096', '4096B', '64KiB', '512MiB', '16GiB',
    '1.5GiB', '1e9'; KB / MB / GB / TB and K / M / G / T mean the same powers of 1024.

    ValueError naming the text for anything else: negative, not finite, not a whole number of
    bytes, or more than an int64 holds.
    """
    if not isinstance(text, str):
        raise ValueError(f"a size is text like '16GiB', got {text!r}")
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"not a byte size: {text!r} (write e.g. 4096, 64KiB, 512MiB or 16GiB; KiB / MiB / "
            "GiB / TiB and KB / MB / GB / TB are powers of 1024)"
        )
    number, exponent, unit, _ = match.groups()
    if exponent is not None and abs(int(exponent[1:])) > 30:
        raise ValueError(f"byte size {text!r} is out of range")
    value = Fraction(number + (exponent or "")) * _UNITS[unit.lower()]
    if value.denominator != 1:
        raise ValueError(f"byte size {text!r} is not a whole number of bytes")
    if value > INT64_MAX:
        raise ValueError(f"byte size {text!r} is more than an int64 holds")
    return int(value)


def format_size(nbytes):
    """'512 B', '1.5 KiB', '16.0 GiB', ...: one decimal, binary units."""
    nbytes = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(nbytes) < 1024 or unit == "PiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    raise AssertionError("unreachable")


def _meminfo():
    """/proc/meminfo as {field: bytes} (empty where there is none)."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return {}
    info = {}
    for line in lines:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            info[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return info


def _cgroup_room():
    """Bytes the process's cgroup (v2) still allows, or None without a limit."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        current = Path("/sys/fs/cgroup/memory.current").read_text().strip()
    except OSError:
        return None
    if not limit.isdigit() or not current.isdigit():
        return None  # "max": no limit
    return max(int(limit) - int(current), 0)


def physical_memory():
    """Bytes of RAM."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return _meminfo().get("MemTotal", 1 << 40)


def available_memory():
    """Bytes that can be allocated and touched now without swapping: MemAvailable (or RAM),
    lowered to what the cgroup still allows."""
    available = _meminfo().get("MemAvailable", physical_memory())
    room = _cgroup_room()
    return available if room is None else min(available, room)


def addressable_memory():
    """Bytes one lazily zeroed buffer may reserve: RAM + swap (Linux refuses larger ones by
    default), lowered to the cgroup's limit."""
    total = physical_memory() + _meminfo().get("SwapTotal", 0)
    room = _cgroup_room()
    return total if room is None else min(total, room)


def check_fits(what, nbytes, available=None):
    """Raise `TooLargeError` if `nbytes` (an estimate of what `what` allocates) is more than
    the memory available (default: `available_memory()`)."""
    available = available_memory() if available is None else available
    if nbytes > available:
        raise TooLargeError(
            f"{what} needs about {format_size(nbytes)}, more than the {format_size(available)} "
            "of memory available"
        )


def check_count(name, value, low, high):
    """`value` as an int in [low, high], else ValueError naming `name` (bools are refused)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if not low <= value <= high:
        raise ValueError(f"{name} must be in {low:,} .. {high:,}, got {value:,}")
    return value


class LoweringLimits(NamedTuple):
    """The work one lowering may do (`rtsoa.lowering.lower(..., limits=...)`); going past one
    is a LoweringError naming the op, the node and the limit. The defaults are far above the
    models rtsoa lowers (its largest test models use a few thousand op calls) and keep a
    refused lowering to seconds."""

    # Sequence elements the sequence ops resolve, summed over the lowering: each op counts
    # the elements it reads and those it makes (a SplitToSequence of n parts counts n).
    sequence_elements: int = 1 << 16
    # Op calls the converters and sequence ops emit, summed over the lowering (If / Loop
    # bodies included); each becomes about three nodes of the lowered graph.
    op_calls: int = 1 << 18


def check_lowering_limits(limits):
    """`limits` (None: the defaults) as LoweringLimits of counts >= 1, else ValueError."""
    if limits is None:
        return LoweringLimits()
    if not isinstance(limits, LoweringLimits):
        raise ValueError(f"limits must be a LoweringLimits, got {type(limits).__name__}")
    for name, value in limits._asdict().items():
        check_count(f"LoweringLimits.{name}", value, 1, INT64_MAX)
    return limits
