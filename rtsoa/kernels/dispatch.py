"""The generated dispatch module: an njit switch over dispatch ids plus the executor loops.

For a registry, `load_dispatch(registry)` writes (once) a Python file
`<cache dir>/rtsoa_dispatch_<hash>.py` that imports every kernel by module and attribute name,
defines `dispatch(rt, kernel_id, node)` as an if/elif chain, and contains the executor loops of
`rtsoa/executors/loops.py`, so each loop and its dispatch are one compiled unit. Everything in it
is `@njit(cache=True)`, so a fresh process with a warm cache loads machine code instead of
compiling.

The hash covers the registry's entries (names, modules, metadata), the full source of every
module defining a kernel (plus modules named by `registry.depends_on`), the loop / runtime /
checksum sources and the numba version: editing any kernel
gives a new file name, which is how a change invalidates the cache (numba's own check only
watches the file it compiles). Files are written to a temp file and renamed, so concurrent
processes never import a half-written module. Cache dir: $RTSOA_CACHE_DIR, else ~/.cache/rtsoa.
"""

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import numba

from rtsoa.kernels import checksum, clock, runtime, status

_GENERATOR_VERSION = "1"
_EXECUTORS_DIR = Path(__file__).resolve().parent.parent / "executors"
_LOOPS_FILE = _EXECUTORS_DIR / "loops.py"
_PROFILED_MARK = "# profiled"
_SHARED_MARK = "# -- shared"
_LOOPS_MARK = "# -- loops"
# Sources the generated module depends on besides the kernels' own modules.
_FIXED_SOURCES = (
    _LOOPS_FILE,
    _EXECUTORS_DIR / "heap.py",
    Path(runtime.__file__),
    Path(status.__file__),
    Path(clock.__file__),
    Path(checksum.__file__),
    Path(__file__),
)

_loaded = {}  # hash -> module (one import per registry content per process)


def cache_dir():
    """Where generated modules (and their numba caches, in __pycache__) go."""
    configured = os.environ.get("RTSOA_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "rtsoa"


def _module_source_bytes(module_name):
    module = sys.modules[module_name]
    path = getattr(module, "__file__", None)
    if path is None:
        raise ValueError(f"module {module_name!r} has no source file; kernels need one")
    return Path(path).read_bytes()


def included_kernels(registry, used=None):
    """Dispatch ids a module for a graph using kernels `used` contains: every kernel of each
    module one of them comes from (all kernels when `used` is None).

    Whole modules, not single kernels, keep the number of distinct generated modules small
    while a graph of cheap kernels no longer pays to compile, say, the device-backed ones.
    """
    entries = registry.entries()
    if used is None:
        return tuple(range(len(entries)))
    modules = {entries[int(index)].module for index in used}
    return tuple(i for i, info in enumerate(entries) if info.module in modules)


def registry_hash(registry, included=None):
    """Hex digest of everything the generated module's machine code depends on."""
    digest = hashlib.sha256()
    if included is not None:
        digest.update(f"kernels {','.join(map(str, included))}\n".encode())
    digest.update(f"rtsoa-dispatch {_GENERATOR_VERSION} numba {numba.__version__}\n".encode())
    digest.update(f"python {sys.version_info[:2]}\n".encode())
    modules = []
    for info in registry.entries():
        line = f"{info.name}|{info.module}|{info.attribute}|{int(info.worker)}|"
        line += f"{info.critical_section}|{info.control_flow}\n"
        digest.update(line.encode())
        if info.module not in modules:
            modules.append(info.module)
    for module_name in registry.dependencies():
        if module_name not in modules:
            modules.append(module_name)
    for module_name in modules:
        digest.update(f"module {module_name}\n".encode())
        digest.update(_module_source_bytes(module_name))
    for path in _FIXED_SOURCES:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


def _loop_sections():
    text = _LOOPS_FILE.read_text()
    shared_start = text.index("\n" + _SHARED_MARK + "\n")
    loops_start = text.index("\n" + _LOOPS_MARK + "\n")
    return text[shared_start:loops_start], text[loops_start:]


def _plain(loops):
    return "\n".join(
        line for line in loops.splitlines() if not line.rstrip().endswith(_PROFILED_MARK)
    )


def _profiled(loops):
    out = []
    for line in loops.splitlines():
        if line.startswith("def run_"):
            name, rest = line[4:].split("(", 1)
            line = f"def {name}_profiled({rest}"
        out.append(line)
    return "\n".join(out)


def generate_source(registry, key, included=None):
    """The generated module's text for `registry`: a switch over the dispatch ids `included`
    (default: every entry), then the loops."""
    entries = registry.entries()
    if included is None:
        included = range(len(entries))
    lines = [
        f'"""Generated by rtsoa.kernels.dispatch (registry {key}). Do not edit."""',
        "",
        "import numpy as np",
        "from numba import njit",
        "",
        "from rtsoa.kernels.status import STATUS_UNKNOWN_KERNEL",
        "",
    ]
    for index in included:
        info = entries[index]
        lines.append(f"from {info.module} import {info.attribute} as _kernel{index}")
    # inline="always": LLVM will not inline a 30-way switch, and a call passes `rt` by value.
    # _nrt=False: no reference counting of the runtime tuple's arrays around kernel calls.
    lines += [
        "",
        "",
        '@njit(cache=True, nogil=True, boundscheck=False, inline="always", _nrt=False)',
    ]
    lines.append("def dispatch(rt, kernel, node):")
    lines.append('    """Run kernel `kernel` (a dispatch id) on `node`; returns its status."""')
    for position, index in enumerate(included):
        keyword = "if" if position == 0 else "elif"
        lines.append(f"    {keyword} kernel == {index}:  # {entries[index].name}")
        lines.append(f"        return _kernel{index}(rt, node)")
    lines.append("    return np.int32(STATUS_UNKNOWN_KERNEL)")
    shared, loops = _loop_sections()
    lines += ["", "", shared, _plain(loops), "", "", _profiled(loops), ""]
    return "\n".join(lines)


def _write_atomically(path, text):
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


def load_dispatch(registry, used=None):
    """The generated module for `registry` (written on first use, imported once per process).

    `used`: dispatch ids the graph runs; the module then holds only their kernel modules'
    kernels (see `included_kernels`). None: every kernel.
    """
    registry.check_importable()
    included = None if used is None else included_kernels(registry, used)
    key = registry_hash(registry, included)
    module = _loaded.get(key)
    if module is not None:
        return module
    name = f"rtsoa_dispatch_{key}"
    path = cache_dir() / f"{name}.py"
    if not path.exists():
        _write_atomically(path, generate_source(registry, key, included))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    _loaded[key] = module
    return module
