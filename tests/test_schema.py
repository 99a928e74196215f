"""The one data contract: ExecuteGraph, the saved tables and the validator all follow FIELDS.

Each test's docstring names the mutations of rtsoa/graph (schema.py, io.py, validate.py) it
catches, so a reader can see that every check of the field table can fail.
"""

import re
import shutil

import numpy as np
import pyarrow as pa
import pytest
from graph_files import read, set_value, write

from rtsoa import GraphFormatError, load_graph, save_graph, validate_graph
from rtsoa.graph.builder import GraphBuilder
from rtsoa.graph.generators import generate
from rtsoa.graph.graph import ExecuteGraph, GraphMeta
from rtsoa.graph.io import graph_tables
from rtsoa.graph.schema import (
    CSRS,
    FIELDS,
    FIELDS_BY_NAME,
    IO_TABLE,
    METADATA_SCHEMA,
    ROLE_COLUMN,
    TABLE_FIELDS,
    TABLES,
    Codes,
    Count,
    External,
    GraphKind,
    IoRole,
    Offsets,
    Rows,
    ValueKind,
    WorkerClass,
)

RANGED = [field for field in FIELDS if field.ids is not None and not isinstance(field.ids, Offsets)]


def every_table_graph():
    """A small valid graph with at least two rows in every table and distinct values per field
    (so a field saved or loaded in another field's place shows)."""
    b = GraphBuilder(name="contract", stream_count=2, event_count=1, notify_count=3)
    branch = b.add_subgraph(GraphKind.BRANCH, name="then")
    body = b.add_subgraph(GraphKind.LOOP_BODY, parent=branch, name="body")
    offset, length = b.add_constant(b"\x01\x02\x03\x04\x05")
    init = b.add_node("Init", graph=GraphKind.INIT, compute_node=9)
    a = b.add_node("A", attributes=[offset, length, 0.5], compute_node=4, priority=2)
    c = b.add_node("B", stream=1, worker=WorkerClass.MEMORY, priority=5, attributes=[7])
    d = b.add_node("C", graph=branch, worker=WorkerClass.LAUNCH, priority=6)
    e = b.add_node("D", graph=body, stream=1, compute_node=7, priority=8)
    free = b.add_node("Free", worker=WorkerClass.MEMORY, priority=9)
    inputs = [b.add_value(ValueKind.TENSOR), b.add_value(ValueKind.INT)]
    outputs = [b.add_value(ValueKind.SHAPE, producer=a), b.add_value(ValueKind.EVENT, producer=e)]
    b.add_value(ValueKind.MEMORY_BLOCK, producer=c)
    for value in inputs:
        b.mark_graph_input(value)
    for value in outputs:
        b.mark_graph_output(value)
    b.add_input(a, inputs[0])
    b.add_input(c, inputs[1])
    b.add_input(c, outputs[0])
    b.add_input(e, outputs[0])
    for source, target in ((a, c), (c, d), (a, d), (d, e), (e, free)):
        b.add_edge(source, target)
    b.add_relation(free, e)
    b.add_relation(free, d)
    b.add_relation(init, init + 1)
    # Named tensors: every graph input and output, dims with symbols, sizes and unknowns.
    b.add_tensor_info(inputs[0], "x", ["batch", 3])
    b.add_tensor_info(inputs[1], "count", [])
    b.add_tensor_info(outputs[0], "shape", None)
    b.add_tensor_info(outputs[1], "y", ["seq", None, 5])
    # The ops table (version 3): names no node runs are kept as they are (no op nodes here).
    b.op_index("Relu")
    b.op_index("Add")
    return b.finalize()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    graph = every_table_graph()
    path = tmp_path_factory.mktemp("schema") / "contract.rtsoa"
    save_graph(graph, path)
    return graph, path


@pytest.fixture
def copy(saved, tmp_path):
    target = tmp_path / "copy.rtsoa"
    shutil.copytree(saved[1], target)
    return target


def where(error):
    return error.table, error.column, error.row


def test_the_graph_fills_every_table_with_two_rows_or_more(saved):
    """Guards the other tests: an empty or one-row column would hide row mix-ups."""
    graph, _ = saved
    for field in FIELDS:
        assert len(getattr(graph, field.name)) >= 2, field.name


