"""Typed errors raised by rtsoa. Jitted code never raises; wrappers turn statuses into these."""


class RtsoaError(Exception):
    """Base class of every error rtsoa raises on purpose."""


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


class ModelStateError(RtsoaError, RuntimeError):
    """A ModelExecutor call out of order (execute before load, load twice, after unload)."""


class SessionOptionsError(RtsoaError, ValueError):
    """A `rtsoa.SessionOptions` field of the wrong type or value; the message names the field."""
