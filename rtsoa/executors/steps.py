"""Helpers every executor loop shares: the per-step record of subscribed runs."""

from rtsoa._jit import jit_out_of_line


@jit_out_of_line
def record_step(record, step, node, start, end):
    """Row `step` of the (capacity, 3) int64 record; steps past the capacity are dropped."""
    if step < record.shape[0]:
        record[step, 0] = node
        record[step, 1] = start
        record[step, 2] = end
