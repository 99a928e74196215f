"""The model commands: `rtsoa lower`, and `rtsoa run` / `rtsoa inspect` of a model (an ONNX
file, or a saved graph that is a lowered model; `rtsoa.cli.graph` hands those over).

The lowering and the model API are imported when a model command runs: at the top here they
would add ~0.1 s to every `rtsoa` start, graph runs included (`bench_coldstart`).
"""

import json
import time

import numpy as np

from rtsoa.cli.arguments import no_winograd, progress
from rtsoa.errors import LoweringError
from rtsoa.executors import Tracer
from rtsoa.graph.graph import ExecuteGraph
from rtsoa.graph.inspect import _shape
from rtsoa.graph.io import save_graph
from rtsoa.host.kinds import map_sequence
from rtsoa.report import device_trace_events
from rtsoa.runtime.npz import read_inputs, write_outputs


def register(subcommands):
    """Add `lower` to the `rtsoa` subparsers."""
    parser = subcommands.add_parser("lower", help="lower an ONNX model to an execute graph")
    parser.add_argument("file", help="ONNX model (.onnx)")
    parser.add_argument("-o", "--output", required=True, help="output graph directory (.rtsoa)")
    parser.add_argument("--force", action="store_true", help="replace an existing graph at -o")
    parser.add_argument(
        "--no-fuse",
        dest="fuse",
        action="store_false",
        help="keep every op of the model (no MatMul -> Add -> Relu fusion)",
    )
    no_winograd(parser)
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    parser.set_defaults(handler=lower_command)


def is_onnx_path(path):
    """Does `path` name an ONNX file (by suffix)?"""
    return str(path).lower().endswith(".onnx")


def lower_onnx(path, inputs=None, fuse=True):
    """(graph, constant inputs): the lowered graph of the ONNX file at `path` (from the
    lowering cache when it holds it), with the fusions `fuse` selects (`lower`'s). A model
    taking sequences or optionals is lowered for the arrays of the .npz file `inputs`
    (`sequence_feeds`: element k of sequence input `x` is the array named `x[k]`); the inputs
    that lowering made constants (positions) are named, so the run does not feed them."""
    from rtsoa.errors import LoweringError
    from rtsoa.lowering.cache import lower_cached  # see the module docstring

    try:
        return lower_cached(path, fuse=fuse), set()
    except LoweringError:
        from rtsoa.lowering.onnx_import import load_onnx
        from rtsoa.lowering.sequence_io import takes_sequences

        model = load_onnx(path)
        if not takes_sequences(model):
            raise
    return _lower_specialised(model, read_inputs(inputs) if inputs else {}, fuse)


def sequence_feeds(model, arrays):
    """{name: value} of .npz `arrays` for a model with sequence or optional inputs: sequence
    input `x` is the list of the arrays named `x[0]`, `x[1]`, ... (none: empty; for an
    optional sequence, absent); an optional tensor missing from the file is absent (None)."""
    from rtsoa.lowering.sequence_io import (
        OPTIONAL,
        SEQUENCE,
        SEQUENCE_KINDS,
        element_name,
        value_kinds,
    )

    feeds = dict(arrays)
    for name, kind, _ in value_kinds(model)[0]:
        if kind in SEQUENCE_KINDS:
            elements = []
            while element_name(name, len(elements)) in arrays:
                elements.append(feeds.pop(element_name(name, len(elements))))
            absent = kind != SEQUENCE and not elements
            feeds[name] = None if absent else elements
        elif kind == OPTIONAL and name not in arrays:
            feeds[name] = None
    return feeds


def _lower_specialised(model, arrays, fuse=True):
    """The lowering of `model` specialised on the sequences and optionals of `arrays`."""
    from rtsoa.limits import LoweringLimits
    from rtsoa.lowering.cache import lower_cached
    from rtsoa.lowering.sequence_io import baked_inputs, signature, specialise

    key = signature(model, sequence_feeds(model, arrays), LoweringLimits().sequence_elements)
    specialised, _ = specialise(model, key)
    return lower_cached(specialised.SerializeToString(), fuse=fuse), baked_inputs(key)


