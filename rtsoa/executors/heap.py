"""A 1-indexed binary min-heap of int64 keys in a preallocated array (njit helpers).

Keys pack (priority, tie-break) as `priority << 32 | tie` so one integer compare orders them.
"""

import numpy as np

from rtsoa._jit import jit

TIE_BITS = 32
TIE_MASK = (1 << TIE_BITS) - 1


def pack_keys(priority, ties):
    """(priority << 32) | tie as int64 (priority may be negative; ties in [0, 2**32))."""
    return (np.asarray(priority, dtype=np.int64) << TIE_BITS) | np.asarray(ties, dtype=np.int64)


@jit
def node_keys(priority):
    """`pack_keys(priority, np.arange(n))`, the keys of nodes 0 .. n - 1, in one pass: numpy's
    expression makes four temporaries, most of what the priority executor's prepare took over
    the topological one's (asv Prepare)."""
    keys = np.empty(priority.shape[0], dtype=np.int64)
    for node in range(priority.shape[0]):
        keys[node] = (np.int64(priority[node]) << TIE_BITS) | node
    return keys


@jit
def heap_push(heap, size, key):
    """Insert `key` into heap[1..size]; returns the new size (capacity checked by the caller)."""
    size += 1
    i = size
    while i > 1:
        parent = i >> 1
        above = heap[parent]
        if above <= key:
            break
        heap[i] = above
        i = parent
    heap[i] = key
    return size


@jit
def heap_pop(heap, size):
    """Remove the smallest key of heap[1..size] (size > 0); returns (key, new size)."""
    top = heap[1]
    last = heap[size]
    size -= 1
    i = 1
    while True:
        child = i << 1
        if child > size:
            break
        if child < size and heap[child + 1] < heap[child]:
            child += 1
        if heap[child] >= last:
            break
        heap[i] = heap[child]
        i = child
    heap[i] = last
    return top, size
