"""The device lock: what lets several workers of one run call into the device at once.

The device's tables (allocator, streams, events, hazard history, trace) are written by
`device_malloc`, `device_free`, `launch_begin`, `device_access` and the event calls with plain
loads and stores. A run whose device calls all come from one worker at a time needs no lock;
a multithread run with several workers issuing them (`MultithreadExecutor` sharing the
launches) sets `LOCK_SHARED` for the run (`share_device`) and every device call then happens
under the lock: the executor holds it around a kernel with a critical section, and a kernel
that computes (an op launch) holds it only around its device calls (`device_enter` /
`device_exit`), so its computation on the arena runs outside it, beside other launches.

A launch's computation reads and writes only the arena bytes of blocks the graph's edges keep
live for it, and the block rows it reads (`block_location`: placement, offset, size,
generation) do not change while its blocks are live, so it needs no lock.
"""

from rtsoa._jit import jit_inline_ir
from rtsoa.device.atomics import spin_lock, spin_unlock
from rtsoa.device.layout import LOCK_HELD, LOCK_SHARED


@jit_inline_ir
def device_enter(dev):
    """Take the device lock when the run shares the device among workers; else nothing."""
    if dev.lock[LOCK_SHARED] != 0:
        spin_lock(dev.lock, LOCK_HELD)


@jit_inline_ir
def device_exit(dev):
    """Release the lock `device_enter` took (the same test, constant during a run)."""
    if dev.lock[LOCK_SHARED] != 0:
        spin_unlock(dev.lock, LOCK_HELD)


@jit_inline_ir
def lock_device(dev):
    """Take the device lock whatever the run (the executor, around a critical section)."""
    spin_lock(dev.lock, LOCK_HELD)


@jit_inline_ir
def unlock_device(dev):
    """Release the lock `lock_device` took."""
    spin_unlock(dev.lock, LOCK_HELD)


def share_device(state, shared):
    """Before a run (no worker running): whether its workers call into the device at once.
    Clears the lock word too (a run that raised between a lock and its release is over)."""
    state.lock[LOCK_HELD] = 0
    state.lock[LOCK_SHARED] = 1 if shared else 0
