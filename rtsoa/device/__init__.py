"""Simulated device: arenas with a caching allocator, streams / events on a device clock, a
happens-before hazard checker, statistics, a replayable trace and a static memory planner.

Kernels (njit) call the functions re-exported here on `rt.device` (a `DeviceState`):
`device_malloc`, `device_free`, `device_launch`, `device_access`, `event_record`,
`stream_wait_event`, `stream_synchronize`, `device_synchronize`, `event_synchronize`,
`event_query`, `block_location`, `block_bytes`. Python code uses `Device` (built for a graph
by `device_for_graph`); `check_state` checks a `DeviceState` before jitted code runs on it.
"""

from rtsoa.device.allocators import (
    Allocator,
    CachingAllocator,
    ExternalAllocator,
    allocator_for,
    create_external_allocator,
)
from rtsoa.device.config import AllocatorConfig
from rtsoa.device.cost import CostModel
from rtsoa.device.device import Device, device_for_graph
from rtsoa.device.handles import block_bytes, block_location
from rtsoa.device.hazards import device_access
from rtsoa.device.malloc import device_free, device_malloc, release_cached, round_request
from rtsoa.device.planner import MemoryPlan, live_bytes_peak, plan_greedy_by_size
from rtsoa.device.replay import replay_trace
from rtsoa.device.state import DeviceState, check_state
from rtsoa.device.streams import (
    DEFAULT_STREAM,
    device_launch,
    device_synchronize,
    event_query,
    event_record,
    event_synchronize,
    launch_begin,
    set_stream_priority,
    stream_synchronize,
    stream_wait_event,
)
from rtsoa.device.trace import load_trace
from rtsoa.errors import (
    DeviceError,
    DeviceOutOfMemory,
    DeviceStateError,
    InvalidArgument,
    InvalidBlock,
)

__all__ = [
    "Allocator",
    "AllocatorConfig",
    "CachingAllocator",
    "CostModel",
    "DEFAULT_STREAM",
    "Device",
    "DeviceError",
    "DeviceOutOfMemory",
    "DeviceState",
    "DeviceStateError",
    "ExternalAllocator",
    "InvalidArgument",
    "InvalidBlock",
    "MemoryPlan",
    "allocator_for",
    "block_bytes",
    "block_location",
    "check_state",
    "create_external_allocator",
    "device_access",
    "device_for_graph",
    "device_free",
    "device_launch",
    "device_malloc",
    "device_synchronize",
    "event_query",
    "event_record",
    "event_synchronize",
    "launch_begin",
    "live_bytes_peak",
    "load_trace",
    "plan_greedy_by_size",
    "release_cached",
    "replay_trace",
    "round_request",
    "set_stream_priority",
    "stream_synchronize",
    "stream_wait_event",
]
