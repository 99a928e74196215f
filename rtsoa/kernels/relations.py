"""The relation pass (the reference's RemoveLaunchFreeEdge) and the checks relations need.

A device Free normally waits, through a control edge, for every Launch that uses its block.
For the multi-thread executor that edge is stronger than needed: what a Free needs is that
those Launches have been *submitted* before the block goes back to the allocator. The pass
replaces each such edge by an exact (Free, Launch) relation, which the multithread executor
honours with generation tracking (`rtsoa.executors.multithread`): the Free becomes ready
without waiting for the Launch's other work, and is released to run as soon as its related
Launches of the current run have been submitted, without any worker blocking on it.

Eligibility, per Free (as the reference qualifies each Free independently):
- the node runs a Free kernel (`free_kernels`, default FreeMemory) and its input 0 is a
  MEMORY_BLOCK value placed on the device (not host);
- the block's producer is a registered memory-class kernel (critical section or worker
  "memory"); host, normal, launch, unregistered or missing producers keep their edges;
- only edges from launch-class predecessors in the same owning graph are replaced.
For each Launch whose edges are replaced, every eligible Free of it is ordered after every
producer of those Frees' blocks (the Cartesian ordering; existing edges are not duplicated), so
a Free never runs before the allocations its Launch uses. Relations are stored as CSR by Free
node, sorted and deduplicated, merged with the graph's existing ones.

Liveness: every replaced edge was a Launch -> Free edge of an acyclic graph and every added
edge is implied by existing paths (producer -> Launch -> Free), so "Free waits for Launch" is
consistent with a topological order of the original graph: the earliest unfinished node in
that order can always run, so a run always completes (see tests/test_multithread.py for the
graph that deadlocks a design where the sole memory worker blocks inside the Free).
"""

from typing import NamedTuple

import numpy as np

from rtsoa._jit import jit
from rtsoa.graph.csr import build_csr
from rtsoa.graph.schema import Placement, ValueKind, WorkerClass
from rtsoa.graph.validate import validate_graph
from rtsoa.kernels.registry import REGISTRY

FREE_KERNELS = ("FreeMemory",)
_HOST_PLACEMENTS = (int(Placement.HOST), int(Placement.FOLLOWING))  # "following" is host


class RelationPassResult(NamedTuple):
    """What `remove_launch_free_edges` did."""

    graph: object  # the new ExecuteGraph
    removed_edges: int  # Launch -> Free edges replaced by relations
    added_edges: int  # producer -> Free edges of the Cartesian ordering not already present
    relations: int  # relations in the new graph (existing ones included)


def node_classes(tables, node_dispatch):
    """int8 class per node: its kernel's critical section if it has one, else its worker."""
    section = tables.critical_section[node_dispatch]
    worker = tables.worker[node_dispatch]
    return np.where(section != 0, section, worker).astype(np.int8)


def node_classes_of(graph, registry):
    """int8 WorkerClass per node from the registry: critical section if set, else worker."""
    return node_classes(registry.tables(), registry.bind(graph.kernel_names)[graph.node_kernel])


def eligible_frees(graph, classes, free_kernels=FREE_KERNELS):
    """(bool per node: an eligible device Free; int64 per node: its block's producer or -1)."""
    n = graph.num_nodes
    names = np.array([name in free_kernels for name in graph.kernel_names], dtype=bool)
    is_free = names[graph.node_kernel] & (np.diff(graph.input_offsets) > 0)
    frees = np.flatnonzero(is_free)
    block = graph.input_values[graph.input_offsets[frees]]
    producer = np.full(n, -1, dtype=np.int64)
    producer[frees] = graph.value_producer[block]
    device_block = (graph.value_kind[block] == ValueKind.MEMORY_BLOCK) & ~np.isin(
        graph.value_placement[block], _HOST_PLACEMENTS
    )
    known = producer[frees] >= 0
    memory = np.zeros(frees.shape[0], dtype=bool)
    memory[known] = classes[producer[frees][known]] == WorkerClass.MEMORY
    eligible = np.zeros(n, dtype=bool)
    eligible[frees] = device_block & memory
    return eligible, producer


