"""Format versions 2 and 3: named tensors, their dims and symbols (tensors / dims / symbols
tables, version 2) and the ops table (version 3; its rules: tests/test_ops_table.py).

Each validation rule has a graph breaking it and checks the table, column and row the error
names; the builder's tensor info round-trips through save / load; version-1 and version-2
files load (the committed tests/data/chain-1k-v1.rtsoa was saved before version 2) and other
versions, or a version's tables missing or extra, are refused.
"""

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from graph_files import read, set_value, write

from rtsoa import (
    FORMAT_VERSION,
    DType,
    GraphBuilder,
    GraphFormatError,
    is_dynamic,
    load_graph,
    save_graph,
    validate_graph,
)
from rtsoa.cli import main
from rtsoa.graph.schema import FIELDS, TABLES_SINCE, ValueKind

DATA = Path(__file__).resolve().parent / "data"
DATASETS = Path(__file__).resolve().parent.parent / "datasets"


def model_graph(**options):
    """A two-node model: inputs x [batch, 3] and mask [batch, seq], a weight w [3, 4], an
    intermediate h of unknown rank, output y [batch, ?]."""
    b = GraphBuilder(name="model", **options)
    x = b.add_value(dtype=DType.FLOAT32)
    mask = b.add_value(dtype=DType.BOOL)
    w = b.add_value(dtype=DType.FLOAT64)
    first = b.add_node("MatMul", inputs=[x, w])
    h = b.add_value(producer=first)
    second = b.add_node("Relu", inputs=[h, mask])
    y = b.add_value(dtype=DType.INT64, producer=second)
    b.add_edge(first, second)
    b.mark_graph_input(x)
    b.mark_graph_input(mask)
    b.mark_graph_output(y)
    rows = [
        b.add_tensor_info(x, "x", ["batch", 3]),
        b.add_tensor_info(mask, "mask", ("batch", "seq")),
        b.add_tensor_info(w, "w", [3, np.int64(4)]),
        b.add_tensor_info(h, "h", None),
        b.add_tensor_info(y, "y", ["batch", None]),
    ]
    assert rows == [0, 1, 2, 3, 4]
    return b.finalize()


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "model.rtsoa"
    save_graph(model_graph(), path)
    return path


def where(error):
    return error.value.table, error.value.column, error.value.row


# -- builder and accessors ----------------------------------------------------------------------


def test_tensor_info_round_trips_through_save_and_load(saved):
    graph = load_graph(saved)
    assert graph.meta.format_version == FORMAT_VERSION == 3
    assert graph.symbols() == ("batch", "seq")
    assert graph.tensor_info(0) == ("x", ("batch", 3))
    assert graph.tensor_info(1) == ("mask", ("batch", "seq"))
    assert graph.tensor_info(2) == ("w", (3, 4))
    assert graph.tensor_info(3) == ("h", None)
    assert graph.tensor_info(4) == ("y", ("batch", None))
    # The columns as the format describes them (symbols interned: batch is row 0 everywhere).
    assert graph.tensor_rank.tolist() == [2, 2, 2, -1, 2]
    assert graph.tensor_dim_start.tolist() == [0, 2, 4, 6, 6]
    assert graph.dim_size.tolist() == [-1, 3, -1, -1, 3, 4, -1, -1]
    assert graph.dim_symbol.tolist() == [0, -1, 0, 1, -1, -1, 0, -1]
    assert graph.io_description() == {
        "inputs": [
            ("x", 0, DType.FLOAT32, ("batch", 3)),
            ("mask", 1, DType.BOOL, ("batch", "seq")),
        ],
        "outputs": [("y", 4, DType.INT64, ("batch", None))],
    }


def test_unnamed_values_and_synthetic_graphs():
    b = GraphBuilder()
    node = b.add_node("A")
    value = b.add_value(kind=ValueKind.INT, dtype=DType.INT32, producer=node)
    b.mark_graph_output(value)
    graph = b.finalize()
    assert graph.tensor_info(value) is None and graph.symbols() == ()
    assert graph.io_description() == {"inputs": [], "outputs": [("value0", 0, DType.INT32, None)]}
    assert not is_dynamic(graph)
    assert is_dynamic(graph._replace(meta=graph.meta._replace(is_dynamic=True)))


@pytest.mark.parametrize(
    "dims, dynamic",
    [((2, 3), False), ((), False), (("n", 3), True), ((None,), True), (None, True)],
)
def test_is_dynamic_answers_from_the_dims(dims, dynamic):
    """A symbolic or unknown dim, or an unknown rank, of any named tensor makes it dynamic."""
    b = GraphBuilder()
    x, w = b.add_value(), b.add_value()
    b.mark_graph_input(x)
    b.add_tensor_info(x, "x", [4, 4])
    b.add_tensor_info(w, "w", dims)  # not a graph input: any tensor counts
    assert is_dynamic(b.finalize()) is dynamic


