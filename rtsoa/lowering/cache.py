"""Lowered models kept on disk: a process runs an ONNX model lowered before without importing
`onnx` or lowering it again.

`rtsoa.InferenceSession`, `rtsoa run` and batch model jobs given an ONNX file (or its bytes) call
`lower_cached`. It looks up `<dir>/<key>/` ($RTSOA_LOWERED_DIR, else `lowered` in the cache
dir of `rtsoa.kernels.dispatch.cache_dir`: $RTSOA_CACHE_DIR, else ~/.cache/rtsoa), which holds
the lowered graph saved by `save_graph` and `entry.json`. The key is a SHA-256 over:
- the model's bytes and the real path of the directory its external-data files are read
  relative to: a file's own directory, or the `base_dir` given with it or with bytes (one
  model in two directories is two entries; bytes without a `base_dir` read no external data:
  a model that has some is refused, never read relative to the current directory);
- the lowering options (`streams`);
- every source file of the rtsoa package, and the `onnx` and `numpy` versions;
- the converter and op registries: every registered name with the module and qualified name
  of its functions, and the content of every module outside rtsoa that registered one.

`entry.json` lists the external-data files the lowering read (path under that real directory,
size, SHA-256); a hit hashes them again and is a miss if one changed. A lowering during which
the model file or an external-data file was written (its stamp, taken before it was read,
differs after the lowering and the hashing: `onnx_import.file_stamp`) is returned but not kept,
so an entry never pairs one content's hash with another content's graph. A hit is loaded by
`load_graph`, which validates it like any saved graph; a miss returns the entry it has just
written, read back the same way, so a model's constants are pages of a file either way (which
a model hands back once Init has uploaded them: `rtsoa.graph.pages`). An entry that is
unreadable, fails validation, is not owned by this user or is writable by others is a miss:
the model is lowered again, and the entry is replaced when it is this user's. A cache
directory that is not this user's, or that others can write, is not used at all. Entries are
written to a temporary directory and renamed into place, so a concurrent process sees a whole
entry or none.
`RTSOA_LOWERING_CACHE=0` turns the cache off.

Eviction: the entries together stay within $RTSOA_LOWERED_MAX_BYTES (a size such as `512MiB`;
default `DEFAULT_MAX_BYTES`). A hit marks its entry used (the modification time of its
`entry.json`); after a write, the least recently used entries of this user are removed until
the rest fit, never the one just written (a model larger than the limit alone is kept until
the next write). Temporary directories of writers that died (older than `STALE_SECONDS`) go
too; entries of other users are never touched, nor anything this cache does not write (a
directory named like an entry or a writer's temporary directory and holding only an entry's
files), so a cache directory set by mistake to a home or a project loses nothing. A process
that has an entry's graph loaded keeps it (the files are memory-mapped; removing them does
not unmap them).
"""

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path

from rtsoa._jit import cache_dir
from rtsoa.errors import GraphFormatError, LoweringError
from rtsoa.graph.io import load_graph, save_graph
from rtsoa.host.program import HostModel
from rtsoa.limits import parse_size
from rtsoa.lowering.converters import _CONVERTERS
from rtsoa.lowering.fuse import FUSIONS
from rtsoa.lowering.lower import fusions_of, lower
from rtsoa.lowering.onnx_import import file_stamp, load_onnx
from rtsoa.ops import OPS

ENTRY_VERSION = 1
DEFAULT_MAX_BYTES = 2 << 30  # 2 GiB of lowered models
STALE_SECONDS = 3600  # a writer's temporary directory older than this was left by a dead one
_KEY = re.compile(r"[0-9a-f]{64}")  # an entry's name: its key
_TEMP = re.compile(r"\.tmp-[A-Za-z0-9_]{8}")  # a writer's (tempfile.mkdtemp(prefix=".tmp-"))
_GRAPH = "graph.rtsoa"
_ENTRY = "entry.json"
_package_digest = None
_lock = threading.Lock()


def enabled():
    """Whether `lower_cached` uses the disk (RTSOA_LOWERING_CACHE=0 turns it off)."""
    return os.environ.get("RTSOA_LOWERING_CACHE", "1").strip() not in ("0", "false", "no", "off")


def lowered_dir():
    """Where lowered models are kept: $RTSOA_LOWERED_DIR, else `lowered` in the cache dir."""
    configured = os.environ.get("RTSOA_LOWERED_DIR")
    if configured:
        return Path(configured)
    return cache_dir() / "lowered"


def max_bytes():
    """The size the entries may take together: $RTSOA_LOWERED_MAX_BYTES, else
    DEFAULT_MAX_BYTES (ValueError naming the variable for a malformed size)."""
    configured = os.environ.get("RTSOA_LOWERED_MAX_BYTES", "").strip()
    if not configured:
        return DEFAULT_MAX_BYTES
    try:
        return parse_size(configured)
    except ValueError as error:
        raise ValueError(f"RTSOA_LOWERED_MAX_BYTES: {error}") from None


