"""save_graph / load_graph: one directory of Arrow IPC files per graph, memory-mapped on load.

Loading maps each `<table>.arrow` file and views its columns as numpy arrays without copying;
the arrays are read-only and keep the mapping alive. Every table is checked against
`rtsoa.graph.schema` and the whole graph by `validate_graph` before anything else may use it.
"""

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

from rtsoa.errors import GraphFormatError
from rtsoa.graph.graph import ExecuteGraph, GraphMeta
from rtsoa.graph.schema import CSR_COLUMNS, FILE_SUFFIX, TABLES, IoRole, check_table_schema
from rtsoa.graph.validate import validate_graph


def graph_tables(graph):
    """The graph as {table name: pyarrow.Table}, in schema column order."""
    meta = graph.meta
    io_values = np.concatenate([graph.graph_inputs, graph.graph_outputs]).astype(np.int32)
    io_roles = np.concatenate(
        [
            np.full(graph.graph_inputs.shape[0], int(IoRole.INPUT), dtype=np.int8),
            np.full(graph.graph_outputs.shape[0], int(IoRole.OUTPUT), dtype=np.int8),
        ]
    )
    columns = {
        "metadata": {
            "format_version": [meta.format_version],
            "name": [meta.name],
            "stream_count": [meta.stream_count],
            "event_count": [meta.event_count],
            "notify_count": [meta.notify_count],
            "is_dynamic": [meta.is_dynamic],
            "has_loops": [meta.has_loops],
        },
        "nodes": {
            "kernel": graph.node_kernel,
            "graph": graph.node_graph,
            "priority": graph.node_priority,
            "stream": graph.node_stream,
            "worker": graph.node_worker,
            "compute_node": graph.node_compute,
            "in_degree": graph.in_degree,
        },
        "node_offsets": {
            "successors": graph.succ_offsets,
            "inputs": graph.input_offsets,
            "outputs": graph.output_offsets,
            "attributes": graph.attr_offsets,
            "relations": graph.relation_offsets,
        },
        "edges": {"target": graph.succ_targets},
        "node_inputs": {"value": graph.input_values},
        "node_outputs": {"value": graph.output_values},
        "values": {
            "kind": graph.value_kind,
            "dtype": graph.value_dtype,
            "placement": graph.value_placement,
            "producer": graph.value_producer,
        },
        "attributes": {"value": graph.attr_pool},
        "constants": {"byte": graph.constants},
        "relations": {"launch": graph.relation_targets},
        "kernels": {"name": list(graph.kernel_names)},
        "graphs": {
            "kind": graph.graph_kind,
            "parent": graph.graph_parent,
            "name": list(graph.graph_names),
        },
        "graph_io": {"value": io_values, "role": io_roles},
    }
    tables = {}
    for name, schema in TABLES.items():
        arrays = [pa.array(columns[name][field.name], type=field.type) for field in schema]
        tables[name] = pa.Table.from_arrays(arrays, schema=schema)
    return tables


