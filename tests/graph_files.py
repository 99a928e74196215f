"""Helpers for tests that mutate saved graph files."""

import pyarrow as pa

from rtsoa.graph.schema import FILE_SUFFIX


def read(path, table):
    """Read into memory (not mapped), so the file can be rewritten safely afterwards."""
    data = (path / f"{table}{FILE_SUFFIX}").read_bytes()
    return pa.ipc.open_file(pa.BufferReader(data)).read_all()


def write(path, table_name, table):
    with pa.OSFile(str(path / f"{table_name}{FILE_SUFFIX}"), "wb") as sink:
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)


def set_value(path, table_name, column, row, value):
    """Rewrite one cell of a saved table, keeping the column type."""
    table = read(path, table_name)
    values = table.column(column).to_pylist()
    values[row] = value
    index = table.column_names.index(column)
    array = pa.array(values, type=table.schema.field(column).type)
    write(path, table_name, table.set_column(index, column, array))
