"""Kernel conformance: every kernel types as `run(rt, node) -> int32` under its own options.

A kernel returning another type (a float, an int64) has its status converted on the way to
the executor, so a failure can read as success; a kernel that creates arrays without
`allocates=True` (compiled without Numba's reference-counting runtime) does not compile, and
it used to fail inside the generated dispatch at the first run, as a raw Numba error that
took every kernel of its module down with it. `check_kernels` finds both at prepare, before
the dispatch exists, and raises `KernelDefinitionError` naming the kernel.

It runs Numba's type inference on each kernel alone, with the kernel's own compile options and
the executor's runtime type, and stops there (no code generation: the kernel's callees are
typed, and compiled or loaded from their cache, exactly as the dispatch would). A check that
passes leaves a marker file next to the generated dispatch modules, named by the dispatch key
(`rtsoa.kernels.dispatch.registry_hash`), which covers every source the kernels' types depend
on; a process with a warm cache therefore only finds the marker.
"""

import re
import weakref

import numba
import numpy as np

from rtsoa._numba.typing_only import NumbaError, return_type
from rtsoa.errors import KernelDefinitionError
from rtsoa.kernels.dispatch import cache_dir, included_kernels, registry_hash

_passed = set()  # dispatch keys checked in this process
_passed_here = weakref.WeakKeyDictionary()  # registry -> {(version, used ids)} that passed
_typed = {}  # (kernel function, argument types) -> None: kernels typed in this process
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _summary(error):
    """The first informative line of a Numba error, without colour codes."""
    lines = [line.strip() for line in _ANSI.sub("", str(error)).splitlines()]
    lines = [line for line in lines if line and not line.startswith("Failed in nopython mode")]
    return lines[0] if lines else type(error).__name__


def check_kernel(info, argument_types):
    """KernelDefinitionError unless the kernel `info` (a KernelInfo) types as int32 for
    `argument_types` under its own options."""
    memo = (info.function, argument_types)
    if memo in _typed:
        return
    where = f"kernel {info.name!r} ({info.module}.{info.attribute})"
    try:
        result = return_type(info.function, argument_types)
    except NumbaError as error:
        if not info.function.targetoptions.get("_nrt", True):
            try:
                return_type(info.function, argument_types, reference_counting=True)
            except NumbaError:
                pass
            else:  # it types with reference counting: it creates arrays
                raise KernelDefinitionError(
                    f"{where} creates arrays but is registered without allocates=True: "
                    "register it with @kernel(..., allocates=True), or write into memory the "
                    "graph provides (block_view / value_view)"
                ) from None
        signature = "run(rt, node, *constants)" if len(argument_types) > 2 else "run(rt, node)"
        raise KernelDefinitionError(
            f"{where} does not compile as {signature}: {_summary(error)}"
        ) from None
    if result != numba.types.int32:
        raise KernelDefinitionError(
            f"{where} returns {result}, not int32: return np.int32(status) on every path "
            "(statuses: rtsoa.kernels.status)"
        )
    _typed[memo] = None


def check_kernels(registry, runtime, used=None):
    """Check every kernel the dispatch module for a graph using dispatch ids `used` holds,
    with `runtime` (the executor's `Runtime`) as the kernels' first argument; once per
    dispatch key and machine (see the module docstring)."""
    # Prepare calls this every time: a registry's entries and the kernel ids in use decide
    # the result within a process (kernels already imported do not change), so that is the
    # first memo; hashing the sources for the key costs ~0.2 ms.
    used_ids = None if used is None else tuple(np.unique(used).tolist())
    memo = _passed_here.setdefault(registry, set())
    if (registry.version, used_ids) in memo:
        return
    included = included_kernels(registry, used)
    key = registry_hash(registry, included)
    if key not in _passed:
        marker = cache_dir() / f"rtsoa_checked_{key}"
        if not marker.exists():
            argument_types = (numba.typeof(runtime), numba.types.int64)
            entries = registry.entries()
            for index in included:
                constants = tuple(numba.typeof(value) for value in entries[index].constants)
                check_kernel(entries[index], argument_types + constants)
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        _passed.add(key)
    memo.add((registry.version, used_ids))