@pytest.mark.parametrize(
    "dims, message",
    [
        ([-1], "int >= 0"),
        ([1.5], "int >= 0"),
        ([True], "int >= 0"),
        ([2**63], "int >= 0"),
        ([""], "non-empty str"),
        ([1] * 9, "rank 9 above 8"),
    ],
)
def test_builder_refuses_bad_dims(dims, message):
    with pytest.raises(ValueError, match=message):
        GraphBuilder().add_tensor_info(0, "t", dims)


# -- validation rules: table, column and row -----------------------------------------------------


@pytest.mark.parametrize(
    "table, column, row, value, message",
    [
        ("tensors", "rank", 2, 9, "rank 9 out of range"),
        ("tensors", "rank", 3, -2, "rank -2 out of range"),
        ("tensors", "dim_start", 1, -1, "outside"),
        ("tensors", "dim_start", 4, 7, r"dims rows \[7, 9\)"),
        ("tensors", "dim_start", 2, 2**63 - 1, "outside"),  # start + rank overflows int64
        ("dims", "size", 5, -2, "size -2 below -1"),
        ("dims", "size", 2, 4, "symbolic dim 'batch'"),
        ("tensors", "value", 3, 0, "value 0 repeats row 0"),
        ("tensors", "name", 4, "mask", "tensor name 'mask' repeats row 1"),
        ("tensors", "name", 2, "", "empty tensor name"),
        ("symbols", "name", 1, "batch", "symbol name 'batch' repeats row 0"),
        ("symbols", "name", 0, "", "empty symbol name"),
    ],
)
def test_a_broken_rule_names_table_column_and_row(saved, table, column, row, value, message):
    set_value(saved, table, column, row, value)
    with pytest.raises(GraphFormatError, match=message) as error:
        load_graph(saved)
    assert where(error) == (table, column, row)


def test_a_rank_unknown_tensor_needs_no_dims_rows(saved):
    """dim_start of a rank -1 tensor may be the end of dims (no window)."""
    set_value(saved, "tensors", "dim_start", 3, 8)
    assert load_graph(saved).tensor_info(3) == ("h", None)


@pytest.mark.parametrize("value, io_row", [(0, 0), (1, 1), (4, 2)])
def test_graph_inputs_and_outputs_must_be_named(saved, value, io_row):
    """Once a graph names tensors, every graph input and output has a tensors row; the error
    names the graph_io row (outputs after the inputs)."""
    graph = load_graph(saved)
    row = int(np.flatnonzero(graph.tensor_value == value)[0])
    table = read(saved, "tensors")
    keep = [index for index in range(table.num_rows) if index != row]
    write(saved, "tensors", table.take(keep))
    with pytest.raises(GraphFormatError, match=f"value {value} has no tensors row") as error:
        load_graph(saved)
    assert where(error) == ("graph_io", "value", io_row)


def test_in_memory_graphs_are_checked_too():
    graph = model_graph()
    with pytest.raises(GraphFormatError) as error:
        validate_graph(graph._replace(dim_size=graph.dim_size - 2))
    assert where(error) == ("dims", "size", 0)
    ranks = graph.tensor_rank.copy()
    ranks[1] = 8  # the window [2, 10) passes the end of dims (8 rows)
    with pytest.raises(GraphFormatError) as error:
        validate_graph(graph._replace(tensor_rank=ranks))
    assert where(error) == ("tensors", "dim_start", 1)


# -- versions ------------------------------------------------------------------------------------


def test_a_version_1_graph_loads_with_empty_tensor_tables(tmp_path):
    """tests/data/chain-1k-v1.rtsoa is datasets/chain-1k.rtsoa as saved by format version 1."""
    v1 = DATA / "chain-1k-v1.rtsoa"
    assert read(v1, "metadata").column("format_version").to_pylist() == [1]
    assert not any((v1 / f"{name}.arrow").exists() for name in TABLES_SINCE)
    graph = load_graph(v1)
    assert graph.meta.format_version == FORMAT_VERSION  # read into the current version
    for field in FIELDS:
        if field.table in TABLES_SINCE:
            assert len(getattr(graph, field.name)) == 0, field.name
    current = load_graph(DATASETS / "chain-1k.rtsoa")
    for field in FIELDS:
        np.testing.assert_array_equal(getattr(graph, field.name), getattr(current, field.name))
    assert graph.meta == current.meta
    # Saved again, it is a version-3 graph with the same bytes as the regenerated dataset.
    path = save_graph(graph, tmp_path / "again.rtsoa")
    for file in sorted((DATASETS / "chain-1k.rtsoa").iterdir()):
        assert (path / file.name).read_bytes() == file.read_bytes(), file.name


