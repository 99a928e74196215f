"""Typed errors of the simulated device. Jitted code returns status codes; `Device` (and
`state.check_state` before any jitted code runs) turn them into these."""

from rtsoa.device.status import STATUS_INVALID_STATE, STATUS_NAMES, STATUS_OUT_OF_MEMORY
from rtsoa.errors import RtsoaError


class DeviceError(RtsoaError, RuntimeError):
    """A device call failed; `status` is the device status code. Also a RuntimeError, as it
    was before it joined rtsoa's error hierarchy."""

    def __init__(self, status, message):
        super().__init__(f"{STATUS_NAMES.get(status, status)}: {message}")
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
