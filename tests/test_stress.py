"""Stress: every executor on every generator kind at 100k nodes (default suite) and at
1,000,000 nodes / 10,000,000 edges (`python -m pytest -m large`).

Checksums are checked against `expected_checksum`, a vectorized numpy computation that does not
use any executor. Memory is reported (prepared state + graph, and the process's peak RSS) and
checked to be linear in nodes + edges.
"""

import resource
import sys

import numpy as np
import pytest
from numpy.lib.array_utils import byte_bounds

from rtsoa.executors import prepare_executor
from rtsoa.graph.generators import generate
from rtsoa.kernels.checksum import expected_checksum

EXECUTORS = ("sequential", "topological", "priority", "auto")
KINDS = {
    "chain": {},
    "random": {"edges_per_node": 10, "window": 1000},
    "layered": {"width": 100, "fan_in": 4},
    "lowered": {"fan_in": 2, "window": 64},
}


def state_bytes(executor, graph):
    """Bytes of the distinct numpy buffers an executor holds (views counted once)."""
    arrays = [v for v in graph if isinstance(v, np.ndarray)]
    for part in (executor.runtime.graph, executor.runtime.values, executor.runtime.worker):
        arrays += [v for v in part if isinstance(v, np.ndarray)]
    arrays += [v for v in executor._arguments if isinstance(v, np.ndarray)]
    arrays += [v for v in vars(executor).values() if isinstance(v, np.ndarray)]
    extents = {}
    for array in arrays:
        base = array
        while isinstance(base.base, np.ndarray):
            base = base.base
        low, high = byte_bounds(base)
        extents[low] = max(extents.get(low, 0), high - low)
    return sum(extents.values())


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
    ex = run_and_check(graph_100k, executor)
    used = state_bytes(ex, graph_100k)
    per_item = used / (graph_100k.num_nodes + graph_100k.num_edges)
    print(
        f"\n{graph_100k.meta.name} {executor}: state+graph {used / 2**20:.1f} MiB "
        f"({per_item:.1f} B per node+edge), peak RSS {peak_rss_bytes() / 2**20:.0f} MiB"
    )
    # Linear in nodes + edges: a generous constant, but no n^2 or per-run growth.
    assert per_item < 200


def test_state_is_linear_in_nodes_and_edges():
    sizes = (20_000, 80_000)
    per_item = []
    for nodes in sizes:
        graph = generate("random", nodes, seed=3, edges_per_node=10, window=1000)
        ex = run_and_check(graph, "priority")
        per_item.append(state_bytes(ex, graph) / (graph.num_nodes + graph.num_edges))
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
        used = state_bytes(ex, graph)
        print(
            f"\n{graph.meta.name} {executor}: {graph.num_edges:,} edges, state+graph "
            f"{used / 2**20:.0f} MiB, peak RSS {peak_rss_bytes() / 2**20:.0f} MiB"
        )
        assert used / (graph.num_nodes + graph.num_edges) < 200
        del ex
