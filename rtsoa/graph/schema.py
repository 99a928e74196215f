"""The whole data contract of an ExecuteGraph: one table of fields, the enums, the version.

A saved graph is a directory (conventionally named `*.rtsoa`) holding one Arrow IPC file per
table, `<table>.arrow`, each written as exactly one record batch so that every column can be
memory-mapped as one contiguous numpy view. Any table opens with plain pyarrow or polars:

    pyarrow.ipc.open_file(pyarrow.memory_map("g.rtsoa/nodes.arrow")).read_all()
    polars.read_ipc("g.rtsoa/nodes.arrow")

`FIELDS` is the contract: one `Field` per ExecuteGraph field, with its table, column, Arrow
type (numpy dtype) and what its values refer to (`Rows`, `Count`, `Codes`, `External`,
`Offsets`). ExecuteGraph's field list, the per-table Arrow schemas (`TABLES`), save, load and
the validator's type / length / range checks are all derived from it, so a plain new column is
one line here (plus filling it in the builder). Three special cases stay explicit: the
metadata table is `GraphMeta` (`METADATA_SCHEMA`), kernels.name and graphs.name are tuples of
str, and graph_io is split by its `role` column into graph_inputs and graph_outputs.

Format version 2 added the tensors, dims and symbols tables (names and shapes of a model's
tensors, symbolic dimensions); load_graph reads version 1 files with those tables empty.
Format version 3 added the ops table: the names of the compute ops a lowered model runs.
Attribute slot 0 of every OpInferShape / OpLaunch node (`OP_KERNELS`) is a row of it, as
nodes.kernel is a row of the kernels table, so a saved model names its ops instead of holding
positions in the op set of the rtsoa that wrote it (`rtsoa/graph/op_table.py` binds the names
to the compiled op switch at load). Files of versions 1 and 2 load with the ops table empty,
unless they hold op nodes: their op codes cannot be checked, so they are refused.

Ids are dense int32, CSR offsets int64. Every CSR over nodes keeps its offsets in the
`node_offsets` table (n + 1 rows), next to the flat target tables.
"""

import dataclasses
import enum
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from rtsoa.abi.dtypes import DType
from rtsoa.abi.operands import MAX_RANK, RANK_UNKNOWN  # noqa: F401 - the tensors table's rank range
from rtsoa.errors import GraphFormatError

FORMAT_VERSION = 3
# Tables added by a format version: a file of an older version has none of them (load reads
# them as empty). Version 2 added the named tensors of models, their dims and their symbols;
# version 3 the names of the ops a model runs.
TABLES_SINCE = {"tensors": 2, "dims": 2, "symbols": 2, "ops": 3}
# Versions load_graph reads; an in-memory graph (and so validate_graph) is always FORMAT_VERSION.
READABLE_FORMAT_VERSIONS = (1, 2, 3)
# Kernels whose attribute slot OP_SLOT names the op they run: a row of the ops table.
OP_KERNELS = ("OpInferShape", "OpLaunch")
OP_SLOT = 0
MAX_STREAMS = 63  # streams a graph may use: the device keeps them as bits of an int64 mask
SIZE_UNKNOWN = -1  # dims.size of a symbolic or unknown dimension
FILE_SUFFIX = ".arrow"
# Key of every table's Arrow schema metadata holding its save's id (a digest of the graph's
# content): tables with different ids come from different graphs, so a mix is refused at load.
# Optional (files written before it have none); plain pyarrow readers ignore it.
SAVE_ID_KEY = "rtsoa.save_id"


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


class IoRole(enum.IntEnum):
    """Role of a graph_io row: the value is a graph input or a graph output."""

    INPUT = 0
    OUTPUT = 1


# -- what a column's values refer to ------------------------------------------------------------
class Rows(NamedTuple):
    """Row ids of another table: [0, rows of `table`), and -1 (none) too when `or_none`."""

    table: str
    or_none: bool = False

    def bounds(self, graph):
        """The valid [low, high) of these ids in `graph`."""
        return (-1 if self.or_none else 0), table_rows(graph, self.table)

    def __str__(self):
        return f"rows of {self.table}" + (" or -1" if self.or_none else "")


class Count(NamedTuple):
    """Ids below a count of the metadata table: [0, metadata.<column>)."""

    column: str

    def bounds(self, graph):
        """The valid [low, high) of these ids in `graph`."""
        return 0, int(getattr(graph.meta, self.column))

    def __str__(self):
        return f"[0, {METADATA_TABLE}.{self.column})"


class Codes(NamedTuple):
    """Codes of an IntEnum whose members are 0 .. len - 1: [0, len(enum))."""

    enum: type

    def bounds(self, graph):
        """The valid [low, high) of these codes (the same for every graph)."""
        return 0, len(self.enum)

    def __str__(self):
        return f"{self.enum.__name__} codes"


class External(NamedTuple):
    """Ids of things outside the graph (e.g. the source model's compute nodes): any int32 id,
    and -1 (none) too when `or_none`."""

    or_none: bool = True

    def bounds(self, graph):
        """The valid [low, high) of these ids."""
        return (-1 if self.or_none else 0), int(np.iinfo(np.int32).max)

    def __str__(self):
        return "ids outside the graph" + (" or -1" if self.or_none else "")


