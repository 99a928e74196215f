"""The ops table (format version 3): a saved model names its ops, and loading binds the names
to this rtsoa's compiled op switch.

The defect this fixes: an op's code was its position in the sorted op names, written into the
op nodes' attributes, so a model lowered by an rtsoa with another op set ran other ops. Here an
"other rtsoa" is this one with an extra op registered that sorts before every other (every
op code one higher than the compiled switch's); its models must still compute what
onnxruntime computes. Files are edited by hand (pyarrow) where a test needs a foreign layout.
"""

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from graph_files import read, set_value, write

from rtsoa import GraphBuilder, GraphFormatError, load_graph, save_graph, validate_graph
from rtsoa.graph.op_table import op_rows
from rtsoa.lowering import lower
from rtsoa.ops import OPS, bind_ops, compiled_op_names, op_names
from rtsoa.runtime import load_model
from rtsoa.testing.models import mlp, run_onnxruntime, transformer_block

DATASETS = Path(__file__).resolve().parent.parent / "datasets"
OP_KERNELS = ("OpInferShape", "OpLaunch")
RTOL, ATOL = 1e-4, 1e-4


def where(error):
    return error.value.table, error.value.column, error.value.row


def file_op_slots(path):
    """(op node ids, attribute rows of their op slot, the slots' values) read from the files."""
    kernels = read(path, "kernels").column("name").to_pylist()
    node_kernel = read(path, "nodes").column("kernel").to_numpy()
    offsets = read(path, "node_offsets").column("attributes").to_numpy()
    pool = read(path, "attributes").column("value").to_numpy()
    ids = [kernels.index(name) for name in OP_KERNELS if name in kernels]
    nodes = np.flatnonzero(np.isin(node_kernel, ids))
    return nodes, offsets[nodes], pool[offsets[nodes]]


def check_against_onnxruntime(graph, proto, batches):
    rng = np.random.default_rng(3)
    name = proto.graph.input[0].name
    dims = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    with load_model(graph) as executor:
        for size in batches:
            shape = [size if d == 0 else d for d in dims]
            if len(shape) == 3:  # the transformer: [batch, seq, d_model], seq symbolic too
                shape[1] = size + 2
            x = rng.standard_normal(shape).astype(np.float32)
            got = executor.execute_sync({name: x})
            want = run_onnxruntime(proto, {name: x})
            for output, value in want.items():
                np.testing.assert_allclose(got[output], value, rtol=RTOL, atol=ATOL)


@pytest.fixture(scope="module")
def mlp_saved(tmp_path_factory):
    proto = mlp()  # unfused: four ops to name (fused, MatMulBias and Gemm)
    path = save_graph(lower(proto, fuse=False), tmp_path_factory.mktemp("ops") / "mlp.rtsoa")
    return proto, path


@pytest.fixture
def mlp_copy(mlp_saved, tmp_path):
    target = tmp_path / "copy.rtsoa"
    shutil.copytree(mlp_saved[1], target)
    return mlp_saved[0], target


def shift_codes(monkeypatch):
    """Register an op that sorts before every other (a copy of Relu under another name)."""
    monkeypatch.setitem(OPS, "AAAShifted", dataclasses.replace(OPS["Relu"], name="AAAShifted"))
    assert op_names()[0] == "AAAShifted" and op_names()[1:] == compiled_op_names()


# -- the defect: a model lowered under another op set --------------------------------------------


@pytest.mark.parametrize("make", [mlp, transformer_block], ids=["mlp", "transformer"])
def test_a_model_lowered_where_op_codes_differ_runs_the_ops_it_names(make, tmp_path, monkeypatch):
    proto = make()
    shift_codes(monkeypatch)
    graph = lower(proto)
    nodes, rows = op_rows(graph)
    compiled = compiled_op_names()
    # the writer's codes are its own: each is one above this switch's code of the same op
    assert nodes.shape[0] > 0 and graph.op_names == op_names()
    assert all(compiled[row - 1] == graph.op_names[row] for row in rows.tolist())
    path = save_graph(graph, tmp_path / "lowered-elsewhere.rtsoa")
    monkeypatch.undo()
    assert op_names() == compiled
    loaded = load_graph(path)
    check_against_onnxruntime(loaded, proto, (1, 3))
    # bound: every op node's slot is this switch's code of the op the writer meant
    _, loaded_rows = op_rows(loaded)
    assert [loaded.op_names[r] for r in loaded_rows] == [graph.op_names[r] for r in rows]
    assert [compiled[r] for r in loaded_rows] == [graph.op_names[r] for r in rows]


def test_a_file_loaded_while_the_registry_differs_binds_to_the_compiled_switch(
    mlp_saved, monkeypatch
):
    """The kernels run the compiled switch, so binding follows it, not the Python registry."""
    proto, path = mlp_saved
    shift_codes(monkeypatch)
    check_against_onnxruntime(load_graph(path), proto, (2,))


def test_ops_rows_in_any_order_bind_by_name(mlp_copy):
    """A foreign writer may order the ops table as it likes: reversed here by hand, every op
    node's slot rewritten to match."""
    proto, path = mlp_copy
    ops = read(path, "ops")
    names = ops.column("name").to_pylist()
    assert len(names) >= 3
    attributes = read(path, "attributes")
    pool = attributes.column("value").to_numpy().copy()
    _, slots, values = file_op_slots(path)
    pool[slots] = len(names) - 1 - values
    write(path, "ops", ops.set_column(0, "name", pa.array(names[::-1], type=pa.string())))
    column = pa.array(pool, type=pa.int64())
    write(path, "attributes", attributes.set_column(0, "value", column))
    graph = load_graph(path)
    check_against_onnxruntime(graph, proto, (1, 4))


