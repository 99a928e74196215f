"""Property-based fuzzing of saved graph files: only GraphFormatError or a correct load.

Each case copies a saved graph, applies one mutation (bit flips, truncation, garbage, a deleted
file; dropped, swapped, retyped columns, an emptied table, a repeated row; a value set anywhere
in any column, string and metadata columns included, near the boundaries of what the column
refers to or anywhere in int32) and loads it. Any exception other than GraphFormatError fails
the test; a crash or hang would kill the run.

The fuzzer measures itself. A case that leaves the input as it was (same bytes for a raw edit,
same table content for a structured one, e.g. a column swap in a one-column table) is rejected
and not counted, so the CASES cases all changed the input. Refused cases are counted by the
error's table, column and kind, loaded ones by mutation; the figures are printed at the end of
the run (tests/conftest.py). Every load is checked by `check_ranges`, written here from the
format's description (docs/graph-format.md), not from validate.py or schema.FIELDS: a
range check dropped from the validator shows as a loaded graph this checker rejects.
Cases are drawn afresh on every run (a failure prints the blob that reproduces it).
"""

import re
import shutil
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from figures import counted, report
from graph_files import read, write
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rtsoa import GraphFormatError, load_graph, save_graph
from rtsoa.abi.dtypes import DTYPES as DTYPE_TABLE
from rtsoa.graph.builder import GraphBuilder
from rtsoa.graph.generators import generate
from rtsoa.graph.schema import TABLES, GraphKind
from rtsoa.ops import compiled_op_names

CASES = 2000
# Of the changed cases, at least this share must be refused and this share must load: a fuzzer
# whose cases all fail to parse (or all load) exercises the validator's checks too little.
MIN_REFUSED = 0.3
MIN_LOADED = 0.05

# Enum sizes as the format documents them (docs/graph-format.md): worker classes normal /
# memory / launch; value kinds tensor, shape, int, memory block, event, float; dtypes 0 (none)
# and rtsoa.abi.dtypes' codes;
# placements HBM, P2P, host, following; graph kinds Init, Main, DeInit, branch, loop
# condition, loop body.
WORKER_CLASSES = 3
VALUE_KINDS = 6
DTYPES = max(DTYPE_TABLE) + 1  # codes 0 .. the largest (FLOAT8E8M0, 23, when written)
PLACEMENTS = 4
GRAPH_KINDS = 6
INT32_MAX = 2**31 - 1
MAX_RANK = 8  # tensors.rank: 0 .. 8, or -1 (unknown)
OP_KERNELS = ("OpInferShape", "OpLaunch")  # attribute 0: a row of the ops table (version 3)


def _control_flow_graph():
    """A small graph using every table: subgraphs, loops, constants, graph io, relations."""
    b = GraphBuilder(name="fuzz", stream_count=2, event_count=1)
    body = b.add_subgraph(GraphKind.LOOP_BODY)
    offset, length = b.add_constant(b"\x01\x02\x03\x04")
    enter = b.add_node("Enter", attributes=[3, offset, length, 0.5])
    wait = b.add_node("WaitAnyone", wait_anyone=True)
    step = b.add_node("Step", graph=body, stream=1, worker=2, compute_node=5)
    done = b.add_node("BranchDone", graph=body)
    free = b.add_node("FreeMemory", graph=GraphKind.DEINIT, worker=1)
    value = b.add_value(producer=enter)
    b.add_input(step, value)
    b.mark_graph_input(value)
    b.mark_graph_output(b.add_value(producer=step))
    for source, target in ((enter, wait), (wait, step), (step, done), (done, wait)):
        b.add_edge(source, target)
    b.add_relation(free, free - 1 if free else free)
    # Named tensors (format version 2): the graph input and output, a weight of unknown rank.
    b.add_tensor_info(value, "x", ["batch", 4, None])
    b.add_tensor_info(value + 1, "y", ["batch", "seq"])
    b.add_tensor_info(b.add_value(), "w", None)
    return b.finalize()


