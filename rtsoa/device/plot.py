"""Memory-over-time plot (PNG) from the device's trace ring, drawn with matplotlib's Agg."""

import numpy as np

from rtsoa.device.layout import (
    EV_ALLOC,
    EV_FREE,
    EV_SEGMENT_ALLOC,
    EV_SEGMENT_FREE,
    NUM_PLACEMENTS,
    PLACEMENT_NAMES,
    TRACE_ALLOCATED_AFTER,
    TRACE_KIND,
    TRACE_PLACEMENT,
    TRACE_RESERVED_AFTER,
)
from rtsoa.device.trace import trace_rows

_MEMORY_KINDS = (EV_ALLOC, EV_FREE, EV_SEGMENT_ALLOC, EV_SEGMENT_FREE)


def memory_series(dev):
    """Per placement: (event index, allocated bytes, reserved bytes) after each memory event."""
    rows, _, first = trace_rows(dev)
    memory = np.isin(rows[:, TRACE_KIND], _MEMORY_KINDS)
    series = {}
    for placement in range(NUM_PLACEMENTS):
        mask = memory & (rows[:, TRACE_PLACEMENT] == placement)
        if not mask.any():
            continue
        index = np.flatnonzero(mask) + first
        series[PLACEMENT_NAMES[placement]] = (
            index,
            rows[mask, TRACE_ALLOCATED_AFTER],
            rows[mask, TRACE_RESERVED_AFTER],
        )
    return series


def plot_memory(dev, path, title=None):
    """Write a PNG of allocated and reserved MiB per trace event; returns `path`.

    Uses the Agg canvas directly, so the caller's pyplot backend is left alone.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    series = memory_series(dev)
    for name, (index, allocated, reserved) in series.items():
        axes.step(index, allocated / 2**20, where="post", label=f"{name} allocated")
        axes.step(index, reserved / 2**20, where="post", linestyle="--", label=f"{name} reserved")
    axes.set_xlabel("device trace event")
    axes.set_ylabel("MiB")
    axes.set_title(title or "simulated device memory")
    if series:
        axes.legend(loc="upper left")
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, format="png")
    return path