def test_a_version_2_graph_loads_with_an_empty_ops_table(saved):
    """A version 2 file of a graph without op nodes (this model_graph's MatMul / Relu nodes are
    plain kernels) loads as before; the version 3 ops table reads empty."""
    (saved / "ops.arrow").unlink()
    set_value(saved, "metadata", "format_version", 0, 2)
    graph = load_graph(saved)
    assert graph.op_names == () and graph.meta.format_version == FORMAT_VERSION
    assert graph.tensor_info(0) == ("x", ("batch", 3))


def test_a_version_2_graph_with_an_ops_table_is_refused(saved):
    set_value(saved, "metadata", "format_version", 0, 2)
    with pytest.raises(GraphFormatError, match="version 2 graph has no ops table") as error:
        load_graph(saved)
    assert error.value.table == "ops"


def test_newer_versions_are_refused(saved):
    set_value(saved, "metadata", "format_version", 0, 4)
    with pytest.raises(GraphFormatError, match=r"format version 4 .*reads 1, 2, 3") as error:
        load_graph(saved)
    assert where(error) == ("metadata", "format_version", 0)


def test_an_element_type_this_rtsoa_does_not_know_is_refused(saved):
    """New element types add DType codes without a format version: a reader that does not
    know a code (an older rtsoa, or a file written by hand) refuses the graph, naming the
    values table, its dtype column and the row, before anything reads the value."""
    code = len(DType)
    set_value(saved, "values", "dtype", 1, code)
    message = rf"value {code} out of range \[0, {code}\)"
    with pytest.raises(GraphFormatError, match=message) as error:
        load_graph(saved)
    assert where(error) == ("values", "dtype", 1)


@pytest.mark.parametrize("table", list(TABLES_SINCE))
def test_a_current_graph_missing_a_new_table_is_refused(saved, table):
    (saved / f"{table}.arrow").unlink()
    with pytest.raises(GraphFormatError, match="format version 3 graph has a") as error:
        load_graph(saved)
    assert error.value.table == table


def test_a_version_1_graph_with_a_new_table_is_refused(tmp_path):
    """A directory claiming version 1 that holds a tensors table mixes versions."""
    path = tmp_path / "v1.rtsoa"
    shutil.copytree(DATA / "chain-1k-v1.rtsoa", path)
    empty = pa.table({"name": pa.array([], type=pa.string())})
    write(path, "symbols", empty)
    with pytest.raises(GraphFormatError, match="version 1 graph has no symbols table") as error:
        load_graph(path)
    assert error.value.table == "symbols"


# -- inspect -------------------------------------------------------------------------------------


def test_inspect_shows_inputs_outputs_and_symbols(saved, capsys):
    assert main(["inspect", str(saved)]) == 0
    text = capsys.readouterr().out
    assert "dynamic shapes   True" in text
    lines = [line.split() for line in text.splitlines()]
    assert ["x", "FLOAT32", "[batch,", "3]"] in lines
    assert ["mask", "BOOL", "[batch,", "seq]"] in lines
    assert ["y", "INT64", "[batch,", "?]"] in lines
    assert ["symbols", "batch,", "seq"] in lines
    assert ["w", "FLOAT64", "[3,", "4]"] not in lines  # a weight is no graph input


def test_inspect_of_a_synthetic_graph_has_no_io_section(capsys):
    assert main(["inspect", str(DATASETS / "chain-1k.rtsoa")]) == 0
    text = capsys.readouterr().out
    lines = [line.split() for line in text.splitlines()]
    assert ["inputs:"] not in lines and ["outputs:"] not in lines
    assert not any(line[:1] == ["symbols"] and len(line) != 2 for line in lines)
    assert ["symbols", "0"] in lines  # the table's bytes, not a symbol list


def test_binding_op_nodes_needs_the_op_registrys_switch(monkeypatch):
    """The graph layer binds op names to the switch the op registry provides (it does not
    import the ops); without one, a graph with op nodes is a typed error, not a crash."""
    from rtsoa.graph import op_table
    from rtsoa.ops.registry import compiled_op_names

    assert op_table.op_switch() == compiled_op_names()
    monkeypatch.setattr(op_table, "_switch", [None])
    with pytest.raises(GraphFormatError, match="no op registry is loaded"):
        load_graph(DATASETS / "mlp.rtsoa")
