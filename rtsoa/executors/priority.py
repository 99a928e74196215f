"""The priority executor: Kahn's algorithm with a binary min-heap on (priority, node id).

The same rules as the topological executor (in-degrees re-armed on push, `notify(k)` for
switches), but the ready node with the smallest (priority, id) runs first.
"""

import numpy as np

from rtsoa.abi.status import STATUS_OK, STATUS_QUEUE_OVERFLOW
from rtsoa.abi.views import read_only
from rtsoa.executors.base import Executor, register_executor
from rtsoa.executors.cancel import step_poll
from rtsoa.executors.heap import TIE_MASK, heap_pop, heap_push, node_keys
from rtsoa.executors.steps import record_step, released_edges
from rtsoa.kernels.clock import monotonic_ns
from rtsoa.kernels.dispatch import dispatch


def run_priority(rt, starts, template, in_degree, keys, heap, max_steps, cancel, record):
    """Kahn with a 1-indexed binary min-heap on keys[node] = priority << 32 | node; polls
    `cancel` every POLL_STEPS steps, as the topological loop does."""
    for i in range(template.shape[0]):  # a slice copy would need NRT
        in_degree[i] = template[i]
    targets = rt.graph.succ_targets
    node_dispatch = rt.graph.node_dispatch
    capacity = heap.shape[0] - 1
    size = 0
    for i in range(starts.shape[0]):
        size = heap_push(heap, size, keys[starts[i]])
    executed = 0
    poll = 0  # the step count of the next poll or of the step limit, whichever comes first
    while size > 0:
        key, size = heap_pop(heap, size)
        node = key & TIE_MASK
        if executed == poll:  # the step limit, or a cancellation poll (every POLL_STEPS)
            stop, poll = step_poll(executed, max_steps, cancel)
            if stop != STATUS_OK:
                return stop, np.int64(node), np.int64(executed)
        if record is not None:
            start = monotonic_ns()
        status = dispatch(rt, node_dispatch[node], node)
        if record is not None:
            record_step(record, executed, node, start, monotonic_ns())
        executed += 1
        first, last, stop = released_edges(rt, status, node, cancel)
        if stop != STATUS_OK:
            return stop, np.int64(node), np.int64(executed)
        for e in range(first, last):
            target = targets[e]
            remaining = in_degree[target] - 1
            if remaining == 0:
                if size == capacity:
                    return np.int64(STATUS_QUEUE_OVERFLOW), np.int64(target), np.int64(executed)
                size = heap_push(heap, size, keys[target])
                remaining = template[target]
            in_degree[target] = remaining
    return np.int64(STATUS_OK), np.int64(-1), np.int64(executed)


@register_executor
class PriorityExecutor(Executor):
    """Binary-heap Kahn inside the loop on (priority, id); runs control flow and loops."""

    name = "priority"
    runs_control_flow = True
    loop = run_priority

    def _prepare(self):
        n = self.graph.num_nodes
        template = read_only(np.ascontiguousarray(self.graph.in_degree, dtype=np.int32))
        in_degree = np.empty(n, dtype=np.int32)
        keys = node_keys(self.graph.node_priority)
        heap = np.empty(n + 2, dtype=np.int64)
        arguments = (read_only(self.starts), template, in_degree, keys, heap)
        return arguments + (np.int64(self.max_steps), self.cancel_words)
