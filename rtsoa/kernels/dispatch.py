"""Kernel dispatch: the one generated module, and executor loops specialised on it.

For a registry (and the kernels a graph uses), `load_dispatch` writes once a Python file
`<cache dir>/rtsoa_dispatch_<key>.py` that imports each kernel by module and attribute name and
defines `dispatch(rt, kernel_id, node)` as an if/elif chain over dispatch ids (a kernel
registered with constants is called with them after `rt, node`). It is the only
generated code in rtsoa.

Executor loops are ordinary Python functions in `rtsoa/executors/<name>.py` that call the
placeholder `dispatch` below. `specialise(loop, module)` compiles a copy of the loop whose
global `dispatch` is the generated switch (same code object, other globals), named
`<loop>_<key>` so that each registry gets its own entry in Numba's disk cache. The loop and
its dispatch then compile as one unit, with the switch inlined, and a fresh process with a warm
cache loads machine code instead of compiling.

The key hashes the registry's entries (names, modules, metadata), the source of every module
defining an included kernel (plus modules named by `registry.depends_on`), rtsoa's package
stamp (every jitted rtsoa source, see `rtsoa._jit`), the Numba and Python versions: editing a
kernel, a helper it inlines or an executor loop gives a new key, which is how a change
invalidates the cache. Files are written to a temp file and renamed, so concurrent processes
never import a half-written module. Cache dir: $RTSOA_CACHE_DIR, else ~/.cache/rtsoa.
"""

import hashlib
import importlib.util
import os
import sys
import types

import numba
import numpy as np

from rtsoa._jit import cache_dir, jit, jit_out_of_line, package_source_stamp
from rtsoa.graph.atomic_save import write_text

_GENERATOR_VERSION = "3"

_loaded = {}  # key -> generated module (one import per registry content per process)
_specialised = {}  # (loop code, key) -> compiled loop
_sources = {}  # path -> ((mtime_ns, size), sha256 digest): a source is read once per edit
_hashes = {}  # (registry id, version, included) -> (source stamps, key)


def dispatch(rt, kernel, node):
    """Placeholder the executor loops call; `specialise` binds the generated switch here."""
    raise RuntimeError("executor loops run only through rtsoa.kernels.dispatch.specialise")


def _module_path(module_name):
    module = sys.modules[module_name]
    path = getattr(module, "__file__", None)
    if path is None:
        raise ValueError(f"module {module_name!r} has no source file; kernels need one")
    return path


def _source_digest(path):
    """(stamp, digest) of a source file; re-read only when its mtime or size changed."""
    stat = os.stat(path)
    stamp = (stat.st_mtime_ns, stat.st_size)
    known = _sources.get(path)
    if known is None or known[0] != stamp:
        with open(path, "rb") as handle:
            known = (stamp, hashlib.sha256(handle.read()).digest())
        _sources[path] = known
    return known


def included_kernels(registry, used=None):
    """Dispatch ids a module for a graph using kernels `used` contains: every kernel of each
    module one of them comes from (all kernels when `used` is None).

    Whole modules, not single kernels, keep the number of distinct generated modules small
    while a graph of cheap kernels does not pay to compile, say, the device-backed ones.
    """
    entries = registry.entries()
    if used is None:
        return tuple(range(len(entries)))
    modules = {entries[int(index)].module for index in used}
    return tuple(i for i, info in enumerate(entries) if info.module in modules)


def _kernel_modules(registry, included):
    entries = registry.entries()
    modules = []
    for index in included:
        if entries[index].module not in modules:
            modules.append(entries[index].module)
    for module_name in registry.dependencies():
        if module_name not in modules:
            modules.append(module_name)
    return modules


def registry_hash(registry, included=None):
    """Hex key of everything the generated module's machine code depends on (memoized: a
    call re-reads no source that has not changed on disk)."""
    if included is None:
        included = tuple(range(len(registry)))
    included = tuple(included)
    paths = [_module_path(name) for name in _kernel_modules(registry, included)]
    stamps = tuple(_source_digest(path)[0] for path in paths)
    memo_key = (id(registry), registry.version, included)
    known = _hashes.get(memo_key)
    if known is not None and known[0] == stamps:
        return known[1]
    digest = hashlib.sha256()
    digest.update(f"kernels {','.join(map(str, included))}\n".encode())
    digest.update(f"rtsoa-dispatch {_GENERATOR_VERSION} numba {numba.__version__}\n".encode())
    digest.update(f"python {sys.version_info[:2]}\n".encode())
    digest.update(f"package {package_source_stamp()}\n".encode())
    for info in registry.entries():
        line = f"{info.name}|{info.module}|{info.attribute}|{int(info.worker)}|"
        constants = ",".join(map(_constant_source, info.constants))
        line += f"{info.critical_section}|{info.control_flow}|{constants}\n"
        digest.update(line.encode())
    for path in paths:
        digest.update(f"module {path}\n".encode())
        digest.update(_source_digest(path)[1])
    key = digest.hexdigest()[:20]
    _hashes[memo_key] = (stamps, key)
    return key


