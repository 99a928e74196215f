"""The graph commands: `rtsoa gen`, and `rtsoa inspect` / `rtsoa run` of a saved graph (an
ONNX file or a lowered model goes to `rtsoa.cli.model`)."""

import json
import time

import numpy as np

from rtsoa.cli.arguments import arena_size, no_winograd, progress
from rtsoa.cli.model import fusions, inspect_model, is_onnx_path, lower_onnx, run_model
from rtsoa.device import AllocatorConfig, device_for_graph
from rtsoa.device.defaults import HBM_BYTES
from rtsoa.executors import EXECUTORS, Tracer, prepare_executor
from rtsoa.graph.generators import GENERATORS, OptionError, generate
from rtsoa.graph.inspect import format_summary, graph_summary
from rtsoa.graph.io import load_graph, save_graph
from rtsoa.kernels.abi import is_model
from rtsoa.limits import check_fits
from rtsoa.ops.library import cores_in_use, op_addresses
from rtsoa.prewarm import cold_start, cold_start_model, finish
from rtsoa.report import device_summary, device_trace_events


def register(sub):
    """Add `gen`, `inspect` and `run` to the `rtsoa` subparsers `sub`."""
    gen_parser = sub.add_parser("gen", help="generate a synthetic execute graph")
    gen_parser.add_argument("kind", choices=list(GENERATORS))
    gen_parser.add_argument("--nodes", type=int, required=True, help="number of nodes")
    gen_parser.add_argument("--seed", type=int, default=0)
    gen_parser.add_argument(
        "--kernels", type=int, default=8, help="distinct checksum kernels (1-16)"
    )
    for name, uses in _generator_options().items():
        meaning = _GEN_OPTION_HELP.get(name, name.replace("_", " "))
        gen_parser.add_argument(f"--{name.replace('_', '-')}", type=int, help=f"{meaning} ({uses})")
    gen_parser.add_argument("-o", "--output", required=True, help="output graph directory (.rtsoa)")
    gen_parser.add_argument(
        "--force",
        action="store_true",
        help="replace OUTPUT even if it is not an rtsoa graph (a file, a symlink or a directory "
        "with other files), deleting what it held",
    )
    gen_parser.add_argument("--json", action="store_true", help="print a JSON object")
    gen_parser.add_argument("--no-progress", dest="progress", action="store_false")
    gen_parser.set_defaults(handler=gen)

    inspect_parser = sub.add_parser("inspect", help="describe a saved graph")
    inspect_parser.add_argument("file", help="graph directory (.rtsoa) or ONNX model (.onnx)")
    inspect_parser.add_argument("--json", action="store_true", help="print a JSON object")
    inspect_parser.set_defaults(handler=inspect)

    run_parser = sub.add_parser("run", help="execute a saved graph's Main graph, or a model")
    run_parser.add_argument("file", help="graph directory (.rtsoa) or ONNX model (.onnx)")
    run_parser.add_argument("--inputs", help="model inputs by graph-input name (.npz)")
    run_parser.add_argument(
        "--outputs",
        help="write the model's outputs here (.npz; a sequence of maps, ZipMap's, as NAME.keys "
        "and NAME.values)",
    )
    run_parser.add_argument("--executor", default="auto", choices=["auto", *EXECUTORS])
    run_parser.add_argument(
        "--threads",
        type=int,
        help="threads that run the graph: 1 a one-thread executor, 2 or more the multithread "
        "executor's workers (default: the executor's own)",
    )
    run_parser.add_argument(
        "--intra-op-threads",
        type=int,
        help="threads that compute one large op of a model (convolutions, pools, batch "
        "normalizations): the launching thread and helpers (default: one per core for a model "
        "with such ops, kept if the model's first runs measure it faster than none; 1: every op "
        "whole on the thread that launches it)",
    )
    run_parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="timed runs after a first run and any calibration runs (a model's intra-op pool "
        "trials, a multithread executor's plan trials)",
    )
    run_parser.add_argument("--trace", help="write a Chrome trace (Perfetto) of one more run here")
    run_parser.add_argument("--memory-plot", help="draw device memory over time into this PNG")
    run_parser.add_argument(
        "--device-trace",
        help="write the device's trace ring (alloc / free / launch / event events) and settings "
        "here (.npz), to replay on the same or another allocator",
    )
    run_parser.add_argument(
        "--device-hbm",
        type=arena_size,
        help=f"simulated HBM arena size: bytes, or with a unit like 512MiB or 16GiB (KiB / MiB "
        f"/ GiB / TiB, and KB / MB / GB / TB as the same powers of 1024; default "
        f"{HBM_BYTES / (1 << 30):g}GiB)",
    )
    run_parser.add_argument(
        "--no-hazard-check",
        dest="hazard_check",
        action="store_false",
        help="switch the device's happens-before checker off (faster)",
    )
    run_parser.add_argument(
        "--allocator",
        default="default",
        choices=["default", "pytorch", "page"],
        help="caching allocator profile: rtsoa's default, PyTorch's CUDA caching allocator, or "
        "the reference's 64 KiB page mode",
    )
    run_parser.add_argument(
        "--quick-depth",
        type=int,
        help="blocks per quick list (freed blocks <= 8 KiB parked unmerged; 0: off; default 32, "
        "0 for the pytorch and page profiles)",
    )
    no_winograd(run_parser, "an ONNX model, as lowered here: ")
    run_parser.add_argument("--json", action="store_true", help="print a JSON object")
    run_parser.add_argument("--no-progress", dest="progress", action="store_false")
    run_parser.set_defaults(handler=run)


