"""The `rtsoa` command line: gen, inspect, lower, run, batch."""

import argparse
import json
import os
import sys
import time

from tqdm import tqdm

from rtsoa.errors import RtsoaError
from rtsoa.executors import EXECUTORS  # the package imports it anyway: choices come from it
from rtsoa.limits import addressable_memory, check_fits, format_size, parse_size

COMMANDS = {}


def command(name):
    def register(fn):
        COMMANDS[name] = fn
        return fn

    return register


def _progress(total, description, enabled):
    # disable=None: tqdm shows the bar only when stderr is a terminal.
    return tqdm(
        total=total, desc=description, unit="step", disable=None if enabled else True, leave=False
    )


@command("gen")
def _gen(args):
    from rtsoa.graph.generators import GENERATORS, OptionError, generate
    from rtsoa.graph.io import save_graph

    takes = GENERATORS[args.kind].options
    options = {}
    for name in _generator_options():
        value = getattr(args, name)
        if value is None:
            continue
        if name not in takes:
            raise ValueError(f"--{name.replace('_', '-')} does not apply to {args.kind} graphs")
        options[name] = value
    with _progress(2, f"gen {args.kind}", args.progress) as bar:
        start = time.perf_counter()
        try:
            graph = generate(args.kind, args.nodes, seed=args.seed, kernels=args.kernels, **options)
        except OptionError as error:  # name the flag the user typed
            raise ValueError(f"--{error.option.replace('_', '-')}: {error.reason}") from None
        bar.update()
        generated = time.perf_counter()
        save_graph(graph, args.output, overwrite=args.force)
        bar.update()
        saved = time.perf_counter()
    result = {
        "kind": args.kind,
        "path": str(args.output),
        "nodes": graph.num_nodes,
        "edges": graph.num_edges,
        "seed": args.seed,
        "generate_seconds": round(generated - start, 4),
        "save_seconds": round(saved - generated, 4),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"wrote {result['path']}: {result['nodes']:,} nodes, {result['edges']:,} edges "
            f"(generated in {result['generate_seconds']:.2f} s, saved in "
            f"{result['save_seconds']:.2f} s)"
        )


@command("lower")
def _lower(args):
    from rtsoa.runtime.commands import lower_command

    lower_command(args, _progress)


@command("inspect")
def _inspect(args):
    from rtsoa.graph.inspect import format_summary, graph_summary
    from rtsoa.graph.io import load_graph
    from rtsoa.runtime.commands import inspect_onnx, is_onnx_path

    if is_onnx_path(args.file):
        return inspect_onnx(args)
    start = time.perf_counter()
    graph = load_graph(args.file)
    summary = graph_summary(graph, args.file)
    summary["load_seconds"] = round(time.perf_counter() - start, 4)
    if args.json:
        print(json.dumps(summary))
    else:
        print(format_summary(summary))


@command("run")
def _run(args):
    if args.repeat < 1:
        raise ValueError(f"--repeat must be >= 1, got {args.repeat}")
    # the per-run times are kept for the median: refuse a count whose array would not fit
    check_fits(f"--repeat {args.repeat:,} (8 bytes of timing per run)", 8 * args.repeat)
    from rtsoa.runtime.commands import is_onnx_path, run_model

    start = time.perf_counter()
    if is_onnx_path(args.file):
        from rtsoa.lowering.cache import lower_cached

        return run_model(args, lower_cached(args.file))
    from rtsoa.prewarm import cold_start, finish

    helper = cold_start(args.file, args.executor)  # a cold cache: two processes compile
    try:
        return _run_graph(args, start, helper)
    except BaseException:
        finish(helper, timeout=0)  # an error or ^C: stop the helper now, do not wait for it
        raise
    finally:
        finish(helper)


