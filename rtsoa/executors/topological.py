"""The topological executor: Kahn's algorithm with a FIFO ring buffer, run inside the loop.

In-degrees are copied from the template at the start of a run and re-armed when a node is
pushed, so a node can run again (loops). A switch kernel's `notify(k)` status makes the loop
decrement only successor k, so untaken branches never run.
"""

import numpy as np

from rtsoa.abi.status import STATUS_OK, STATUS_QUEUE_OVERFLOW
from rtsoa.abi.views import read_only
from rtsoa.executors.base import Executor, register_executor
from rtsoa.executors.cancel import step_poll
from rtsoa.executors.steps import record_step, released_edges
from rtsoa.kernels.clock import monotonic_ns
from rtsoa.kernels.dispatch import dispatch


def run_topological(rt, starts, degrees, queue, max_steps, cancel, record):
    """Kahn with a FIFO ring buffer (capacity n + 1); a pushed node's in-degree is re-armed.
    Every POLL_STEPS steps, in the test of the step limit, it polls `cancel`
    (`rtsoa.executors.cancel`).

    `degrees` holds each node's live in-degree and its template side by side (int32 pairs,
    `degrees[2 * v]` and `degrees[2 * v + 1]`): the re-arm reads the cache line the decrement
    has just loaded. With the template in an array of its own, each node pushed cost one more
    random access into another 400 KB on the 100k-node random DAG.

    The queue positions, nodes and edge rows are unsigned (valid ids, >= 0): a signed index
    costs Numba's negative-index wrap (a shift, a mask and a register) at every queue, edge
    and in-degree access. The poll is a call (`step_poll`, out of line): inlined, its clock
    read's stack slot kept a frame pointer for the whole loop, and with the loop-carried
    `poll` that cost the random DAG ~5 % (bench_executors, topological over C)."""
    for i in range(0, degrees.shape[0], 2):  # a strided slice copy would need NRT
        degrees[i] = degrees[i + 1]
    targets = rt.graph.succ_targets
    node_dispatch = rt.graph.node_dispatch
    capacity = np.uint64(queue.shape[0])
    head = np.uint64(0)
    tail = np.uint64(0)
    for i in range(starts.shape[0]):
        queue[tail] = starts[i]
        tail += np.uint64(1)
    executed = np.int64(0)
    poll = np.int64(0)  # the step count of the next poll or of the step limit, the earlier
    while head != tail:
        node = np.uint64(queue[head])
        if executed == poll:  # the step limit, or a cancellation poll (every POLL_STEPS)
            stop, poll = step_poll(executed, max_steps, cancel)
            if stop != STATUS_OK:
                return stop, np.int64(node), executed
        head += np.uint64(1)
        if head == capacity:
            head = np.uint64(0)
        if record is not None:
            start = monotonic_ns()
        status = dispatch(rt, node_dispatch[node], np.int64(node))
        if record is not None:
            record_step(record, executed, np.int64(node), start, monotonic_ns())
        executed += 1
        first, last, stop = released_edges(rt, status, np.int64(node), cancel)
        if stop != STATUS_OK:
            return stop, np.int64(node), executed
        for e in range(np.uint64(first), np.uint64(last)):
            target = np.uint64(targets[e])
            live = target + target
            remaining = degrees[live] - 1
            if remaining == 0:
                queue[tail] = target
                tail += np.uint64(1)
                if tail == capacity:
                    tail = np.uint64(0)
                if tail == head:
                    return np.int64(STATUS_QUEUE_OVERFLOW), np.int64(target), executed
                remaining = degrees[live + np.uint64(1)]
            degrees[live] = remaining
    return np.int64(STATUS_OK), np.int64(-1), executed


@register_executor
class TopologicalExecutor(Executor):
    """FIFO Kahn inside the loop; runs control flow and loops."""

    name = "topological"
    runs_control_flow = True
    loop = run_topological

    def _prepare(self):
        n = self.graph.num_nodes
        degrees = np.empty(2 * n, dtype=np.int32)  # (live, template) per node
        degrees[1::2] = self.graph.in_degree
        queue = np.empty(n + 1, dtype=np.int32)
        return (read_only(self.starts), degrees, queue, np.int64(self.max_steps), self.cancel_words)