def _constant_source(value):
    """A numpy scalar as source text of its exact value and type (floats through their hex
    form, so 0.1, -0.0, inf and nan survive)."""
    if isinstance(value, np.floating):
        return f"np.float64(float.fromhex({float(value).hex()!r}))"
    return f"np.{value.dtype.name}({int(value)})"


def generate_source(registry, key, included=None):
    """The generated module's text: a switch over the dispatch ids `included` (default: all)."""
    entries = registry.entries()
    if included is None:
        included = range(len(entries))
    lines = [
        f'"""Generated by rtsoa.kernels.dispatch (registry {key}). Do not edit."""',
        "",
        "import numpy as np",
        "",
        "from rtsoa._jit import jit_inline_ir",
        "from rtsoa.kernels.status import STATUS_UNKNOWN_KERNEL",
        "",
    ]
    for index in included:
        info = entries[index]
        lines.append(f"from {info.module} import {info.attribute} as _kernel{index}")
    # constants as module globals (Numba freezes them into the code with their numpy types)
    lines.append("")
    for index in included:
        for position, value in enumerate(entries[index].constants):
            lines.append(f"_constant{index}_{position} = {_constant_source(value)}")
    # Inlined at IR level: LLVM will not inline a 30-way switch, and a call passes `rt` by
    # value. No reference counting of the runtime tuple's arrays around kernel calls.
    lines += [
        "",
        "",
        "@jit_inline_ir",
        "def dispatch(rt, kernel, node):",
        '    """Run kernel `kernel` (a dispatch id) on `node`; returns its status."""',
    ]
    for position, index in enumerate(included):
        keyword = "if" if position == 0 else "elif"
        lines.append(f"    {keyword} kernel == {index}:  # {entries[index].name!r}")
        arguments = "".join(
            f", _constant{index}_{position}" for position in range(len(entries[index].constants))
        )
        lines.append(f"        return _kernel{index}(rt, node{arguments})")
    lines += ["    return np.int32(STATUS_UNKNOWN_KERNEL)", ""]
    return "\n".join(lines)


def load_dispatch(registry, used=None):
    """The generated module for `registry` (written on first use, imported once per process).

    `used`: dispatch ids the graph runs; the module then holds only their kernel modules'
    kernels (see `included_kernels`). None: every kernel. The module's `KEY` is its key.
    """
    registry.check_importable()
    included = included_kernels(registry, used)
    key = registry_hash(registry, included)
    module = _loaded.get(key)
    if module is not None:
        return module
    name = f"rtsoa_dispatch_{key}"
    path = cache_dir() / f"{name}.py"
    if not path.exists():
        write_text(path, generate_source(registry, key, included))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    module.KEY = key
    _loaded[key] = module
    return module


def specialise(loop, module, cache=True):
    """`loop` (a plain Python executor loop calling `dispatch`) compiled against the generated
    `module`'s switch; one compiled function per (loop, registry key, cache) and process.
    `cache=False` compiles in memory only (to inspect the generated code)."""
    memo_key = (loop.__code__, module.KEY, cache)
    compiled = _specialised.get(memo_key)
    if compiled is not None:
        return compiled
    bound = dict(loop.__globals__)
    bound["dispatch"] = module.dispatch
    name = f"{loop.__name__}_{module.KEY}"
    function = types.FunctionType(loop.__code__, bound, name, loop.__defaults__)
    function.__qualname__ = name  # Numba names its cache files after the qualified name
    function.__module__ = loop.__module__
    function.__doc__ = loop.__doc__
    # loops allocate nothing: no reference counting (the profile's options, cache as asked)
    compiled = jit(function, **{**jit_out_of_line.options, "cache": cache})
    _specialised[memo_key] = compiled
    return compiled
