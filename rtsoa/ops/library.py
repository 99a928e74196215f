"""Loading the compiled op library (`rtsoa.ops.entry`), in parallel on a cold cache.

The op library is the largest compile rtsoa has (every op's shape inference and compute, for
every dtype it takes: about 1.5 minutes of one core on a cold cache). `op_library()` returns
the loaded `rtsoa.ops.entry` module and is how rtsoa reaches it (kernels' runtime, lowering's
constant folding). It makes two promises:

* **No compile twice.** The first load on a machine holds an exclusive lock on
  `<rtsoa cache dir>/ops-library.lock` while it compiles, so processes that start together
  (batch workers, test runs, a user's shells) wait for it and then load its machine code from
  Numba's disk cache instead of compiling the same functions side by side.
* **Both cores.** On a cold cache the op functions are first compiled by `jobs` processes,
  each taking whole op modules (`shares`; this process one share, `jobs - 1` helper processes
  the others, all writing Numba's disk cache); the entry is compiled last and finds them there.
  That leaves only the entry itself (the switch over op codes, ~5 s: it calls the op functions
  by symbol, `rtsoa._numba.linking`) on one core.

Whether the op functions are already compiled is read from Numba's cache indexes (each op
function's index holds the switch's argument types for this machine and these sources), so a
warm process starts no helper. A helper that fails costs nothing but time: whatever it did not
leave in the cache is compiled by the entry as usual. Without Numba's disk cache (caching
switched off) helpers would compile in vain, so none are started.

    python -m rtsoa.ops.library [--jobs N]   # compile (or check) the op library now
"""

import argparse
import fcntl
import importlib
import os
import subprocess
import sys
import threading
import time

_ENTRY = "rtsoa.ops.entry"
_guard = threading.Lock()  # threads of one process (the flock is per open file)


def compile_jobs():
    """Processes a cold compile uses: $RTSOA_COMPILE_JOBS, else the usable cores (at most 4)."""
    configured = os.environ.get("RTSOA_COMPILE_JOBS", "").strip()
    if configured:
        try:
            jobs = int(configured)
        except ValueError:
            raise ValueError(f"RTSOA_COMPILE_JOBS={configured!r} is not a whole number") from None
        if jobs < 1:
            raise ValueError(f"RTSOA_COMPILE_JOBS={configured!r} must be at least 1")
        return jobs
    return max(1, min(4, len(os.sched_getaffinity(0))))


def _cache_directory():
    from rtsoa.kernels.dispatch import cache_dir

    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def op_functions_cached():
    """True when Numba's disk cache holds every op function for the switch's argument types,
    for these sources and this machine (then loading the library compiles the entry at most);
    False too when the cache is switched off."""
    from rtsoa._numba.caching import cached_signatures, is_cached

    argument_types = _argument_types()
    for function in op_functions():
        if not is_cached(function) or argument_types not in cached_signatures(function):
            return False
    return True


def _caching():
    """Whether the op functions are cached on disk at all (helpers would compile in vain)."""
    from rtsoa._numba.caching import is_cached

    return is_cached(op_functions()[0])


def op_library(jobs=None):
    """The compiled op entry module (`rtsoa.ops.entry`), loaded under the op-library lock; on a
    cold cache its op functions are compiled by `jobs` processes first (default
    `compile_jobs()`; 1: this process alone)."""
    loaded = sys.modules.get(_ENTRY)
    if loaded is not None and getattr(loaded, "entry", None) is not None:
        return loaded
    with _guard, open(_cache_directory() / "ops-library.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        jobs = compile_jobs() if jobs is None else jobs
        if jobs > 1 and _caching() and not op_functions_cached():
            parallel_compile(jobs)
        return importlib.import_module(_ENTRY)  # compiles the entry (or loads it)


def op_functions():
    """The op functions the compiled switch calls (shape inference and compute of every op in
    it), sorted by qualified name; a function shared by several ops is listed once."""
    from rtsoa.ops.registry import OPS, compiled_op_names

    functions = {}
    for name in compiled_op_names():
        for function in (OPS[name].infer, OPS[name].compute):
            python = function.py_func
            functions[f"{python.__module__}.{python.__qualname__}"] = function
    return [functions[key] for key in sorted(functions)]


def _argument_types():
    """The argument types the switch passes every op function (see `rtsoa.ops.abi`)."""
    from numba import types

    return (
        types.Array(types.uint8, 1, "C"),  # arena
        types.Array(types.int64, 2, "C"),  # operand table
        types.int64,  # inputs
        types.int64,  # outputs
        types.Array(types.int64, 1, "C"),  # attribute slots
        types.Array(types.float64, 1, "C"),  # the same slots as float64
    )


def shares(functions, jobs):
    """Split op functions into `jobs` lists, whole modules together: the ops of one module share
    most of their out-of-line helpers, and a helper two processes both need is compiled by both
    (each is linked once per process, `rtsoa._numba.linking`). Modules go, largest first, to the
    list with the fewest functions."""
    modules = {}
    for function in functions:
        modules.setdefault(function.py_func.__module__, []).append(function)
    split = [[] for _ in range(jobs)]
    for name in sorted(modules, key=lambda module: (-len(modules[module]), module)):
        min(split, key=len).extend(modules[name])
    return split


def compile_share(share, jobs):
    """Compile share `share` of `shares(op_functions(), jobs)` into Numba's disk cache (loading
    those already there). Returns how many."""
    argument_types = _argument_types()
    functions = shares(op_functions(), jobs)[share]
    for function in functions:
        function.compile(argument_types)
    return len(functions)


def parallel_compile(jobs):
    """Compile the op functions in `jobs` processes (this one and `jobs - 1` helpers); the
    helpers' failures are ignored (what they left out is compiled here by the entry)."""
    if jobs <= 1:
        return
    command = [sys.executable, "-m", "rtsoa.ops.library", "--share", "", "--jobs", str(jobs)]
    helpers = []
    for share in range(1, jobs):
        command[4] = str(share)
        helpers.append(
            subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
    try:
        compile_share(0, jobs)
    finally:
        for helper in helpers:
            helper.wait()


def main(argv=None):
    """`python -m rtsoa.ops.library`: load the op library now (compiling it if needed)."""
    parser = argparse.ArgumentParser(prog="python -m rtsoa.ops.library", description=__doc__)
    parser.add_argument("--jobs", type=int, default=None, help="processes for a cold compile")
    parser.add_argument("--share", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.share is not None:  # a helper of parallel_compile
        compile_share(args.share, args.jobs)
        return 0
    start = time.perf_counter()
    op_library(args.jobs)
    print(f"op library loaded in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
