"""The work a lowering may do (`rtsoa.limits.LoweringLimits`): what `lower` charges as it goes.

`lower` runs inside `running(limits)`; the passes call `spend(kind, count, where)` for the
sequence elements they resolve and the op calls they emit, and going past a limit is a
LoweringError naming the op and node (`where()`). Outside a lowering `spend` charges nothing.
"""

from contextlib import contextmanager
from contextvars import ContextVar

from rtsoa.errors import LoweringError

_budget = ContextVar("lowering_budget", default=None)  # the running lowering's WorkBudget


class WorkBudget:
    """What the running lowering may still do (`rtsoa.limits.LoweringLimits`)."""

    def __init__(self, limits):
        self.limits = limits
        self.spent = dict.fromkeys(limits._fields, 0)

    def spend(self, kind, count, where):
        """Count `count` more of `kind`; LoweringError naming `where()` past the limit."""
        self.spent[kind] += count
        limit = getattr(self.limits, kind)
        if self.spent[kind] > limit:
            raise LoweringError(
                f"{where()}: needs {count:,} {kind.replace('_', ' ')}, {self.spent[kind]:,} in "
                f"this lowering, past its limit of {limit:,} (LoweringLimits.{kind}; "
                "lower(..., limits=LoweringLimits(...)) sets it)"
            )


def spend(kind, count, where):
    """Charge `count` of `kind` (a LoweringLimits field) to the running lowering; `where()`
    names the op and node if that goes past the limit. Nothing outside `lower`."""
    budget = _budget.get()
    if budget is not None:
        budget.spend(kind, count, where)


@contextmanager
def running(limits):
    """The lowering inside this block is charged against `limits` (checked LoweringLimits)."""
    token = _budget.set(WorkBudget(limits))
    try:
        yield
    finally:
        _budget.reset(token)