def _run_graph(args, start, helper):
    """`rtsoa run` of a saved graph (`_run`); `helper`: the cold start's compile helper."""
    import numpy as np

    from rtsoa.executors import Tracer, prepare_executor
    from rtsoa.graph.io import load_graph
    from rtsoa.kernels.runtime import is_model
    from rtsoa.prewarm import finish
    from rtsoa.runtime.commands import run_model

    graph = load_graph(args.file)
    if is_model(graph):
        return run_model(args, graph)
    if args.inputs or args.outputs:
        raise ValueError(f"{args.file} is not a model: --inputs / --outputs apply to models")
    loaded = time.perf_counter()
    from rtsoa.device import device_for_graph

    device = device_for_graph(  # options left out (None) keep the factory's defaults
        graph,
        hbm_bytes=args.device_hbm,
        hazards=None if args.hazard_check else False,
        allocator=_allocator_config(args.allocator, args.quick_depth),
    )
    executor = prepare_executor(graph, executor=args.executor, device=device)
    prepared = time.perf_counter()
    first = executor.run()  # the first run pays any remaining JIT load; it is reported apart
    first_seconds = time.perf_counter() - prepared
    device = executor.device
    if not device.is_synchronized():  # a graph that never used the device: nothing to wait
        device.synchronize()  # for, and its compile (~0.9 s of a cold run) is not paid
    device_start = device.host_time
    waits_start = device.stats()["num_allocator_waits"]
    times = np.empty(args.repeat)
    result = first
    with _progress(args.repeat, f"run {executor.name}", args.progress and args.repeat > 1) as bar:
        for i in range(args.repeat):
            begin = time.perf_counter_ns()
            result = executor.run()
            times[i] = time.perf_counter_ns() - begin
            bar.update()
    if not device.is_synchronized():
        device.synchronize()
    device_ns = (device.host_time - device_start) / args.repeat
    executed = max(result.nodes_executed, 1)
    summary = {
        "file": str(args.file),
        "executor": executor.name,
        "status": result.status,
        "end_of_sequence": result.end_of_sequence,
        "nodes": graph.num_nodes,
        "nodes_executed": result.nodes_executed,
        "checksum": result.checksum,
        "repeat": args.repeat,
        "load_seconds": round(loaded - start, 6),
        "prepare_seconds": round(prepared - loaded, 6),
        "first_run_seconds": round(first_seconds, 6),
        "run_seconds": {
            "median": float(np.median(times)) / 1e9,
            "min": float(times.min()) / 1e9,
            "max": float(times.max()) / 1e9,
        },
        "ns_per_node": {
            "median": float(np.median(times)) / executed,
            "min": float(times.min()) / executed,
            "max": float(times.max()) / executed,
        },
    }
    summary["device"] = _device_summary(device, device_ns, waits_start, args.allocator)
    # a cold start's compile helper (None when none was started: warm cache, one core, ...)
    summary["compile_helper_status"] = None if helper is None else finish(helper)
    if args.memory_plot:
        device.plot_memory(args.memory_plot, title=f"{graph.meta.name or args.file}: memory")
        summary["memory_plot"] = str(args.memory_plot)
    if args.device_trace:
        device.dump_trace(args.device_trace)
        summary["device_trace"] = str(args.device_trace)
    if args.trace:
        tracer = Tracer(details=graph.num_nodes <= 100_000)
        executor.run(subscriber=tracer)
        trace = tracer.trace()
        trace["traceEvents"].extend(_numeric_ids(device.chrome_trace(pid=_DEVICE_PID)))
        with open(args.trace, "w") as file:
            json.dump(trace, file)
        summary["trace"] = str(args.trace)
    if args.json:
        print(json.dumps(summary))
        return
    dev = summary["device"]
    per_node = summary["ns_per_node"]
    run_seconds = summary["run_seconds"]
    print(
        f"{summary['file']}: executor {summary['executor']}, status {summary['status']}"
        f"{' (end of sequence)' if result.end_of_sequence else ''}\n"
        f"  nodes executed  {summary['nodes_executed']:,} (graph has {summary['nodes']:,} nodes)\n"
        f"  checksum        {summary['checksum']:#018x}\n"
        f"  time per run    median {run_seconds['median'] * 1e3:.3f} ms, "
        f"min {run_seconds['min'] * 1e3:.3f} ms, max {run_seconds['max'] * 1e3:.3f} ms "
        f"over {args.repeat} run(s)\n"
        f"  ns per node     median {per_node['median']:.1f}, min {per_node['min']:.1f}, "
        f"max {per_node['max']:.1f}\n"
        f"  load {summary['load_seconds'] * 1e3:.1f} ms, prepare "
        f"{summary['prepare_seconds'] * 1e3:.1f} ms, first run "
        f"{summary['first_run_seconds'] * 1e3:.1f} ms\n"
        f"  device time     {dev['time_ns_per_run'] / 1e3:,.1f} us per run (simulated), "
        f"hazards {dev['hazards']}, allocator waits {dev['allocator_waits']}, "
        f"leaked blocks {dev['leaked_blocks']}\n"
        f"  device memory   peak allocated {dev['peak_allocated_bytes']:,} B, "
        f"peak reserved {dev['peak_reserved_bytes']:,} B (allocator {args.allocator}, "
        f"quick lists {dev['allocator']['quick_depth']})"
        + (f"\n  memory plot     {summary['memory_plot']}" if args.memory_plot else "")
        + (f"\n  device trace    {summary['device_trace']}" if args.device_trace else "")
        + (f"\n  trace           {summary['trace']}" if args.trace else "")
    )


@command("batch")
def _batch(args):
    from rtsoa.batch.command import run_command

    return run_command(args, ["auto", *EXECUTORS])


_DEVICE_PID = 2  # the host-side node slices are pid 1


