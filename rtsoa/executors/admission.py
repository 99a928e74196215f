"""The multithread executor's release order and admission window.

Release order. Every node gets a *rank*: its position in the sequential executor's order
(Kahn with the ready set ordered by priority, then ready time: the reference's build-time
order), computed over the edges *and* the exact Free -> Launch relations (a relation orders
its Launch before its Free, like the edge the relation pass removed). The ready queues are
heaps on the rank, and a worker serving several queues takes the smallest rank among their
heads, so ready tasks are released in the one priority order across classes.

Admission window (what bounds device memory). A node may start only if its rank is below
`low + window`, where `low` is the smallest rank not yet finished in this run. This is the
reference's "at most thread_num tasks released per round from one priority queue" made
continuous: no worker runs further ahead of the oldest unfinished node than `window`
ranks. Without it a MEMORY worker apart from the LAUNCH worker (3+ threads) allocates for
every op whose shape inference has run and outruns the launches and the Frees that wait for
them, so live memory grows far past the single-thread peak (lowered graphs of 20,000 nodes ran
out of device memory without it: tests/test_multithread_memory.py).

Liveness. Ranks are a topological order of edges + relations, so the node of rank `low` has
every predecessor and every related Launch finished: it is ready, admitted (low < low +
window), and the smallest rank in its queue, so the worker serving that queue takes it and
runs it (a Free finds its Launches submitted). `low` then advances. When edges + relations
have a cycle (a relation no order can satisfy, built by hand), ranks come from the edges
alone and the window is off, so the no-progress detector sees only parked Frees and reports
the run instead of the window hiding it.

`low` is advanced by whoever finishes the node at `low` (and by idle workers, which retry):
a finished rank is marked with the run's epoch, then `low` moves past every marked rank by
compare-and-swap, so concurrent finishers never skip an unfinished rank.

Two threads (`private_admissions`): the marks and `low` above are written by both cores at
every node, and each write moves a cache line from one core to the other. When one worker
runs every memory and launch node, its window can be its own instead: it alone knows which
of its nodes finished, so it keeps its marks and its `low` in its own arrays, and the other
worker, running NORMAL nodes that allocate nothing, has no window (asv BusyWork measures
what each costs; docs/multithread.md).
"""

from typing import NamedTuple

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_inline_llvm
from rtsoa.device.atomics import atomic_cas, atomic_load, atomic_store
from rtsoa.errors import GraphFormatError
from rtsoa.executors.heap import node_keys
from rtsoa.executors.sequential import priority_order
from rtsoa.graph.csr import in_degrees
from rtsoa.graph.schema import WorkerClass
from rtsoa.kernels.abi import line_zeros

# Ranks a worker may run ahead of the oldest unfinished node. 64 ranks are 16 ops of a
# lowered graph (4 nodes each): enough for the NORMAL worker's shape inference to stay ahead
# of the device worker on 2 threads, few enough that the allocations ahead of the launches
# stay a small part of the single-thread peak (tests/test_multithread_memory.py states it).
DEFAULT_WINDOW = 64
LOW = 0  # slot of the smallest unfinished rank in the admission array (its own cache line)
# `finished` value of a rank another worker runs, in a worker's private admission: finished in
# every run (epochs stay below it)
NOT_MINE = np.iinfo(np.int64).max


class Admission(NamedTuple):
    """The admission window's run state."""

    window: np.int64  # ranks ahead of `low` a node may start at; 0: no window
    count: np.int64  # ranked nodes (the root's)
    finished: np.ndarray  # int64[count]: epoch of the run in which each rank finished
    low: np.ndarray  # int64[8]: low[LOW], the smallest unfinished rank of this run
    # written by several workers (the marks and `low` then need sequentially consistent
    # stores: see finish_rank); False for a window one worker alone uses (private_admissions)
    shared: np.bool_ = np.bool_(True)


def _order_with_relations(graph, nodes, starts, relations, edgeless):
    """The priority order of `nodes` over edges + relations (Launch before Free), or None
    on a cycle. The relations are a second CSR of successors (by Launch, the relation
    state's), not merged into the edges: a merge sorts every edge and relation again
    (asv RelationPrepare). `edgeless`: the relations without their edge
    (`Binding.edgeless`)."""
    n = graph.num_nodes
    if edgeless == 0:  # every relation has its edge: as is
        return priority_order(graph, nodes, starts)
    root = np.zeros(n, dtype=np.bool_)
    root[nodes] = True
    degree = in_degrees(graph.succ_offsets, graph.succ_targets, n)
    degree += np.where(root, np.diff(relations.offsets), 0).astype(np.int32)
    merged_starts = np.flatnonzero(root & (degree == 0)).astype(np.int32)
    extra = (relations.waiter_offsets, relations.waiter_frees)
    return priority_order(graph, nodes, merged_starts, in_degree=degree, extra=extra)


