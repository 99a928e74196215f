"""Allocator interface, the built-in caching allocator, external allocators and the factory.

`Allocator.alloc / free / view` are the public calls; subclasses implement `_alloc / _free /
_view`. The built-in `CachingAllocator` is a placement of a `Device`. An external allocator lets
users plug their own memory management into Python-level paths (loading, inputs / outputs);
jitted kernels always use the device's own allocator, since a Python object cannot be called
from njit code. As in the reference, an allocator belongs to one stream and must not release
memory before that stream has synchronised.
"""

from abc import ABC, abstractmethod

import numpy as np

from rtsoa.device.device import Device, placement_index
from rtsoa.device.layout import PLACEMENT_FOLLOWING, PLACEMENT_HOST, PLACEMENT_NAMES


class Allocator(ABC):
    """Memory of one placement, bound to one stream."""

    def __init__(self, placement, stream=0):
        index = placement_index(placement)
        self.placement = PLACEMENT_NAMES[PLACEMENT_HOST if index == PLACEMENT_FOLLOWING else index]
        self.stream = int(stream)

    def alloc(self, nbytes):
        """Allocate `nbytes`; returns an opaque integer handle."""
        if nbytes < 0:
            raise ValueError(f"cannot allocate {nbytes} bytes")
        return self._alloc(int(nbytes))

    def free(self, handle):
        """Release a handle returned by `alloc`."""
        self._free(handle)

    def view(self, handle, dtype=np.uint8):
        """The handle's bytes as a numpy array of `dtype`."""
        return self._view(handle).view(dtype)

    @abstractmethod
    def _alloc(self, nbytes): ...

    @abstractmethod
    def _free(self, handle): ...

    @abstractmethod
    def _view(self, handle): ...


class CachingAllocator(Allocator):
    """The device's caching allocator for one placement and stream."""

    def __init__(self, device, placement, stream=0):
        super().__init__(placement, stream)
        self.device = device

    def _alloc(self, nbytes):
        return self.device.malloc(nbytes, self.placement, self.stream)

    def _free(self, handle):
        self.device.free(handle, self.stream)

    def _view(self, handle):
        return self.device.view(handle)


class ExternalAllocator(Allocator):
    """An allocator backed by user callables: `alloc(nbytes) -> handle`, `free(handle)`,
    `view(handle) -> uint8 ndarray`."""

    def __init__(self, alloc, free, view, placement="hbm", stream=0):
        super().__init__(placement, stream)
        self._user_alloc = alloc
        self._user_free = free
        self._user_view = view

    def _alloc(self, nbytes):
        return self._user_alloc(nbytes)

    def _free(self, handle):
        self._user_free(handle)

    def _view(self, handle):
        return np.asarray(self._user_view(handle), dtype=np.uint8)


def create_external_allocator(alloc, free, view, placement="hbm", stream=0):
    """Wrap user callables as an `Allocator` (the reference's CreateExternalAllocator)."""
    return ExternalAllocator(alloc, free, view, placement, stream)


def allocator_for(device, placement, stream=0):
    """The built-in allocator of a placement: hbm / p2p use device arenas, host and
    "following" the host arena (as the reference's HostMemAllocator)."""
    if not isinstance(device, Device):
        raise TypeError("allocator_for needs a Device")
    return CachingAllocator(device, placement, stream)