class Offsets(NamedTuple):
    """CSR offsets over nodes (rows of nodes + 1): start 0, never decrease, and end at the
    length of the flat column of field `targets`."""

    targets: str

    def __str__(self):
        return f"CSR offsets into {FIELDS_BY_NAME[self.targets].where}"


@dataclasses.dataclass(frozen=True)
class Field:
    """One ExecuteGraph field and the table column that stores it."""

    name: str  # the ExecuteGraph field
    table: str
    column: str
    arrow_type: pa.DataType
    ids: object = None  # what the values refer to (Rows / Count / Codes / External / Offsets)
    role: IoRole | None = None  # stored as the graph_io rows of this role
    doc: str = ""
    # Derived (set in __post_init__; load and validation read them for every field).
    dtype: np.dtype | None = dataclasses.field(init=False, repr=False, compare=False)
    where: str = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        # The in-memory numpy dtype, or None for a string column (held as a tuple of str).
        dtype = None
        if not pa.types.is_string(self.arrow_type):
            dtype = np.dtype(self.arrow_type.to_pandas_dtype())
        object.__setattr__(self, "dtype", dtype)
        # `table.column`, as error messages name it.
        object.__setattr__(self, "where", f"{self.table}.{self.column}")


# The contract. Tables appear in their on-disk order and columns in their file order (save
# writes them so; the committed datasets pin the bytes). ExecuteGraph's fields follow this order.
FIELDS = (
    Field("node_kernel", "nodes", "kernel", pa.int32(), Rows("kernels")),
    Field("node_graph", "nodes", "graph", pa.int32(), Rows("graphs"), doc="the owning graph"),
    Field("node_priority", "nodes", "priority", pa.int32(), doc="smaller runs first"),
    Field("node_stream", "nodes", "stream", pa.int32(), Count("stream_count")),
    Field("node_worker", "nodes", "worker", pa.int8(), Codes(WorkerClass)),
    Field(
        "node_compute",
        "nodes",
        "compute_node",
        pa.int32(),
        External(or_none=True),
        doc="the compute node the node was lowered from",
    ),
    Field(
        "in_degree",
        "nodes",
        "in_degree",
        pa.int32(),
        doc="in-degree template, wait-anyone nodes clamped to 1 (checked against the edges)",
    ),
    Field("succ_offsets", "node_offsets", "successors", pa.int64(), Offsets("succ_targets")),
    Field("input_offsets", "node_offsets", "inputs", pa.int64(), Offsets("input_values")),
    Field("output_offsets", "node_offsets", "outputs", pa.int64(), Offsets("output_values")),
    Field("attr_offsets", "node_offsets", "attributes", pa.int64(), Offsets("attr_pool")),
    Field("relation_offsets", "node_offsets", "relations", pa.int64(), Offsets("relation_targets")),
    Field(
        "succ_targets",
        "edges",
        "target",
        pa.int32(),
        Rows("nodes"),
        doc="successors; data and control edges merged and deduplicated",
    ),
    Field("input_values", "node_inputs", "value", pa.int32(), Rows("values"), doc="in arg order"),
    Field("output_values", "node_outputs", "value", pa.int32(), Rows("values")),
    Field("value_kind", "values", "kind", pa.int8(), Codes(ValueKind)),
    Field("value_dtype", "values", "dtype", pa.int8(), Codes(DType)),
    Field("value_placement", "values", "placement", pa.int8(), Codes(Placement)),
    Field(
        "value_producer",
        "values",
        "producer",
        pa.int32(),
        Rows("nodes", or_none=True),
        doc="-1 for graph inputs and constants",
    ),
    Field(
        "attr_pool",
        "attributes",
        "value",
        pa.int64(),
        doc="8-byte slots; float attributes are the same bits viewed as float64",
    ),
    Field(
        "constants",
        "constants",
        "byte",
        pa.uint8(),
        doc="the constant blob; a constant is an (offset, length) pair of attributes",
    ),
    Field(
        "relation_targets",
        "relations",
        "launch",
        pa.int32(),
        Rows("nodes"),
        doc="exact Free -> Launch relations",
    ),
    Field("kernel_names", "kernels", "name", pa.string(), doc="bound to the registry at load"),
    Field("graph_kind", "graphs", "kind", pa.int8(), Codes(GraphKind)),
    Field(
        "graph_parent",
        "graphs",
        "parent",
        pa.int32(),
        Rows("graphs", or_none=True),
        doc="-1 for the roots Init / Main / DeInit, else an earlier graph",
    ),
    Field("graph_names", "graphs", "name", pa.string()),
    Field("graph_inputs", "graph_io", "value", pa.int32(), Rows("values"), role=IoRole.INPUT),
    Field("graph_outputs", "graph_io", "value", pa.int32(), Rows("values"), role=IoRole.OUTPUT),
    # Since version 2: named tensors (model inputs, outputs, weights, intermediates) with their
    # shapes. Tensor t's dims are dims rows [dim_start, dim_start + rank); rank -1 has none.
    Field(
        "tensor_value",
        "tensors",
        "value",
        pa.int32(),
        Rows("values"),
        doc="one row per named value (synthetic graphs have none)",
    ),
    Field("tensor_name", "tensors", "name", pa.string(), doc="unique, non-empty"),
    Field("tensor_rank", "tensors", "rank", pa.int8(), doc="0 .. MAX_RANK (8), or -1: unknown"),
    Field("tensor_dim_start", "tensors", "dim_start", pa.int64(), doc="first row in dims"),
    Field("dim_size", "dims", "size", pa.int64(), doc=">= 0 static, -1 symbolic or unknown"),
    Field(
        "dim_symbol",
        "dims",
        "symbol",
        pa.int32(),
        Rows("symbols", or_none=True),
        doc="the symbol of a symbolic dim (its size is -1), -1 for none",
    ),
    Field("symbol_names", "symbols", "name", pa.string(), doc='e.g. "batch", "seq"; unique'),
    # Since version 3: the ops of a lowered model (attribute slot 0 of its op nodes is a row).
    Field(
        "op_names",
        "ops",
        "name",
        pa.string(),
        doc="ONNX op types (unique); attribute 0 of an OpInferShape / OpLaunch node is a row",
    ),
)

