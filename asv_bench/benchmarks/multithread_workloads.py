"""The busy-work lowered-like graph of `bench_multithread.BusyWork`, and its two kernels.

The kernels live here (an importable module, as a user's would) in their own registry, so
the global registry and every other benchmark's dispatch stay unchanged.
"""

import time

import numpy as np
from numba import njit

from .common import _import as import_rtsoa

kernels = import_rtsoa("rtsoa.kernels")
lowered = import_rtsoa("rtsoa.kernels.lowered")
_A = np.uint64(6364136223846793005)
_C = np.uint64(1442695040888963407)
_WORKERS = {0: "normal", 1: "memory", 2: "launch"}

BUSY_REGISTRY = kernels.KernelRegistry()
for _name in ("AllocMemory", "FreeMemory"):
    _info = kernels.REGISTRY[_name]
    BUSY_REGISTRY.register(
        _name,
        _info.function,
        worker=_WORKERS[int(_info.worker)],
        critical_section=_info.critical_section,
        outputs=_info.outputs,
        requires=_info.requires,
    )


@njit(nogil=True, cache=False)
def _rounds(seed, count):
    x = np.uint64(seed)
    for _ in range(count):
        x = x * _A + _C
    return x


@kernels.kernel("BusyInferShape", requires={"attributes": 2, "outputs": 1}, registry=BUSY_REGISTRY)
def busy_infer_shape(rt, node):
    """attrs [nbytes, rounds]: `rounds` LCG rounds of host work, then InferShape."""
    rt.worker.scratch[0] ^= np.int64(_rounds(node, kernels.attribute(rt, node, 1)) >> np.uint64(1))
    return lowered.infer_shape(rt, node)


@kernels.kernel(
    "BusyLaunch",
    worker="launch",
    critical_section="launch",
    requires={"attributes": 3},
    registry=BUSY_REGISTRY,
)
def busy_launch(rt, node):
    """attrs [bytes, flops, rounds]: `rounds` LCG rounds of host work, then LaunchKernel."""
    rt.worker.scratch[0] ^= np.int64(_rounds(node, kernels.attribute(rt, node, 2)) >> np.uint64(1))
    return lowered.launch_kernel(rt, node)


def rounds_for(nanoseconds):
    """LCG rounds that take about `nanoseconds` on this machine (best of a few timings)."""
    _rounds(1, 10)
    count = 1_000_000
    best = min(_timed(count) for _ in range(5))
    return max(1, int(nanoseconds * count / (best * 1e9)))


def _timed(count):
    start = time.perf_counter()
    _rounds(3, count)
    return time.perf_counter() - start


def busy_lowered_graph(ops, nanoseconds, seed=5):
    """(graph, registry, expected checksum): `generate("lowered", 4 * ops)` with its
    InferShape and LaunchKernel nodes doing ~`nanoseconds` of host work first. The checksum is
    the original graph's (the busy kernels fold like the kernels they wrap)."""
    generate = import_rtsoa("rtsoa.graph.generators").generate
    validate_graph = import_rtsoa("rtsoa.graph.validate").validate_graph
    graph = generate("lowered", 4 * ops, seed=seed, fan_in=2, window=64)
    expected = kernels.expected_checksum(graph)
    renamed = {"InferShape": "BusyInferShape", "LaunchKernel": "BusyLaunch"}
    names = tuple(renamed.get(name, name) for name in graph.kernel_names)
    busy = np.isin(graph.node_kernel, [names.index(name) for name in renamed.values()])
    counts = np.diff(graph.attr_offsets)
    offsets = np.zeros(graph.num_nodes + 1, dtype=np.int64)
    np.cumsum(counts + busy, out=offsets[1:])
    owner = np.repeat(np.arange(graph.num_nodes), counts)
    pool = np.empty(int(offsets[-1]), dtype=np.int64)
    pool[offsets[owner] + np.arange(owner.shape[0]) - graph.attr_offsets[owner]] = graph.attr_pool
    pool[offsets[:-1][busy] + counts[busy]] = rounds_for(nanoseconds)
    busy_graph = graph._replace(kernel_names=names, attr_offsets=offsets, attr_pool=pool)
    validate_graph(busy_graph)
    return busy_graph, BUSY_REGISTRY, expected


