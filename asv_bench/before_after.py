"""The same workloads on two source trees of rtsoa, in alternating fresh processes.

asv builds one commit at a time and runs the benchmarks of the current checkout; this driver
runs this checkout's asv benchmark classes (their `setup`, `track_*` and `timeraw_*` code)
against two trees of rtsoa, each on the path first with caches of its own, so two commits are
compared in one run on one machine:

    cd asv_bench && python before_after.py run BEFORE_TREE AFTER_TREE --repeats 3 --out RAW.jsonl
    python before_after.py table RAW.jsonl

A tree is a directory holding `rtsoa/` (e.g. `git archive COMMIT | tar -x -C DIR`). Each
repeat runs every group on both trees, before / after in one repeat and after / before in the
next, each group in a new process per tree. The op compile group times, in a fresh process
with empty caches and one compile process: a tree with one op library (`rtsoa.ops.switch`)
compiles the whole library; a tree with per-op entries compiles the generic entries of the ops
the other tree has (like with like) and, apart, the entries the 1,000-op MLP of
bench_models uses. The table gives the median of each row per tree, its spread over the
repeats, and after / before with the range of the per-repeat ratios.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GROUPS = ("executors", "device", "models", "start", "op_compile")


def _executors():
    from benchmarks import bench_executors as bench

    paths = bench.setup_cache()
    rows = {}
    for workload in bench.WORKLOAD_NAMES:
        for executor in bench.EXECUTORS:
            case = bench.ExecutorSpeed()
            case.setup(paths, workload, executor)
            rows[f"executor ratio over C: {workload} {executor}"] = case.track_ratio(
                paths, workload, executor
            )
    return rows


def _device():
    from benchmarks.bench_device import MallocFreePair

    rows = {}
    for trace, quick_lists in ((True, True), (False, True), (True, False)):
        case = MallocFreePair()
        case.setup(trace, quick_lists)
        name = f"malloc + free ns: trace {trace}, quick lists {quick_lists}"
        rows[name] = case.track_ns_per_pair(trace, quick_lists)
        case.teardown(trace, quick_lists)
    return rows


# Modules the benchmarks import under their newer name, and where an older tree kept them (the
# same names: the layering moved them); the worker aliases them only in a tree without the new.
MOVED_MODULES = {"rtsoa.kernels.abi": "rtsoa.kernels.runtime"}


def _alias_moved_modules():
    import importlib
    import importlib.util

    for new, old in MOVED_MODULES.items():
        if importlib.util.find_spec(new) is None:
            sys.modules[new] = importlib.import_module(old)


def _models():
    _alias_moved_modules()
    from benchmarks.bench_model_api import ExecuteSyncOverhead
    from benchmarks.bench_models import ModelLatency

    latency = ModelLatency()
    latency.setup("mlp-1000")
    rows = {
        "mlp-1000 over onnxruntime": latency.track_ratio_vs_onnxruntime("mlp-1000"),
        "mlp-1000 unfused over onnxruntime unoptimized": (
            latency.track_unfused_ratio_vs_onnxruntime_unoptimized("mlp-1000")
        ),
    }
    latency.teardown("mlp-1000")
    overhead = ExecuteSyncOverhead()
    overhead.setup()
    rows["execute_sync overhead us"] = overhead.track_overhead_us()
    return rows


def _timed(code):
    """Wall seconds of `python -c code` in a new interpreter (asv's timeraw, number 1)."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode:
        raise RuntimeError(f"fresh process failed:\n{result.stderr[-4000:]}")
    return seconds


def _start():
    from benchmarks.bench_coldstart import ColdStart, ModelColdStart
    from benchmarks.bench_models import ModelStart

    rows = {}
    model = ModelColdStart()
    model.setup("mlp")
    rows["mlp.onnx run, cold s"] = _timed(model.timeraw_first_run_cold("mlp"))
    rows["mlp.onnx run, warm s"] = _timed(model.timeraw_first_run_warm("mlp"))
    start = ModelStart()
    start.setup()
    rows["mlp.onnx load + first inference, warm s"] = _timed(
        start.timeraw_load_and_first_inference()
    )
    graph = ColdStart()
    graph.setup("random-10k")
    rows["random-10k run, cold s"] = _timed(graph.timeraw_run_cold("random-10k"))
    rows["random-10k run, warm s"] = _timed(graph.timeraw_run_warm("random-10k"))
    return rows


def _one_library():
    """Whether this tree compiles its ops as one library (a generated op switch)."""
    import importlib.util

    return importlib.util.find_spec("rtsoa.ops.switch") is not None


def _mlp_entries():
    """Entry ids of the ops the 1,000-op MLP of bench_models runs, once lowered."""
    from benchmarks.bench_models import _models as models

    from rtsoa.lowering import lower
    from rtsoa.ops.library import graph_entries

    return sorted(set(graph_entries(lower(models()["mlp-1000"][0])).values()))


def _op_compile(other_ops):
    from benchmarks.common import process_preamble

    lines = process_preamble(True)
    if _one_library():
        lines += ["from rtsoa.ops.library import op_library", "assert op_library(1).entry"]
        return {"op compile: whole library s": _timed("\n".join(lines) + "\n")}
    from rtsoa.ops.registry import OPS

    shared = sorted(name for name in other_ops if name in OPS)
    rows = {}
    for label, names in (
        (f"op compile: the {len(shared)} ops of both trees s", shared),
        ("op compile: the mlp-1000 entries s", _mlp_entries()),
    ):
        code = lines + [
            "from rtsoa.ops.library import load_ops",
            f"addresses = load_ops({names!r}, jobs=1)",
            "assert len(addresses) == len(set(addresses)) and all(addresses.values())",
        ]
        rows[label] = _timed("\n".join(code) + "\n")
    return rows


def _op_names():
    from rtsoa.ops.registry import op_names

    return list(op_names())


def _environment(tree, caches):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(HERE)])
    for variable, name in (
        ("RTSOA_CACHE_DIR", "rtsoa"),
        ("NUMBA_CACHE_DIR", "numba"),
        ("RTSOA_LOWERED_DIR", "lowered"),
        ("RTSOA_BENCH_CACHE", "bench"),
    ):
        env[variable] = str(caches / name)
    return env


