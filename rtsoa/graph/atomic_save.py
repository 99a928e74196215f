"""Replacing a directory at a path atomically, for `save_graph`.

The model. A saved graph is a plain directory NAME (no symlink: it can be moved, copied and
committed like any directory). A save writes the new files into a staging directory next to
it, `.NAME.staging-<token>`, flushes them to disk, and swaps the staging directory with NAME in
one `renameat2(RENAME_EXCHANGE)` system call (Linux >= 3.15; `renamex_np(RENAME_SWAP)` on
macOS). The call exchanges the two names atomically, so at every instant NAME is the old
complete directory or the new complete one, never missing; the old one, now under the staging
name, is then deleted. A first save (nothing at NAME) is one rename(2), atomic on POSIX.
Where no exchange call exists (another OS, a filesystem without it) the swap falls back to two
renames, and NAME is missing between them; the old directory is kept at `.NAME.old-<token>`
until the new one is in place.

Saves into one parent directory are serialised by an exclusive flock(2) on that directory,
which the kernel drops when the holder dies, even by SIGKILL. Holding it, a save removes what
interrupted saves left next to NAME (staging and old directories): no live save uses them.
Where no lock can be taken (no flock, or a filesystem refusing it) leftovers stay for a later
save that can.

Readers need no lock: `load_graph` opens NAME's tables by path, so a swap between two opens can
give it tables of two saves; every table carries its save's id, and a mix is re-read.

`write_text` is the same promise for one file (the generated modules of the kernel dispatch
and of the op entries): a temp file in the same directory, renamed over the path.
"""

import contextlib
import ctypes
import errno
import os
import re
import secrets
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no parent lock (saves into one directory must not overlap)
    fcntl = None

STAGING = "staging"  # .NAME.staging-<token>: a save being written (or an interrupted one)
OLD = "old"  # .NAME.old-<token>: a replaced entry waiting to be deleted
# `.NAME.` + 8 characters: the staging directory of saves before this scheme (tempfile.mkdtemp)
_LEGACY_STAGING = re.compile(r"[a-z0-9_]{8}")


def sibling(path, kind):
    """A fresh hidden name next to `path`: `.NAME.<kind>-<random token>`."""
    return path.with_name(f".{path.name}.{kind}-{secrets.token_hex(8)}")


@contextlib.contextmanager
def parent_lock(parent):
    """Hold an exclusive flock on the directory `parent` (one save at a time in it); yields
    whether the lock is held (False where the system or filesystem offers none)."""
    if fcntl is None:
        yield False
        return
    try:
        descriptor = os.open(parent, os.O_RDONLY)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        except OSError:  # e.g. ENOLCK on some network filesystems
            yield False
        else:
            yield True
    finally:
        os.close(descriptor)  # closing drops the lock


def fsync_path(path, directory=False):
    """Flush a file (or a directory's entries) to disk."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        if directory:
            return  # some systems cannot open directories; their entries are flushed anyway
        raise
    try:
        os.fsync(descriptor)
    except OSError as error:
        # Some filesystems refuse fsync on a directory (EINVAL); the files are already synced.
        if not directory or error.errno not in (errno.EINVAL, errno.EBADF, errno.ENOTSUP):
            raise
    finally:
        os.close(descriptor)


def fsync_all(files, directory):
    """Flush `files` and then `directory` to disk; the files concurrently (the filesystem's
    journal then commits them together: ~4x faster than one by one for a graph's tables)."""
    files = list(files)
    if files:
        with ThreadPoolExecutor(max_workers=min(len(files), 16)) as pool:
            list(pool.map(fsync_path, files))
    fsync_path(directory, directory=True)


def remove_entry(path):
    """Delete a directory tree, file or symlink (a symlink itself, never what it points to)."""
    path = Path(path)
    if path.is_symlink() or not path.is_dir():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def only_files_ending(path, suffix):
    """Whether `path` is a real directory whose entries are all regular files ending `suffix`."""
    if path.is_symlink() or not path.is_dir():
        return False
    return all(
        entry.name.endswith(suffix) and entry.is_file() and not entry.is_symlink()
        for entry in path.iterdir()
    )


def remove_leftovers(path, suffix):
    """Delete what interrupted saves of `path` left next to it (call with the parent lock held).

    Staging and old entries are rtsoa's own names; a pre-scheme staging directory is deleted
    only if it holds nothing but `suffix` files, so nothing else is ever touched. Returns the
    names removed.
    """
    prefix = f".{path.name}."
    removed = []
    for entry in path.parent.iterdir():
        if not entry.name.startswith(prefix):
            continue
        rest = entry.name[len(prefix) :]
        ours = rest.startswith((f"{STAGING}-", f"{OLD}-"))
        legacy = _LEGACY_STAGING.fullmatch(rest) and only_files_ending(entry, suffix)
        if ours or legacy:
            remove_entry(entry)
            removed.append(entry.name)
    return removed


def _exchange_call():
    """A function exchanging two paths atomically, or None where the OS has none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        call = libc.renameat2
        call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
        call.argtypes += [ctypes.c_uint]
        at_fdcwd, rename_exchange = -100, 2
        return lambda a, b: call(at_fdcwd, a, at_fdcwd, b, rename_exchange)
    if sys.platform == "darwin" and hasattr(libc, "renamex_np"):
        call = libc.renamex_np
        call.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint]
        rename_swap = 2
        return lambda a, b: call(a, b, rename_swap)
    return None


_EXCHANGE = _exchange_call()
# errno values meaning "this system or filesystem cannot exchange": fall back to two renames
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}


def exchange(a, b):
    """Swap the entries at paths `a` and `b` atomically; False where that is not supported."""
    if _EXCHANGE is None:
        return False
    if _EXCHANGE(os.fsencode(a), os.fsencode(b)) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), str(b))


def publish(staging, path, durable=True):
    """Put the directory `staging` at `path` atomically (replacing whatever is there) and
    delete what it replaced; `durable` flushes the parent directory's entries to disk. See the
    module docstring for what "atomically" covers."""
    if not os.path.lexists(path):
        os.rename(staging, path)  # fails, rather than replacing, if a non-empty entry appeared
        replaced = None
    elif exchange(staging, path):
        replaced = staging  # the staging name now holds the replaced entry
    else:
        replaced = sibling(path, OLD)
        os.rename(path, replaced)
        os.rename(staging, path)
    if durable:
        fsync_path(path.parent, directory=True)
    if replaced is not None:
        remove_entry(replaced)


def write_text(path, text):
    """Write `text` to the file at `path` (its directory made if missing) through a temp file
    in the same directory renamed over it, so a reader sees the old file or the whole new one;
    the temp file is removed on failure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
