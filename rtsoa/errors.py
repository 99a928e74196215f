"""Every exception class rtsoa defines. Jitted code never raises; wrappers turn statuses into
these, and every message that names a status says what it means through
`rtsoa.abi.status.describe`. Subpackages re-export the classes they raise."""

from rtsoa.abi.status import (
    STATUS_INVALID_STATE,
    STATUS_OUT_OF_MEMORY,
    describe,
    meaning,
    status_label,
)


class RtsoaError(Exception):
    """Base class of every error rtsoa raises on purpose."""


# -- graphs, kernels, models ------------------------------------------------------------------


class GraphFormatError(RtsoaError, ValueError):
    """A graph file or in-memory graph breaks the format contract.

    `table`, `column` and `row` name the first offending place (None where not applicable).
    """

    def __init__(self, message, table=None, column=None, row=None):
        self.table = table
        self.column = column
        self.row = row
        where = []
        if table is not None:
            where.append(f"table {table!r}")
        if column is not None:
            where.append(f"column {column!r}")
        if row is not None:
            where.append(f"row {row}")
        prefix = (", ".join(where) + ": ") if where else ""
        super().__init__(prefix + message)


class OptionError(ValueError):
    """A generator option out of range; `option` names it (the CLI shows it as --option)."""

    def __init__(self, option, reason):
        self.option = option
        self.reason = reason
        super().__init__(f"{option}: {reason}")


class UnknownKernelError(RtsoaError, KeyError):
    """A graph names a kernel that is not in the registry."""

    def __str__(self):
        return str(self.args[0]) if self.args else "unknown kernel"


class TooLargeError(RtsoaError, ValueError):
    """A request that would not fit: in memory (estimated before anything is allocated) or in
    the id types of the format (int32 node ids). The message gives the estimate and the limit."""


class KernelDefinitionError(RtsoaError, ValueError):
    """A kernel rtsoa cannot register or compile as written: a bad name, a return type other
    than int32, or arrays created without `allocates=True`. The message names the kernel."""


class LoweringError(RtsoaError, ValueError):
    """A model rtsoa cannot lower: an unsupported op (named with its node and opset), a bad
    attribute, a shape that cannot work. Raised at lowering, never at run time."""


class ModelInputError(RtsoaError, ValueError):
    """Inputs that do not fit a model: missing, extra, wrongly typed or shaped (named)."""


class ConstantMemoryError(ModelInputError):
    """A bad `constant_memory` entry; `weight` names it (None for the mapping itself)."""

    def __init__(self, message, weight=None):
        super().__init__(message)
        self.weight = weight


class ModelStateError(RtsoaError, RuntimeError):
    """A ModelExecutor call out of order (execute before load, load twice, after unload)."""


class SessionOptionsError(RtsoaError, ValueError):
    """A `rtsoa.SessionOptions` field of the wrong type or value; the message names the field."""


class ModelResourceError(RtsoaError, RuntimeError):
    """Bad or exhausted stream / event / notify allocators, or a bad memory allocator."""


class SessionStateError(RtsoaError, RuntimeError):
    """A closed session used again."""


class UnknownOpError(RtsoaError, KeyError):
    """An op name this rtsoa does not register."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


class OpError(RtsoaError):
    """An op refused its inputs or attributes (status names the reason)."""

    def __init__(self, op, status, message=""):
        self.op = op
        self.status = status
        reason = meaning(status) or f"status {status}"
        super().__init__(f"{op}: {reason}" + (f" ({message})" if message else ""))


# -- the simulated device -----------------------------------------------------------------------


class DeviceError(RtsoaError, RuntimeError):
    """A device call failed; `status` is the device status code. Also a RuntimeError, as it
    was before it joined rtsoa's error hierarchy."""

    def __init__(self, status, message):
        super().__init__(f"{status_label(status)}: {message}")
        self.status = status


class InvalidBlock(DeviceError):
    """Stale, double-freed or unknown block handle, or another device's."""


class InvalidArgument(DeviceError, ValueError):
    """A size, cost, stream, event or placement out of range (or not an int64); nothing
    changed on the device. Also a ValueError."""


class DeviceStateError(DeviceError):
    """A `DeviceState` breaks the layout contract jitted code relies on; `field` names the
    first offending field."""

    def __init__(self, field, message):
        super().__init__(STATUS_INVALID_STATE, f"field {field!r}: {message}")
        self.field = field


class DeviceOutOfMemory(DeviceError):
    """No memory after the wait -> sync -> release -> retry path; the device stays usable."""

    def __init__(self, placement, requested, allocated, reserved, cap, largest_free, fragmentation):
        self.placement = placement
        self.requested = requested
        self.allocated = allocated
        self.reserved = reserved
        self.cap = cap
        self.largest_free = largest_free
        self.fragmentation = fragmentation
        super().__init__(
            STATUS_OUT_OF_MEMORY,
            f"tried to allocate {_human(requested)} on {placement}: "
            f"{_human(allocated)} allocated, {_human(reserved)} reserved "
            f"(cap {_human(cap)}), largest free block {_human(largest_free)}, "
            f"fragmentation {fragmentation:.1%}",
        )


def _human(nbytes):
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{value:.2f} GiB"


# -- runs -----------------------------------------------------------------------------------------


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
        meaning_ = describe(self.status)
        detail = f" ({meaning_})" if meaning_ else ""
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
        return (type(self), (self.nodes_executed, str(self)))


class RunTimeout(RunCancelled):
    """A run stopped because its `timeout=` passed. Attributes: nodes_executed, timeout
    (seconds)."""

    def __init__(self, nodes_executed, timeout, message=None):
        self.timeout = timeout
        super().__init__(
            nodes_executed,
            message
            or f"run stopped by its timeout of {timeout} s after {int(nodes_executed):,} node(s)",
        )

    def __reduce__(self):
        return (type(self), (self.nodes_executed, self.timeout, str(self)))


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


# -- batches --------------------------------------------------------------------------------------


class BatchError(RtsoaError, ValueError):
    """A batch that cannot start or go on: a bad job list, manifest, option or results file.
    The message names the job, line or option."""


class BatchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a batch; the results file holds `summary.recorded` rows."""

    def __init__(self, summary):
        super().__init__("batch interrupted")
        self.summary = summary


class UnsupportedJob(Exception):
    """A job this rtsoa cannot run yet (recorded with status "unsupported")."""
