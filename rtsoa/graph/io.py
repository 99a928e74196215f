"""save_graph / load_graph: one directory of Arrow IPC files per graph, memory-mapped on load.

Saving writes every table into a staging directory and swaps it into place atomically
(`rtsoa.graph.atomic_save`); every table records the save's id. Loading maps each `<table>.arrow`
file and views its columns as numpy arrays without copying; the arrays are read-only and keep
the mapping alive. Every table is checked against `rtsoa.graph.schema`, the save ids against
each other, and the whole graph by `validate_graph` before anything else may use it. The ops a
model's op nodes run are saved by name and bound to this rtsoa's op switch at load
(`rtsoa.graph.op_table`).
"""

import hashlib
import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from rtsoa.errors import GraphFormatError
from rtsoa.graph import atomic_save
from rtsoa.graph.graph import ExecuteGraph, GraphMeta
from rtsoa.graph.op_table import (
    bind_op_names,
    compact_op_names,
    op_nodes,
    op_switch,
    refuse_unnamed_ops,
)
from rtsoa.graph.schema import (
    FIELDS,
    FILE_SUFFIX,
    FORMAT_VERSION,
    IO_TABLE,
    METADATA_SCHEMA,
    METADATA_TABLE,
    READABLE_FORMAT_VERSIONS,
    ROLE_CODES,
    ROLE_COLUMN,
    ROLE_FIELDS,
    SAVE_ID_KEY,
    TABLES,
    TABLES_SINCE,
    check_format_version,
    check_table_schema,
    tables_of_version,
)
from rtsoa.graph.validate import check_ids, validate_graph


def graph_tables(graph):
    """The graph as {table name: pyarrow.Table}, in schema column order (from schema.FIELDS).
    The ops table holds only the ops the graph's op nodes run (`compact_op_names`)."""
    graph = compact_op_names(graph)
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


