"""The `rtsoa` command line: gen, inspect, run."""

import argparse
import json
import sys
import time

from tqdm import tqdm

from rtsoa.errors import RtsoaError

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
    from rtsoa.generators import generate
    from rtsoa.io import save_graph

    options = {
        "edges_per_node": args.edges_per_node,
        "window": args.window,
        "width": args.width,
        "fan_in": args.fan_in,
        "layers": args.layers,
        "streams": args.streams,
    }
    allowed = {
        "chain": (),
        "random": ("edges_per_node", "window"),
        "layered": ("width", "fan_in", "layers"),
        "lowered": ("fan_in", "window", "streams"),
    }[args.kind]
    for key, value in options.items():
        if value is not None and key not in allowed:
            raise SystemExit(f"rtsoa gen {args.kind}: --{key.replace('_', '-')} does not apply")
    options = {key: value for key, value in options.items() if key in allowed}
    with _progress(2, f"gen {args.kind}", args.progress) as bar:
        start = time.perf_counter()
        graph = generate(args.kind, args.nodes, seed=args.seed, kernels=args.kernels, **options)
        bar.update()
        generated = time.perf_counter()
        save_graph(graph, args.output)
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


@command("inspect")
def _inspect(args):
    from rtsoa.inspect import format_summary, graph_summary
    from rtsoa.io import load_graph

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
    import numpy as np

    from rtsoa.executors import Tracer, prepare_executor
    from rtsoa.io import load_graph

    if args.repeat < 1:
        raise ValueError("--repeat must be >= 1")
    start = time.perf_counter()
    graph = load_graph(args.file)
    loaded = time.perf_counter()
    executor = prepare_executor(graph, executor=args.executor)
    prepared = time.perf_counter()
    first = executor.run()  # the first run pays any remaining JIT load; it is reported apart
    first_seconds = time.perf_counter() - prepared
    times = np.empty(args.repeat)
    result = first
    with _progress(args.repeat, f"run {executor.name}", args.progress and args.repeat > 1) as bar:
        for i in range(args.repeat):
            begin = time.perf_counter_ns()
            result = executor.run()
            times[i] = time.perf_counter_ns() - begin
            bar.update()
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
    if args.trace:
        tracer = Tracer(details=graph.num_nodes <= 100_000)
        executor.run(subscriber=tracer)
        tracer.save(args.trace)
        summary["trace"] = str(args.trace)
    if args.json:
        print(json.dumps(summary))
        return
    per_node = summary["ns_per_node"]
    run_seconds = summary["run_seconds"]
    print(
        f"{summary['file']}: executor {summary['executor']}, status {summary['status']}"
        f"{' (end of sequence)' if result.end_of_sequence else ''}\n"
        f"  nodes executed  {summary['nodes_executed']:,} of {summary['nodes']:,}\n"
        f"  checksum        {summary['checksum']:#018x}\n"
        f"  time per run    median {run_seconds['median'] * 1e3:.3f} ms, "
        f"min {run_seconds['min'] * 1e3:.3f} ms, max {run_seconds['max'] * 1e3:.3f} ms "
        f"over {args.repeat} run(s)\n"
        f"  ns per node     median {per_node['median']:.1f}, min {per_node['min']:.1f}, "
        f"max {per_node['max']:.1f}\n"
        f"  load {summary['load_seconds'] * 1e3:.1f} ms, prepare "
        f"{summary['prepare_seconds'] * 1e3:.1f} ms, first run "
        f"{summary['first_run_seconds'] * 1e3:.1f} ms"
        + (f"\n  trace           {summary['trace']}" if args.trace else "")
    )


def build_parser():
    parser = argparse.ArgumentParser(prog="rtsoa", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command")

    gen = sub.add_parser("gen", help="generate a synthetic execute graph")
    gen.add_argument("kind", choices=["chain", "random", "layered", "lowered"])
    gen.add_argument("--nodes", type=int, required=True, help="number of nodes")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--kernels", type=int, default=8, help="distinct checksum kernels (1-16)")
    gen.add_argument("--edges-per-node", type=int, help="random: predecessors per node (10)")
    gen.add_argument("--window", type=int, help="random: 1000 nodes; lowered: 64 ops to draw from")
    gen.add_argument("--width", type=int, help="layered: nodes per layer (100)")
    gen.add_argument("--layers", type=int, help="layered: layer count (overrides --nodes)")
    gen.add_argument("--fan-in", type=int, help="layered: 4; lowered: 2 producers per op")
    gen.add_argument("--streams", type=int, help="lowered: streams the launches spread over (1)")
    gen.add_argument("-o", "--output", required=True, help="output graph directory (.rtsoa)")
    gen.add_argument("--json", action="store_true", help="print a JSON object")
    gen.add_argument("--no-progress", dest="progress", action="store_false")

    inspect = sub.add_parser("inspect", help="describe a saved graph")
    inspect.add_argument("file", help="graph directory (.rtsoa)")
    inspect.add_argument("--json", action="store_true", help="print a JSON object")

    run = sub.add_parser("run", help="execute a saved graph's Main graph")
    run.add_argument("file", help="graph directory (.rtsoa)")
    run.add_argument(
        "--executor", default="auto", choices=["auto", "sequential", "topological", "priority"]
    )
    run.add_argument("--repeat", type=int, default=1, help="timed runs after a first run")
    run.add_argument("--trace", help="write a Chrome trace (Perfetto) of one more run here")
    run.add_argument("--json", action="store_true", help="print a JSON object")
    run.add_argument("--no-progress", dest="progress", action="store_false")
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
        COMMANDS[args.command](args)
    except RtsoaError as error:
        print(f"rtsoa {args.command}: error: {error}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as error:
        print(f"rtsoa {args.command}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