# -- what is saved, and the round trip -----------------------------------------------------------


def test_lowered_graphs_are_bound_and_files_name_only_the_ops_used(mlp_saved):
    proto, path = mlp_saved
    graph = lower(proto, fuse=False)
    assert graph.op_names == compiled_op_names()  # row = code: the kernels can run it as is
    _, rows = op_rows(graph)
    used = sorted({graph.op_names[r] for r in rows.tolist()})
    assert used == ["Add", "Gemm", "MatMul", "Relu"]
    assert read(path, "ops").column("name").to_pylist() == used
    _, _, values = file_op_slots(path)
    assert sorted(set(values.tolist())) == list(range(len(used)))
    loaded = load_graph(path)
    assert loaded.op_names == graph.op_names
    np.testing.assert_array_equal(loaded.attr_pool, graph.attr_pool)


def test_the_committed_model_names_its_ops():
    path = DATASETS / "mlp.rtsoa"
    assert read(path, "ops").column("name").to_pylist() == ["Gemm", "MatMulBias"]
    assert read(path, "metadata").column("format_version").to_pylist() == [3]


def test_bind_ops_binds_a_graph_built_by_hand():
    b = GraphBuilder(name="by hand")
    relu = b.op_index("Relu")
    add = b.op_index("Add")
    assert (relu, add) == (0, 1)
    for row in (add, relu):
        b.add_node("OpLaunch", attributes=[row, 1, 1, 1, 0])
    graph = b.finalize()
    assert graph.op_names == ("Relu", "Add")
    bound = bind_ops(graph)
    compiled = compiled_op_names()
    assert bound.op_names == compiled
    _, rows = op_rows(bound)
    assert rows.tolist() == [compiled.index("Add"), compiled.index("Relu")]
    assert bind_ops(bound) is bound  # already bound: no copy


# -- refusals ----------------------------------------------------------------------------------


def test_an_op_this_rtsoa_lacks_is_refused_naming_op_and_node(mlp_copy):
    _, path = mlp_copy
    names = read(path, "ops").column("name").to_pylist()
    row = names.index("Relu")
    set_value(path, "ops", "name", row, "NoSuchOp")
    nodes, _, values = file_op_slots(path)
    first = int(nodes[np.flatnonzero(values == row)[0]])
    with pytest.raises(GraphFormatError, match=rf"node {first} runs \w+ of op 'NoSuchOp'") as e:
        load_graph(path)
    assert where(e) == ("ops", "name", row)
    with pytest.raises(GraphFormatError, match="'NoSuchOp'"):
        load_graph(path, validate=False)  # binding needs no validation to refuse it


def test_a_version_2_model_file_is_refused_with_re_lower(mlp_copy):
    """Version 2 files hold op codes without names: which op set wrote them is unknown."""
    _, path = mlp_copy
    (path / "ops.arrow").unlink()
    set_value(path, "metadata", "format_version", 0, 2)
    for validate in (True, False):
        with pytest.raises(GraphFormatError, match="re-lower the model") as error:
            load_graph(path, validate=validate)
        assert where(error) == ("metadata", "format_version", 0)


def test_a_version_2_file_without_op_nodes_loads(tmp_path):
    path = shutil.copytree(DATASETS / "lowered-4k.rtsoa", tmp_path / "v2.rtsoa")
    (path / "ops.arrow").unlink()
    set_value(path, "metadata", "format_version", 0, 2)
    graph = load_graph(path)
    assert graph.op_names == ()
    current = load_graph(DATASETS / "lowered-4k.rtsoa")
    np.testing.assert_array_equal(graph.attr_pool, current.attr_pool)


def test_op_slot_outside_the_ops_table_names_the_attribute_row(mlp_copy):
    _, path = mlp_copy
    names = read(path, "ops").column("name").to_pylist()
    nodes, slots, _ = file_op_slots(path)
    set_value(path, "attributes", "value", int(slots[2]), len(names))
    with pytest.raises(GraphFormatError, match=f"node {int(nodes[2])} runs") as error:
        load_graph(path)
    assert where(error) == ("attributes", "value", int(slots[2]))


def test_in_memory_op_table_rules():
    b = GraphBuilder()
    b.op_index("Relu")
    short = b.add_node("OpInferShape", attributes=[])
    graph = b.finalize(validate=False)
    with pytest.raises(GraphFormatError, match="has 0 attribute") as error:
        validate_graph(graph)
    assert where(error) == ("nodes", "kernel", short)
    b = GraphBuilder()
    b.op_index("Relu")
    b.add_node("OpLaunch", attributes=[0])
    graph = b.finalize()
    with pytest.raises(GraphFormatError, match="op name 'Relu' repeats row 0") as error:
        validate_graph(graph._replace(op_names=("Relu", "Relu")))
    assert where(error) == ("ops", "name", 1)
    with pytest.raises(GraphFormatError, match="empty op name") as error:
        validate_graph(graph._replace(op_names=("",)))
    assert where(error) == ("ops", "name", 0)
    with pytest.raises(ValueError, match="op names repeat"):
        GraphBuilder().set_op_names(["Add", "Add"])
