"""Stress: every executor on every generator kind at 100k nodes (default suite) and at
1,000,000 nodes / 10,000,000 edges (`python -m pytest -m large`).

Checksums are checked against `expected_checksum`, a vectorized numpy computation that does not
use any executor. Memory is reported (graph, run state, device tables, and the process's peak
RSS) and checked: the run state against each executor's bytes per node and value (measured,
not a generous constant), the device's tables and arenas against its configuration.
"""

import resource
import sys
from typing import NamedTuple

import numpy as np
import pytest
from numpy.lib.array_utils import byte_bounds

from rtsoa.device import device_for_graph
from rtsoa.device.layout import PCFG_ARENA_SIZE
from rtsoa.executors import prepare_executor
from rtsoa.graph.generators import generate
from rtsoa.graph.schema import ValueKind
from rtsoa.kernels.checksum import expected_checksum

EXECUTORS = ("sequential", "topological", "priority", "auto")
KINDS = {
    "chain": {},
    "random": {"edges_per_node": 10, "window": 1000},
    "layered": {"width": 100, "fan_in": 4},
    "lowered": {"fan_in": 2, "window": 64},
}


# Bytes of run state per node each executor may hold besides the graph, the value slots and
# the device: the bound node-dispatch ids, the root's node ids and starts (4 + 4 + 4 B), then
# the sequential order (4 B), the topological in-degrees and ring queue (4 + 4 B) or the
# priority in-degrees, keys and heap (4 + 8 + 8 B). Value slots are 8 B per value, and the
# ids of the memory-block values (released after a failed run) 8 B per such value.
RUN_STATE_PER_NODE = {"sequential": 16, "topological": 20, "priority": 32}
RUN_STATE_PER_VALUE = 8
RUN_STATE_PER_MEMORY_VALUE = 8
RUN_STATE_SLACK = 128 << 10  # registry tables, worker state (measured: 74 KiB)


def _arrays(value):
    """Every numpy array in `value`, descending into (named) tuples such as the runtime."""
    if isinstance(value, np.ndarray):
        yield value
    elif isinstance(value, tuple):
        for item in value:
            yield from _arrays(item)


def _distinct_bytes(arrays):
    """Bytes of the distinct buffers under `arrays` (views of one buffer counted once)."""
    extents = {}
    for array in arrays:
        base = array
        while isinstance(base.base, np.ndarray):
            base = base.base
        low, high = byte_bounds(base)
        extents[low] = max(extents.get(low, 0), high - low)
    return sum(extents.values())


class StateBytes(NamedTuple):
    graph: int  # the ExecuteGraph's arrays
    run: int  # what the executor adds: runtime tuple, loop arguments, its own arrays
    device_tables: int  # the simulated device's allocator / stream / trace tables
    arenas: int  # the simulated device memory (zeroed lazily by the OS; not host state)

    @property
    def host(self):
        return self.graph + self.run + self.device_tables


def state_bytes(executor, graph):
    """Bytes an executor holds, split into graph, run state, device tables and arenas; every
    array reachable from the runtime tuple counts, the device's state included."""
    device = executor.device.state
    arenas = [device.arena_hbm, device.arena_p2p, device.arena_host]
    arena_ids = {id(array) for array in arenas}

    def reachable(value):
        return [a for a in _arrays(tuple(value)) if id(a) not in arena_ids]

    tables = reachable(device)
    graph_arrays = reachable(graph)
    everything = graph_arrays + tables + reachable(executor.runtime)
    everything += reachable(executor._arguments) + reachable(vars(executor).values())
    graph_bytes = _distinct_bytes(graph_arrays)
    table_bytes = _distinct_bytes(tables)
    run = _distinct_bytes(everything) - graph_bytes - table_bytes
    return StateBytes(graph_bytes, run, table_bytes, _distinct_bytes(arenas))


def check_state_bytes(executor, graph, name):
    """The run state is linear in the nodes with the executor's constant, and the device's
    tables and arenas are those it was created with (no growth with the graph or the runs)."""
    used = state_bytes(executor, graph)
    n = graph.num_nodes
    limit = RUN_STATE_PER_NODE[executor.name] * n + RUN_STATE_PER_VALUE * graph.num_values
    memory_values = int((graph.value_kind == ValueKind.MEMORY_BLOCK).sum())
    limit += RUN_STATE_PER_MEMORY_VALUE * memory_values
    assert used.run <= limit + RUN_STATE_SLACK, (name, used, n, graph.num_values)
    # The device's tables depend on its configuration only: a fresh device for this graph has
    # the same (a run that grew or replaced them would show here).
    fresh = device_for_graph(graph).state
    fresh_arenas = {id(fresh.arena_hbm), id(fresh.arena_p2p), id(fresh.arena_host)}
    fresh_tables = _distinct_bytes([a for a in _arrays(tuple(fresh)) if id(a) not in fresh_arenas])
    assert used.device_tables == fresh_tables, (used, fresh_tables)
    config = executor.device.state.placement_config[:, PCFG_ARENA_SIZE]
    assert used.arenas == int(config.sum()), used
    return used


def peak_rss_bytes():
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def run_and_check(graph, executor):
    ex = prepare_executor(graph, executor=executor)
    want = expected_checksum(graph)
    for _ in range(2):  # the second run proves the reset between runs
        result = ex.run()
        assert result.status == 0
        assert result.nodes_executed == graph.num_nodes
        assert result.checksum == want
    return ex


@pytest.fixture(scope="module", params=sorted(KINDS))
def graph_100k(request):
    return generate(request.param, 100_000, seed=11, **KINDS[request.param])


@pytest.mark.parametrize("executor", EXECUTORS)
def test_100k_every_kind_every_executor(graph_100k, executor):
    """Catches: a run that misses nodes or folds wrongly; run state that is not linear in the
    nodes with the executor's constant (e.g. a heap of 2 n int64 keys, a per-run copy kept, an
    n x k table); device tables that grow with the graph or the runs."""
    ex = run_and_check(graph_100k, executor)
    used = check_state_bytes(ex, graph_100k, executor)
    items = graph_100k.num_nodes + graph_100k.num_edges
    print(
        f"\n{graph_100k.meta.name} {executor}: graph {used.graph / items:.1f} B per node+edge, "
        f"run state {used.run / graph_100k.num_nodes:.1f} B per node "
        f"({graph_100k.num_values / graph_100k.num_nodes:.1f} values per node), device tables "
        f"{used.device_tables / 2**20:.1f} MiB, peak RSS {peak_rss_bytes() / 2**20:.0f} MiB"
    )


def test_state_is_linear_in_nodes_and_edges():
    sizes = (20_000, 80_000)
    per_item = []
    for nodes in sizes:
        graph = generate("random", nodes, seed=3, edges_per_node=10, window=1000)
        ex = run_and_check(graph, "priority")
        used = state_bytes(ex, graph)
        per_item.append(used.host / (graph.num_nodes + graph.num_edges))
    assert per_item[1] < 1.25 * per_item[0], per_item


@pytest.mark.large
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_1m_nodes_every_executor(kind):
    options = dict(KINDS[kind])
    graph = generate(kind, 1_000_000, seed=12, **options)
    if kind == "random":
        assert graph.num_edges > 9_990_000
    for executor in EXECUTORS:
        ex = run_and_check(graph, executor)
        used = check_state_bytes(ex, graph, executor)
        print(
            f"\n{graph.meta.name} {executor}: {graph.num_edges:,} edges, graph + run state + "
            f"device tables {used.host / 2**20:.0f} MiB, "
            f"peak RSS {peak_rss_bytes() / 2**20:.0f} MiB"
        )
        del ex