def test_execute_graph_fields_are_the_field_table_then_meta():
    """Catches: a field added to FIELDS but not to ExecuteGraph, or ExecuteGraph's field list
    written by hand again; GraphMeta drifting from the metadata table's columns."""
    assert ExecuteGraph._fields == tuple(field.name for field in FIELDS) + ("meta",)
    assert GraphMeta._fields == tuple(METADATA_SCHEMA.names)
    assert len(FIELDS_BY_NAME) == len(FIELDS), "field names are unique"
    stored = [(field.table, field.column) for field in FIELDS if field.role is None]
    assert len(set(stored)) == len(stored), "only role fields share a column"


def test_table_schemas_come_from_the_field_table():
    """Catches: a TABLES entry written by hand that misses, adds or retypes a FIELDS column, or
    puts the tables or their columns out of FIELDS order (on-disk order)."""
    expected = {"metadata": list(METADATA_SCHEMA)}
    for field in FIELDS:
        columns = expected.setdefault(field.table, [])
        if field.column not in [column.name for column in columns]:
            columns.append(pa.field(field.column, field.arrow_type))
    expected[IO_TABLE].append(pa.field(ROLE_COLUMN, pa.int8()))
    assert list(TABLES) == list(expected)
    for name, schema in TABLES.items():
        assert list(schema) == expected[name], name


def test_saved_files_hold_exactly_the_field_table_columns(saved):
    """Catches: graph_tables (io.py) writing a column missing from FIELDS or leaving one out,
    or a different Arrow type than the field's."""
    _, path = saved
    for name, schema in TABLES.items():
        table = pa.ipc.open_file(pa.memory_map(str(path / f"{name}.arrow"))).read_all()
        assert table.schema.equals(schema), name


@pytest.mark.parametrize("field", FIELDS, ids=lambda field: field.name)
def test_round_trip_preserves_every_field(saved, field):
    """Catches: save or load (io.py) mapping a field to another column or role, dropping the
    role split, or changing the dtype (e.g. tuple of str read back as a list)."""
    graph, path = saved
    loaded = load_graph(path)
    original = getattr(graph, field.name)
    value = getattr(loaded, field.name)
    if field.dtype is None:
        assert type(value) is tuple and value == original
    else:
        assert value.dtype == field.dtype == original.dtype
        np.testing.assert_array_equal(value, original)
    assert loaded.meta == graph.meta


def test_graph_io_is_saved_inputs_first_then_outputs(saved):
    """Catches: graph_tables writing graph_io in another layout than the one errors name."""
    graph, path = saved
    table = read(path, IO_TABLE)
    assert table.column("value").to_pylist() == [*graph.graph_inputs, *graph.graph_outputs]
    roles = [IoRole.INPUT] * len(graph.graph_inputs) + [IoRole.OUTPUT] * len(graph.graph_outputs)
    assert table.column(ROLE_COLUMN).to_pylist() == roles


def _file_rows(path, field, count):
    """Rows of the saved table holding the field's entries (graph_io: the rows of its role)."""
    if field.role is None:
        return np.arange(count)
    roles = np.asarray(read(path, IO_TABLE).column(ROLE_COLUMN).to_pylist())
    return np.flatnonzero(roles == field.role)


def _bad_values(field, graph):
    """Just outside the field's id range: below it and at its end."""
    ids = field.ids
    if isinstance(ids, Rows):
        high = len(getattr(graph, TABLE_FIELDS[ids.table][0].name))
        return (-2 if ids.or_none else -1), high
    if isinstance(ids, Count):
        return -1, getattr(graph.meta, ids.column)
    if isinstance(ids, Codes):
        return -1, len(ids.enum)
    assert isinstance(ids, External)
    return (-2 if ids.or_none else -1), np.iinfo(np.int32).max


@pytest.mark.parametrize("side", ["below", "above"])
@pytest.mark.parametrize("field", RANGED, ids=lambda field: field.name)
def test_out_of_range_id_in_a_file_names_table_column_and_row(saved, copy, field, side):
    """Every field with an id range rejects a value just outside it, naming the field's table,
    column and the file row. Catches: a range check dropped from validate_graph or a field
    missing from its loop; Rows / Count / Codes / External bounds off by one or ignoring
    `or_none`; an error naming another column (graphs.parent once was reported as `kind`); a
    graph_outputs row reported without the graph_inputs rows before it (saved_row)."""
    graph, _ = saved
    count = len(getattr(graph, field.name))
    below, above = _bad_values(field, graph)
    # Below the range at the second entry, above it at the last (rows other than 0 and n - 1
    # catch rows counted from the wrong end).
    row = int(_file_rows(copy, field, count)[1 if side == "below" else -1])
    set_value(copy, field.table, field.column, row, int(below if side == "below" else above))
    with pytest.raises(GraphFormatError) as info:
        load_graph(copy)
    assert where(info.value) == (field.table, field.column, row)