def _numeric_ids(events):
    """Integer thread ids plus process / thread name records, as every trace viewer expects."""
    names = {}
    for event in events:
        tid = event.get("tid")
        if isinstance(tid, str):
            event["tid"] = names.setdefault(tid, len(names) + 1)
    meta = [{"name": "process_name", "ph": "M", "pid": _DEVICE_PID, "args": {"name": "device"}}]
    meta += [
        {"name": "thread_name", "ph": "M", "pid": _DEVICE_PID, "tid": tid, "args": {"name": name}}
        for name, tid in names.items()
    ]
    return meta + events


def _device_summary(device, time_ns_per_run, waits_start, profile):
    """Peak memory per placement and in total, simulated time per run, hazard count, the
    cross-stream waits the allocator inserted to reuse cached memory during the timed runs, and
    the allocator profile with its effective quick-list depth (0 where no size has a list)."""
    from rtsoa.device.layout import PCFG_QUICK_LIMIT

    stats = device.stats()
    quick_on = bool(device.state.placement_config[:, PCFG_QUICK_LIMIT].any())  # page mode: none
    placements = {
        name: {
            "peak_allocated_bytes": stats[name]["allocated_bytes.peak"],
            "peak_reserved_bytes": stats[name]["reserved_bytes.peak"],
        }
        for name in ("hbm", "p2p", "host")
    }
    return {
        "time_ns_per_run": time_ns_per_run,
        "hazards": device.hazard_count,
        "leaked_blocks": device.leaked_blocks,  # over every run so far (each reclaims its own)
        "allocator_waits": stats["num_allocator_waits"] - waits_start,
        "peak_allocated_bytes": sum(p["peak_allocated_bytes"] for p in placements.values()),
        "peak_reserved_bytes": sum(p["peak_reserved_bytes"] for p in placements.values()),
        "placements": placements,
        "allocator": {
            "profile": profile,
            "quick_depth": device.allocator_config.quick_depth if quick_on else 0,
        },
    }


def _allocator_config(profile, quick_depth):
    """The `AllocatorConfig` of `rtsoa run --allocator PROFILE [--quick-depth N]`."""
    from rtsoa.device import AllocatorConfig

    overrides = {} if quick_depth is None else {"quick_depth": quick_depth}
    if profile == "pytorch":
        return AllocatorConfig.pytorch_like(**overrides)
    return AllocatorConfig(page_mode=profile == "page", **overrides)


def _arena_size(text):
    """`--device-hbm`: a byte size ('512MiB', '16GiB', ...) the machine can hold."""
    try:
        size = parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if size < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: the arena needs at least one byte")
    limit = addressable_memory()
    if size > limit:
        raise argparse.ArgumentTypeError(
            f"{text!r} is {format_size(size)}, more than this machine's memory "
            f"({format_size(limit)}): the arena is a real, lazily zeroed buffer"
        )
    return size


# What each generator option means; which kinds take it, with their defaults, comes from the
# generator registry (rtsoa.graph.generators.GENERATORS).
_GEN_OPTION_HELP = {
    "edges_per_node": "predecessors per node",
    "window": "earlier nodes (random) or ops (lowered) to draw predecessors from",
    "width": "nodes per layer",
    "fan_in": "predecessors per node (layered) or producer ops per op (lowered)",
    "layers": "layer count, overriding --nodes",
    "streams": "streams the launches spread over",
    "min_bytes": "smallest buffer in bytes",
    "max_bytes": "largest buffer in bytes",
}


def _generator_kinds():
    from rtsoa.graph.generators import GENERATORS

    return list(GENERATORS)