def _tree_bytes(path):
    """Bytes of the files under `path` (0 for what vanished meanwhile)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _cache_made(path, name):
    """Is `path` (named `name`) something this cache writes: an entry (named by a key) or a
    writer's temporary directory, holding nothing but an entry's files? A directory set as
    the cache by mistake (a home, a project) keeps everything else: eviction removes only
    these."""
    if not (_KEY.fullmatch(name) or _TEMP.fullmatch(name)):
        return False
    try:
        return set(os.listdir(path)) <= {_GRAPH, _ENTRY}
    except OSError:
        return False


def evict(home, keep=None, limit=None):
    """Remove this user's least recently used entries of `home` until the rest take at most
    `limit` bytes (default `max_bytes()`), never `keep` (a path), and temporary directories
    older than STALE_SECONDS; returns the names removed (see the module docstring). Only
    what this cache writes is touched (`_cache_made`)."""
    limit = max_bytes() if limit is None else limit
    removed = []
    entries = []
    now = time.time()
    try:
        names = os.listdir(home)
    except OSError:
        return removed
    for name in names:
        path = Path(home) / name
        try:
            if not _ours(path) or not stat.S_ISDIR(os.lstat(path).st_mode):
                continue  # someone else's (or not an entry): never ours to remove
            if not _cache_made(path, name):
                continue
            if name.startswith(".tmp-"):
                if now - os.lstat(path).st_mtime > STALE_SECONDS:
                    shutil.rmtree(path, ignore_errors=True)
                    removed.append(name)
                continue
            try:
                used = os.stat(path / _ENTRY).st_mtime
            except OSError:
                used = 0.0  # broken (no record): the first to go
            entries.append((used, name, path, _tree_bytes(path)))
        except OSError:
            continue
    total = sum(size for *_, size in entries)
    keep = None if keep is None else os.path.realpath(keep)
    for _, name, path, size in sorted(entries):
        if total <= limit:
            break
        if keep is not None and os.path.realpath(path) == keep:
            continue
        shutil.rmtree(path, ignore_errors=True)
        total -= size
        removed.append(name)
    return removed


def _mark_used(entry):
    """A hit: the entry becomes the most recently used (failures ignored)."""
    try:
        os.utime(entry / _ENTRY)
    except OSError:
        pass


def _file_digest(path, chunk=1 << 20):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _rtsoa_digest():
    """SHA-256 over the names and contents of every source file of the rtsoa package (once per
    process: lowering depends on far more than the compiled-code files of the Numba cache stamp)."""
    global _package_digest
    if _package_digest is None:
        root = Path(__file__).resolve().parent.parent
        digest = hashlib.sha256()
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(root)).encode() + b"\0")
                digest.update(path.read_bytes() + b"\0")
        _package_digest = digest.hexdigest()
    return _package_digest


def _function_identity(fn, foreign):
    """`module:qualname` of a registered function; the module's file is added to `foreign`
    when it lies outside rtsoa (its content is part of the key)."""
    module = getattr(fn, "__module__", None) or "?"
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    if module != "rtsoa" and not module.startswith("rtsoa."):
        path = getattr(sys.modules.get(module), "__file__", None)
        foreign.add(path or f"<no file: {module}>")
    return f"{module}:{qualname}"


def _registries_digest():
    """SHA-256 of what the converter and op registries hold now (see the module docstring)."""
    foreign = set()
    lines = []
    for (domain, op_type), entries in sorted(_CONVERTERS.items()):
        for since, fn in entries:
            lines.append(f"converter {domain} {op_type} {since} {_function_identity(fn, foreign)}")
    for name, op in sorted(OPS.items()):
        functions = [_function_identity(fn, foreign) for fn in (op.infer, op.compute, op.encode)]
        lines.append(f"op {name} {' '.join(functions)} {op.inputs} {op.outputs} {op.data_inputs}")
    for path in sorted(foreign):
        content = _file_digest(path) if os.path.isfile(path) else "missing"
        lines.append(f"module {path} {content}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def entry_key(model_digest, directory, streams, fusions=None):
    """The cache key of a model (the SHA-256 hex digest of its bytes) whose external data is
    read relative to `directory` (a real path; None for bytes without a base directory),
    lowered with `streams` and the fusions named in `fusions` (None: every fusion, what
    `fuse=True` runs)."""
    fusions = sorted(FUSIONS if fusions is None else fusions)
    digest = hashlib.sha256()
    digest.update(f"rtsoa-lowered {ENTRY_VERSION}\n".encode())
    digest.update(f"rtsoa {_rtsoa_digest()}\nregistries {_registries_digest()}\n".encode())
    digest.update(f"onnx {_version('onnx')} numpy {_version('numpy')}\n".encode())
    digest.update(f"directory {directory!s}\nstreams {int(streams)}\n".encode())
    digest.update(f"fusions {','.join(fusions)}\n".encode())
    digest.update(f"model {model_digest}\n".encode())
    return digest.hexdigest()


def _ours(path):
    """Is `path` owned by this user and writable by no one else (and not a symlink)?"""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return False
    owner_ok = not hasattr(os, "getuid") or info.st_uid == os.getuid()
    return owner_ok and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _usable(home):
    """The cache directory is missing (it is created on the first write) or this user's and
    writable by no one else: otherwise another user could swap an entry after it was
    checked, and the cache is not used."""
    try:
        return _ours(home)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _entry_trusted(entry):
    """Every directory and file of an entry is this user's and writable by no one else."""
    if not _ours(entry):
        return False
    for root, dirs, files in os.walk(entry):
        for name in dirs + files:
            if not _ours(os.path.join(root, name)):
                return False
    return True


