"""`rtsoa compile [--all | MODEL ...] [--jobs N]`: compile ops into the cache ahead of time
(`rtsoa.ops.library`): every op, or the ops the models given run."""

import os

from rtsoa.graph.io import load_graph
from rtsoa.host.program import HostModel
from rtsoa.ops import library


def register(subcommands):
    """Add `compile` to the `rtsoa` subparsers."""
    parser = subcommands.add_parser(
        "compile", help="compile ops ahead of time: --all, or a model's ops"
    )
    parser.add_argument("models", nargs="*", help="ONNX models or saved graphs: compile their ops")
    library.add_arguments(parser)
    parser.set_defaults(handler=run)


def model_ops(path):
    """The op entries model `path` runs (an op's name, or `<op>[<dtype>]` for a per-dtype
    entry): a saved graph's, or an ONNX model's once lowered (the lowering, kept in the
    lowered-model cache, compiles the ops it folds constants with)."""
    from rtsoa.lowering.cache import lower_cached  # as in rtsoa.cli.model: not at every start

    graph = lower_cached(path) if str(path).endswith(".onnx") else load_graph(path)
    if isinstance(graph, HostModel):  # string values: the ops are the device graph's
        graph = graph.device
    return sorted(set(library.graph_entries(graph).values()))


def run(args):
    """The `rtsoa compile` command."""
    if args.all and args.models:
        raise ValueError("give --all or models, not both")
    if not args.models:
        return library.run(args)
    names = set()
    for model in args.models:
        if not os.path.exists(model):
            raise FileNotFoundError(f"{model}: no such file")
        names.update(model_ops(model))
    return library.run(args, names)
