"""Kernels for the multithread executor's tests: they record which worker ran them and race
on a shared value slot inside critical sections (a lost update would show a data race)."""

import numpy as np

from rtsoa._jit import jit_inline_ir
from rtsoa.device.atomics import atomic_add, atomic_load, cpu_yield
from rtsoa.device.lock import device_enter, device_exit
from rtsoa.kernels import (
    REGISTRY,
    KernelRegistry,
    attribute,
    builtin,
    input_value,
    kernel,
    workload,
)

MT_REGISTRY = KernelRegistry()
MT_REGISTRY.register("Checksum0", builtin.checksum, constants=REGISTRY["Checksum0"].constants)
MT_REGISTRY.register("Fail", workload.fail)

# WorkerState.scratch words the kernels count into (per thread, never shared)
SCRATCH_MEMORY = 1
SCRATCH_LAUNCH = 2
SCRATCH_NORMAL = 3
SCRATCH_MET = 4  # launches that met another one computing at the same time
_LCG_A = np.uint64(6364136223846793005)
_LCG_C = np.uint64(1442695040888963407)


@jit_inline_ir
def _slow_increment(rt, node, scratch):
    """slots[input 0] += 1 with attrs[0] LCG rounds between the read and the write: two
    threads inside at once lose an update with high probability."""
    value = input_value(rt, node, 0)
    before = rt.values.slots[value]
    x = np.uint64(node)
    for _ in range(attribute(rt, node, 0)):
        x = x * _LCG_A + _LCG_C
    rt.worker.scratch[0] ^= np.int64(x & np.uint64(0xFFFF))
    rt.values.slots[value] = before + 1
    rt.worker.scratch[scratch] += 1
    return np.int32(0)


_REQUIRES = {"inputs": 1, "attributes": 1}


@kernel(
    "MemoryCount",
    worker="memory",
    critical_section="memory",
    requires=_REQUIRES,
    registry=MT_REGISTRY,
)
def memory_count(rt, node):
    return _slow_increment(rt, node, SCRATCH_MEMORY)


@kernel(
    "LaunchCount",
    worker="launch",
    critical_section="launch",
    requires=_REQUIRES,
    registry=MT_REGISTRY,
)
def launch_count(rt, node):
    return _slow_increment(rt, node, SCRATCH_LAUNCH)


@kernel("NormalCount", requires={"attributes": 1}, registry=MT_REGISTRY)
def normal_count(rt, node):
    """Busy for attrs[0] rounds, counted in the worker's scratch (no shared write)."""
    x = np.uint64(node)
    for _ in range(attribute(rt, node, 0)):
        x = x * _LCG_A + _LCG_C
    rt.worker.scratch[0] ^= np.int64(x & np.uint64(0xFFFF))
    rt.worker.scratch[SCRATCH_NORMAL] += 1
    return np.int32(0)


@kernel(
    "LaunchMeet",
    worker="launch",
    critical_section="launch",
    requires={"inputs": 4, "attributes": 2},
    registry=MT_REGISTRY,
    locks_device=True,
)
def launch_meet(rt, node):
    """A launch that locks the device itself: its "device calls" (the slow increment of
    input 0, racing the MemoryCount kernels on the same slot) under the device lock, then
    its "computation" outside it. That counts itself in (input 1) and out (input 2); one
    that sees two launches in at once sets input 3, and each waits, up to attrs[1] yields,
    for input 3 to be set (counted in SCRATCH_MET if it was)."""
    device_enter(rt.device)
    _slow_increment(rt, node, SCRATCH_LAUNCH)
    device_exit(rt.device)
    slots = rt.values.slots
    arrived, left, met = (
        input_value(rt, node, 1),
        input_value(rt, node, 2),
        input_value(rt, node, 3),
    )
    atomic_add(slots, arrived, 1)
    for _ in range(attribute(rt, node, 1)):
        if atomic_load(slots, arrived) - atomic_load(slots, left) >= 2:
            atomic_add(slots, met, 1)
        if atomic_load(slots, met) > 0:
            rt.worker.scratch[SCRATCH_MET] += 1
            break
        cpu_yield()
    atomic_add(slots, left, 1)
    return np.int32(0)