def release_keys(graph, nodes, starts, relations, edgeless, wants_window, window=DEFAULT_WINDOW):
    """(int64 heap key per node: rank << 32 | node, Admission). `edgeless`: the root's
    relations without their edge (`Binding.edgeless`); `wants_window`: bound the run (the
    root has memory-class nodes); the window is off anyway when edges + relations have a
    cycle (see the module docstring). Nodes outside the root rank last."""
    n = graph.num_nodes
    order = _order_with_relations(graph, nodes, starts, relations, edgeless)
    if order is None:  # a relation against the edges: the no-progress detector reports it
        order = priority_order(graph, nodes, starts)
        wants_window = False
    if order is None:
        raise GraphFormatError("the Main graph has a cycle", "edges", "target")
    count = order.shape[0]
    rank = np.full(n, count, dtype=np.int64)
    rank[order] = np.arange(count, dtype=np.int64)
    keys = node_keys(rank)
    admission = Admission(
        window=np.int64(window if wants_window else 0),
        count=np.int64(count),
        finished=line_zeros(max(count, 1), np.int64),
        low=line_zeros(8, np.int64),
    )
    return keys, admission


def private_admissions(admission, rank, classes, serves):
    """One Admission per worker, each over the ranks of the nodes that worker alone runs,
    for runs where every class queue has a single server (two threads: the NORMAL worker and
    the one device worker serving MEMORY and LAUNCH).

    The window then needs no shared state: the device worker, the only one running device
    nodes, knows the smallest rank among them it has not finished, and starts a node only
    within `window` ranks of it; the NORMAL worker, which allocates nothing, has no window.
    The ranks of other workers' nodes are NOT_MINE in a worker's `finished` (finished in
    every run), so its `low` moves past them. Liveness as in the module docstring: the device
    node at the device worker's `low` has its device predecessors finished (lower ranks) and
    its NORMAL ones run by a worker that never waits on a window, so it becomes ready, is
    admitted and runs.

    `rank`: int64 per node (rank `admission.count` for nodes outside the root); `classes`:
    the class queue of each node; `serves`: bool[threads, queues], one server per queue.
    """
    count = int(admission.count)
    ranked = rank < count
    result = []
    for queues in serves:
        memory = bool(queues[WorkerClass.MEMORY]) and admission.window != 0
        finished = line_zeros(max(count, 1) if memory else 1, np.int64)
        if memory:
            finished[:] = NOT_MINE
            finished[rank[ranked & queues[classes]]] = 0
        result.append(
            Admission(
                window=np.int64(admission.window if memory else 0),
                count=admission.count,
                finished=finished,
                low=line_zeros(8, np.int64),
                shared=np.bool_(False),
            )
        )
    return result


def reset_epochs(admission):
    """Forget every finished mark (the run epoch wrapped): NOT_MINE marks stay."""
    admission.finished[admission.finished != NOT_MINE] = 0


@jit_inline_ir
def admitted(admission, key):
    """May the node with heap key `key` start now? (Always, without a window.)"""
    if admission.window == 0:
        return True
    return (key >> 32) < atomic_load(admission.low, LOW) + admission.window


@jit_inline_llvm  # per finished rank of a windowed worker: no call copying the window
def advance_low(admission, epoch):
    """Move `low` past every rank finished in this run (any worker may call it)."""
    low = atomic_load(admission.low, LOW)
    while low < admission.count and atomic_load(admission.finished, low) >= epoch:
        atomic_cas(admission.low, LOW, low, low + 1)
        low = atomic_load(admission.low, LOW)


@jit_inline_ir
def finish_rank(admission, key, epoch):
    """The node with heap key `key` finished: mark its rank and advance `low`.

    A shared window's mark is a sequentially consistent store (a locked exchange on x86):
    when another worker moves `low` up to this rank at the same time, either this worker
    reads the moved `low` and advances past its rank, or the other reads the mark and does;
    with a store the core may hold back behind the read of `low`, both could miss it. A
    private window has one reader and writer: plain stores."""
    if admission.window != 0:
        rank = key >> 32
        if admission.shared:
            atomic_store(admission.finished, rank, epoch)
            if atomic_load(admission.low, LOW) == rank:
                advance_low(admission, epoch)
        else:
            finished = admission.finished
            finished[rank] = epoch
            low = admission.low[LOW]
            if low == rank:
                while low < admission.count and finished[low] >= epoch:
                    low += 1
                admission.low[LOW] = low
