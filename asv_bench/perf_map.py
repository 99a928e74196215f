"""Name rtsoa's jitted functions in `perf` profiles.

`perf` shows samples in Numba's machine code as `[JIT]` addresses. After the code you want to
profile has run once (so its functions are loaded), call `write_perf_map()` in the profiled
process: it writes `/tmp/perf-<pid>.map`, which `perf report` reads by itself, naming each
loaded overload by module and qualified name. Sizes are the gaps to the next function's start
(Numba does not keep them), so a sample in code without a dispatcher (a generated switch, the
op entry) is attributed to the function loaded just before it: read small, surprising
entries with that in mind.

    perf record -D 8000 -e cpu-clock -o /tmp/run.data python my_script.py   # skip set-up
    perf report -i /tmp/run.data --no-children --sort symbol

where my_script.py runs the workload once, calls `write_perf_map()`, then loops. Functions
inlined into others (every `jit_inline_*` helper) count as their caller.
"""

import gc
import os


def write_perf_map(path=None):
    """Write the perf map of every jitted overload loaded now; returns (path, functions)."""
    from numba.core.dispatcher import Dispatcher

    starts = {}
    for dispatcher in gc.get_objects():
        if not isinstance(dispatcher, Dispatcher):
            continue
        for cres in list(dispatcher.overloads.values()):
            try:
                address = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
            except Exception:  # noqa: BLE001 - an overload without machine code: skip it
                continue
            if address:
                function = dispatcher.py_func
                starts[address] = f"{function.__module__}.{function.__qualname__}"
    path = path or f"/tmp/perf-{os.getpid()}.map"
    ordered = sorted(starts.items())
    with open(path, "w") as handle:
        for index, (address, name) in enumerate(ordered):
            end = ordered[index + 1][0] if index + 1 < len(ordered) else address + 4096
            handle.write(f"{address:x} {min(end - address, 1 << 20):x} {name}\n")
    return path, len(ordered)
