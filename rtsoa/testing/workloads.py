"""Seeded allocation workloads shared by tests and benchmarks.

`random_sequence` is the benchmark's random alloc / free sequence: at each step, with probability
`alloc_probability` allocate a size drawn log-uniformly from [min_size, max_size] (1 B..5 MiB by
default), otherwise free a uniformly chosen live block (an allocation when none is live).
"""

from typing import NamedTuple

import numpy as np

from rtsoa._jit import jit_out_of_line
from rtsoa.abi.status import describe
from rtsoa.device.malloc import device_free, device_malloc

OP_FREE = 0
OP_ALLOC = 1


class Sequence(NamedTuple):
    """ops[k] (OP_ALLOC / OP_FREE), sizes[k] (bytes, allocs), ids[k] (tensor id)."""

    ops: np.ndarray
    sizes: np.ndarray
    ids: np.ndarray
    num_tensors: int

    def lifetimes(self):
        """(first_use, last_use, size) per tensor id; never-freed tensors live to the end."""
        steps = self.ops.shape[0]
        first = np.zeros(self.num_tensors, dtype=np.int64)
        last = np.full(self.num_tensors, steps, dtype=np.int64)
        size = np.zeros(self.num_tensors, dtype=np.int64)
        alloc = self.ops == OP_ALLOC
        first[self.ids[alloc]] = np.flatnonzero(alloc)
        size[self.ids[alloc]] = self.sizes[alloc]
        free = ~alloc
        last[self.ids[free]] = np.flatnonzero(free)
        return first, last, size

    def live_bytes_peak(self):
        """Peak of the summed sizes of live tensors (the lower bound for any allocator)."""
        delta = np.where(self.ops == OP_ALLOC, self.sizes, 0)
        first, _, size = self.lifetimes()
        free = self.ops == OP_FREE
        delta[free] = -size[self.ids[free]]
        return int(np.cumsum(delta).max(initial=0))


def random_sequence(seed, steps, alloc_probability, min_size=1, max_size=5 << 20):
    """The seeded random alloc / free sequence (see module docstring)."""
    rng = np.random.default_rng(seed)
    draws = rng.random(steps)
    log_sizes = rng.uniform(np.log(min_size), np.log(max_size + 1), steps)
    sizes_drawn = np.minimum(np.exp(log_sizes).astype(np.int64), max_size)
    picks = rng.random(steps)
    ops = np.zeros(steps, dtype=np.int64)
    sizes = np.zeros(steps, dtype=np.int64)
    ids = np.zeros(steps, dtype=np.int64)
    live = []
    next_id = 0
    for step in range(steps):
        if draws[step] < alloc_probability or not live:
            ops[step] = OP_ALLOC
            sizes[step] = sizes_drawn[step]
            ids[step] = next_id
            live.append(next_id)
            next_id += 1
        else:
            position = int(picks[step] * len(live))
            live[position], live[-1] = live[-1], live[position]
            ids[step] = live.pop()
    return Sequence(ops, sizes, ids, next_id)


@jit_out_of_line
def run_sequence(dev, placement, ops, sizes, ids, handles, stream):
    """Run a sequence on `dev` from njit code; `handles` (int64, one per tensor) receives the
    handles. Returns (status, failing step or -1, peak reserved bytes of the placement)."""
    for step in range(ops.shape[0]):
        if ops[step] == OP_ALLOC:
            handle = device_malloc(dev, placement, sizes[step], stream)
            if handle < 0:
                return -handle, step
            handles[ids[step]] = handle
        else:
            status = device_free(dev, handles[ids[step]], stream)
            if status != 0:
                return np.int64(status), step
    return np.int64(0), np.int64(-1)


def churn_workload(seed, pairs, live_blocks=256, min_size=1, max_size=1 << 20):
    """Steady-state mixed workload: `live_blocks` blocks stay live; each step frees a random
    one and allocates a log-uniform size in its place. Returns (initial sizes, victims, sizes)."""
    rng = np.random.default_rng(seed)

    def draw(count):
        logs = rng.uniform(np.log(min_size), np.log(max_size + 1), count)
        return np.minimum(np.exp(logs).astype(np.int64), max_size)

    initial = draw(live_blocks)
    victims = rng.integers(0, live_blocks, pairs).astype(np.int64)
    return initial, victims, draw(pairs)


@jit_out_of_line
def churn_fill(dev, placement, initial, handles, stream):
    """Allocate the workload's initial live blocks; returns a status."""
    for k in range(initial.shape[0]):
        handle = device_malloc(dev, placement, initial[k], stream)
        if handle < 0:
            return -handle
        handles[k] = handle
    return np.int64(0)


@jit_out_of_line
def churn_run(dev, placement, victims, sizes, handles, stream):
    """One free + malloc pair per step from njit code; returns a status."""
    for step in range(victims.shape[0]):
        victim = victims[step]
        status = device_free(dev, handles[victim], stream)
        if status != 0:
            return np.int64(status)
        handle = device_malloc(dev, placement, sizes[step], stream)
        if handle < 0:
            return -handle
        handles[victim] = handle
    return np.int64(0)


@jit_out_of_line
def churn_drain(dev, handles, stream):
    """Free every live block of the workload; returns a status."""
    for k in range(handles.shape[0]):
        status = device_free(dev, handles[k], stream)
        if status != 0:
            return np.int64(status)
    return np.int64(0)


def reserved_over_lower_bound(sequence, config):
    """Replay `sequence` on a fresh device with allocator `config`; reserved peak divided by
    the live-bytes lower bound (the fragmentation figure of the device benchmark)."""
    from rtsoa.device.device import Device
    from rtsoa.device.layout import STAT_PEAK, STAT_REQUESTED_BYTES, STAT_RESERVED_BYTES

    device = Device(hbm_bytes=8 << 30, allocator=config, trace=False)
    handles = np.full(sequence.num_tensors, -1, dtype=np.int64)
    status, _ = run_sequence(
        device.state, 0, sequence.ops, sequence.sizes, sequence.ids, handles, 0
    )
    if status != 0:
        raise RuntimeError(f"sequence replay failed with status {status} ({describe(status)})")
    lower_bound = sequence.live_bytes_peak()
    if device.state.stats[0, STAT_REQUESTED_BYTES + STAT_PEAK] != lower_bound:
        raise RuntimeError("tracked requested-bytes peak differs from the sequence's live peak")
    return device.state.stats[0, STAT_RESERVED_BYTES + STAT_PEAK] / lower_bound


def lowered_reserved_over_requested(nodes, streams, seed):
    """Run the seeded synthetic lowered graph once with the sequential executor (no host sync
    inside the run) and return its HBM reserved peak / requested peak (the lowered-run
    fragmentation figure of the tests and benchmarks). Raises if the run left a hazard or a
    live block."""
    from rtsoa.executors import prepare_executor
    from rtsoa.graph.generators import generate

    executor = prepare_executor(
        generate("lowered", nodes, seed=seed, streams=streams), "sequential"
    )
    executor.run()
    device = executor.device
    device.synchronize()
    if device.hazard_count != 0:
        raise RuntimeError(f"lowered run reported hazards: {device.hazards()[:3]}")
    hbm = device.stats()["hbm"]
    if hbm["allocated_bytes.current"] != 0:
        raise RuntimeError("lowered run left device blocks allocated")
    return hbm["reserved_bytes.peak"] / hbm["requested_bytes.peak"]
