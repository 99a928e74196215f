"""save_graph / load_graph: round trips, zero-copy views, plain-pyarrow/polars access, errors."""

import shutil

import numpy as np
import pyarrow as pa
import pytest
from graph_files import read, set_value, write

from rtsoa import GraphFormatError, load_graph, save_graph
from rtsoa.graph.generators import generate
from rtsoa.graph.schema import TABLES


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    graph = generate("lowered", 200, seed=5)
    path = tmp_path_factory.mktemp("io") / "lowered.rtsoa"
    save_graph(graph, path)
    return graph, path


@pytest.fixture
def copy(saved, tmp_path):
    _, path = saved
    target = tmp_path / "copy.rtsoa"
    shutil.copytree(path, target)
    return target


def test_round_trip_is_exact(saved):
    graph, path = saved
    loaded = load_graph(path)
    for name, original in graph._asdict().items():
        value = getattr(loaded, name)
        if isinstance(original, np.ndarray):
            np.testing.assert_array_equal(value, original, err_msg=name)
            assert value.dtype == original.dtype, name
        else:
            assert value == original, name


def test_loaded_arrays_are_views_of_the_mapped_file(saved):
    _, path = saved
    loaded = load_graph(path)
    for name in ("succ_targets", "succ_offsets", "node_kernel", "attr_pool", "input_values"):
        array = getattr(loaded, name)
        assert not array.flags.owndata, name
        assert not array.flags.writeable, name
    # The view's memory lies inside the memory-mapped file's buffer.
    with pa.memory_map(str(path / "edges.arrow")) as source:
        size = source.size()
    table = pa.ipc.open_file(pa.memory_map(str(path / "edges.arrow"))).read_all()
    buffer = table.column("target").chunk(0).buffers()[1]
    assert buffer.size <= size
    # The zero-copy conversion path is the one load_graph uses: it refuses to copy.
    view = table.column("target").chunk(0).to_numpy(zero_copy_only=True)
    assert view.__array_interface__["data"][0] == buffer.address


def test_every_table_opens_with_plain_pyarrow_and_polars(saved):
    polars = pytest.importorskip("polars")
    graph, path = saved
    for name, schema in TABLES.items():
        table = pa.ipc.open_file(pa.memory_map(str(path / f"{name}.arrow"))).read_all()
        assert table.schema.names == schema.names
        frame = polars.read_ipc(path / f"{name}.arrow")
        assert frame.columns == schema.names
    nodes = polars.read_ipc(path / "nodes.arrow")
    assert nodes.height == graph.num_nodes


def test_save_replaces_an_existing_graph(tmp_path):
    path = tmp_path / "g.rtsoa"
    save_graph(generate("chain", 10), path)
    save_graph(generate("chain", 20), path)
    assert load_graph(path).num_nodes == 20
    assert [p.name for p in tmp_path.iterdir()] == ["g.rtsoa"]


def test_missing_path_and_plain_file(tmp_path):
    with pytest.raises(GraphFormatError, match="does not exist"):
        load_graph(tmp_path / "nope.rtsoa")
    plain = tmp_path / "file.rtsoa"
    plain.write_bytes(b"not a graph")
    with pytest.raises(GraphFormatError, match="not a graph directory"):
        load_graph(plain)


def test_unknown_format_version(copy):
    set_value(copy, "metadata", "format_version", 0, 99)
    with pytest.raises(GraphFormatError, match="format version 99") as info:
        load_graph(copy)
    assert (info.value.table, info.value.column, info.value.row) == (
        "metadata",
        "format_version",
        0,
    )


def test_missing_extra_and_mistyped_columns(copy):
    nodes = read(copy, "nodes")
    write(copy, "nodes", nodes.drop(["priority"]))
    with pytest.raises(GraphFormatError, match="missing column") as info:
        load_graph(copy)
    assert info.value.column == "priority"
    write(copy, "nodes", nodes.append_column("extra", pa.array(np.zeros(nodes.num_rows))))
    with pytest.raises(GraphFormatError, match="unexpected column"):
        load_graph(copy)
    write(copy, "nodes", nodes.set_column(0, "kernel", nodes.column("kernel").cast(pa.int64())))
    with pytest.raises(GraphFormatError, match="type int64, expected int32"):
        load_graph(copy)