def gen(args):
    """rtsoa gen KIND --nodes N -o graph.rtsoa"""
    takes = GENERATORS[args.kind].options
    options = {}
    for name in _generator_options():
        value = getattr(args, name)
        if value is None:
            continue
        if name not in takes:
            raise ValueError(f"--{name.replace('_', '-')} does not apply to {args.kind} graphs")
        options[name] = value
    with progress(2, f"gen {args.kind}", args.progress) as bar:
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


def inspect(args):
    """rtsoa inspect graph.rtsoa (a model file goes to rtsoa.cli.model)."""
    if is_onnx_path(args.file):
        return inspect_model(args)
    start = time.perf_counter()
    graph = load_graph(args.file)
    summary = graph_summary(graph, args.file)
    summary["load_seconds"] = round(time.perf_counter() - start, 4)
    if args.json:
        print(json.dumps(summary))
    else:
        print(format_summary(summary))


def run(args):
    """rtsoa run graph.rtsoa / model.onnx"""
    if args.repeat < 1:
        raise ValueError(f"--repeat must be >= 1, got {args.repeat}")
    # the per-run times are kept for the median: refuse a count whose array would not fit
    check_fits(f"--repeat {args.repeat:,} (8 bytes of timing per run)", 8 * args.repeat)
    start = time.perf_counter()
    if is_onnx_path(args.file):
        return _run_onnx(args)
    if not args.winograd:
        raise ValueError(
            f"--no-winograd applies to an ONNX model, which rtsoa run lowers; {args.file} is "
            "lowered already (rtsoa lower --no-winograd makes a graph without Winograd convs)"
        )
    helper = cold_start(args.file, args.executor)  # a cold cache: two processes compile
    try:
        return _run_graph(args, start, helper)
    except BaseException:
        finish(helper, timeout=0)  # an error or ^C: stop the helper now, do not wait for it
        raise
    finally:
        finish(helper)


def _run_onnx(args):
    """`rtsoa run model.onnx`: on a cold cache a helper compiles the model runtime while this
    process lowers the model and compiles the lowered graph's ops on the other core, and the
    load waits for the helper (`rtsoa.prewarm.cold_start_model`)."""
    helper = cold_start_model(args.executor)
    try:
        with cores_in_use(1 if helper is not None else 0):
            graph, constants = lower_onnx(args.file, args.inputs, fusions(args))
            if helper is not None:  # the ops' computes, while the helper finishes its work
                op_addresses(getattr(graph, "device", graph))  # a HostModel's device graph
        status = finish(helper)
    except BaseException:
        finish(helper, timeout=0)
        raise
    return run_model(args, graph, helper_status=status, constants=constants)


def _run_graph(args, start, helper):
    """`rtsoa run` of a saved graph (`run`); `helper`: the cold start's compile helper."""
    graph = load_graph(args.file)
    if is_model(graph):
        return run_model(args, graph)
    if args.inputs or args.outputs:
        raise ValueError(f"{args.file} is not a model: --inputs / --outputs apply to models")
    loaded = time.perf_counter()
    device = device_for_graph(  # options left out (None) keep the factory's defaults
        graph,
        hbm_bytes=args.device_hbm,
        hazards=None if args.hazard_check else False,
        allocator=_allocator_config(args.allocator, args.quick_depth),
    )
    executor = prepare_executor(graph, executor=args.executor, device=device, threads=args.threads)
    prepared = time.perf_counter()
    first = executor.run()  # the first run pays any remaining JIT load; it is reported apart
    first_seconds = time.perf_counter() - prepared
    calibration = executor.calibrate()  # a multithread executor's plan trials, not timed
    device = executor.device
    if not device.is_synchronized():  # a graph that never used the device: nothing to wait
        device.synchronize()  # for, and its compile (~0.9 s of a cold run) is not paid
    device_start = device.host_time
    waits_start = device.stats()["num_allocator_waits"]
    times = np.empty(args.repeat)
    result = first
    with progress(args.repeat, f"run {executor.name}", args.progress and args.repeat > 1) as bar:
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
        "calibration_runs": calibration,
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
    summary["device"] = device_summary(device, device_ns, waits_start, args.allocator)
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
        trace["traceEvents"].extend(device_trace_events(device))
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
        f"{summary['first_run_seconds'] * 1e3:.1f} ms"
        + (f", {calibration} calibration run(s)" if calibration else "")
        + "\n"
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


def _allocator_config(profile, quick_depth):
    """The `AllocatorConfig` of `rtsoa run --allocator PROFILE [--quick-depth N]`."""
    overrides = {} if quick_depth is None else {"quick_depth": quick_depth}
    if profile == "pytorch":
        return AllocatorConfig.pytorch_like(**overrides)
    return AllocatorConfig(page_mode=profile == "page", **overrides)


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


def _generator_options():
    """Every generator option -> 'kind: default, ...' over the kinds that take it."""
    uses = {}
    for kind, generator in GENERATORS.items():
        for name, default in generator.options.items():
            uses.setdefault(name, []).append(kind if default is None else f"{kind}: {default}")
    return {name: ", ".join(kinds) for name, kinds in uses.items()}
