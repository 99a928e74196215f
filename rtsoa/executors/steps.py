"""Helpers every executor loop shares: which successors a finished node releases, and the
per-step record of subscribed runs.

The loops' `dispatch` calls stay in each loop's own source: `specialise` binds the generated
switch to the loop function's globals only.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_out_of_line
from rtsoa.kernels.status import STATUS_BAD_NOTIFY, STATUS_NOTIFY_BASE, STATUS_OK


@jit_inline_ir
def released_edges(rt, status, node):
    """(first, last, stop) after `node` returned `status`: the edge rows [first, last) whose
    targets the loop decrements, and the status that stops the run (STATUS_OK to go on).

    STATUS_OK releases every successor; `notify(k)` only successor k, and only from a kernel
    registered as control flow, checked against the node's successor count (else
    STATUS_BAD_NOTIFY); any other status releases none and stops.
    """
    offsets = rt.graph.succ_offsets
    first = offsets[node]
    last = offsets[node + 1]
    if status == STATUS_OK:
        return first, last, np.int64(STATUS_OK)
    if status < STATUS_NOTIFY_BASE:
        return first, first, np.int64(status)
    first += status - STATUS_NOTIFY_BASE
    if first >= last or not rt.graph.kernel_control_flow[rt.graph.node_dispatch[node]]:
        return first, first, np.int64(STATUS_BAD_NOTIFY)
    return first, first + 1, np.int64(STATUS_OK)


@jit_out_of_line
def record_step(record, step, node, start, end):
    """Row `step` of the (capacity, 3) int64 record; steps past the capacity are dropped."""
    if step < record.shape[0]:
        record[step, 0] = node
        record[step, 1] = start
        record[step, 2] = end
