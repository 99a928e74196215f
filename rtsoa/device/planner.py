"""Static memory planner: greedy offset assignment over tensor lifetimes, best of a few orders.

A pure function of (first use, last use, size) per tensor, inclusive lifetimes in any integer
time unit. Tensors are placed in a priority order (ties: earlier first use, then index); each
goes into the smallest gap between already-placed tensors whose lifetimes overlap its own, or
above them all (greedy by size with best-fit gaps: Pisarchyk & Lee, "Efficient memory management
for deep neural net inference", 2020). The orders tried, keeping the smallest arena:
  * "size": largest first (the paper's greedy by size);
  * "area": largest size x lifetime first (greedy by breadth / area);
  * "size_sqrt_duration": size x sqrt(lifetime), between the two.
The plan's arena size is compared with the peak of live bytes, a lower bound for any plan.
"""

from typing import NamedTuple

import numpy as np

from rtsoa._jit import jit_with_nrt


class MemoryPlan(NamedTuple):
    """Offsets per tensor, the arena size they need, and the live-bytes lower bound."""

    offsets: np.ndarray  # int64, one per tensor
    arena_size: int
    lower_bound: int
    strategy: str = "size"  # the order that produced this plan

    @property
    def ratio(self):
        """arena_size / lower_bound (1.0 is optimal; 1.0 for an empty plan)."""
        return self.arena_size / self.lower_bound if self.lower_bound else 1.0


def live_bytes_peak(first_use, last_use, sizes):
    """Peak over time of the summed sizes of live tensors (inclusive lifetimes)."""
    first_use = np.asarray(first_use, dtype=np.int64)
    last_use = np.asarray(last_use, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    if sizes.size == 0:
        return 0
    times = np.concatenate([first_use, last_use + 1])
    deltas = np.concatenate([sizes, -sizes])
    # at equal times, releases (negative deltas) come before acquisitions
    order = np.lexsort((deltas, times))
    return int(np.cumsum(deltas[order]).max(initial=0))


@jit_with_nrt  # allocates its work array: needs the reference-counting runtime
def _greedy_by_size(first_use, last_use, sizes, order, offsets):
    n = order.shape[0]
    placed = np.empty(n, dtype=np.int64)  # placed tensors, sorted by offset
    count = 0
    arena = np.int64(0)
    for k in range(n):
        tensor = order[k]
        size = sizes[tensor]
        first = first_use[tensor]
        last = last_use[tensor]
        previous_end = np.int64(0)
        best_offset = np.int64(-1)
        best_gap = np.int64(-1)
        for j in range(count):
            other = placed[j]
            if first_use[other] > last or last_use[other] < first:
                continue
            gap = offsets[other] - previous_end
            if gap >= size and (best_gap < 0 or gap < best_gap):
                best_gap = gap
                best_offset = previous_end
            previous_end = max(previous_end, offsets[other] + sizes[other])
        if best_offset < 0:
            best_offset = previous_end
        offsets[tensor] = best_offset
        arena = max(arena, best_offset + size)
        position = count
        while position > 0 and offsets[placed[position - 1]] > best_offset:
            placed[position] = placed[position - 1]
            position -= 1
        placed[position] = tensor
        count += 1
    return arena


ORDERS = ("size", "area", "size_sqrt_duration")


def _priority(order, first_use, last_use, sizes):
    duration = (last_use - first_use + 1).astype(np.float64)
    if order == "size":
        return sizes.astype(np.float64)
    if order == "area":
        return sizes * duration
    if order == "size_sqrt_duration":
        return sizes * np.sqrt(duration)
    raise ValueError(f"unknown order {order!r}; use {ORDERS}")


def plan_greedy_by_size(first_use, last_use, sizes, alignment=1, orders=ORDERS):
    """Assign offsets (multiples of `alignment`) so tensors alive at the same time never overlap.

    Runs the greedy best-fit placement once per priority order in `orders` (see the module
    docstring; `orders=("size",)` is plain greedy by size) and keeps the smallest arena (the
    first order wins ties). Returns a `MemoryPlan`; `lower_bound` is the live-bytes peak of the
    aligned sizes and `strategy` names the winning order.
    """
    first_use = np.ascontiguousarray(first_use, dtype=np.int64)
    last_use = np.ascontiguousarray(last_use, dtype=np.int64)
    sizes = np.ascontiguousarray(sizes, dtype=np.int64)
    if not (first_use.shape == last_use.shape == sizes.shape) or sizes.ndim != 1:
        raise ValueError("first_use, last_use and sizes must be 1-D arrays of one length")
    if (last_use < first_use).any() or (sizes < 0).any():
        raise ValueError("lifetimes must have first_use <= last_use and sizes must be >= 0")
    if alignment < 1:
        raise ValueError("alignment must be >= 1")
    if not orders:
        raise ValueError("orders must name at least one priority order")
    aligned = (sizes + alignment - 1) // alignment * alignment
    lower_bound = live_bytes_peak(first_use, last_use, aligned)
    best = None
    for name in orders:
        priority = _priority(name, first_use, last_use, aligned)
        order = np.lexsort((np.arange(sizes.size), first_use, -priority)).astype(np.int64)
        offsets = np.zeros(sizes.size, dtype=np.int64)
        arena = 0
        if sizes.size:
            arena = int(_greedy_by_size(first_use, last_use, aligned, order, offsets))
        if best is None or arena < best.arena_size:
            best = MemoryPlan(offsets, arena, lower_bound, name)
    return best