def _generator_options():
    """Every generator option -> 'kind: default, ...' over the kinds that take it."""
    from rtsoa.graph.generators import GENERATORS

    uses = {}
    for kind, generator in GENERATORS.items():
        for name, default in generator.options.items():
            uses.setdefault(name, []).append(kind if default is None else f"{kind}: {default}")
    return {name: ", ".join(kinds) for name, kinds in uses.items()}


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `rtsoa run: error: argument --repeat: ...`."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser():
    from rtsoa.device.defaults import HBM_BYTES

    parser = _Parser(prog="rtsoa", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    gen = sub.add_parser("gen", help="generate a synthetic execute graph")
    gen.add_argument("kind", choices=_generator_kinds())
    gen.add_argument("--nodes", type=int, required=True, help="number of nodes")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--kernels", type=int, default=8, help="distinct checksum kernels (1-16)")
    for name, uses in _generator_options().items():
        meaning = _GEN_OPTION_HELP.get(name, name.replace("_", " "))
        gen.add_argument(f"--{name.replace('_', '-')}", type=int, help=f"{meaning} ({uses})")
    gen.add_argument("-o", "--output", required=True, help="output graph directory (.rtsoa)")
    gen.add_argument(
        "--force",
        action="store_true",
        help="replace OUTPUT even if it is not an rtsoa graph (a file, a symlink or a directory "
        "with other files), deleting what it held",
    )
    gen.add_argument("--json", action="store_true", help="print a JSON object")
    gen.add_argument("--no-progress", dest="progress", action="store_false")

    inspect = sub.add_parser("inspect", help="describe a saved graph")
    inspect.add_argument("file", help="graph directory (.rtsoa) or ONNX model (.onnx)")
    inspect.add_argument("--json", action="store_true", help="print a JSON object")

    lower = sub.add_parser("lower", help="lower an ONNX model to an execute graph")
    lower.add_argument("file", help="ONNX model (.onnx)")
    lower.add_argument("-o", "--output", required=True, help="output graph directory (.rtsoa)")
    lower.add_argument("--force", action="store_true", help="replace an existing graph at -o")
    lower.add_argument(
        "--no-fuse",
        dest="fuse",
        action="store_false",
        help="keep every op of the model (no MatMul -> Add -> Relu fusion)",
    )
    lower.add_argument("--json", action="store_true", help="print a JSON object")
    lower.add_argument("--no-progress", dest="progress", action="store_false")

    run = sub.add_parser("run", help="execute a saved graph's Main graph, or a model")
    run.add_argument("file", help="graph directory (.rtsoa) or ONNX model (.onnx)")
    run.add_argument("--inputs", help="model inputs by graph-input name (.npz)")
    run.add_argument("--outputs", help="write the model's outputs here (.npz)")
    run.add_argument("--executor", default="auto", choices=["auto", *EXECUTORS])
    run.add_argument("--repeat", type=int, default=1, help="timed runs after a first run")
    run.add_argument("--trace", help="write a Chrome trace (Perfetto) of one more run here")
    run.add_argument("--memory-plot", help="draw device memory over time into this PNG")
    run.add_argument(
        "--device-trace",
        help="write the device's trace ring (alloc / free / launch / event events) and settings "
        "here (.npz), to replay on the same or another allocator",
    )
    run.add_argument(
        "--device-hbm",
        type=_arena_size,
        help=f"simulated HBM arena size: bytes, or with a unit like 512MiB or 16GiB (KiB / MiB "
        f"/ GiB / TiB, and KB / MB / GB / TB as the same powers of 1024; default "
        f"{HBM_BYTES / (1 << 30):g}GiB)",
    )
    run.add_argument(
        "--no-hazard-check",
        dest="hazard_check",
        action="store_false",
        help="switch the device's happens-before checker off (faster)",
    )
    run.add_argument(
        "--allocator",
        default="default",
        choices=["default", "pytorch", "page"],
        help="caching allocator profile: rtsoa's default, PyTorch's CUDA caching allocator, or "
        "the reference's 64 KiB page mode",
    )
    run.add_argument(
        "--quick-depth",
        type=int,
        help="blocks per quick list (freed blocks <= 8 KiB parked unmerged; 0: off; default 32, "
        "0 for the pytorch and page profiles)",
    )
    run.add_argument("--json", action="store_true", help="print a JSON object")
    run.add_argument("--no-progress", dest="progress", action="store_false")

    from rtsoa.batch.command import add_arguments

    batch = sub.add_parser("batch", help="run many saved graphs, one result row per job")
    add_arguments(batch, ["auto", *EXECUTORS])

    from rtsoa import caches

    cache = sub.add_parser("cache", help="where rtsoa's caches live and their sizes; clear them")
    caches.add_arguments(cache)
    COMMANDS["cache"] = caches.run
    from rtsoa.ops import library

    ops = sub.add_parser("compile", help="compile ops ahead of time: --all, or a model's ops")
    library.add_arguments(ops)
    COMMANDS["compile"] = library.run
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from rtsoa import __version__

        print(__version__)
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    try:
        status = COMMANDS[args.command](args)
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except RtsoaError as error:
        print(f"rtsoa {args.command}: error: {error}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as error:
        print(f"rtsoa {args.command}: error: {error}", file=sys.stderr)
        return 1
    except MemoryError:  # estimates refuse what cannot fit; this is the machine running short
        print(f"rtsoa {args.command}: error: out of memory", file=sys.stderr)
        return 1
    except KeyboardInterrupt as interrupt:  # Ctrl-C: a run stops cleanly first (RunInterrupted)
        if args.command != "run":
            raise
        executed = getattr(interrupt, "nodes_executed", None)
        where = "" if executed is None else f": the run stopped after {executed:,} node(s)"
        print(f"rtsoa {args.command}: interrupted{where}", file=sys.stderr)
        return 130
    return status or 0


if __name__ == "__main__":
    sys.exit(main())