@pytest.mark.parametrize("field", RANGED, ids=lambda field: field.name)
def test_in_memory_out_of_range_id_names_the_saved_row(field):
    """The same check on a graph that never was a file (validate_graph without io_rows).
    Catches: _check_field_ids mapping rows through io_rows when there are none."""
    graph = every_table_graph()
    array = getattr(graph, field.name).copy()
    array[-1] = _bad_values(field, graph)[1]
    with pytest.raises(GraphFormatError) as info:
        validate_graph(graph._replace(**{field.name: array}))
    row = len(array) - 1
    if field.role is IoRole.OUTPUT:
        row += len(graph.graph_inputs)
    assert where(info.value) == (field.table, field.column, row)


def test_graph_io_rows_are_named_as_the_file_orders_them(copy):
    """A foreign file may interleave inputs and outputs. Catches: load_graph not passing
    io_rows, or validate_graph ignoring them."""
    table = read(copy, IO_TABLE)
    order = [2, 0, 3, 1]  # output, input, output, input
    write(copy, IO_TABLE, table.take(order))
    graph = load_graph(copy)  # the split still yields inputs and outputs in their own order
    assert list(graph.graph_inputs) == table.column("value").to_pylist()[:2]
    set_value(copy, IO_TABLE, "value", 2, 10**6)  # the file's second output
    with pytest.raises(GraphFormatError) as info:
        load_graph(copy)
    assert where(info.value) == (IO_TABLE, "value", 2)


@pytest.mark.parametrize("offsets,targets", CSRS, ids=lambda field: field.name)
def test_offsets_errors_name_the_offsets_column_and_row(saved, copy, offsets, targets):
    """Catches: a CSR missing from CSRS / the offsets loop; the monotone check reporting the
    row after the too large offset (node_offsets row 4 was once reported as row 5); the first-
    and last-offset checks naming another row or comparing with the wrong target column; the
    messages quoting other offsets than the bad ones; a negative first offset accepted
    (mutation testing: offsets[row + 1] mutated to offsets[row - 1] or [row | 1], offsets[0]
    to offsets[1], `offsets[0] != 0` to `> 0` survived)."""
    graph, path = saved
    n = graph.num_nodes
    length = len(getattr(graph, targets.name))
    # row 3, odd: a message quoting offsets[row | 1] or offsets[row] instead of row + 1 shows
    set_value(copy, offsets.table, offsets.column, 3, length + 1)
    following = int(getattr(graph, offsets.name)[4])
    message = rf"offset {length + 1} is above the next row's {following} \(offsets are not mono"
    with pytest.raises(GraphFormatError, match=message) as info:
        load_graph(copy)
    assert where(info.value) == (offsets.table, offsets.column, 3)
    set_value(copy, offsets.table, offsets.column, 3, int(getattr(graph, offsets.name)[3]))
    for first in (1, -1):  # a negative first offset would index before the targets
        set_value(copy, offsets.table, offsets.column, 0, first)
        with pytest.raises(GraphFormatError, match=f"first offset is {first}, expected 0") as info:
            load_graph(copy)
        assert where(info.value) == (offsets.table, offsets.column, 0)
    set_value(copy, offsets.table, offsets.column, 0, 0)
    set_value(copy, offsets.table, offsets.column, n, length + 1)
    with pytest.raises(GraphFormatError, match=targets.where) as info:
        load_graph(copy)
    assert where(info.value) == (offsets.table, offsets.column, n)


@pytest.mark.parametrize("offsets,targets", CSRS, ids=lambda field: field.name)
def test_a_last_offset_short_of_its_targets_is_refused(offsets, targets):
    """Offsets capped one below the targets' length: still monotone, but the last entry of the
    targets column belongs to no node. Caught mutant (mutation testing): the last
    offset check `offsets[n] != length` -> `>`, which only refused a last offset past the end."""
    graph = every_table_graph()
    length = len(getattr(graph, targets.name))
    capped = np.minimum(getattr(graph, offsets.name), length - 1)
    message = f"last offset {length - 1} does not match {targets.where} length {length}"
    with pytest.raises(GraphFormatError, match=re.escape(message)) as info:
        validate_graph(graph._replace(**{offsets.name: capped}))
    assert where(info.value) == (offsets.table, offsets.column, graph.num_nodes)


