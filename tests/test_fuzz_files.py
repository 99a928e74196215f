"""Property-based fuzzing of saved graph files: only GraphFormatError or a correct load.

Each case copies a saved graph, applies one mutation (bit flips, truncation, dropped, swapped,
retyped or renamed columns, out-of-range values, deleted or foreign files) and loads it. Any
exception other than GraphFormatError fails the test; a crash or hang would kill the run.
"""

import shutil

import numpy as np
import pyarrow as pa
import pytest
from graph_files import read, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtsoa import GraphFormatError, load_graph, save_graph
from rtsoa.graph.builder import GraphBuilder
from rtsoa.graph.generators import generate
from rtsoa.graph.schema import TABLES, GraphKind

TABLE_NAMES = sorted(TABLES)
CASES = 2000


def _control_flow_graph():
    """A small graph using every table: subgraphs, loops, constants, graph io, relations."""
    b = GraphBuilder(name="fuzz", stream_count=2, event_count=1)
    body = b.add_subgraph(GraphKind.LOOP_BODY)
    offset, length = b.add_constant(b"\x01\x02\x03\x04")
    enter = b.add_node("Enter", attributes=[3, offset, length, 0.5])
    wait = b.add_node("WaitAnyone", wait_anyone=True)
    step = b.add_node("Step", graph=body, stream=1)
    done = b.add_node("BranchDone", graph=body)
    free = b.add_node("FreeMemory", graph=GraphKind.DEINIT)
    value = b.add_value(producer=enter)
    b.add_input(step, value)
    b.mark_graph_input(value)
    b.mark_graph_output(b.add_value(producer=step))
    for source, target in ((enter, wait), (wait, step), (step, done), (done, wait)):
        b.add_edge(source, target)
    b.add_relation(free, free - 1 if free else free)
    return b.finalize()


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    paths = []
    for index, graph in enumerate([generate("lowered", 120, seed=9), _control_flow_graph()]):
        path = root / f"g{index}.rtsoa"
        save_graph(graph, path)
        paths.append(path)
    return paths


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**9), st.integers(1, 8)),
    st.tuples(st.just("truncate"), st.floats(0.0, 0.999)),
    st.tuples(st.just("drop_column"), st.integers(0, 10**6)),
    st.tuples(st.just("swap_columns"), st.integers(0, 10**6), st.integers(0, 10**6)),
    st.tuples(
        st.just("set_value"),
        st.integers(0, 10**6),
        st.integers(0, 10**9),
        st.integers(-(2**31), 2**31 - 1),
    ),
    st.tuples(
        st.just("small_value"), st.integers(0, 10**6), st.integers(0, 10**9), st.integers(-3, 300)
    ),
    st.tuples(st.just("retype"), st.integers(0, 10**6)),
    st.tuples(st.just("delete")),
    st.tuples(st.just("garbage"), st.binary(min_size=0, max_size=64)),
    st.tuples(st.just("empty_table")),
)


def _mutate(path, table_name, action):
    file = path / f"{table_name}.arrow"
    kind = action[0]
    if kind == "flip":
        data = bytearray(file.read_bytes())
        rng = np.random.default_rng(action[1])
        for _ in range(action[2]):
            position = int(rng.integers(0, len(data)))
            data[position] ^= 1 << int(rng.integers(0, 8))
        file.write_bytes(bytes(data))
    elif kind == "truncate":
        data = file.read_bytes()
        file.write_bytes(data[: int(len(data) * action[1])])
    elif kind == "delete":
        file.unlink()
    elif kind == "garbage":
        file.write_bytes(action[1])
    else:
        table = read(path, table_name)
        names = table.column_names
        if kind == "drop_column":
            table = table.drop([names[action[1] % len(names)]])
        elif kind == "swap_columns":
            i, j = action[1] % len(names), action[2] % len(names)
            renamed = list(names)
            renamed[i], renamed[j] = renamed[j], renamed[i]
            table = table.rename_columns(renamed)
        elif kind == "retype":
            i = action[1] % len(names)
            column = table.column(i)
            new_type = pa.int64() if column.type != pa.int64() else pa.int32()
            try:
                table = table.set_column(i, names[i], column.cast(new_type, safe=False))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                table = table.drop([names[i]])
        elif kind == "empty_table":
            table = table.slice(0, 0)
        elif kind in ("set_value", "small_value") and table.num_rows:
            i = action[1] % len(names)
            column = table.column(i)
            if pa.types.is_integer(column.type):
                values = column.to_numpy().copy()
                info = np.iinfo(values.dtype)
                values[action[2] % len(values)] = int(np.clip(action[3], info.min, info.max))
                table = table.set_column(i, names[i], pa.array(values, type=column.type))
        write(path, table_name, table)


@settings(
    max_examples=CASES,
    deadline=None,  # an example may be the first to reach a jitted validation pass (compile)
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(which=st.integers(0, 1), table=st.sampled_from(TABLE_NAMES), action=mutation)
def test_mutated_files_load_correctly_or_raise_graph_format_error(
    originals, tmp_path_factory, which, table, action
):
    path = tmp_path_factory.mktemp("case") / "g.rtsoa"
    shutil.copytree(originals[which], path)
    _mutate(path, table, action)
    try:
        graph = load_graph(path)
    except GraphFormatError:
        return
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)
    # A load that succeeds must hold a graph every jitted loop can index safely.
    n = graph.num_nodes
    assert graph.succ_offsets.shape[0] == n + 1 and graph.succ_offsets[-1] == graph.num_edges
    if graph.num_edges:
        assert 0 <= graph.succ_targets.min() and graph.succ_targets.max() < n
    if n:
        assert 0 <= graph.node_kernel.min() and graph.node_kernel.max() < len(graph.kernel_names)
    for values in (graph.input_values, graph.output_values):
        if values.shape[0]:
            assert 0 <= values.min() and values.max() < graph.num_values