def _op_graph():
    """A graph with op nodes (format version 3): OpInferShape -> OpLaunch pairs whose
    attribute 0 names a row of the ops table (the nodes are never run, only loaded)."""
    b = GraphBuilder(name="ops")
    previous = None
    for row in (0, 1, 2, 1):
        op = b.op_index(("Relu", "Add", "Sigmoid")[row])
        infer = b.add_node("OpInferShape", attributes=[op, 1, 1, 1, 0])
        launch = b.add_node("OpLaunch", attributes=[op, 1, 1, 1, 0, 7], stream=0)
        b.add_edge(infer, launch)
        if previous is not None:
            b.add_edge(previous, infer)
        previous = launch
    return b.finalize()


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    paths = []
    graphs = [generate("lowered", 120, seed=9, streams=2), _control_flow_graph(), _op_graph()]
    for index, graph in enumerate(graphs):
        path = root / f"g{index}.rtsoa"
        save_graph(graph, path)
        paths.append(path)
    return paths


TABLE_NAMES = sorted(TABLES)
# Every (table, column) of the format, so value edits reach each column equally often.
COLUMNS = [(table, field.name) for table in TABLE_NAMES for field in TABLES[table]]

raw_edit = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**9), st.integers(1, 8)),
    st.tuples(st.just("truncate"), st.floats(0.0, 0.999)),
    st.tuples(st.just("garbage"), st.binary(min_size=0, max_size=64)),
    st.tuples(st.just("delete")),
)
table_edit = st.one_of(
    st.tuples(st.just("drop_column"), st.integers(0, 10**6)),
    st.tuples(st.just("swap_columns"), st.integers(0, 10**6), st.integers(0, 10**6)),
    st.tuples(st.just("retype"), st.integers(0, 10**6)),
    st.tuples(st.just("empty_table")),
    st.tuples(st.just("repeat_row"), st.integers(0, 10**6)),
)
# A new value for one cell: near the current value, near 0 and the small counts a column may
# refer to (row counts of the small graphs, enum sizes), or anywhere in int32.
new_value = st.one_of(
    st.tuples(st.just("delta"), st.integers(-3, 3)),
    st.tuples(st.just("small"), st.integers(-3, 300)),
    st.tuples(st.just("any"), st.integers(-(2**31), INT32_MAX)),
)
value_edit = st.tuples(
    st.just("set_value"), st.sampled_from(COLUMNS), st.integers(0, 10**9), new_value
)


def _mutate(path, table_name, action):
    """Apply `action` to `table_name` of the graph at `path`; returns whether it changed the
    input (bytes for a raw edit, the table's content for a structured one)."""
    file = path / f"{table_name}.arrow"
    before = file.read_bytes()
    kind = action[0]
    if kind == "flip":
        data = bytearray(before)
        rng = np.random.default_rng(action[1])
        for _ in range(action[2]):
            position = int(rng.integers(0, len(data)))
            data[position] ^= 1 << int(rng.integers(0, 8))
        file.write_bytes(bytes(data))
        return bytes(data) != before
    if kind == "truncate":
        file.write_bytes(before[: int(len(before) * action[1])])
        return True
    if kind == "delete":
        file.unlink()
        return True
    if kind == "garbage":
        file.write_bytes(action[1])
        return action[1] != before
    table = read(path, table_name)
    edited = _edit_table(table, action)
    if edited is None or edited.equals(table):
        return False
    write(path, table_name, edited)
    return True


def _edit_table(table, action):
    """The edited table, or None when the edit does not apply (e.g. a cell of an empty one)."""
    kind = action[0]
    names = table.column_names
    if kind == "drop_column":
        return table.drop([names[action[1] % len(names)]])
    if kind == "swap_columns":
        i, j = action[1] % len(names), action[2] % len(names)
        renamed = list(names)
        renamed[i], renamed[j] = renamed[j], renamed[i]
        return table.rename_columns(renamed)
    if kind == "retype":
        i = action[1] % len(names)
        column = table.column(i)
        new_type = pa.int64() if column.type != pa.int64() else pa.int32()
        try:
            return table.set_column(i, names[i], column.cast(new_type, safe=False))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return table.drop([names[i]])
    if kind == "empty_table":
        return table.slice(0, 0)
    if kind == "repeat_row":
        if not table.num_rows:
            return None
        row = action[1] % table.num_rows
        return pa.concat_tables([table, table.slice(row, 1)]).combine_chunks()
    _, (_, column), row, (how, number) = action
    if not table.num_rows:
        return None
    row %= table.num_rows
    index = names.index(column)
    values = table.column(index).to_pylist()
    values[row] = _new_cell(table.column(index).type, values[row], values, how, number)
    return table.set_column(index, column, pa.array(values, type=table.column(index).type))


