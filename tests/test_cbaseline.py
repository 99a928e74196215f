"""The C baselines of asv_bench/benchmarks/cbaseline against NumPy / pure-Python references."""

import heapq
import importlib.util
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not on PATH")

_PACKAGE = Path(__file__).resolve().parents[1] / "asv_bench" / "benchmarks" / "cbaseline"


def _import_cbaseline():
    name = "rtsoa_bench_cbaseline"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, _PACKAGE / "__init__.py", submodule_search_locations=[str(_PACKAGE)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


cbaseline = _import_cbaseline()


def csr_from_edges(n, sources, targets):
    """(succ_offsets int64[n+1], succ_targets int32[m], in_degree int32[n]) with NumPy."""
    sources = np.asarray(sources, dtype=np.int64)
    targets = np.asarray(targets, dtype=np.int64)
    order = np.lexsort((targets, sources))
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(sources, minlength=n), out=offsets[1:])
    in_degree = np.bincount(targets, minlength=n).astype(np.int32)
    return offsets, targets[order].astype(np.int32), in_degree


def random_dag(n, edges_per_node, window, seed):
    """Each node draws up to `edges_per_node` distinct predecessors from the previous `window`."""
    rng = np.random.default_rng(seed)
    sources, targets = [], []
    for node in range(1, n):
        low = max(0, node - window)
        count = min(edges_per_node, node - low)
        predecessors = rng.choice(np.arange(low, node), size=count, replace=False)
        sources.extend(predecessors.tolist())
        targets.extend([node] * count)
    return csr_from_edges(n, sources, targets)


def chain(n):
    return csr_from_edges(n, np.arange(n - 1), np.arange(1, n))


def layered(layers, width, fan_in, seed):
    rng = np.random.default_rng(seed)
    sources, targets = [], []
    for layer in range(1, layers):
        for slot in range(width):
            node = layer * width + slot
            predecessors = rng.choice(width, size=fan_in, replace=False) + (layer - 1) * width
            sources.extend(predecessors.tolist())
            targets.extend([node] * fan_in)
    return csr_from_edges(layers * width, sources, targets)


def graphs():
    rng = np.random.default_rng(7)
    for name, csr in [
        ("random", random_dag(3000, 10, 100, seed=1)),
        ("chain", chain(5000)),
        ("layered", layered(30, 20, 4, seed=2)),
        ("single", chain(1)),
    ]:
        n = csr[2].shape[0]
        kernel_ids = rng.integers(0, 8, size=n, dtype=np.int32)
        priority = rng.integers(-50, 50, size=n, dtype=np.int32)
        yield name, csr, kernel_ids, priority


GRAPHS = list(graphs())


def position_of(order, n):
    position = np.full(n, -1, dtype=np.int64)
    position[order] = np.arange(order.shape[0])
    return position


def test_salts_are_distinct_and_the_c_source_agrees():
    assert len(set(cbaseline.CHECKSUM_SALTS.tolist())) == 8
    cbaseline.load_library()  # raises if the C kernels differ from the Python formula


@pytest.mark.parametrize("executor", cbaseline.EXECUTORS)
@pytest.mark.parametrize("name,csr,kernel_ids,priority", GRAPHS, ids=[g[0] for g in GRAPHS])
def test_checksum_matches_numpy_reference(executor, name, csr, kernel_ids, priority):
    baseline = cbaseline.prepare_baseline(executor, *csr, kernel_ids, priority)
    expected = cbaseline.reference_checksum(kernel_ids)
    for _ in range(3):  # state is reset per run
        executed, checksum = baseline.run()
        assert executed == kernel_ids.shape[0]
        assert checksum == expected


def fold_by_hand(node, k):
    """rtsoa's Checksum<k> kernel in plain Python integers."""
    mask = 2**64 - 1
    salt = ((k + 1) * 0x9E3779B97F4A7C15) & mask
    x = ((node + salt) * 0xBF58476D1CE4E5B9) & mask
    return x ^ (x >> 31)


