"""Helpers every executor loop shares: which successors a finished node releases, and the
per-step record of subscribed runs.

The loops' `dispatch` calls stay in each loop's own source: `specialise` binds the generated
switch to the loop function's globals only.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_out_of_line
from rtsoa.abi.status import (
    RESERVED_STATUS_BASE,
    STATUS_BAD_NOTIFY,
    STATUS_CANCELLED,
    STATUS_END_OF_SEQUENCE,
    STATUS_NOTIFY_BASE,
    STATUS_OK,
    STATUS_RESERVED_NOT_REGISTERED,
)
from rtsoa.device.atomics import atomic_load
from rtsoa.executors.cancel import REASON


@jit_inline_ir
def kernel_stop(status):
    """The status a run stops with after a kernel returned `status` (not OK, not an obeyed
    notify): `notify(k)` here is STATUS_BAD_NOTIFY (which `notify` itself returns for a bad
    choice), any other reserved code STATUS_RESERVED_NOT_REGISTERED. End-of-sequence passes;
    the executor checks in Python that its kernel is registered with `ends_sequence` (the loop
    returns the node)."""
    if status >= STATUS_NOTIFY_BASE:
        return np.int64(STATUS_BAD_NOTIFY)
    if (
        status >= RESERVED_STATUS_BASE
        and status != STATUS_END_OF_SEQUENCE
        and status != STATUS_BAD_NOTIFY
    ):
        return np.int64(STATUS_RESERVED_NOT_REGISTERED)
    return np.int64(status)


@jit_inline_ir
def released_edges(rt, status, node, cancel):
    """(first, last, stop) after `node` returned `status`: the edge rows [first, last) whose
    targets the loop decrements, and the status that stops the run (STATUS_OK to go on).

    STATUS_OK releases every successor; `notify(k)` only successor k, and only from a kernel
    registered as control flow, checked against the node's successor count (else
    STATUS_BAD_NOTIFY); any other status releases none and stops (`kernel_stop`). A switch
    also reads the cancellation reason (`rtsoa.executors.cancel`): a loop whose iterations
    run long kernels stops at its next iteration (STATUS_CANCELLED), not POLL_STEPS later.
    """
    offsets = rt.graph.succ_offsets
    first = offsets[node]
    last = offsets[node + 1]
    if status == STATUS_OK:
        return first, last, np.int64(STATUS_OK)
    if status < STATUS_NOTIFY_BASE:
        return first, first, kernel_stop(status)
    first += status - STATUS_NOTIFY_BASE
    if first >= last or not rt.graph.kernel_control_flow[rt.graph.node_dispatch[node]]:
        return first, first, np.int64(STATUS_BAD_NOTIFY)
    if atomic_load(cancel, REASON) != 0:
        return first, first, np.int64(STATUS_CANCELLED)
    return first, first + 1, np.int64(STATUS_OK)


@jit_out_of_line
def record_step(record, step, node, start, end):
    """Row `step` of the (capacity, 3) int64 record; steps past the capacity are dropped."""
    if step < record.shape[0]:
        record[step, 0] = node
        record[step, 1] = start
        record[step, 2] = end