def _new_cell(arrow_type, old, column, how, number):
    """A new value for one cell of `arrow_type`, from the drawn (how, number)."""
    if pa.types.is_boolean(arrow_type):
        return not old
    if pa.types.is_string(arrow_type):  # another name of the column, or a new one
        return column[number % len(column)] if how == "delta" else f"n{number}"
    value = old + number if how == "delta" else number
    info = np.iinfo(arrow_type.to_pandas_dtype())
    return int(np.clip(value, info.min, info.max))


def _refusal(error):
    """(what was refused: `table.column`, why: the message with numbers and details elided)."""
    message = error.args[0] if error.args else str(error)
    message = message.split(": ", 1)[1] if error.table is not None and ": " in message else message
    message = re.sub(r"\(.*\)", "(...)", re.sub(r"-?\d+", "N", message))[:60]
    return f"{error.table}.{error.column or '*'}", message


# -- the independent post-load checker ----------------------------------------------------------


def _in_range(name, array, low, high):
    array = np.asarray(array)
    if array.shape[0]:
        assert low <= array.min() and array.max() < high, (
            name,
            low,
            high,
            array.min(),
            array.max(),
        )


def _csr(name, offsets, targets, n):
    assert offsets.shape[0] == n + 1, (name, offsets.shape[0], n)
    assert offsets[0] == 0 and offsets[-1] == targets.shape[0], name
    assert (np.diff(offsets) >= 0).all(), name


def check_ranges(graph):
    """Every id column of a loaded graph points where the format says; the CSRs are whole; the
    edges are what the executors assume (no self-loop, duplicate successor or edge between
    Init / Main / DeInit; in-degree templates within the edges; acyclic without loops)."""
    meta = graph.meta
    assert meta.stream_count >= 1 and meta.event_count >= 0 and meta.notify_count >= 0
    n = graph.node_kernel.shape[0]
    kernels = len(graph.kernel_names)
    graphs = graph.graph_kind.shape[0]
    values = graph.value_kind.shape[0]
    for column in ("node_graph", "node_priority", "node_stream", "node_worker"):
        assert getattr(graph, column).shape[0] == n, column
    assert graph.node_compute.shape[0] == n and graph.in_degree.shape[0] == n
    _in_range("nodes.kernel", graph.node_kernel, 0, kernels)
    _in_range("nodes.graph", graph.node_graph, 0, graphs)
    _in_range("nodes.stream", graph.node_stream, 0, meta.stream_count)
    _in_range("nodes.worker", graph.node_worker, 0, WORKER_CLASSES)
    _in_range("nodes.compute_node", graph.node_compute, -1, INT32_MAX)
    _csr("successors", graph.succ_offsets, graph.succ_targets, n)
    _csr("inputs", graph.input_offsets, graph.input_values, n)
    _csr("outputs", graph.output_offsets, graph.output_values, n)
    _csr("attributes", graph.attr_offsets, graph.attr_pool, n)
    _csr("relations", graph.relation_offsets, graph.relation_targets, n)
    _in_range("edges.target", graph.succ_targets, 0, n)
    _in_range("node_inputs.value", graph.input_values, 0, values)
    _in_range("node_outputs.value", graph.output_values, 0, values)
    _in_range("relations.launch", graph.relation_targets, 0, n)
    for column in ("value_dtype", "value_placement", "value_producer"):
        assert getattr(graph, column).shape[0] == values, column
    _in_range("values.kind", graph.value_kind, 0, VALUE_KINDS)
    _in_range("values.dtype", graph.value_dtype, 0, DTYPES)
    _in_range("values.placement", graph.value_placement, 0, PLACEMENTS)
    _in_range("values.producer", graph.value_producer, -1, n)
    _in_range("graph_io inputs", graph.graph_inputs, 0, values)
    _in_range("graph_io outputs", graph.graph_outputs, 0, values)
    assert graphs >= 3 and graph.graph_parent.shape[0] == graphs == len(graph.graph_names)
    assert (
        graph.graph_kind[:3].tolist() == [0, 1, 2] and graph.graph_parent[:3].tolist() == [-1] * 3
    )
    _in_range("graphs.kind", graph.graph_kind, 0, GRAPH_KINDS)
    for subgraph in range(3, graphs):
        assert 0 <= graph.graph_parent[subgraph] < subgraph, ("graphs.parent", subgraph)
        assert graph.graph_kind[subgraph] >= 3, ("graphs.kind", subgraph)
    assert len(set(graph.kernel_names)) == kernels and (kernels > 0 or n == 0)
    _check_edges(graph, n)
    _check_tensors(graph, values)
    _check_ops(graph, n)


