"""The sequential executor: a topological order computed once at prepare, then a plain loop.

The order is Kahn's with a ready set ordered by (priority, then the time a node became ready),
so equal priorities keep FIFO order; when every node has the same priority the ready set is a
plain FIFO, which gives the same order without the heap. The fastest executor; it cannot run
control flow (a switch needs a queue to skip the untaken branches).
"""

import numpy as np

from rtsoa._jit import jit, jit_inline_llvm
from rtsoa.abi.status import STATUS_CANCELLED, STATUS_OK
from rtsoa.errors import GraphFormatError
from rtsoa.executors.base import Executor, register_executor
from rtsoa.executors.cancel import POLL_STEPS, cancel_requested
from rtsoa.executors.heap import TIE_MASK, heap_pop, heap_push
from rtsoa.executors.steps import record_step
from rtsoa.kernels.clock import monotonic_ns
from rtsoa.kernels.dispatch import dispatch

_NO_PRIORITY = 2**62  # above every int32 priority


def run_sequential(rt, order, cancel, record):
    """Run `order` (a precomputed topological order) to the end or the first non-zero status,
    polling `cancel` (`rtsoa.executors.cancel`) every POLL_STEPS nodes: a masked test of the
    position, one well-predicted branch per node."""
    node_dispatch = rt.graph.node_dispatch
    executed = 0
    for i in range(order.shape[0]):
        if (i & (POLL_STEPS - 1)) == 0 and cancel_requested(cancel):
            return np.int64(STATUS_CANCELLED), np.int64(-1), np.int64(executed)
        node = order[i]
        if record is not None:
            start = monotonic_ns()
        status = dispatch(rt, node_dispatch[node], node)
        if record is not None:
            record_step(record, executed, node, start, monotonic_ns())
        executed += 1
        if status != STATUS_OK:  # a kernel's: reserved codes are mapped after the loop (base)
            return np.int64(status), np.int64(node), np.int64(executed)
    return np.int64(STATUS_OK), np.int64(-1), np.int64(executed)


@jit_inline_llvm
def _made_ready(target, degree, priority, ready_node, heap, size, tickets, best, held):
    """One edge into `target` taken: when it was the last, `target` gets the next ready
    ticket and is held (the best so far) or pushed. Returns (size, tickets, best, held)."""
    degree[target] -= 1
    if degree[target] == 0:
        ready_node[tickets] = target
        ready = (np.int64(priority[target]) << 32) | tickets
        tickets += 1
        if not held:
            best = ready
            held = True
        elif ready < best:
            size = heap_push(heap, size, best)
            best = ready
        else:
            size = heap_push(heap, size, ready)
    return size, tickets, best, held


@jit
def _kahn_priority_order(
    succ_offsets,
    succ_targets,
    in_degree,
    priority,
    starts,
    count,
    extra_offsets=None,
    extra_targets=None,
):
    """Up to `count` nodes in (priority, then ready time) order; shorter on a cycle.

    Keys are (priority << 32 | ready ticket), unique, so the order is the one a plain heap
    gives. The best node made ready by the node just taken is held apart and taken next without
    a heap round trip when it beats the heap's minimum (on graphs whose successors usually come
    next in priority order, most nodes never enter the heap). `extra_offsets` /
    `extra_targets`: a second CSR of successors taken after the edges (the multithread
    executor's Launch -> Free relations, `in_degree` counting them); None compiles without."""
    degree = in_degree.copy()
    heap = np.empty(count + 1, dtype=np.int64)
    ready_node = np.empty(count, dtype=np.int32)  # FIFO ticket -> node
    order = np.empty(count, dtype=np.int32)
    tickets = 0
    size = 0
    for i in range(starts.shape[0]):
        node = starts[i]
        ready_node[tickets] = node
        size = heap_push(heap, size, (np.int64(priority[node]) << 32) | tickets)
        tickets += 1
    done = 0
    best = np.int64(0)  # key of the best node the last one made ready (keys may be < 0)
    held = False  # is `best` a node's key?
    while size > 0 or held:
        if held and (size == 0 or best < heap[1]):  # heap[1..size]: min at 1
            key = best
        else:
            if held:
                size = heap_push(heap, size, best)
            key, size = heap_pop(heap, size)
        held = False
        node = ready_node[key & TIE_MASK]
        order[done] = node
        done += 1
        for e in range(succ_offsets[node], succ_offsets[node + 1]):
            size, tickets, best, held = _made_ready(
                succ_targets[e], degree, priority, ready_node, heap, size, tickets, best, held
            )
        if extra_offsets is not None:
            for e in range(extra_offsets[node], extra_offsets[node + 1]):
                size, tickets, best, held = _made_ready(
                    extra_targets[e], degree, priority, ready_node, heap, size, tickets, best, held
                )
    return order[:done].copy()