def fusions(args):
    """`lower`'s `fuse` for the flags of `rtsoa lower` and `rtsoa run` (of an ONNX model):
    every fusion, none (--no-fuse), or all but the Winograd convolutions (--no-winograd)."""
    from rtsoa.lowering.fuse import FUSIONS

    fuse = getattr(args, "fuse", True)
    if fuse and not getattr(args, "winograd", True):
        return tuple(name for name in FUSIONS if name != "winograd")
    return fuse


def lower_command(args):
    """rtsoa lower model.onnx -o model.rtsoa"""
    from rtsoa.lowering import import_onnx, lower  # see the module docstring

    start = time.perf_counter()
    with progress(3, "lower", args.progress) as bar:
        model = import_onnx(args.file)
        bar.update()
        graph = lower(model, fuse=fusions(args))
        bar.update()
        if not isinstance(graph, ExecuteGraph):  # a HostModel: host steps have no graph file
            raise LoweringError(
                f"{args.file}: the model has string values, which run as host steps around "
                "the device graph; a saved graph cannot hold them: run the .onnx file itself"
            )
        save_graph(graph, args.output, overwrite=args.force)
        bar.update()
    seconds = time.perf_counter() - start
    summary = {
        "file": str(args.file),
        "output": str(args.output),
        "compute_nodes": len(model.nodes),
        "nodes": graph.num_nodes,
        "seconds": round(seconds, 6),
        "op_counts": model.op_counts(),
        "fused": bool(getattr(args, "fuse", True)),
        "winograd": bool(getattr(args, "fuse", True) and getattr(args, "winograd", True)),
    }
    if args.json:
        print(json.dumps(summary))
        return
    print(
        f"{args.file}: {len(model.nodes)} ops lowered to {graph.num_nodes} nodes in "
        f"{seconds * 1e3:.1f} ms -> {args.output}"
    )


def run_model(args, graph, helper_status=None, constants=()):
    """rtsoa run on a lowered model (a saved graph or an .onnx file lowered on the fly);
    `helper_status`: the exit status of a cold start's helper (None: none ran); `constants`:
    inputs of the file the lowering made constants (`lower_onnx`), not fed."""
    from rtsoa.runtime.model import ModelExecutor  # see the module docstring

    if args.repeat < 1:
        raise ValueError(f"--repeat must be >= 1, got {args.repeat}")
    start = time.perf_counter()
    model = ModelExecutor(
        graph,
        executor=args.executor,
        hbm_bytes=args.device_hbm,
        threads=args.threads,
        intra_op_threads=getattr(args, "intra_op_threads", None),
    )
    inputs = read_inputs(args.inputs) if args.inputs else {}
    inputs = {name: array for name, array in inputs.items() if name not in constants}
    model.check_inputs(inputs)  # named errors before anything runs
    model.load()
    loaded = time.perf_counter()
    outputs = model.execute_sync(inputs)
    first = time.perf_counter() - loaded
    calibration = model.calibrate(inputs)  # the pool / plan trials, kept out of the timings
    times = np.empty(args.repeat)
    device = model.device
    device_start = device.host_time
    for i in range(args.repeat):
        begin = time.perf_counter_ns()
        outputs = model.execute_sync(inputs)
        times[i] = time.perf_counter_ns() - begin
    device.synchronize()
    device_ns = (device.host_time - device_start) / args.repeat
    if args.outputs:
        write_outputs(args.outputs, outputs)
    hazards = device.hazard_count
    if args.trace:
        write_trace(args.trace, model, inputs)
    model.unload()
    summary = {
        "file": str(args.file),
        "executor": model.main.name,
        "inputs": {name: list(np.asarray(a).shape) for name, a in inputs.items()},
        "outputs": {name: _shape_and_type(value) for name, value in outputs.items()},
        "load_seconds": round(loaded - start, 6),
        "first_run_seconds": round(first, 6),
        "calibration_runs": calibration,
        "intra_op_threads": model.parts_choice.chosen,
        "run_seconds_median": float(np.median(times)) / 1e9,
        "device_ns_per_run": float(device_ns),
        "hazards": int(hazards),
        "repeat": args.repeat,
        "compile_helper_status": helper_status,
    }
    if args.outputs:
        summary["outputs_file"] = str(args.outputs)
    if args.json:
        print(json.dumps(summary))
        return
    shapes = ", ".join(f"{n} {s[1]}{s[0]}" for n, s in summary["outputs"].items())
    print(
        f"{args.file}: model, executor {summary['executor']}\n"
        f"  outputs         {shapes}\n"
        f"  time per run    median {summary['run_seconds_median'] * 1e3:.3f} ms over "
        f"{args.repeat} run(s) (first {first * 1e3:.1f} ms, "
        + (f"{calibration} calibration run(s), " if calibration else "")
        + f"load {summary['load_seconds']:.2f} s)\n"
        f"  device time     {device_ns / 1e3:,.1f} us per run (simulated), hazards {hazards}"
        + (f"\n  outputs file    {args.outputs}" if args.outputs else "")
        + (f"\n  trace           {args.trace}" if args.trace else "")
    )