def _check_ops(graph, n):
    """The ops table (docs/graph-format.md, version 3): unique non-empty names; each op
    node's attribute 0 a row of it, and after load the row of its op in rtsoa's op switch."""
    names = graph.op_names
    assert len(set(names)) == len(names) and "" not in names, names
    kernels = [k for k, name in enumerate(graph.kernel_names) if name in OP_KERNELS]
    switch = compiled_op_names()
    for node in np.flatnonzero(np.isin(graph.node_kernel, kernels)):
        start, end = graph.attr_offsets[node], graph.attr_offsets[node + 1]
        assert end > start, ("op node without attributes", node)
        row = graph.attr_pool[start]
        assert 0 <= row < len(names), ("attributes.value op row", node, row)
        assert names[row] == switch[row], ("op node not bound to the op switch", node)


def _check_tensors(graph, values):
    """The tensors / dims / symbols tables (docs/graph-format.md, version 2)."""
    tensors = graph.tensor_value.shape[0]
    assert len(graph.tensor_name) == graph.tensor_rank.shape[0] == tensors
    assert graph.tensor_dim_start.shape[0] == tensors
    dims = graph.dim_size.shape[0]
    symbols = len(graph.symbol_names)
    assert graph.dim_symbol.shape[0] == dims
    _in_range("tensors.value", graph.tensor_value, 0, values)
    _in_range("tensors.rank", graph.tensor_rank, -1, MAX_RANK + 1)
    for start, rank in zip(
        graph.tensor_dim_start.tolist(), graph.tensor_rank.tolist(), strict=True
    ):
        assert 0 <= start and start + max(rank, 0) <= dims, ("tensors.dim_start", start, rank)
    assert (graph.dim_size >= -1).all(), "dims.size below -1"
    _in_range("dims.symbol", graph.dim_symbol, -1, symbols)
    assert (graph.dim_size[graph.dim_symbol >= 0] == -1).all(), "symbolic dim with a size"
    assert len(set(graph.tensor_value.tolist())) == tensors, "tensors.value repeated"
    for names in (graph.tensor_name, graph.symbol_names):
        assert len(set(names)) == len(names) and "" not in names, names
    if tensors:
        named = set(graph.tensor_value.tolist())
        io = graph.graph_inputs.tolist() + graph.graph_outputs.tolist()
        assert named.issuperset(io), "unnamed graph input or output"


def _check_edges(graph, n):
    root = np.arange(graph.graph_kind.shape[0])
    for subgraph in range(3, root.shape[0]):
        root[subgraph] = root[graph.graph_parent[subgraph]]
    sources = np.repeat(np.arange(n), np.diff(graph.succ_offsets))
    targets = graph.succ_targets.astype(np.int64)
    assert not (sources == targets).any(), "self-loop"
    assert np.unique(sources * n + targets).shape[0] == targets.shape[0], "duplicate successor"
    node_root = root[graph.node_graph]
    assert (node_root[sources] == node_root[targets]).all(), "edge between root graphs"
    incoming = np.bincount(targets, minlength=n)
    template = graph.in_degree
    assert ((template >= 0) & (template <= incoming)).all(), "in-degree above the edges"
    assert ((template == 0) == (incoming == 0)).all(), "in-degree 0 with edges or > 0 without"
    if not graph.meta.has_loops:  # Kahn's peeling visits every node of an acyclic graph
        degree = incoming.copy()
        ready = list(np.flatnonzero(degree == 0))
        visited = 0
        while ready:
            node = ready.pop()
            visited += 1
            for target in graph.succ_targets[
                graph.succ_offsets[node] : graph.succ_offsets[node + 1]
            ]:
                degree[target] -= 1
                if degree[target] == 0:
                    ready.append(target)
        assert visited == n, "cycle in a graph without loops"


# -- the fuzzer ----------------------------------------------------------------------------------