def remove_launch_free_edges(graph, registry=None, free_kernels=FREE_KERNELS):
    """The graph with every eligible Launch -> Free edge replaced by an exact relation (see
    the module docstring). Returns a RelationPassResult; the new graph is validated."""
    registry = registry if registry is not None else REGISTRY
    n = graph.num_nodes
    classes = node_classes_of(graph, registry)
    eligible, producer = eligible_frees(graph, classes, free_kernels)
    sources = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.succ_offsets))
    targets = graph.succ_targets.astype(np.int64)
    replace = (
        eligible[targets]
        & (classes[sources] == WorkerClass.LAUNCH)
        & (graph.node_graph[sources] == graph.node_graph[targets])
    )
    launches, frees = sources[replace], targets[replace]
    # Cartesian ordering per Launch: every producer of its Frees' blocks -> each of its Frees.
    order = np.argsort(launches, kind="stable")
    launches, frees = launches[order], frees[order]
    starts = np.searchsorted(launches, launches, side="left")
    ends = np.searchsorted(launches, launches, side="right")
    sizes = ends - starts
    pair_free = np.repeat(frees, sizes)
    pair_other = _group_partners(starts, ends, int(sizes.sum()))
    pair_producer = producer[frees[pair_other]] if pair_other.shape[0] else pair_other
    kept_sources, kept_targets = sources[~replace], targets[~replace]
    existing = kept_sources * n + kept_targets
    candidate = np.unique(pair_producer * n + pair_free)
    new = candidate[~np.isin(candidate, existing)]
    new = new[(new // n) != (new % n)]
    all_sources = np.concatenate([kept_sources, new // n])
    all_targets = np.concatenate([kept_targets, new % n])
    succ_offsets, succ_targets = build_csr(all_sources, all_targets, n)
    degree = graph.in_degree.astype(np.int32).copy()
    np.subtract.at(degree, frees, 1)
    np.add.at(degree, (new % n).astype(np.int64), 1)
    old_sources = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.relation_offsets))
    pairs = np.unique(  # sorted by (Free, Launch), deduplicated
        np.concatenate([old_sources * n + graph.relation_targets, frees * n + launches])
    )
    relation_offsets, relation_targets = build_csr(pairs // n, pairs % n, n)
    result = graph._replace(
        succ_offsets=succ_offsets,
        succ_targets=succ_targets,
        in_degree=degree,
        relation_offsets=relation_offsets,
        relation_targets=relation_targets,
    )
    validate_graph(result)
    return RelationPassResult(
        result, int(frees.shape[0]), int(new.shape[0]), int(relation_targets.shape[0])
    )


def _group_partners(starts, ends, total):
    """For each item i of a run [starts[i], ends[i]) of equal keys, every index of its run."""
    partners = np.empty(total, dtype=np.int64)
    _fill_partners(starts, ends, partners)
    return partners


@jit
def _fill_partners(starts, ends, partners):
    position = 0
    for i in range(starts.shape[0]):
        for j in range(starts[i], ends[i]):
            partners[position] = j
            position += 1


@jit
def _relations_without_edges(nodes, succ_offsets, succ_targets, relation_offsets, relation_targets):
    missing = 0
    for i in range(nodes.shape[0]):
        free = nodes[i]
        for r in range(relation_offsets[free], relation_offsets[free + 1]):
            launch = relation_targets[r]
            found = False
            for e in range(succ_offsets[launch], succ_offsets[launch + 1]):
                if succ_targets[e] == free:
                    found = True
                    break
            if not found:
                missing += 1
    return missing


def relations_without_edges(graph, nodes):
    """How many relations (Free, Launch) of the Frees among `nodes` have no Launch -> Free
    edge: the ones a single-thread executor would not honour (the relation pass removed the
    edge). Zero without a scan when the graph has no relations."""
    if graph.relation_targets.shape[0] == 0:
        return 0
    return int(
        _relations_without_edges(
            np.ascontiguousarray(nodes, dtype=np.int32),
            graph.succ_offsets,
            graph.succ_targets,
            graph.relation_offsets,
            graph.relation_targets,
        )
    )
