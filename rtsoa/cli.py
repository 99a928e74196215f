"""The `rtsoa` command line: gen, inspect (and run, once executors are registered)."""

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
    return tqdm(total=total, desc=description, unit="step", disable=not enabled, leave=False)


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
