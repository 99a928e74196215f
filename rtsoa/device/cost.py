"""Cost model of a launch on the simulated device, with its documented defaults.

duration_ns = launch_latency_ns + bytes_moved / bytes_per_ns + flops / flops_per_ns

Defaults describe a mid-range accelerator: 2 us launch latency, 1.6 TB/s of memory bandwidth
(1600 bytes per ns), 256 TFLOP/s of peak compute (256,000 flops per ns); an event record costs
nothing. They only set the scale of simulated times; studies should pass their own.
"""

import math
import numbers
from dataclasses import dataclass

import numpy as np

from rtsoa.device.layout import (
    COST_BYTES_PER_NS,
    COST_EVENT_RECORD_NS,
    COST_FLOPS_PER_NS,
    COST_LAUNCH_LATENCY_NS,
    NUM_COST,
)


@dataclass(frozen=True)
class CostModel:
    """Launch cost parameters (nanoseconds, bytes per ns, flops per ns)."""

    launch_latency_ns: float = 2000.0
    bytes_per_ns: float = 1600.0
    flops_per_ns: float = 256000.0
    event_record_ns: float = 0.0

    def __post_init__(self):
        for name in ("launch_latency_ns", "bytes_per_ns", "flops_per_ns", "event_record_ns"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"{name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value!r}")
        if self.bytes_per_ns <= 0 or self.flops_per_ns <= 0:
            raise ValueError("bandwidth and peak compute must be positive")
        if self.launch_latency_ns < 0 or self.event_record_ns < 0:
            raise ValueError("latencies must be non-negative")

    def to_array(self):
        """The float64 array stored in `DeviceState.cost`."""
        array = np.zeros(NUM_COST, dtype=np.float64)
        array[COST_LAUNCH_LATENCY_NS] = self.launch_latency_ns
        array[COST_BYTES_PER_NS] = self.bytes_per_ns
        array[COST_FLOPS_PER_NS] = self.flops_per_ns
        array[COST_EVENT_RECORD_NS] = self.event_record_ns
        return array

    def duration_ns(self, bytes_moved, flops):
        """Same formula as the jitted `launch_cost_ns`, for references and tests."""
        return self.launch_latency_ns + bytes_moved / self.bytes_per_ns + flops / self.flops_per_ns