def test_checksum_reference_by_hand():
    kernel_ids = np.array([3, 0, 7, 7], dtype=np.int32)
    expected = sum(fold_by_hand(node, int(k)) for node, k in enumerate(kernel_ids)) % 2**64
    assert cbaseline.reference_checksum(kernel_ids) == expected


@pytest.mark.parametrize("executor", cbaseline.EXECUTORS)
@pytest.mark.parametrize("name,csr,kernel_ids,priority", GRAPHS, ids=[g[0] for g in GRAPHS])
def test_every_node_once_and_every_edge_respected(executor, name, csr, kernel_ids, priority):
    offsets, targets, in_degree = csr
    n = in_degree.shape[0]
    executed, _, order = cbaseline.prepare_baseline(
        executor, *csr, kernel_ids, priority
    ).visit_order()
    assert executed == n
    assert np.array_equal(np.sort(order), np.arange(n))
    position = position_of(order, n)
    sources = np.repeat(np.arange(n), np.diff(offsets))
    assert np.all(position[sources] < position[targets])


def test_kahn_is_fifo():
    # Diamond 0 -> {2, 1} -> 3, plus 4 -> 3: sources 0, 4 in id order, then 0's successors.
    offsets, targets, in_degree = csr_from_edges(5, [0, 0, 1, 2, 4], [2, 1, 3, 3, 3])
    kernel_ids = np.zeros(5, dtype=np.int32)
    baseline = cbaseline.prepare_baseline("topological", offsets, targets, in_degree, kernel_ids)
    assert baseline.visit_order()[2].tolist() == [0, 4, 1, 2, 3]


def python_priority_order(offsets, targets, in_degree, priority):
    remaining = in_degree.astype(np.int64).copy()
    ready = [(int(priority[v]), v) for v in range(len(remaining)) if remaining[v] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, node = heapq.heappop(ready)
        order.append(node)
        for target in targets[offsets[node] : offsets[node + 1]]:
            remaining[target] -= 1
            if remaining[target] == 0:
                heapq.heappush(ready, (int(priority[target]), int(target)))
    return order


@pytest.mark.parametrize("name,csr,kernel_ids,priority", GRAPHS, ids=[g[0] for g in GRAPHS])
def test_heap_order_matches_python_heapq(name, csr, kernel_ids, priority):
    expected = python_priority_order(*csr, priority)
    order = cbaseline.topological_order(*csr, priority)
    assert order.tolist() == expected
    sequential = cbaseline.prepare_baseline("sequential", *csr, kernel_ids, priority)
    assert sequential.order.tolist() == expected


def test_cycle_stops_kahn_early():
    offsets, targets, in_degree = csr_from_edges(4, [0, 1, 2], [1, 2, 1])  # 1 <-> 2 cycle
    kernel_ids = np.zeros(4, dtype=np.int32)
    for executor in ("topological", "priority"):
        baseline = cbaseline.prepare_baseline(executor, offsets, targets, in_degree, kernel_ids)
        executed, _ = baseline.run()
        assert executed == 2  # nodes 0 and 3
    with pytest.raises(ValueError, match="cycle"):
        cbaseline.prepare_baseline("sequential", offsets, targets, in_degree, kernel_ids)


@pytest.mark.parametrize("kind", ["chain", "random", "layered"])
def test_c_checksum_equals_rtsoa_checksum_kernels(kind):
    # The C kernels copy rtsoa's Checksum<k> fold; this catches either side drifting.
    generators = pytest.importorskip("rtsoa.graph.generators")
    checksum = pytest.importorskip("rtsoa.kernels.checksum")
    graph = generators.generate(kind, 2000, seed=5, kernels=8)
    table = np.array([int(name[len("Checksum") :]) for name in graph.kernel_names], np.int32)
    kernel_ids = table[graph.node_kernel]
    expected = checksum.expected_checksum(graph)
    assert cbaseline.reference_checksum(kernel_ids) == expected
    csr = (graph.succ_offsets, graph.succ_targets, graph.in_degree)
    for executor in cbaseline.EXECUTORS:
        baseline = cbaseline.prepare_baseline(executor, *csr, kernel_ids, graph.node_priority)
        assert baseline.run() == (graph.num_nodes, expected)