def test_a_too_large_offset_is_reported_at_its_own_row(tmp_path):
    """The issue's case on a generated graph: node_offsets.successors row 4 set to 10**9."""
    path = tmp_path / "g.rtsoa"
    save_graph(generate("lowered", 200, seed=5), path)
    set_value(path, "node_offsets", "successors", 4, 10**9)
    with pytest.raises(GraphFormatError) as info:
        load_graph(path)
    assert where(info.value) == ("node_offsets", "successors", 4)


@pytest.mark.parametrize("field", FIELDS, ids=lambda field: field.name)
def test_wrong_dtype_names_the_field(field):
    """Catches: a field left out of _check_types, or its dtype taken from anywhere but FIELDS."""
    graph = every_table_graph()
    value = getattr(graph, field.name)
    wrong = list(value) if field.dtype is None else value.astype(np.int16)
    with pytest.raises(GraphFormatError, match="expected a") as info:
        validate_graph(graph._replace(**{field.name: wrong}))
    assert where(info.value) == (field.table, field.column, None)


SHORTENED = [
    field
    for fields in TABLE_FIELDS.values()
    for field in fields[1:]
    if field.role is None or isinstance(field.ids, Offsets)
] + [fields[0] for fields in TABLE_FIELDS.values() if isinstance(fields[0].ids, Offsets)]


@pytest.mark.parametrize("change", ["shorter", "longer"])
@pytest.mark.parametrize("field", SHORTENED, ids=lambda field: field.name)
def test_wrong_length_names_the_field(field, change):
    """A column one row shorter or longer than its table (or than nodes + 1 for offsets).
    Catches: a field left out of _check_lengths, or the error naming the table's first column
    instead; a longer column accepted (mutation testing: `length != len(first)` ->
    `<` survived when only shorter columns were tried)."""
    graph = every_table_graph()
    value = getattr(graph, field.name)
    if change == "shorter":
        value = value[:-1]
    elif field.dtype is None:
        value = value + (value[-1],)
    else:
        value = np.append(value, value[-1])
    with pytest.raises(GraphFormatError) as info:
        validate_graph(graph._replace(**{field.name: value}))
    if isinstance(field.ids, Offsets):
        expected = f"has {len(value)} rows, expected nodes + 1 = {graph.num_nodes + 1}"
    else:
        first = TABLE_FIELDS[field.table][0]
        expected = f"has {len(value)} rows, {first.where} has {len(getattr(graph, first.name))}"
    assert str(info.value).endswith(": " + expected)
    assert where(info.value) == (field.table, field.column, None)


@pytest.mark.parametrize("name", list(TABLES))
def test_duplicate_column_names_are_a_format_error(copy, name):
    """A table with two columns of one name (pyarrow's lookup by name raised KeyError before
    the duplicate check could fire). Catches: check_table_schema looking columns up by name
    before it rejects duplicates."""
    table = read(copy, name)
    first = table.column_names[0]
    write(copy, name, table.append_column(first, table.column(0)))
    with pytest.raises(GraphFormatError, match="duplicate column") as info:
        load_graph(copy)
    assert where(info.value) == (name, first, None)


def test_graphs_table_rules_name_the_broken_column(copy):
    """Catches: the root checks reporting a bad parent as column `kind` (or the reverse); the
    earlier-parent or the subgraph-kind rule dropped from _check_graphs_table."""
    set_value(copy, "graphs", "parent", 1, 0)
    with pytest.raises(GraphFormatError, match="root MAIN") as info:
        load_graph(copy)
    assert where(info.value) == ("graphs", "parent", 1)
    set_value(copy, "graphs", "parent", 1, -1)
    set_value(copy, "graphs", "kind", 1, int(GraphKind.BRANCH))
    with pytest.raises(GraphFormatError, match="root MAIN") as info:
        load_graph(copy)
    assert where(info.value) == ("graphs", "kind", 1)
    set_value(copy, "graphs", "kind", 1, int(GraphKind.MAIN))
    set_value(copy, "graphs", "parent", 4, 4)
    with pytest.raises(GraphFormatError, match="earlier graph") as info:
        load_graph(copy)
    assert where(info.value) == ("graphs", "parent", 4)
    set_value(copy, "graphs", "parent", 4, 3)
    set_value(copy, "graphs", "kind", 4, int(GraphKind.DEINIT))
    with pytest.raises(GraphFormatError, match="only graphs 0-2 may be roots") as info:
        load_graph(copy)
    assert where(info.value) == ("graphs", "kind", 4)


