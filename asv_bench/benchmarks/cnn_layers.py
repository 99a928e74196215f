"""Where a CNN's time goes, layer by layer, on rtsoa and on onnxruntime.

`python -m benchmarks.cnn_layers [MODEL ...] [--size 224] [--top 12] [--threads default]`
(in `asv_bench/`) lowers each network of `rtsoa.testing.cnn` (random weights), runs it on
rtsoa's sequential executor with one BLAS thread and on onnxruntime with one intra-op thread
(`--threads default`: rtsoa's default intra-op pool and onnxruntime's; `--threads 2`: two
intra-op threads on both), and prints a table
per model: each kind of layer (a convolution by its input and weight shapes, a pool by its
input shape, any other op by name), how many, and the milliseconds each runtime spends in
them. rtsoa's times are the minimum per node over `--runs` profiled runs (`Profiler`: one
OpLaunch each); onnxruntime's come from its own profiler, the minimum per node over the same
number of runs. The layers of the two sides are matched by these keys: onnxruntime fuses an
activation into its Conv as rtsoa does (FusedConv), so a conv layer is one node on each side
(a WinogradConv is keyed by the weights it was transformed from).

This is the per-layer breakdown behind the CNN ratios of `bench_cnn` (docs/performance.md);
it is a diagnostic, not an asv benchmark (it tracks nothing).
"""

import argparse
import collections
import json
import os
import tempfile

import numpy as np

WINDOWED = ("Conv", "FusedConv", "WinogradConv", "MaxPool", "AveragePool")


def _key(op, x_shape, w_shape):
    """The layer kind: convs by input (C, H, W) and weight shape, pools by input, else the op."""
    if op not in WINDOWED:
        return op
    kind = "Conv" if op.endswith("Conv") else op
    x = "x".join(str(d) for d in x_shape[1:])
    if kind != "Conv":
        return f"{kind} {x}"
    return f"Conv {x} w{'x'.join(str(d) for d in w_shape)}"


def rtsoa_layers(proto, x, runs, threads=1, intra_op_threads=None):
    """{layer key: [milliseconds, count]} of one run, the minimum per node over `runs`;
    `threads`: the BLAS threads (None: as they are); `intra_op_threads`: the session's."""
    from threadpoolctl import threadpool_limits

    from rtsoa.executors import Profiler
    from rtsoa.kernels.abi import SHAPE_DIMS, SHAPE_RANK
    from rtsoa.lowering import lower
    from rtsoa.runtime import InferenceSession, SessionOptions

    options = SessionOptions(executor="sequential", intra_op_threads=intra_op_threads)
    session = InferenceSession(lower(proto), options)
    session.execute_sync({"x": x})  # Main, and BLAS loaded before its threads are limited
    profiler = Profiler()
    best = {}
    with threadpool_limits(threads):
        session.execute_sync({"x": x})
        session.add_subscriber(profiler)
        for _ in range(runs):
            session.execute_sync({"x": x})
            durations = profiler.durations_ns().tolist()
            for node, ns in zip(profiler.nodes.tolist(), durations, strict=True):
                best[node] = min(ns, best.get(node, ns))
        session.remove_subscriber(profiler)
    executor = profiler.executor
    graph = executor.graph
    shapes = executor.runtime.values.shapes
    names = np.array(graph.kernel_names)[np.asarray(graph.node_kernel)]

    def shape(value):
        rank = int(shapes[value, SHAPE_RANK])
        return tuple(int(d) for d in shapes[value, SHAPE_DIMS : SHAPE_DIMS + rank])

    layers = collections.defaultdict(lambda: [0.0, 0])
    for node, ns in best.items():
        key = names[node]
        if key == "OpLaunch":  # operands: (block, shape value) pairs, inputs first
            op = graph.op_names[int(graph.attributes(node)[0])]
            values = np.asarray(graph.inputs(node))
            weight = shape(values[3]) if op.endswith("Conv") else ()
            if op == "WinogradConv":  # transformed weights (16, M, C): the conv's (M, C, 3, 3)
                weight = (weight[1], weight[2], 3, 3)
            key = _key(op, shape(values[1]), weight)
        layers[key][0] += ns / 1e6
        layers[key][1] += 1
    session.close()
    return layers