def test_nulls_are_rejected_with_their_row(copy):
    edges = read(copy, "edges")
    values = edges.column("target").to_pylist()
    values[7] = None
    write(copy, "edges", pa.table({"target": pa.array(values, type=pa.int32())}))
    with pytest.raises(GraphFormatError, match="null") as info:
        load_graph(copy)
    assert (info.value.table, info.value.column, info.value.row) == ("edges", "target", 7)


@pytest.mark.parametrize(
    "table, column, row, value, message",
    [
        ("edges", "target", 3, 10**6, "out of range"),
        ("edges", "target", 3, -1, "out of range"),
        ("nodes", "kernel", 5, 42, "out of range"),
        ("nodes", "graph", 5, 9, "out of range"),
        ("nodes", "stream", 5, 3, "out of range"),
        ("nodes", "worker", 5, 7, "out of range"),
        ("nodes", "in_degree", 5, 40, "in-degree template"),
        ("node_inputs", "value", 0, 10**6, "out of range"),
        ("values", "producer", 2, 10**6, "out of range"),
        ("relations", "launch", 0, -3, "out of range"),
        ("node_offsets", "successors", 4, 10**9, "not monotone|does not match"),
        ("node_offsets", "successors", 0, 1, "first offset"),
        ("graphs", "parent", 1, 0, "root MAIN"),
    ],
)
def test_bad_values_name_table_column_and_row(copy, table, column, row, value, message):
    """The error names exactly the edited cell. Catches: an error naming no column or another
    one (a bad graphs.parent was once reported as column `kind`), or another row (a too large
    node_offsets row 4 was once reported as row 5). test_schema.py checks every field so."""
    set_value(copy, table, column, row, value)
    with pytest.raises(GraphFormatError, match=message) as info:
        load_graph(copy)
    assert (info.value.table, info.value.column, info.value.row) == (table, column, row)


def test_truncated_and_garbage_files(copy):
    file = copy / "edges.arrow"
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])
    with pytest.raises(GraphFormatError, match="not a readable Arrow IPC file") as info:
        load_graph(copy)
    assert info.value.table == "edges"
    file.write_bytes(b"\x00garbage" * 20)
    with pytest.raises(GraphFormatError, match="not a readable Arrow IPC file"):
        load_graph(copy)
    file.unlink()
    with pytest.raises(GraphFormatError, match="missing"):
        load_graph(copy)


def test_multi_chunk_column_is_rejected(copy):
    edges = read(copy, "edges")
    chunked = pa.concat_tables([edges.slice(0, 10), edges.slice(10)])
    write(copy, "edges", chunked)
    with pytest.raises(GraphFormatError, match="chunks"):
        load_graph(copy)


def test_invalid_utf8_in_a_string_column_is_a_format_error(copy):
    # Found by the file fuzzer: a bit flip in the metadata name made pyarrow raise
    # UnicodeDecodeError out of load_graph.
    metadata = read(copy, "metadata")
    offsets = pa.py_buffer(np.array([0, 2], dtype=np.int32).tobytes())
    bad_name = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(b"\xff\xfe")])
    index = metadata.column_names.index("name")
    write(copy, "metadata", metadata.set_column(index, "name", bad_name))
    with pytest.raises(GraphFormatError) as info:
        load_graph(copy)
    assert info.value.table == "metadata"


def test_a_column_name_that_is_not_utf8_is_a_format_error(copy):
    """Found by the file fuzzer: one bit flip in a column name (constants.byte) made
    load_graph raise UnicodeDecodeError from the schema check instead of GraphFormatError."""
    file = copy / "constants.arrow"
    data = file.read_bytes()
    assert data.count(b"byte") >= 1
    file.write_bytes(data.replace(b"byte", b"\xf9yte"))
    with pytest.raises(GraphFormatError, match="not a readable Arrow IPC file") as info:
        load_graph(copy)
    assert info.value.table == "constants"
