"""Hand back the resident pages of a memory-mapped, read-only column.

A graph loaded by `load_graph` views its columns in the mapped files. The constant blob of a
model is read once, by Init's uploads into device blocks; afterwards the process would keep
those pages resident for nothing (the weights twice: the file's pages and the device's
copy). `release_file_pages` tells the kernel the pages are not needed (`madvise
MADV_DONTNEED`), which for a read-only mapping of a file only drops them from this process's
resident set: a later read (Init again, after the weights were freed) faults them back in from
the file. It does nothing unless every check below holds, since the same call on anonymous or
written memory would zero it:
- Linux (`/proc/self/maps` and `madvise` as described);
- a read-only numpy array of at least `MIN_BYTES`;
- one mapping that covers the array's whole pages, readable, not writable, backed by a file
  (a path, not `[heap]` or an anonymous region).
"""

import ctypes
import mmap
import sys

import numpy as np

MIN_BYTES = 1 << 20  # smaller blobs are not worth a read of /proc/self/maps
_MADV_DONTNEED = 4  # Linux's value (asm-generic/mman-common.h); mmap.MADV_DONTNEED where defined


def _madvise():
    """libc's madvise as a ctypes function, or None where it cannot be had."""
    try:
        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


def _in_read_only_file_mapping(start, end, maps="/proc/self/maps"):
    """Whether one read-only mapping of a file covers [start, end)."""
    try:
        with open(maps) as lines:
            for line in lines:
                fields = line.split(maxsplit=5)
                low, high = (int(bound, 16) for bound in fields[0].split("-"))
                if not low <= start < high:
                    continue
                path = fields[5].strip() if len(fields) == 6 else ""
                permissions = fields[1]
                read_only = permissions[0] == "r" and permissions[1] == "-"
                return end <= high and read_only and path.startswith("/")
    except (OSError, ValueError, IndexError):
        return False
    return False


def release_file_pages(array):
    """Drop `array`'s whole pages from the resident set if it is a read-only view of a file
    mapping (see the module docstring); return the bytes released (0 when nothing was)."""
    if not sys.platform.startswith("linux") or not isinstance(array, np.ndarray):
        return 0
    if array.flags.writeable or not array.flags.c_contiguous or array.nbytes < MIN_BYTES:
        return 0
    page = mmap.PAGESIZE
    address = array.ctypes.data
    start = -(-address // page) * page  # whole pages inside the array only
    end = (address + array.nbytes) // page * page
    if end <= start or not _in_read_only_file_mapping(start, end):
        return 0
    madvise = _madvise()
    if madvise is None:
        return 0
    advice = getattr(mmap, "MADV_DONTNEED", _MADV_DONTNEED)
    if madvise(start, end - start, advice) != 0:
        return 0
    return end - start