@jit
def _kahn_fifo_order(
    succ_offsets, succ_targets, in_degree, starts, count, extra_offsets=None, extra_targets=None
):
    """Kahn with a FIFO ready set (the priority order when all priorities are equal);
    `extra_offsets` / `extra_targets` as in `_kahn_priority_order`."""
    degree = in_degree.copy()
    order = np.empty(count, dtype=np.int32)
    tail = 0
    for i in range(starts.shape[0]):
        order[tail] = starts[i]
        tail += 1
    head = 0
    while head < tail:
        node = order[head]
        head += 1
        tail = _fifo_row(succ_offsets, succ_targets, node, degree, order, tail, count)
        if extra_offsets is not None:
            tail = _fifo_row(extra_offsets, extra_targets, node, degree, order, tail, count)
    return order[:tail].copy()


@jit_inline_llvm
def _fifo_row(offsets, targets, node, degree, order, tail, count):
    """Take the CSR row of `node`: each target whose last edge it was joins the FIFO
    `order` at `tail`. Returns the new tail."""
    for e in range(offsets[node], offsets[node + 1]):
        target = targets[e]
        degree[target] -= 1
        if degree[target] == 0 and tail < count:
            order[tail] = target
            tail += 1
    return tail


@jit
def _priorities_are_the_order(succ_offsets, succ_targets, in_degree, priority, nodes):
    """Do `nodes`, as listed, have strictly increasing priorities, does every edge go to a
    higher priority, and is no in-degree template clamped? Then the (priority, ready time)
    Kahn order is `nodes` itself: the lowest-priority node left never waits for another.

    Validation keeps every template within 1 .. its edge count, so templates that add up to
    the edge count are all unclamped."""
    previous = np.int64(0)
    edges = np.int64(0)
    templates = np.int64(0)
    for k in range(nodes.shape[0]):
        node = nodes[k]
        own = np.int64(priority[node])
        if k > 0 and own <= previous:
            return False
        previous = own
        templates += in_degree[node]
        first = succ_offsets[node]
        last = succ_offsets[node + 1]
        edges += last - first
        lowest = np.int64(_NO_PRIORITY)
        for e in range(first, last):  # branch-free: a min, one test per node
            lowest = min(lowest, np.int64(priority[succ_targets[e]]))
        if lowest <= own:
            return False
    return templates == edges


def priority_order(graph, nodes, starts, in_degree=None, extra=None):
    """Kahn order of `nodes` (one root graph) from `starts`; None if they contain a cycle.

    Three paths give the same order: equal priorities need no heap (FIFO); priorities that
    already order the graph (ids listed by rising priority, every edge rising) need no queue at
    all (a check of every edge, a third of the heap pass on the 100k-node random DAG, whose
    generator gives priority = id); otherwise Kahn with a heap. `extra`: (offsets, targets),
    a second CSR of successors beside the edges, with `in_degree` counting both (the
    multithread executor's relations, `rtsoa.executors.admission`)."""
    starts = np.ascontiguousarray(starts, dtype=np.int32)
    count = int(nodes.shape[0])
    priority = graph.node_priority[nodes]
    if in_degree is None:
        in_degree = graph.in_degree
    extra_offsets, extra_targets = (None, None) if extra is None else extra
    if (
        extra is None
        and count
        and _priorities_are_the_order(
            graph.succ_offsets, graph.succ_targets, in_degree, graph.node_priority, nodes
        )
    ):
        return np.ascontiguousarray(nodes, dtype=np.int32).copy()
    if count == 0 or priority.min() == priority.max():
        order = _kahn_fifo_order(
            graph.succ_offsets,
            graph.succ_targets,
            in_degree,
            starts,
            count,
            extra_offsets,
            extra_targets,
        )
    else:
        order = _kahn_priority_order(
            graph.succ_offsets,
            graph.succ_targets,
            in_degree,
            graph.node_priority,
            starts,
            count,
            extra_offsets,
            extra_targets,
        )
    if order.shape[0] != count:
        return None
    return order


@register_executor
class SequentialExecutor(Executor):
    """Runs a precomputed (priority, FIFO) topological order; no control flow."""

    name = "sequential"
    runs_control_flow = False
    loop_maps_reserved = False  # every status the loop returns is a kernel's
    loop = run_sequential

    def _prepare(self):
        order = priority_order(self.graph, self.nodes, self.starts)
        if order is None:
            raise GraphFormatError("the Main graph has a cycle", "edges", "target")
        return (order, self.cancel_words)