def save_graph(graph, path):
    """Write `graph` to the directory `path` (replaced atomically if it exists)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        for name, table in graph_tables(graph).items():
            batch = table.combine_chunks().to_batches()
            with pa.OSFile(str(staging / f"{name}{FILE_SUFFIX}"), "wb") as sink:
                with pa.ipc.new_file(sink, table.schema) as writer:
                    if batch:
                        writer.write_batch(batch[0])
                    else:
                        writer.write_batch(pa.record_batch(_empty_columns(table), table.schema))
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
        os.replace(staging, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return path


def _empty_columns(table):
    return [pa.array([], type=field.type) for field in table.schema]


def read_table(path, name):
    """One table of a saved graph, memory-mapped and schema-checked."""
    file = Path(path) / f"{name}{FILE_SUFFIX}"
    if not file.is_file():
        raise GraphFormatError(f"file {file} is missing", table=name)
    try:
        source = pa.memory_map(str(file), "r")
        table = pa.ipc.open_file(source).read_all()
        # Full validation (UTF-8, offsets) where it is cheap: the small tables holding strings.
        table.validate(full=any(pa.types.is_string(field.type) for field in table.schema))
    except (pa.ArrowException, OSError, ValueError) as error:
        raise GraphFormatError(f"not a readable Arrow IPC file ({error})", table=name) from None
    check_table_schema(name, table)
    return table


def _column(table, name, column):
    """A column as one contiguous numpy array: a zero-copy view when the type allows it."""
    chunked = table.column(column)
    if chunked.num_chunks == 0:
        return np.empty(0, dtype=chunked.type.to_pandas_dtype())
    if chunked.num_chunks > 1:
        raise GraphFormatError(
            f"column is split into {chunked.num_chunks} chunks; rtsoa writes one record batch",
            table=name,
            column=column,
        )
    array = chunked.chunk(0)
    try:
        if pa.types.is_boolean(array.type) or pa.types.is_string(array.type):
            return array.to_pylist()
        return array.to_numpy(zero_copy_only=True)
    except (pa.ArrowException, ValueError) as error:
        raise GraphFormatError(f"unreadable column ({error})", table=name, column=column) from None


def load_graph(path, validate=True):
    """Memory-map a graph saved by `save_graph` and validate it (GraphFormatError if bad)."""
    path = Path(path)
    if not path.is_dir():
        if path.exists():
            raise GraphFormatError(f"{path} is not a graph directory (expected <name>.rtsoa/)")
        raise GraphFormatError(f"{path} does not exist")
    tables = {name: read_table(path, name) for name in TABLES}

    metadata = tables["metadata"]
    if metadata.num_rows != 1:
        raise GraphFormatError(f"{metadata.num_rows} rows, expected 1", table="metadata")
    try:
        row = {column: metadata.column(column)[0].as_py() for column in metadata.column_names}
    except ValueError as error:  # e.g. invalid UTF-8 in the name
        raise GraphFormatError(f"unreadable metadata ({error})", table="metadata") from None
    meta = GraphMeta(**row)
    if meta.format_version != GraphMeta().format_version:
        # Report the version before anything else: newer files may have other tables.
        validate_graph_version(meta)

    def col(table, column):
        return _column(tables[table], table, column)

    roles = col("graph_io", "role")
    io_values = col("graph_io", "value")
    if roles.shape[0] and (roles.min() < 0 or roles.max() > 1):
        bad = int(np.argmax((roles < 0) | (roles > 1)))
        raise GraphFormatError(f"role {int(roles[bad])} is not 0 or 1", "graph_io", "role", bad)
    graph = ExecuteGraph(
        node_kernel=col("nodes", "kernel"),
        node_graph=col("nodes", "graph"),
        node_priority=col("nodes", "priority"),
        node_stream=col("nodes", "stream"),
        node_worker=col("nodes", "worker"),
        node_compute=col("nodes", "compute_node"),
        in_degree=col("nodes", "in_degree"),
        succ_offsets=col("node_offsets", "successors"),
        succ_targets=col("edges", "target"),
        input_offsets=col("node_offsets", "inputs"),
        input_values=col("node_inputs", "value"),
        output_offsets=col("node_offsets", "outputs"),
        output_values=col("node_outputs", "value"),
        attr_offsets=col("node_offsets", "attributes"),
        attr_pool=col("attributes", "value"),
        relation_offsets=col("node_offsets", "relations"),
        relation_targets=col("relations", "launch"),
        constants=col("constants", "byte"),
        value_kind=col("values", "kind"),
        value_dtype=col("values", "dtype"),
        value_placement=col("values", "placement"),
        value_producer=col("values", "producer"),
        kernel_names=tuple(col("kernels", "name")),
        graph_kind=col("graphs", "kind"),
        graph_parent=col("graphs", "parent"),
        graph_names=tuple(col("graphs", "name")),
        graph_inputs=io_values[roles == 0],
        graph_outputs=io_values[roles == 1],
        meta=meta,
    )
    if validate:
        validate_graph(graph)
    return graph


def validate_graph_version(meta):
    raise GraphFormatError(
        f"format version {meta.format_version} is not supported (this rtsoa reads "
        f"{GraphMeta().format_version})",
        table="metadata",
        column="format_version",
        row=0,
    )


__all__ = ["save_graph", "load_graph", "read_table", "graph_tables", "CSR_COLUMNS"]