def _read_entry(entry, hashed=False):
    """The graph of a cache entry, or None if it is missing, foreign, stale or broken.
    `hashed`: the external-data files were hashed just now (an entry this process has just
    written, or a concurrent writer of the same key): not again."""
    try:
        if not _entry_trusted(entry):
            return None
        record = json.loads((entry / _ENTRY).read_text())
        if record.get("version") != ENTRY_VERSION:
            return None
        for path, size, digest in [] if hashed else record["external"]:
            if not os.path.isfile(path) or os.path.getsize(path) != size:
                return None
            if _file_digest(path) != digest:
                return None
        return load_graph(entry / _GRAPH)
    except (OSError, ValueError, KeyError, TypeError, GraphFormatError):
        return None


def _write_entry(entry, graph, records):
    """Save `graph` as `entry` (a temp directory renamed into place). An entry already there
    is kept when it is someone else's or loads (a concurrent writer's), and replaced when it
    is a broken one of this user's. `records`: [path, size, SHA-256] per external-data
    file. Failures are ignored: the cache is an optimisation."""
    temp = None
    try:
        entry.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        if not _ours(entry.parent):
            return
        temp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
        save_graph(graph, temp / _GRAPH, durable=False)
        (temp / _ENTRY).write_text(json.dumps({"version": ENTRY_VERSION, "external": records}))
        try:
            os.rename(temp, entry)
        except OSError:  # an entry is there: a concurrent writer's, or a broken one of ours
            if not _ours(entry) or _read_entry(entry) is not None:
                return  # someone else's, or a good one: leave it
            shutil.rmtree(entry, ignore_errors=True)
            os.rename(temp, entry)
        temp = None
    except OSError:
        pass
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)


def lower_cached(source, streams=1, base_dir=None, fuse=True):
    """`rtsoa.lowering.lower(source, streams=streams, fuse=fuse)` for an ONNX file path or ONNX
    bytes, served from the disk cache when this model was lowered before with the same
    fusions (see the module docstring).
    `base_dir`: the directory the model's external data is relative to (default: a path's own
    directory; bytes have none, and bytes with external data are refused without one). Other
    sources (a ModelProto, a ComputeGraph) are lowered as usual."""
    if isinstance(source, bytearray):
        source = bytes(source)
    if base_dir is not None and not os.path.isdir(base_dir):
        raise LoweringError(f"base_dir {os.fspath(base_dir)!r} is not a directory")
    fusions = fusions_of(fuse)  # an unknown name is an error before any work
    if not enabled() or not isinstance(source, str | os.PathLike | bytes):
        if base_dir is None:
            return lower(source, streams=streams, fuse=fusions)
        return lower(load_onnx(source, base_dir=base_dir), streams=streams, fuse=fusions)
    limit = max_bytes()  # a malformed setting is an error before any work
    home = lowered_dir()
    if not _usable(home):
        return lower(load_onnx(source, base_dir=base_dir), streams=streams, fuse=fusions)
    stamps = {}
    if isinstance(source, bytes):
        model_digest = hashlib.sha256(source).hexdigest()
    else:
        path = os.fspath(source)
        if not os.path.isfile(path):
            return lower(source, streams=streams, fuse=fusions)  # the lowering's own error
        stamps[path] = file_stamp(path)
        model_digest = _file_digest(path)  # streamed: a large model is not held twice
        if base_dir is None:
            base_dir = os.path.dirname(path) or os.curdir  # where onnx reads external data
    # the real directory external data is read from: bytes without one read none
    directory = None if base_dir is None else os.path.realpath(base_dir)
    entry = home / entry_key(model_digest, directory, streams, fusions)
    graph = _read_entry(entry) if entry.exists() else None
    if graph is not None:
        _mark_used(entry)
        return graph
    external = []
    model = load_onnx(source, base_dir=base_dir, external_files=external, external_stamps=stamps)
    graph = lower(model, streams=streams, fuse=fusions)
    if isinstance(graph, HostModel):
        return graph  # host steps are not a saved graph: lowered again each time
    try:
        records = [[name, os.path.getsize(name), _file_digest(name)] for name in external]
    except OSError:
        return graph
    if any(file_stamp(name) != stamp for name, stamp in stamps.items()):
        return graph  # written while it was read: not kept (see the module docstring)
    with _lock:  # one writer per process; processes are kept apart by the rename
        _write_entry(entry, graph, records)
        evict(home, keep=entry, limit=limit)
    # The entry just written, as a hit would serve it: its constants are then pages of a file,
    # which a model hands back once Init has uploaded them (graph/pages.py), instead of a
    # second, anonymous copy of the weights held for the model's life.
    return _read_entry(entry, hashed=True) or graph
