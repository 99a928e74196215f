"""The whole on-disk data contract of an ExecuteGraph: tables, columns, types, enums, version.

A saved graph is a directory (conventionally named `*.rtsoa`) holding one Arrow IPC file per
table, `<table>.arrow`, each written as exactly one record batch so that every column can be
memory-mapped as one contiguous numpy view. Any table opens with plain pyarrow or polars:

    pyarrow.ipc.open_file(pyarrow.memory_map("g.rtsoa/nodes.arrow")).read_all()
    polars.read_ipc("g.rtsoa/nodes.arrow")

Ids are dense int32, CSR offsets int64. Every CSR over nodes keeps its offsets in the
`node_offsets` table (n + 1 rows), next to the flat target tables.
"""

import enum

import pyarrow as pa

from rtsoa.errors import GraphFormatError

FORMAT_VERSION = 1
FILE_SUFFIX = ".arrow"


class GraphKind(enum.IntEnum):
    """What an owning graph is. Ids 0, 1, 2 are always Init, Main, DeInit (the roots)."""

    INIT = 0
    MAIN = 1
    DEINIT = 2
    BRANCH = 3  # one branch of an If / Case
    LOOP_COND = 4  # condition subgraph of a While
    LOOP_BODY = 5  # body subgraph of a While


ROOT_GRAPHS = (GraphKind.INIT, GraphKind.MAIN, GraphKind.DEINIT)


class WorkerClass(enum.IntEnum):
    """Which worker of the multi-thread executor runs a node (the reference's classes)."""

    NORMAL = 0
    MEMORY = 1
    LAUNCH = 2


class ValueKind(enum.IntEnum):
    """What a value slot (a "chain" in the reference) holds."""

    TENSOR = 0
    SHAPE = 1
    INT = 2
    MEMORY_BLOCK = 3
    EVENT = 4
    FLOAT = 5


class Placement(enum.IntEnum):
    """Where a value's memory lives. FOLLOWING resolves to HOST on the simulated device."""

    DEVICE_HBM = 0
    DEVICE_P2P = 1
    HOST = 2
    FOLLOWING = 3


class DType(enum.IntEnum):
    """Element types of tensors (codes are stable across format versions)."""

    UNDEFINED = 0
    FLOAT32 = 1
    FLOAT64 = 2
    FLOAT16 = 3
    INT8 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    UINT8 = 8
    BOOL = 9


class IoRole(enum.IntEnum):
    INPUT = 0
    OUTPUT = 1


# One schema per table. Order matters only for writing; reading checks names and types.
TABLES = {
    "metadata": pa.schema(
        [
            ("format_version", pa.int32()),
            ("name", pa.string()),
            ("stream_count", pa.int32()),
            ("event_count", pa.int32()),
            ("notify_count", pa.int32()),
            ("is_dynamic", pa.bool_()),
            ("has_loops", pa.bool_()),
        ]
    ),
    "nodes": pa.schema(
        [
            ("kernel", pa.int32()),  # index into the kernels table
            ("graph", pa.int32()),  # index into the graphs table
            ("priority", pa.int32()),
            ("stream", pa.int32()),
            ("worker", pa.int8()),
            ("compute_node", pa.int32()),  # originating compute node, -1 if none
            ("in_degree", pa.int32()),  # template; wait-anyone nodes are clamped to 1
        ]
    ),
    "node_offsets": pa.schema(
        [
            ("successors", pa.int64()),
            ("inputs", pa.int64()),
            ("outputs", pa.int64()),
            ("attributes", pa.int64()),
            ("relations", pa.int64()),
        ]
    ),
    "edges": pa.schema([("target", pa.int32())]),
    "node_inputs": pa.schema([("value", pa.int32())]),
    "node_outputs": pa.schema([("value", pa.int32())]),
    "values": pa.schema(
        [
            ("kind", pa.int8()),
            ("dtype", pa.int8()),
            ("placement", pa.int8()),
            ("producer", pa.int32()),  # producing node, -1 for graph inputs / constants
        ]
    ),
    # Attribute slots are 8 bytes: read as int64, or as float64 through a view of the same pool.
    "attributes": pa.schema([("value", pa.int64())]),
    "constants": pa.schema([("byte", pa.uint8())]),
    "relations": pa.schema([("launch", pa.int32())]),  # exact Free -> Launch relations
    "kernels": pa.schema([("name", pa.string())]),
    "graphs": pa.schema([("kind", pa.int8()), ("parent", pa.int32()), ("name", pa.string())]),
    "graph_io": pa.schema([("value", pa.int32()), ("role", pa.int8())]),
}

# The CSRs: offsets column in node_offsets -> (target table, target column).
CSR_COLUMNS = {
    "successors": ("edges", "target"),
    "inputs": ("node_inputs", "value"),
    "outputs": ("node_outputs", "value"),
    "attributes": ("attributes", "value"),
    "relations": ("relations", "launch"),
}


def check_table_schema(name, table):
    """Reject missing, extra, mistyped or null-holding columns of one table."""
    expected = TABLES[name]
    got = {field.name: field.type for field in table.schema}
    for field in expected:
        if field.name not in got:
            raise GraphFormatError("missing column", table=name, column=field.name)
        if got[field.name] != field.type:
            raise GraphFormatError(
                f"column has type {got[field.name]}, expected {field.type}",
                table=name,
                column=field.name,
            )
    extra = sorted(set(got) - set(expected.names))
    if extra:
        raise GraphFormatError(f"unexpected column(s) {extra}", table=name, column=extra[0])
    if len(got) != len(expected):
        raise GraphFormatError("duplicate column names", table=name)
    for field in expected:
        column = table.column(field.name)
        if column.null_count:
            first = _first_null(column)
            raise GraphFormatError("null value", table=name, column=field.name, row=first)


def _first_null(column):
    offset = 0
    for chunk in column.chunks:
        if chunk.null_count:
            mask = chunk.is_null().to_numpy(zero_copy_only=False)
            return offset + int(mask.argmax())
        offset += len(chunk)
    return None
