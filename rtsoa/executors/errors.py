"""KernelError: a kernel's non-zero status, carried to Python with where it happened;
ExecutorBusyError: an executor used by two threads at once."""

from rtsoa.device.status import STATUS_NAMES as DEVICE_STATUS_NAMES
from rtsoa.errors import RtsoaError
from rtsoa.kernels.status import status_name


class KernelError(RtsoaError):
    """A run stopped on a kernel failure; the first failure wins.

    Attributes: status (int32 code), node (node id), kernel (kernel name), compute_node
    (originating compute node or -1), nodes_executed (including the failing node).
    """

    def __init__(self, status, node, kernel, compute_node, nodes_executed):
        self.status = int(status)
        self.node = int(node)
        self.kernel = kernel
        self.compute_node = int(compute_node)
        self.nodes_executed = int(nodes_executed)
        meaning = status_name(self.status)
        if meaning is None and self.status in DEVICE_STATUS_NAMES:
            meaning = f"device: {DEVICE_STATUS_NAMES[self.status]}"
        detail = f" ({meaning})" if meaning else ""
        super().__init__(
            f"kernel {kernel!r} failed with status {self.status}{detail} at node {self.node} "
            f"(compute node {self.compute_node}) after {self.nodes_executed} node(s)"
        )

    def __reduce__(self):
        arguments = (self.status, self.node, self.kernel, self.compute_node, self.nodes_executed)
        return (type(self), arguments)


class ExecutorBusyError(RtsoaError):
    """`run()` was called while the same executor was running in another thread."""