def test_mutated_files_load_correctly_or_raise_graph_format_error(originals, tmp_path_factory):
    figures = Counter()
    refused_where = Counter()
    refused_why = Counter()
    loaded = Counter()

    @settings(
        max_examples=CASES,
        deadline=None,  # an example may be the first to compile a validation pass; slow is no bug
        print_blob=True,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
        ],
    )
    @given(
        which=st.integers(0, 2),
        table=st.sampled_from(TABLE_NAMES),
        action=st.one_of(raw_edit, table_edit, value_edit, value_edit),
    )
    def case(which, table, action):
        if action[0] == "set_value":
            table = action[1][0]  # a value edit picks its column among all tables'
        path = tmp_path_factory.mktemp("case") / "g.rtsoa"
        shutil.copytree(originals[which], path)
        try:
            if not _mutate(path, table, action):
                figures["unchanged (rejected, not counted)"] += 1
                assume(False)
            figures["changed"] += 1
            try:
                graph = load_graph(path)
            except GraphFormatError as error:
                where, why = _refusal(error)
                refused_where[where] += 1
                refused_why[why] += 1
                figures["refused"] += 1
                return
            check_ranges(graph)
            figures["loaded"] += 1
            loaded[f"{action[0]} {table}"] += 1
            del graph  # unmap before the files go
        finally:
            shutil.rmtree(path.parent, ignore_errors=True)

    case()
    changed = figures["changed"]
    report(
        "test_fuzz_files.py (file fuzzer)",
        [f"  {key}: {value}" for key, value in figures.items()]
        + ["  refused, by error:"]
        + counted(refused_why, limit=12)
        + ["  refused, by table.column:"]
        + counted(refused_where, limit=10)
        + ["  loaded, by mutation and table:"]
        + counted(loaded, limit=8),
    )
    assert changed >= CASES, figures  # hypothesis stops at CASES accepted (changed) cases
    assert figures["refused"] >= MIN_REFUSED * changed, figures
    assert figures["loaded"] >= MIN_LOADED * changed, figures


@pytest.mark.parametrize(
    "field, value",
    [
        ("node_kernel", 99),
        ("node_graph", 99),
        ("node_stream", 2),
        ("node_worker", 3),
        ("node_compute", -2),
        ("succ_targets", -1),
        ("input_values", 99),
        ("output_values", -1),
        ("relation_targets", 999),
        ("value_kind", 6),
        ("value_dtype", DTYPES),  # one past the largest code
        ("value_placement", 4),
        ("value_producer", 999),
        ("graph_kind", 6),
        ("graph_parent", 99),
        ("graph_inputs", 99),
        ("graph_outputs", -1),
        ("in_degree", 50),
        ("tensor_value", 99),
        ("tensor_value", 0),  # repeated, or the graph output unnamed
        ("tensor_rank", 9),
        ("tensor_rank", -2),
        ("tensor_dim_start", -1),
        ("tensor_dim_start", 6),  # w's empty window past the 5 dims rows
        ("dim_size", -2),
        ("dim_size", 5),  # the symbolic dim batch or seq with a size
        ("dim_symbol", 2),
        ("dim_symbol", -2),
    ],
)
def test_the_range_checker_can_fail(field, value):
    """Guards check_ranges against vacuity: one bad entry in any id column makes it fail."""
    graph = generate("lowered", 120, seed=9, streams=2)
    check_ranges(graph)
    if not getattr(graph, field).shape[0]:
        graph = _control_flow_graph()
    array = getattr(graph, field).copy()
    array[-1] = value
    with pytest.raises(AssertionError):
        check_ranges(graph._replace(**{field: array}))


def test_the_ops_checker_can_fail(tmp_path):
    """Guards _check_ops: a repeated name, an op row outside the table and an unbound graph
    (rows of its own table, not of the op switch) each make it fail."""
    graph = _op_graph()  # rows of its own table ("Relu", "Add", "Sigmoid"): not bound
    with pytest.raises(AssertionError, match="not bound"):
        check_ranges(graph)
    bound = load_graph(save_graph(graph, tmp_path / "ops.rtsoa"))
    check_ranges(bound)
    with pytest.raises(AssertionError):
        check_ranges(bound._replace(op_names=bound.op_names[:1] * 2 + bound.op_names[2:]))
    pool = bound.attr_pool.copy()
    pool[bound.attr_offsets[1]] = len(bound.op_names)
    with pytest.raises(AssertionError, match="op row"):
        check_ranges(bound._replace(attr_pool=pool))
