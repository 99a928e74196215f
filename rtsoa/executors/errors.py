"""KernelError: a kernel's non-zero status, carried to Python with where it happened;
ExecutorBusyError: an executor used by two threads at once; RunCancelled, RunTimeout and
RunInterrupted: a run stopped on request (`rtsoa.executors.cancel`)."""

from rtsoa.device.status import STATUS_NAMES as DEVICE_STATUS_NAMES
from rtsoa.errors import RtsoaError
from rtsoa.kernels import compute, model_control
from rtsoa.kernels.status import status_name
from rtsoa.ops.abi import OP_STATUS_NAMES

MODEL_STATUS_NAMES = {
    **{code: f"op: {name}" for code, name in OP_STATUS_NAMES.items()},
    compute.STATUS_BAD_OP_NODE: "op node: header and inputs / outputs do not match",
    compute.STATUS_NO_OP_LIBRARY: "op node: the graph's op table has no entry for its op",
    compute.STATUS_BAD_TENSOR: "op node: a tensor shape is unset, out of range or too large",
    compute.STATUS_CONSTANT_RANGE: "constant outside the constant blob or its block",
    compute.STATUS_SHAPE_CHANGED: "op node: output shape differs from the allocated one",
    model_control.STATUS_NOT_A_SCALAR: "control flow: a condition or trip count tensor does "
    "not hold exactly one element",
    model_control.STATUS_SCALAR_DTYPE: "control flow: a condition or trip count tensor's "
    "element type is not an integer or bool",
    model_control.STATUS_NO_SHAPE_ROWS: "control flow: the graph's values have no shape rows "
    "(not a lowered model)",
}


class KernelError(RtsoaError):
    """A run stopped on a kernel failure; the first failure wins.

    Attributes: status (int32 code), node (node id), kernel (kernel name), compute_node
    (originating compute node or -1), nodes_executed (including the failing node), op (the
    compute op an op node runs, e.g. "Div", or None).
    """

    def __init__(self, status, node, kernel, compute_node, nodes_executed, op=None):
        self.status = int(status)
        self.op = op
        self.node = int(node)
        self.kernel = kernel
        self.compute_node = int(compute_node)
        self.nodes_executed = int(nodes_executed)
        meaning = status_name(self.status)
        if meaning is None and self.status in DEVICE_STATUS_NAMES:
            meaning = f"device: {DEVICE_STATUS_NAMES[self.status]}"
        if meaning is None:
            meaning = MODEL_STATUS_NAMES.get(self.status)
        detail = f" ({meaning})" if meaning else ""
        running = f" (op {op})" if op else ""
        super().__init__(
            f"kernel {kernel!r}{running} failed with status {self.status}{detail} at node "
            f"{self.node} (compute node {self.compute_node}) after {self.nodes_executed} node(s)"
        )

    def __reduce__(self):
        arguments = (self.status, self.node, self.kernel, self.compute_node, self.nodes_executed)
        return (type(self), (*arguments, self.op))


class ExecutorBusyError(RtsoaError):
    """`run()` was called while the same executor was running in another thread."""


class RunCancelled(RtsoaError):
    """A run stopped because `cancel()` was called while it ran. The run's blocks were freed
    as after any failed run; the executor is ready for the next run.

    Attributes: nodes_executed (nodes the run had executed when it stopped)."""

    def __init__(self, nodes_executed, message=None):
        self.nodes_executed = int(nodes_executed)
        super().__init__(message or f"run cancelled after {self.nodes_executed:,} node(s)")

    def __reduce__(self):
        return (type(self), (self.nodes_executed,))


class RunTimeout(RunCancelled):
    """A run stopped because its `timeout=` passed. Attributes: nodes_executed, timeout
    (seconds)."""

    def __init__(self, nodes_executed, timeout):
        self.timeout = timeout
        super().__init__(
            nodes_executed,
            f"run stopped by its timeout of {timeout} s after {int(nodes_executed):,} node(s)",
        )

    def __reduce__(self):
        return (type(self), (self.nodes_executed, self.timeout))


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped a run started from the main thread: a KeyboardInterrupt, raised
    once the run stopped and its blocks were freed, so `except Exception` does not swallow it.

    Attributes: nodes_executed (None if Ctrl-C came while the run's Python part ran, before
    or after its compiled loop)."""

    def __init__(self, nodes_executed):
        self.nodes_executed = None if nodes_executed is None else int(nodes_executed)
        if self.nodes_executed is None:
            super().__init__("run interrupted")
        else:
            super().__init__(f"run interrupted after {self.nodes_executed:,} node(s)")

    def __reduce__(self):
        return (type(self), (self.nodes_executed,))