def relation_graph(nodes, relations_per_node, seed=11):
    """`nodes` checksum nodes with `relations_per_node` distinct exact relations each
    (Free v -> Launch (v + 1 + k * step) mod nodes): the prepare-time workload (100,000
    nodes and 1,000,000 relations). Relations need no edges for the relation state; the
    graph has none (its relations form cycles, so the executor's order ignores them)."""
    builder_module = import_rtsoa("rtsoa.graph.builder")
    rng = np.random.default_rng(seed)
    builder = builder_module.GraphBuilder(name=f"relations-{nodes}")
    names = np.array([f"Checksum{k}" for k in range(8)])
    builder.add_nodes(names[rng.integers(0, len(names), size=nodes)])
    step = max(1, (nodes - 1) // (relations_per_node + 1))
    frees = np.repeat(np.arange(nodes, dtype=np.int64), relations_per_node)
    ks = np.tile(np.arange(relations_per_node, dtype=np.int64), nodes)
    builder.add_relations(frees, (frees + 1 + ks * step) % nodes)
    return builder.finalize()


def pair_graph(pairs, unrelated=0):
    """`pairs` (Free 2i, Launch 2i + 1) pairs, one exact relation each, then `unrelated`
    nodes in no relation; no edges: the per-event workload (each relation is one Free /
    Launch occurrence)."""
    builder_module = import_rtsoa("rtsoa.graph.builder")
    builder = builder_module.GraphBuilder(name=f"pairs-{pairs}")
    builder.add_nodes(np.full(2 * pairs + unrelated, "Checksum0"))
    frees = 2 * np.arange(pairs, dtype=np.int64)
    builder.add_relations(frees, frees + 1)
    return builder.finalize()


def host_dag(nodes, nanoseconds, edges_per_node=2, window=2000, seed=7):
    """(graph, expected checksum): a random DAG (`generate("random", ...)`'s edges: each node
    draws `edges_per_node` predecessors from the previous `window`) of `Busy` kernels, host
    (NORMAL) work of ~`nanoseconds` each. The graph of the speed issue's "both cores" item:
    2,000 kernels of ~14 us, with up to 208 ready at once (`widest_ready`)."""
    generate = import_rtsoa("rtsoa.graph.generators").generate
    builder_module = import_rtsoa("rtsoa.graph.builder")
    shape = generate("random", nodes, seed=seed, edges_per_node=edges_per_node, window=window)
    rounds = rounds_for(nanoseconds)
    builder = builder_module.GraphBuilder(name=f"host-dag-{nodes}")
    for node in range(nodes):
        builder.add_node("Busy", priority=node, attributes=[rounds])
    sources = np.repeat(np.arange(nodes), np.diff(shape.succ_offsets))
    builder.add_edges(sources, np.asarray(shape.succ_targets, dtype=np.int64))
    graph = builder.finalize()
    return graph, kernels.expected_checksum(graph)


def widest_ready(graph):
    """The most nodes ready at once in a breadth-first (level by level) run of `graph`."""
    degree = np.asarray(graph.in_degree, dtype=np.int64).copy()
    ready = np.flatnonzero(degree == 0)
    widest = 0
    while ready.shape[0]:
        widest = max(widest, int(ready.shape[0]))
        targets = np.concatenate(
            [graph.succ_targets[graph.succ_offsets[v] : graph.succ_offsets[v + 1]] for v in ready]
        )
        np.subtract.at(degree, targets, 1)
        ready = np.unique(targets[degree[targets] == 0])
    return widest