def test_repeated_kernel_name_names_its_row(copy):
    """Catches: the kernels-table check dropped or reporting no row."""
    names = read(copy, "kernels").column("name").to_pylist()
    set_value(copy, "kernels", "name", 3, names[1])
    with pytest.raises(GraphFormatError, match="not unique") as info:
        load_graph(copy)
    assert where(info.value) == ("kernels", "name", 3)


def test_format_version_is_reported_before_the_metadata_schema(copy):
    """A newer file may have other metadata columns; the version is what to report. Catches:
    load_graph checking the metadata schema (or reading other tables) before the version, or
    `validate=False` skipping the version check."""
    metadata = read(copy, "metadata")
    index = metadata.column_names.index("format_version")
    newer = metadata.set_column(index, "format_version", pa.array([4], type=pa.int32()))
    write(copy, "metadata", newer.append_column("future", pa.array([1.0])))
    for validate in (True, False):
        with pytest.raises(GraphFormatError, match="format version 4") as info:
            load_graph(copy, validate=validate)
        assert where(info.value) == ("metadata", "format_version", 0)


def test_validate_graph_checks_the_version_of_an_in_memory_graph():
    """Catches: the version check living only in load_graph."""
    graph = every_table_graph()
    with pytest.raises(GraphFormatError, match="format version 7"):
        validate_graph(graph._replace(meta=graph.meta._replace(format_version=7)))


def test_enum_codes_are_dense_from_zero():
    """Codes(enum).bounds is [0, len(enum)): only right for enums numbered 0 .. len - 1."""
    for field in FIELDS:
        if isinstance(field.ids, Codes):
            assert sorted(int(member) for member in field.ids.enum) == list(
                range(len(field.ids.enum))
            ), field.name


def test_in_memory_tables_match_saved_tables(saved):
    """graph_tables (used by inspect's byte counts) is what save_graph writes."""
    graph, path = saved
    for name, table in graph_tables(graph).items():
        assert read(path, name).equals(table), name


@pytest.mark.parametrize("template", [0, 2, 3, -1])
def test_in_degree_template_must_fit_the_incoming_edges(copy, template):
    """A node with incoming edges must wait for 1 .. (its edge count) of them: 0 would start it
    at once, more would never start it. Catches: the `template == 0 with edges` rule dropped
    from _check_edges (mutation testing: `template == 0` mutated to `template < 0` survived;
    `template == 0` -> `== -1` / `< 0` and `template < 0` -> `< -1` survived while
    the test matched only "in-degree template", because the join check then refused the 0 or
    -1 as a clamped template with its own message; `actual[t] += 1` -> `+= 2`, which doubled
    every edge count, is caught by the template 2 and by the quoted edge count)."""
    graph = load_graph(copy)
    node = int(np.flatnonzero(graph.in_degree == 1)[0])
    edges = int(np.count_nonzero(graph.succ_targets == node))
    set_value(copy, "nodes", "in_degree", node, template)
    with pytest.raises(GraphFormatError) as info:
        load_graph(copy)
    # the edge pass's message, not the join check's (which refuses a clamped template of 0 too)
    assert str(info.value).endswith(
        f": in-degree template {template} does not fit the {edges} incoming edge(s) (must be 0 "
        "for start nodes, else between 1 and the edge count)"
    )
    assert where(info.value) == ("nodes", "in_degree", node)


@pytest.mark.parametrize("row", [0, 2])
def test_a_bad_io_role_names_its_row(copy, row):
    """graph_io.role is checked before the split by role (load_graph's check_ids). Caught
    mutants (mutation testing): check_ids raising only for row 0 (`row >= 0` -> `row == 0`),
    and never for row 0 (`row >= 0` -> `row > 0`)."""
    set_value(copy, IO_TABLE, ROLE_COLUMN, row, 7)
    with pytest.raises(GraphFormatError) as info:
        load_graph(copy)
    assert str(info.value).endswith(": value 7 out of range [0, 2)")
    assert where(info.value) == (IO_TABLE, ROLE_COLUMN, row)
