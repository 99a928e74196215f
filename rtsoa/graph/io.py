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
from rtsoa.graph.schema import (
    FIELDS,
    FILE_SUFFIX,
    IO_TABLE,
    METADATA_SCHEMA,
    METADATA_TABLE,
    ROLE_CODES,
    ROLE_COLUMN,
    ROLE_FIELDS,
    TABLES,
    check_format_version,
    check_table_schema,
)
from rtsoa.graph.validate import check_ids, validate_graph


def graph_tables(graph):
    """The graph as {table name: pyarrow.Table}, in schema column order (from schema.FIELDS)."""
    meta = graph.meta
    columns = {name: {} for name in TABLES}
    columns[METADATA_TABLE] = {column: [getattr(meta, column)] for column in METADATA_SCHEMA.names}
    for field in FIELDS:
        if field.role is None:
            value = getattr(graph, field.name)
            columns[field.table][field.column] = value if field.dtype is not None else list(value)
    # graph_io: the rows of each role field one after the other, tagged with the role.
    for field in ROLE_FIELDS:
        rows = np.asarray(getattr(graph, field.name), dtype=field.dtype)
        columns[IO_TABLE].setdefault(field.column, []).append(rows)
        roles = np.full(rows.shape[0], int(field.role), dtype=np.int8)
        columns[IO_TABLE].setdefault(ROLE_COLUMN, []).append(roles)
    for column, pieces in columns[IO_TABLE].items():
        columns[IO_TABLE][column] = np.concatenate(pieces)
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
    table = _map_table(path, name)
    check_table_schema(name, table)
    return table


def _map_table(path, name):
    """One table of a saved graph, memory-mapped (GraphFormatError if it is no Arrow file)."""
    file = Path(path) / f"{name}{FILE_SUFFIX}"
    if not file.is_file():
        raise GraphFormatError(f"file {file} is missing", table=name)
    try:
        source = pa.memory_map(str(file), "r")
        table = pa.ipc.open_file(source).read_all()
        # Column names are decoded lazily: a name that is not UTF-8 must fail here, as a bad
        # file, not later as UnicodeDecodeError (found by the file fuzzer: one bit flip).
        table.schema.names  # noqa: B018
        # Full validation (UTF-8, offsets) where it is cheap: the small tables holding strings.
        table.validate(full=any(pa.types.is_string(field.type) for field in table.schema))
    except (pa.ArrowException, OSError, ValueError) as error:
        raise GraphFormatError(f"not a readable Arrow IPC file ({error})", table=name) from None
    return table


def _format_version(metadata):
    """The metadata table's format_version if it holds a readable one, else None."""
    index = metadata.schema.get_field_index("format_version")  # -1 if missing or repeated
    if index < 0 or metadata.num_rows < 1 or not pa.types.is_integer(metadata.schema[index].type):
        return None
    return metadata.column(index)[0].as_py()


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
    """Memory-map a graph saved by `save_graph` and validate it (GraphFormatError if bad).

    With `validate=False` only the format version and each table's schema are checked; use it
    for files you wrote yourself, never for files jitted code will index unchecked.
    """
    path = Path(path)
    if not path.is_dir():
        if path.exists():
            raise GraphFormatError(f"{path} is not a graph directory (expected <name>.rtsoa/)")
        raise GraphFormatError(f"{path} does not exist")
    # The version first: a file of another version may have other tables and columns.
    metadata = _map_table(path, METADATA_TABLE)
    version = _format_version(metadata)
    if version is not None:
        check_format_version(version)
    check_table_schema(METADATA_TABLE, metadata)
    if metadata.num_rows != 1:
        raise GraphFormatError(f"{metadata.num_rows} rows, expected 1", table=METADATA_TABLE)
    try:
        row = {column: metadata.column(column)[0].as_py() for column in metadata.column_names}
    except ValueError as error:  # e.g. invalid UTF-8 in the name
        raise GraphFormatError(f"unreadable metadata ({error})", table=METADATA_TABLE) from None
    meta = GraphMeta(**row)
    tables = {name: read_table(path, name) for name in TABLES if name != METADATA_TABLE}

    roles = _column(tables[IO_TABLE], IO_TABLE, ROLE_COLUMN)
    check_ids(roles, *ROLE_CODES.bounds(None), IO_TABLE, ROLE_COLUMN)
    columns = {}
    for field in FIELDS:
        value = _column(tables[field.table], field.table, field.column)
        if field.role is not None:
            value = value[roles == field.role]
        elif field.dtype is None:
            value = tuple(value)
        columns[field.name] = value
    graph = ExecuteGraph(**columns, meta=meta)
    if validate:
        # Errors name graph_io rows as saved; a foreign file may order its roles otherwise.
        io_rows = np.concatenate([np.flatnonzero(roles == field.role) for field in ROLE_FIELDS])
        validate_graph(graph, io_rows=io_rows)
    return graph


__all__ = ["save_graph", "load_graph", "read_table", "graph_tables"]
