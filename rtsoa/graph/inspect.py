"""Graph statistics for `rtsoa inspect`: counts, critical path, width, bytes per table."""

import numpy as np

from rtsoa.graph.csr import kahn_levels
from rtsoa.graph.graph import is_dynamic
from rtsoa.graph.io import graph_tables
from rtsoa.graph.schema import GraphKind, WorkerClass


def _counts(labels, names):
    counts = np.bincount(labels, minlength=len(names)) if labels.shape[0] else []
    return {str(names[i]): int(c) for i, c in enumerate(counts) if c}


def graph_summary(graph, path=None):
    """A JSON-ready dict describing a graph."""
    n = graph.num_nodes
    roots = graph.root_of_graph()
    graph_labels = [
        f"{i}:{graph.graph_names[i]} ({GraphKind(int(graph.graph_kind[i])).name})"
        for i in range(graph.graph_kind.shape[0])
    ]
    summary = {
        "name": graph.meta.name,
        "path": str(path) if path is not None else None,
        "format_version": graph.meta.format_version,
        "nodes": n,
        "edges": graph.num_edges,
        "values": graph.num_values,
        "relations": int(graph.relation_targets.shape[0]),
        "attribute_slots": int(graph.attr_pool.shape[0]),
        "constant_bytes": int(graph.constants.shape[0]),
        "nodes_per_graph": _counts(graph.node_graph, graph_labels),
        "nodes_per_root_graph": _counts(roots[graph.node_graph], [k.name for k in GraphKind][:3]),
        "nodes_per_kernel": _counts(graph.node_kernel, graph.kernel_names),
        "nodes_per_stream": {
            str(k): int(v)
            for k, v in zip(*np.unique(graph.node_stream, return_counts=True), strict=True)
        },
        "nodes_per_worker_class": _counts(
            graph.node_worker.astype(np.int64), [w.name for w in WorkerClass]
        ),
        "streams": graph.meta.stream_count,
        "events": graph.meta.event_count,
        "notifies": graph.meta.notify_count,
        "is_dynamic": is_dynamic(graph),
        "has_loops": graph.meta.has_loops,
        "graph_inputs": int(graph.graph_inputs.shape[0]),
        "graph_outputs": int(graph.graph_outputs.shape[0]),
    }
    if graph.meta.has_loops:
        summary["critical_path"] = None
        summary["max_width"] = None
    else:
        levels, _ = kahn_levels(graph.succ_offsets, graph.succ_targets, n)
        summary["critical_path"] = int(levels.max()) + 1 if n else 0
        summary["max_width"] = int(np.bincount(levels).max()) if n else 0
    if graph.tensor_value.shape[0]:
        summary["io"] = {
            key: [
                {"name": name, "value": value, "dtype": dtype.name, "dims": dims}
                for name, value, dtype, dims in entries
            ]
            for key, entries in graph.io_description().items()
        }
        summary["symbols"] = list(graph.symbols())
    ops = op_counts(graph)
    if ops:
        summary["ops_per_type"] = ops
    summary["bytes_per_table"] = table_bytes(graph)
    summary["structure_bytes"] = graph.nbytes()
    return summary


def op_counts(graph):
    """{op type: launches} of a lowered model ({} for other graphs)."""
    if "OpLaunch" not in graph.kernel_names:
        return {}
    launch = graph.kernel_names.index("OpLaunch")
    nodes = np.flatnonzero(graph.node_kernel == launch)
    # attribute 0 of an op node is its op's row in the graph's ops table (format version 3)
    rows = graph.attr_pool[graph.attr_offsets[nodes]] if nodes.size else np.zeros(0, np.int64)
    ops = graph.op_names
    names = [ops[r] if 0 <= r < len(ops) else f"op#{r}" for r in rows.tolist()]
    values, counts = np.unique(np.array(names, dtype=object), return_counts=True)
    return {str(v): int(c) for v, c in zip(values, counts, strict=True)}


def table_bytes(graph):
    """In-memory bytes of each table's columns (the same numbers the files hold, sans headers)."""
    return {name: int(table.nbytes) for name, table in graph_tables(graph).items()}


def format_summary(summary):
    """Human-readable text for a summary dict."""
    lines = [
        f"graph {summary['name']!r}" + (f"  ({summary['path']})" if summary["path"] else ""),
        f"  format version   {summary['format_version']}",
        f"  nodes            {summary['nodes']:,}",
        f"  edges            {summary['edges']:,}",
        f"  values           {summary['values']:,}",
        f"  relations        {summary['relations']:,}",
        f"  critical path    {_maybe(summary['critical_path'])}",
        f"  max width        {_maybe(summary['max_width'])}",
        f"  streams / events / notifies  {summary['streams']} / {summary['events']} / "
        f"{summary['notifies']}",
        f"  dynamic shapes   {summary['is_dynamic']}, loops {summary['has_loops']}",
        f"  structure        {summary['structure_bytes']:,} bytes",
    ]
    for key in ("inputs", "outputs") if "io" in summary else ():
        lines.append(f"  {key}:")
        for entry in summary["io"][key]:
            lines.append(f"    {entry['name']:<32} {entry['dtype']:<8} {_shape(entry['dims'])}")
    if "symbols" in summary:
        lines.append(f"  symbols          {', '.join(summary['symbols']) or '(none)'}")
    for title, key in (
        ("nodes per graph", "nodes_per_graph"),
        ("nodes per kernel", "nodes_per_kernel"),
        ("nodes per stream", "nodes_per_stream"),
        ("nodes per worker class", "nodes_per_worker_class"),
        ("ops per type", "ops_per_type"),
        ("bytes per table", "bytes_per_table"),
    ):
        if key not in summary:
            continue
        lines.append(f"  {title}:")
        for name, count in summary[key].items():
            lines.append(f"    {name:<32} {count:>14,}")
    return "\n".join(lines)


def _shape(dims):
    """[batch, 3, ?] for dims ("batch", 3, None); "rank unknown" for None."""
    if dims is None:
        return "rank unknown"
    return "[" + ", ".join("?" if dim is None else str(dim) for dim in dims) + "]"


def _maybe(value):
    return "n/a (graph has loops)" if value is None else f"{value:,} nodes"