def _in_tree(tree, caches, *arguments):
    """Run this script's worker for `tree` in a new process; its JSON answer."""
    result = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "_worker", *arguments],
        cwd=HERE,
        env=_environment(tree, caches),
        capture_output=True,
        text=True,
    )
    if result.returncode:
        raise RuntimeError(f"{arguments[0]} on {tree} failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.splitlines()[-1])


def run(args):
    trees = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    for label, tree in trees.items():
        if not (tree / "rtsoa" / "__init__.py").is_file():
            raise SystemExit(f"{label} tree {tree} holds no rtsoa/ package")
    caches = {label: Path(args.caches).resolve() / label for label in trees}
    names = {label: _in_tree(tree, caches[label], "op_names") for label, tree in trees.items()}
    groups = args.groups or GROUPS
    with open(args.out, "a") as out:
        for repeat in range(args.repeats):
            order = ("before", "after") if repeat % 2 == 0 else ("after", "before")
            for group in groups:
                for label in order:
                    other = names["before" if label == "after" else "after"]
                    record = {"repeat": repeat, "tree": label, "group": group, "rows": {}}
                    try:
                        record["rows"] = _in_tree(
                            trees[label], caches[label], group, json.dumps(other)
                        )
                    except RuntimeError as error:  # kept in the record; the other groups still run
                        record["error"] = str(error)
                    out.write(json.dumps(record) + "\n")
                    out.flush()
                    print(json.dumps(record), flush=True)


def table(args):
    values = {}  # row -> tree -> {repeat: value}
    for line in Path(args.raw).read_text().splitlines():
        record = json.loads(line)
        for row, value in record["rows"].items():
            values.setdefault(row, {}).setdefault(record["tree"], {})[record["repeat"]] = value
    print("| row | before: median (min-max) | after: median (min-max) | after / before (range) |")
    print("|---|---|---|---|")
    for row, trees in values.items():
        cells = []
        for label in ("before", "after"):
            series = list(trees.get(label, {}).values())
            cells.append(
                f"{statistics.median(series):.3g} ({min(series):.3g}-{max(series):.3g})"
                if series
                else "-"
            )
        before, after = trees.get("before", {}), trees.get("after", {})
        if before and after:
            median = statistics.median(after.values()) / statistics.median(before.values())
            # per-repeat ratios: the spread one pair of neighbouring runs shows
            pairs = [after[r] / before[r] for r in after if r in before]
            cells.append(f"{median:.3f} ({min(pairs):.3f}-{max(pairs):.3f})")
        else:
            # rows one tree alone has: compared with the other tree's row by the reader
            cells.append("-")
        print(f"| {row} | " + " | ".join(cells) + " |")


WORKERS = {
    "executors": _executors,
    "device": _device,
    "models": _models,
    "start": _start,
}


def worker(argv):
    group = argv[0]
    if group == "op_names":
        answer = _op_names()
    elif group == "op_compile":
        answer = _op_compile(json.loads(argv[1]))
    else:
        answer = WORKERS[group]()
    print(json.dumps(answer))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_worker":
        return worker(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run", help="measure both trees, appending to --out")
    runner.add_argument("before")
    runner.add_argument("after")
    runner.add_argument("--repeats", type=int, default=3)
    runner.add_argument("--out", required=True, help="JSON lines, one per group, tree, repeat")
    runner.add_argument("--caches", required=True, help="directory for each tree's caches")
    runner.add_argument("--groups", nargs="*", choices=GROUPS)
    printer = commands.add_parser("table", help="the Markdown table of a run's JSON lines")
    printer.add_argument("raw")
    args = parser.parse_args(argv)
    return run(args) if args.command == "run" else table(args)


if __name__ == "__main__":
    sys.exit(main())
