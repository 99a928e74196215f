"""Kernel status codes. 0 is success; any other value stops a run.

Codes from 1_000_000_000 up are reserved for the runtime: a kernel that returns one of them is
asking the executor for something (end the run, notify one successor), it is not failing.
User kernels report failures with any other non-zero int32.
"""

STATUS_OK = 0
RESERVED_STATUS_BASE = 1_000_000_000
# The graph's work is done for this run: stop without error (the reference's end-of-sequence).
STATUS_END_OF_SEQUENCE = 1_000_000_001
# Notify only successor number rt.state[STATE_SELECT] of this node (switch kernels).
STATUS_NOTIFY_ONE = 1_000_000_002
# Returned by the dispatch switch for an id it does not know (a bug, never a valid graph).
STATUS_UNKNOWN_KERNEL = 1_000_000_003
# A ready queue would overflow: a malformed control-flow graph made a node ready twice.
STATUS_QUEUE_OVERFLOW = 1_000_000_004
# A queue executor ran its step limit (a loop that never exits would otherwise hang).
STATUS_STEP_LIMIT = 1_000_000_005

STATUS_NAMES = {
    STATUS_OK: "ok",
    STATUS_END_OF_SEQUENCE: "end of sequence",
    STATUS_NOTIFY_ONE: "notify one",
    STATUS_UNKNOWN_KERNEL: "unknown kernel id in dispatch",
    STATUS_QUEUE_OVERFLOW: "ready queue overflow (malformed control flow)",
    STATUS_STEP_LIMIT: "step limit reached (a loop did not terminate; see max_steps)",
}


def is_reserved(status):
    """True for the runtime's own codes (never a kernel's failure code)."""
    return status >= RESERVED_STATUS_BASE
