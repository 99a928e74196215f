"""Where a cold compile's time goes: Numba's LLVM phases and the functions compiled.

    python asv_bench/compile_phases.py graph datasets/lowered-4k.rtsoa   # `rtsoa run` of a graph
    python asv_bench/compile_phases.py model datasets/mlp.onnx \
        --inputs datasets/mlp-inputs.npz                                 # `rtsoa run` of a model
    python asv_bench/compile_phases.py ops                               # the whole op library

Runs in empty, temporary Numba and rtsoa cache directories (so everything compiles) and prints
the wall time, the seconds spent in each LLVM phase of Numba's code libraries (per-function
passes, the module passes over a library with everything it links, machine-code generation),
then the functions whose compile took longest, exclusive of the functions they compiled.
Pin it to one core (`taskset -c 1`) and compare trees by alternating them: the VM's speed
drifts. The op library, and a model's ops, are compiled by this process alone (`jobs=1`,
RTSOA_COMPILE_JOBS=1), so every compile is seen.
"""

import argparse
import contextlib
import io
import os
import tempfile
import time
from collections import defaultdict

PHASES = (
    "add_ir_module",  # IR to text, parse, per-function passes
    "_optimize_functions",
    "_optimize_final_module",  # module passes over the library and what it links
    "_finalize_final_module",  # machine code
    "serialize_using_object_code",
)


def _time_phases(totals, counts):
    from numba.core import codegen

    for name in PHASES:
        original = getattr(codegen.CPUCodeLibrary, name)

        def timed(*args, _original=original, _name=name, **kwargs):
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                totals[_name] += time.perf_counter() - start
                counts[_name] += 1

        setattr(codegen.CPUCodeLibrary, name, timed)


def _time_functions(exclusive):
    from numba.core import event

    stack = []

    class Listener(event.Listener):
        def on_start(self, ev):
            function = ev.data["dispatcher"].py_func
            stack.append([f"{function.__module__}.{function.__qualname__}", time.perf_counter(), 0])

        def on_end(self, ev):
            name, start, children = stack.pop()
            spent = time.perf_counter() - start
            exclusive[name] += spent - children
            if stack:
                stack[-1][2] += spent

    event.register("numba:compile", Listener())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("graph", "model", "ops"))
    parser.add_argument("path", nargs="?", help="the graph or model to run")
    parser.add_argument("--inputs", help="the model's inputs (.npz), as `rtsoa run` takes them")
    parser.add_argument("--top", type=int, default=25, help="functions listed (default 25)")
    args = parser.parse_args(argv)
    if args.what != "ops" and not args.path:
        parser.error(f"`{args.what}` needs the path of a saved graph or an ONNX model")
    caches = tempfile.mkdtemp(prefix="rtsoa-phases-")
    os.environ["NUMBA_CACHE_DIR"] = os.path.join(caches, "numba")
    os.environ["RTSOA_CACHE_DIR"] = os.path.join(caches, "rtsoa")
    os.environ["RTSOA_COMPILE_JOBS"] = "1"
    totals, counts, exclusive = defaultdict(float), defaultdict(int), defaultdict(float)
    _time_phases(totals, counts)
    _time_functions(exclusive)
    start = time.perf_counter()
    if args.what != "ops":
        from rtsoa.cli import main as cli

        with contextlib.redirect_stdout(io.StringIO()) as report:
            inputs = ["--inputs", args.inputs] if args.inputs else []
            status = cli(["run", args.path, "--no-progress", *inputs])
        if status:
            raise SystemExit(f"rtsoa run failed ({status}):\n{report.getvalue()}")
    else:
        from rtsoa.ops.library import op_library

        op_library(jobs=1)
    print(f"wall {time.perf_counter() - start:.1f} s (caches in {caches})")
    for name in PHASES:
        print(f"  {name:30s} {totals[name]:7.2f} s  {counts[name]:5d} calls")
    print(f"functions, exclusive compile seconds (top {args.top}):")
    for name, seconds in sorted(exclusive.items(), key=lambda item: -item[1])[: args.top]:
        print(f"  {seconds:7.2f}  {name}")


if __name__ == "__main__":
    main()
