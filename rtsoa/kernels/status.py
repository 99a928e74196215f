"""Kernel status codes. 0 is success; any other value stops a run, except the reserved ones.

Codes from RESERVED_STATUS_BASE up are the runtime's: a kernel that returns one of them is
asking the executor for something (end the run, continue on one successor), it is not failing.
Only kernels registered for it may ask: `notify(k)` is obeyed from `control_flow` kernels,
STATUS_END_OF_SEQUENCE from `ends_sequence` kernels; from any other kernel `notify(k)` stops
the run with STATUS_BAD_NOTIFY and every other reserved code with
STATUS_RESERVED_NOT_REGISTERED (`executors.steps.kernel_stop`). User kernels report failures
with any other non-zero int32.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir

STATUS_OK = 0
RESERVED_STATUS_BASE = 1_000_000_000
# The graph's work is done for this run: stop without error (the reference's end-of-sequence).
STATUS_END_OF_SEQUENCE = 1_000_000_001
# (1_000_000_002 was "notify the successor in rt.state[STATE_SELECT]": the choice now travels
# in the status itself, see STATUS_NOTIFY_BASE.)
# Returned by the dispatch switch for an id it does not know (a bug, never a valid graph).
STATUS_UNKNOWN_KERNEL = 1_000_000_003
# A ready queue would overflow: a malformed control-flow graph made a node ready twice.
STATUS_QUEUE_OVERFLOW = 1_000_000_004
# A queue executor ran its step limit (a loop that never exits would otherwise hang).
STATUS_STEP_LIMIT = 1_000_000_005
# A kernel asked to continue on successor k, but the node has no successor k.
STATUS_BAD_NOTIFY = 1_000_000_006
# A kernel returned a reserved status it is not registered to return (e.g. end-of-sequence
# from a kernel without `ends_sequence=True`, or a code only the executors produce).
STATUS_RESERVED_NOT_REGISTERED = 1_000_000_007
# The run was asked to stop (cancel(), a timeout, Ctrl-C; rtsoa.executors.cancel): only the
# executor loops return it, and the executor raises RunCancelled / RunTimeout /
# RunInterrupted instead of KernelError.
STATUS_CANCELLED = 1_000_000_008
# Statuses from here up mean "notify only successor (status - STATUS_NOTIFY_BASE)": the switch
# kernels' choice travels in the returned status, so no state is shared between threads.
STATUS_NOTIFY_BASE = 1_100_000_000
MAX_NOTIFY = np.iinfo(np.int32).max - STATUS_NOTIFY_BASE

STATUS_NAMES = {
    STATUS_OK: "ok",
    STATUS_END_OF_SEQUENCE: "end of sequence",
    STATUS_UNKNOWN_KERNEL: "unknown kernel id in dispatch",
    STATUS_QUEUE_OVERFLOW: "ready queue overflow (malformed control flow)",
    STATUS_STEP_LIMIT: (
        "step limit reached (a loop did not terminate, or a node of a graph without loops ran "
        "twice; see max_steps)"
    ),
    STATUS_BAD_NOTIFY: "a switch chose a successor the node does not have",
    STATUS_RESERVED_NOT_REGISTERED: (
        "a kernel returned a reserved status it is not registered to return (end of sequence "
        "needs ends_sequence=True; the executors' own codes come from no kernel)"
    ),
    STATUS_CANCELLED: "the run was cancelled (cancel(), a timeout or Ctrl-C)",
}


def is_reserved(status):
    """True for the runtime's own codes (never a kernel's failure code)."""
    return status >= RESERVED_STATUS_BASE


def status_name(status):
    """A short meaning of a runtime status, or None for kernel-defined codes."""
    if status >= STATUS_NOTIFY_BASE:
        return f"notify successor {status - STATUS_NOTIFY_BASE}"
    return STATUS_NAMES.get(status)


@jit_inline_ir
def notify(successor):
    """The status a switch kernel returns to continue on successor number `successor` only.

    The executor checks the number against the node's successors (STATUS_BAD_NOTIFY if out of
    range); a negative or too large choice becomes STATUS_BAD_NOTIFY here.
    """
    if successor < 0 or successor > MAX_NOTIFY:
        return np.int32(STATUS_BAD_NOTIFY)
    return np.int32(STATUS_NOTIFY_BASE + successor)
