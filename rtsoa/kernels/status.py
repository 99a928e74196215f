"""The statuses a kernel returns, and `notify(k)`. The codes are defined in `rtsoa.abi.status`
(`RuntimeStatus`); they are re-exported here for kernel authors.

0 is success; any other value stops a run, except the reserved ones. Codes from
RESERVED_STATUS_BASE up are the runtime's: a kernel that returns one of them is asking the
executor for something (end the run, continue on one successor), it is not failing. Only
kernels registered for it may ask: `notify(k)` is obeyed from `control_flow` kernels,
STATUS_END_OF_SEQUENCE from `ends_sequence` kernels; from any other kernel `notify(k)` stops
the run with STATUS_BAD_NOTIFY and every other reserved code with
STATUS_RESERVED_NOT_REGISTERED (`executors.steps.kernel_stop`). User kernels report failures
with any other non-zero int32.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir
from rtsoa.abi.status import (  # noqa: F401 - re-exported for kernel authors
    MAX_NOTIFY,
    RESERVED_STATUS_BASE,
    STATUS_BAD_NOTIFY,
    STATUS_CANCELLED,
    STATUS_END_OF_SEQUENCE,
    STATUS_NOTIFY_BASE,
    STATUS_OK,
    STATUS_QUEUE_OVERFLOW,
    STATUS_RESERVED_NOT_REGISTERED,
    STATUS_STEP_LIMIT,
    STATUS_UNKNOWN_KERNEL,
    describe,
    is_reserved,
)


@jit_inline_ir
def notify(successor):
    """The status a switch kernel returns to continue on successor number `successor` only.

    The executor checks the number against the node's successors (STATUS_BAD_NOTIFY if out of
    range); a negative or too large choice becomes STATUS_BAD_NOTIFY here.
    """
    if successor < 0 or successor > MAX_NOTIFY:
        return np.int32(STATUS_BAD_NOTIFY)
    return np.int32(STATUS_NOTIFY_BASE + successor)