def save_graph(graph, path, overwrite=False, durable=True):
    """Write `graph` to the directory `path`; returns `path`.

    Crash-safe and atomic (see `rtsoa/graph/atomic_save.py`): a reader sees the old or the new
    graph at `path`, never a mix or nothing, and a save killed at any point leaves one of the
    two; what interrupted saves left next to `path` is removed. Every table records the save's
    id, a digest of the graph's content, so equal graphs save to identical bytes.

    `path` may be missing, an empty directory or an rtsoa graph (a directory of `.arrow`
    tables with a metadata table). Anything else, a file, a symlink or a directory holding
    other files, is refused with FileExistsError, unless `overwrite=True`, which replaces it
    and deletes what it held.

    `durable=True` flushes the tables to disk before the swap, so the guarantee also holds
    across a power loss; `durable=False` skips the flushes (faster for scratch graphs, still
    atomic for readers and against the process being killed).
    """
    path = Path(path)
    if path.name in ("", ".", ".."):
        raise ValueError(f"cannot save a graph as {str(path)!r}: name a directory like g.rtsoa")
    tables = graph_tables(graph)
    metadata = {SAVE_ID_KEY: content_id(tables)}
    tables = {name: table.replace_schema_metadata(metadata) for name, table in tables.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_save.parent_lock(path.parent) as locked:
        if locked:  # no other save is running here: what staging directories exist are dead
            atomic_save.remove_leftovers(path, FILE_SUFFIX)
        if not overwrite:  # checked under the lock: what is checked is what gets replaced
            _check_replaceable(path)
        staging = atomic_save.sibling(path, atomic_save.STAGING)
        try:
            staging.mkdir()
            files = [staging / f"{name}{FILE_SUFFIX}" for name in tables]
            for file, table in zip(files, tables.values(), strict=True):
                _write_table(file, table)
            if durable:  # on disk before the swap makes them the graph
                atomic_save.fsync_all(files, staging)
            atomic_save.publish(staging, path, durable)
        except BaseException:
            atomic_save.remove_entry(staging)
            raise
    return path


def _write_table(file, table):
    """One table as an Arrow IPC file of one record batch."""
    batch = table.combine_chunks().to_batches()
    with pa.OSFile(str(file), "wb") as sink:
        with pa.ipc.new_file(sink, table.schema) as writer:
            if batch:
                writer.write_batch(batch[0])
            else:
                writer.write_batch(pa.record_batch(_empty_columns(table), table.schema))


def _empty_columns(table):
    return [pa.array([], type=field.type) for field in table.schema]


def is_graph_directory(path):
    """Whether `path` is a directory holding only `.arrow` tables, the metadata table among
    them: what `save_graph` replaces without `overwrite=True`."""
    path = Path(path)
    has_metadata = (path / f"{METADATA_TABLE}{FILE_SUFFIX}").is_file()
    return has_metadata and atomic_save.only_files_ending(path, FILE_SUFFIX)


def _check_replaceable(path):
    """FileExistsError unless `path` is missing, an empty directory or an rtsoa graph."""
    if not os.path.lexists(path):
        return
    if path.is_symlink():
        what = "a symbolic link"
    elif not path.is_dir():
        what = "a file"
    elif is_graph_directory(path) or not any(path.iterdir()):
        return
    else:
        foreign = sorted(
            entry.name
            for entry in path.iterdir()
            if not (entry.name.endswith(FILE_SUFFIX) and entry.is_file())
        )
        what = f"a directory holding {foreign[0]!r}" if foreign else "a directory without a graph"
    raise FileExistsError(
        f"{path} exists and is {what}, not an rtsoa graph; refusing to replace it "
        "(overwrite=True, or --force on the command line, replaces it and deletes its contents)"
    )


def content_id(tables):
    """Hex digest of the tables' names, schemas and values: the save id every table records."""
    digest = hashlib.sha256()
    for name, table in tables.items():
        digest.update(f"table {name} {table.num_rows}\n".encode())
        for field, column in zip(table.schema, table.columns, strict=True):
            digest.update(f"column {field.name} {field.type}\n".encode())
            for chunk in column.chunks:
                if pa.types.is_string(chunk.type) or pa.types.is_boolean(chunk.type):
                    digest.update(repr(chunk.to_pylist()).encode())  # small tables only
                else:
                    digest.update(np.ascontiguousarray(chunk.to_numpy(zero_copy_only=False)))
    return digest.hexdigest()[:32]


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


# Reads of one load_graph call while saves keep replacing the directory under it.
_LOAD_ATTEMPTS = 100


def load_graph(path, validate=True):
    """Memory-map a graph saved by `save_graph` and validate it (GraphFormatError if bad).

    Tables written by different saves are never combined: if a save replaced the directory
    while it was read, it is read again; a directory that mixes saves by itself is refused.
    With `validate=False` only the format version, each table's schema and the save ids are
    checked; use it for files you wrote yourself, never for files the executors will index
    unchecked.

    The op names of a model are bound to this rtsoa's op switch (`op_table.bind_op_names`): the
    graph returned runs the ops its file names, whatever op set wrote it; an op this rtsoa does
    not have, or a version 1 / 2 file with op nodes (codes without names), is refused.
    """
    path = Path(path)
    for attempt in range(_LOAD_ATTEMPTS):
        identity = _identity(path)
        try:
            meta, version, tables = _read_tables(path)
            _check_one_save(tables)
            break
        except GraphFormatError:
            # A save swapped the directory mid-read: read the new one (it is complete).
            if attempt + 1 == _LOAD_ATTEMPTS or _identity(path, missing_ok=True) == identity:
                raise

    roles = _column(tables[IO_TABLE], IO_TABLE, ROLE_COLUMN)
    check_ids(roles, *ROLE_CODES.bounds(None), IO_TABLE, ROLE_COLUMN)
    columns = {}
    for field in FIELDS:
        if field.table not in tables:  # a table added after the file's version: empty
            columns[field.name] = () if field.dtype is None else np.empty(0, dtype=field.dtype)
            continue
        value = _column(tables[field.table], field.table, field.column)
        if field.role is not None:
            value = value[roles == field.role]
        elif field.dtype is None:
            value = tuple(value)
        columns[field.name] = value
    graph = ExecuteGraph(**columns, meta=meta)
    refuse_unnamed_ops(graph, version)
    if validate:
        # Errors name graph_io rows as saved; a foreign file may order its roles otherwise.
        io_rows = np.concatenate([np.flatnonzero(roles == field.role) for field in ROLE_FIELDS])
        validate_graph(graph, io_rows=io_rows)
    return _bind_ops(graph)


def _bind_ops(graph):
    """The graph bound to the compiled op switch (models only)."""
    if op_nodes(graph).shape[0] == 0:
        return graph
    return bind_op_names(graph, op_switch())


def _identity(path, missing_ok=False):
    """Which directory is at `path` now: (device, inode, change time); a save changes it."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise GraphFormatError(f"{path} does not exist") from None
    if not os.path.isdir(path):
        if missing_ok:
            return None
        raise GraphFormatError(f"{path} is not a graph directory (expected <name>.rtsoa/)")
    return stat.st_dev, stat.st_ino, stat.st_ctime_ns


def _read_tables(path):
    """(GraphMeta, the file's format version, {table name: schema-checked table}) of the graph
    directory `path`.

    A file of an older readable version holds only the tables of its version; the graph read
    from it is of the current version (GraphMeta.format_version is FORMAT_VERSION), with the
    newer tables empty, so saving it writes the current version.
    """
    # The version first: a file of another version may have other tables and columns.
    metadata = _map_table(path, METADATA_TABLE)
    version = _format_version(metadata)
    if version is not None:
        check_format_version(version, READABLE_FORMAT_VERSIONS)
    check_table_schema(METADATA_TABLE, metadata)
    if metadata.num_rows != 1:
        raise GraphFormatError(f"{metadata.num_rows} rows, expected 1", table=METADATA_TABLE)
    try:
        row = {column: metadata.column(column)[0].as_py() for column in metadata.column_names}
    except ValueError as error:  # e.g. invalid UTF-8 in the name
        raise GraphFormatError(f"unreadable metadata ({error})", table=METADATA_TABLE) from None
    version = row["format_version"]
    names = tables_of_version(version)
    for name, since in TABLES_SINCE.items():
        present = (Path(path) / f"{name}{FILE_SUFFIX}").exists()
        if name not in names and present:
            raise GraphFormatError(
                f"a format version {version} graph has no {name} table (added in version "
                f"{since}): the file's version is wrong or the directory mixes graphs",
                table=name,
            )
        if name in names and not present:
            raise GraphFormatError(
                f"file {name}{FILE_SUFFIX} is missing: a format version {version} graph has a "
                f"{name} table (added in version {since})",
                table=name,
            )
    tables = {METADATA_TABLE: metadata}
    tables.update({name: read_table(path, name) for name in names if name != METADATA_TABLE})
    row["format_version"] = FORMAT_VERSION
    return GraphMeta(**row), version, tables


def save_id(table):
    """The id of the save that wrote `table` (None for files written before save ids)."""
    value = (table.schema.metadata or {}).get(SAVE_ID_KEY.encode())
    return None if value is None else value.decode(errors="replace")


def _check_one_save(tables):
    """GraphFormatError naming the first table whose save id is not the metadata table's."""
    expected = save_id(tables[METADATA_TABLE])
    for name, table in tables.items():
        found = save_id(table)
        if found != expected:
            raise GraphFormatError(
                f"written by another save than the metadata table (save id {found} vs "
                f"{expected}): the directory mixes tables of two graphs",
                table=name,
            )


__all__ = [
    "content_id",
    "graph_tables",
    "is_graph_directory",
    "load_graph",
    "read_table",
    "save_graph",
    "save_id",
]