def _shape_and_type(value):
    """[shape, dtype] of an output for the summary; a sequence of maps (a list of dicts) is
    [[its length], "map"]."""
    if isinstance(value, list):
        return [[len(value)], "map"]
    return [list(value.shape), str(value.dtype)]


def write_trace(path, model, inputs):
    """One more execute with the tracer: host node slices and the device's stream tasks in
    one Chrome trace (open it in Perfetto)."""
    tracer = Tracer(details=True)
    model.execute_sync(inputs, subscriber=tracer)
    trace = tracer.trace()
    trace["traceEvents"].extend(device_trace_events(model.device))
    with open(path, "w") as file:
        json.dump(trace, file)


def inspect_model(args):
    """rtsoa inspect model.onnx: inputs, outputs, symbolic dims and op counts."""
    from rtsoa.lowering import import_onnx  # see the module docstring

    graph = import_onnx(args.file)
    constants = [t for t in graph.tensors.values() if t.is_constant]

    def entry(name):
        tensor = graph.tensors[name]
        dtype = "STRING" if tensor.string else tensor.dtype.name
        if tensor.maps:
            dtype = map_sequence(tensor.maps)
        return {"name": name, "dtype": dtype, "dims": tensor.dims}

    symbols = sorted(
        {
            d
            for name in graph.inputs + graph.outputs
            for d in (graph.tensors[name].dims or ())
            if isinstance(d, str)
        }
    )
    summary = {
        "name": graph.name,
        "path": str(args.file),
        "opsets": graph.opsets,
        "ops": len(graph.nodes),
        "inputs": [entry(name) for name in graph.inputs],
        "outputs": [entry(name) for name in graph.outputs],
        "symbols": symbols,
        "constants": len(constants),
        "constant_bytes": int(sum(t.data.nbytes for t in constants)),
        "ops_per_type": graph.op_counts(),
    }
    if args.json:
        print(json.dumps(summary))
        return
    lines = [
        f"model {summary['name']!r}  ({args.file})",
        f"  opsets           {summary['opsets']}",
        f"  ops              {summary['ops']:,}",
        f"  constants        {summary['constants']:,} ({summary['constant_bytes']:,} bytes)",
    ]
    for key in ("inputs", "outputs"):
        lines.append(f"  {key}:")
        for item in summary[key]:
            lines.append(f"    {item['name']:<32} {item['dtype']:<8} {_shape(item['dims'])}")
    lines.append(f"  symbols          {', '.join(symbols) or '(none)'}")
    lines.append("  ops per type:")
    for name, count in summary["ops_per_type"].items():
        lines.append(f"    {name:<32} {count:>14,}")
    print("\n".join(lines))