def onnxruntime_layers(proto, x, runs, threads=1):
    """{layer key: [milliseconds, count]} of one onnxruntime run, the minimum per node;
    `threads`: its intra- and inter-op threads (None: its defaults)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = threads
    options.enable_profiling = True
    with tempfile.TemporaryDirectory() as directory:
        options.profile_file_prefix = os.path.join(directory, "profile")
        session = ort.InferenceSession(proto.SerializeToString(), options)
        session.run(None, {"x": x})
        for _ in range(runs):
            session.run(None, {"x": x})
        with open(session.end_profiling()) as handle:
            events = json.load(handle)
    best = {}
    for event in events:
        if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time"):
            continue
        args = event["args"]
        node = event["name"]
        shapes = [next(iter(entry.values())) for entry in args.get("input_type_shape", [])]
        weight = shapes[1] if len(shapes) > 1 else ()
        key = _key(args["op_name"], shapes[0] if shapes else (), weight)
        micros = float(event["dur"])
        if node not in best or micros < best[node][1]:
            best[node] = (key, micros)
    layers = collections.defaultdict(lambda: [0.0, 0])
    for key, micros in best.values():
        layers[key][0] += micros / 1e3
        layers[key][1] += 1
    return layers


def table(name, ours, theirs, top):
    """The markdown table of one model: its `top` layer kinds by rtsoa's time, then the rest
    and the totals."""
    keys = sorted(set(ours) | set(theirs), key=lambda k: -ours.get(k, [0.0])[0])
    lines = [
        f"### {name}",
        "",
        "| layer | count | rtsoa ms | onnxruntime ms | ratio |",
        "|---|---|---|---|---|",
    ]

    def row(label, count, mine, other):
        ratio = f"{mine / other:.2f}" if other > 0 else "-"
        return f"| {label} | {count} | {mine:.2f} | {other:.2f} | {ratio} |"

    rest = [0.0, 0.0, 0]
    for index, key in enumerate(keys):
        mine, count = ours.get(key, [0.0, 0])
        other = theirs.get(key, [0.0, 0])[0]
        if index < top:
            lines.append(row(key, count or theirs.get(key, [0, 0])[1], mine, other))
        else:
            rest[0] += mine
            rest[1] += other
            rest[2] += count
    if rest[2]:
        lines.append(row("everything else", rest[2], rest[0], rest[1]))
    total = sum(v[0] for v in ours.values()), sum(v[0] for v in theirs.values())
    lines.append(row("**total**", sum(v[1] for v in ours.values()), *total))
    return "\n".join(lines)


def main(argv=None):
    from rtsoa.testing.cnn import ARCHITECTURES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=sorted(ARCHITECTURES))
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--threads", choices=("one", "default", "2"), default="one")
    args = parser.parse_args(argv)
    threads = {"one": 1, "default": None, "2": 2}[args.threads]
    intra = {"one": 1, "default": None, "2": 2}[args.threads]
    for name in args.models:
        proto = ARCHITECTURES[name](size=args.size)
        x = np.random.default_rng(0).standard_normal((1, 3, args.size, args.size))
        x = x.astype(np.float32)
        ours = rtsoa_layers(proto, x, args.runs, 1 if intra == 1 else None, intra)
        theirs = onnxruntime_layers(proto, x, args.runs, threads)
        title = f"{name}, 1 x {args.size} x {args.size}, {args.threads} thread"
        print(table(title + ("" if threads == 1 else "s"), ours, theirs, args.top))
        print()


if __name__ == "__main__":
    main()
