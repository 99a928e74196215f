"""Executor loops: source text for the generated dispatch module, never imported directly.

`rtsoa.kernels.dispatch` copies the part below `# -- shared` once and the part below
`# -- loops` twice into the generated module, after the generated `dispatch` switch, so each loop
and the dispatch it calls compile as one unit:
  - plain `run_<name>`: every line ending in `# profiled` removed (the fast path pays nothing);
  - `run_<name>_profiled`: those lines kept; they record (node, start ns, end ns) per step.
Every loop returns (status, failing or last node, nodes executed) and allocates nothing, so
the loops are compiled without Numba's reference counting (_nrt=False): with it, every kernel
call increfs / decrefs each array of the runtime tuple.
"""

import numpy as np  # noqa: F401  (used by the copied text)


def dispatch(rt, kernel, node):  # the generated module defines the real switch
    return np.int32(0)


# -- shared
from numba import njit  # noqa: E402

from rtsoa.executors.heap import TIE_MASK, heap_pop, heap_push  # noqa: E402
from rtsoa.kernels.clock import monotonic_ns  # noqa: E402, F401
from rtsoa.kernels.status import (  # noqa: E402
    STATUS_NOTIFY_ONE,
    STATUS_OK,
    STATUS_QUEUE_OVERFLOW,
    STATUS_STEP_LIMIT,
)

_SELECT = 0  # rtsoa.kernels.runtime.STATE_SELECT
_STEP_LIMIT = 2  # rtsoa.kernels.runtime.STATE_STEP_LIMIT


@njit(cache=True, nogil=True, boundscheck=False, _nrt=False)
def record_step(record, step, node, start, end):
    """Row `step` of the (capacity, 3) int64 record; steps past the capacity are dropped."""
    if step < record.shape[0]:
        record[step, 0] = node
        record[step, 1] = start
        record[step, 2] = end


# -- loops
@njit(cache=True, nogil=True, boundscheck=False, _nrt=False)
def run_sequential(rt, order, record):
    """Run `order` (a precomputed topological order) to the end or the first non-zero status."""
    node_kernel = rt.node_kernel
    executed = 0
    for i in range(order.shape[0]):
        node = order[i]
        start = monotonic_ns()  # profiled
        status = dispatch(rt, node_kernel[node], node)
        record_step(record, executed, node, start, monotonic_ns())  # profiled
        executed += 1
        if status != STATUS_OK:
            return np.int64(status), np.int64(node), np.int64(executed)
    return np.int64(STATUS_OK), np.int64(-1), np.int64(executed)


@njit(cache=True, nogil=True, boundscheck=False, _nrt=False)
def run_topological(rt, starts, template, in_degree, queue, record):
    """Kahn with a FIFO ring buffer (capacity n + 1); a pushed node's in-degree is re-armed."""
    for i in range(template.shape[0]):  # a slice copy would need NRT
        in_degree[i] = template[i]
    offsets = rt.succ_offsets
    targets = rt.succ_targets
    node_kernel = rt.node_kernel
    capacity = queue.shape[0]
    head = 0
    tail = 0
    for i in range(starts.shape[0]):
        queue[tail] = starts[i]
        tail += 1
    executed = 0
    step_limit = rt.state[_STEP_LIMIT]
    while head != tail:
        node = queue[head]
        if executed == step_limit:
            return np.int64(STATUS_STEP_LIMIT), np.int64(node), np.int64(executed)
        head += 1
        if head == capacity:
            head = 0
        start = monotonic_ns()  # profiled
        status = dispatch(rt, node_kernel[node], node)
        record_step(record, executed, node, start, monotonic_ns())  # profiled
        executed += 1
        first = offsets[node]
        last = offsets[node + 1]
        if status != STATUS_OK:
            if status != STATUS_NOTIFY_ONE:
                return np.int64(status), np.int64(node), np.int64(executed)
            first += rt.state[_SELECT]
            last = first + 1
        for e in range(first, last):
            target = targets[e]
            remaining = in_degree[target] - 1
            if remaining == 0:
                queue[tail] = target
                tail += 1
                if tail == capacity:
                    tail = 0
                if tail == head:
                    return np.int64(STATUS_QUEUE_OVERFLOW), np.int64(target), np.int64(executed)
                remaining = template[target]
            in_degree[target] = remaining
    return np.int64(STATUS_OK), np.int64(-1), np.int64(executed)


@njit(cache=True, nogil=True, boundscheck=False, _nrt=False)
def run_priority(rt, starts, template, in_degree, keys, heap, record):
    """Kahn with a 1-indexed binary min-heap on keys[node] = priority << 32 | node."""
    for i in range(template.shape[0]):  # a slice copy would need NRT
        in_degree[i] = template[i]
    offsets = rt.succ_offsets
    targets = rt.succ_targets
    node_kernel = rt.node_kernel
    capacity = heap.shape[0] - 1
    size = 0
    for i in range(starts.shape[0]):
        size = heap_push(heap, size, keys[starts[i]])
    executed = 0
    step_limit = rt.state[_STEP_LIMIT]
    while size > 0:
        key, size = heap_pop(heap, size)
        node = key & TIE_MASK
        if executed == step_limit:
            return np.int64(STATUS_STEP_LIMIT), np.int64(node), np.int64(executed)
        start = monotonic_ns()  # profiled
        status = dispatch(rt, node_kernel[node], node)
        record_step(record, executed, node, start, monotonic_ns())  # profiled
        executed += 1
        first = offsets[node]
        last = offsets[node + 1]
        if status != STATUS_OK:
            if status != STATUS_NOTIFY_ONE:
                return np.int64(status), np.int64(node), np.int64(executed)
            first += rt.state[_SELECT]
            last = first + 1
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