FIELDS_BY_NAME = {field.name: field for field in FIELDS}


def _fields_by_table():
    tables = {}
    for field in FIELDS:
        tables.setdefault(field.table, []).append(field)
    return {table: tuple(fields) for table, fields in tables.items()}


# table -> its fields, in FIELDS order; a table's row count is its first field's length.
TABLE_FIELDS = _fields_by_table()
# The CSRs over nodes: (offsets field, targets field).
CSRS = tuple(
    (field, FIELDS_BY_NAME[field.ids.targets]) for field in FIELDS if isinstance(field.ids, Offsets)
)
NODES_TABLE = "nodes"  # the table every CSR in node_offsets is over

# graph_io: one table for the graph inputs and outputs, told apart by a role column (IoRole).
# save_graph writes the rows of ROLE_FIELDS one field after the other.
ROLE_FIELDS = tuple(field for field in FIELDS if field.role is not None)
IO_TABLE = ROLE_FIELDS[0].table
ROLE_COLUMN = "role"
ROLE_CODES = Codes(IoRole)

# The metadata table: one row, read into GraphMeta (rtsoa.graph.graph), ExecuteGraph's `meta`.
METADATA_TABLE = "metadata"
METADATA_SCHEMA = pa.schema(
    [
        ("format_version", pa.int32()),
        ("name", pa.string()),
        ("stream_count", pa.int32()),
        ("event_count", pa.int32()),
        ("notify_count", pa.int32()),
        ("is_dynamic", pa.bool_()),
        ("has_loops", pa.bool_()),
    ]
)


def _table_schemas():
    """One Arrow schema per table, from FIELDS (metadata first, as written on disk)."""
    schemas = {METADATA_TABLE: METADATA_SCHEMA}
    for table, fields in TABLE_FIELDS.items():
        columns = []
        for field in fields:
            if field.column not in [column.name for column in columns]:
                columns.append(pa.field(field.column, field.arrow_type))
        if any(field.role is not None for field in fields):
            columns.append(pa.field(ROLE_COLUMN, pa.int8()))
        schemas[table] = pa.schema(columns)
    return schemas


# table name -> Arrow schema. Column order matters only for writing; reading checks names/types.
TABLES = _table_schemas()


def table_rows(graph, table):
    """Rows of `table` in an ExecuteGraph: the length of the table's first field."""
    return len(getattr(graph, TABLE_FIELDS[table][0].name))


def saved_row(graph, field, row):
    """Row of `table` that holds entry `row` of `field`, as save_graph lays the table out."""
    if field.role is None:
        return row
    for earlier in ROLE_FIELDS[: ROLE_FIELDS.index(field)]:
        row += len(getattr(graph, earlier.name))
    return row


def tables_of_version(version):
    """Names of the tables a file of format `version` holds (metadata first, on-disk order)."""
    return [name for name in TABLES if TABLES_SINCE.get(name, 1) <= version]


def check_format_version(version, readable=(FORMAT_VERSION,)):
    """Raise GraphFormatError unless `version` is one of `readable` (load_graph passes
    READABLE_FORMAT_VERSIONS; an in-memory graph must be FORMAT_VERSION)."""
    if version not in readable:
        versions = ", ".join(str(v) for v in readable)
        raise GraphFormatError(
            f"format version {version} is not supported (this rtsoa reads {versions})",
            table=METADATA_TABLE,
            column="format_version",
            row=0,
        )


def check_table_schema(name, table):
    """Reject duplicate, missing, extra, mistyped or null-holding columns of one table."""
    expected = TABLES[name]
    names = table.schema.names
    seen = set()
    for column in names:
        # Before any lookup by name: pyarrow raises KeyError for a name that occurs twice.
        if column in seen:
            raise GraphFormatError("duplicate column name", table=name, column=column)
        seen.add(column)
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
