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
