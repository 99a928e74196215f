"""The device blocks a model's inputs are copied into before each run (`ModelExecutor`).

Built-in memory: one staging block per input, made at load at the input's smallest size (its
static dims), kept across runs and replaced by a larger one when a run needs it (written in
stream order: the copy of a run's inputs happens when the run is enqueued, after the previous
run on the stream); a failing run puts them back to their load-time sizes. An external
memory allocator: a fresh block per input and run, freed after it by the caller.
"""

import math

from rtsoa.errors import InvalidBlock
from rtsoa.runtime.checks import numpy_dtype
from rtsoa.runtime.resources import ModelResourceError


class InputStaging:
    """The staging blocks of a model's `inputs` ((name, block, shape, dtype, dims) each) on
    `device`, freed and made on `stream`; `allocator`: an external one, or None."""

    def __init__(self, device, stream, inputs, allocator):
        self.device = device
        self.stream = stream
        self.inputs = inputs
        self.allocator = allocator
        self.blocks = [None] * len(inputs)  # (handle, uint8 view) per input, built-in memory
        self.load_bytes = [1] * len(inputs)

    def make(self):
        """The built-in staging blocks at the inputs' smallest sizes (none for an external
        allocator)."""
        if self.allocator is not None:
            return
        for index, (name, _b, _s, dtype, dims) in enumerate(self.inputs):
            static = [d for d in dims or () if isinstance(d, int)]
            nbytes = math.prod(static) * numpy_dtype(dtype).itemsize
            self.load_bytes[index] = max(nbytes, 1)
            self.block(index, name, nbytes, [])

    def block(self, index, name, nbytes, handles):
        """(handle, uint8 view) of a block of at least `nbytes` for input `index`: its staging
        block (grown when needed), or a fresh block of the external allocator, appended to
        `handles` for the caller to free after the run."""
        if self.allocator is None:
            staged = self.blocks[index]
            if staged is not None and staged[1].shape[0] >= nbytes:
                return staged
            self._free(index)
            handle = self.device.malloc(max(nbytes, 1), "hbm", self.stream)
            self.blocks[index] = (handle, self.device.view(handle))
            return self.blocks[index]
        handle = self.allocator.alloc(max(nbytes, 1))
        handles.append(handle)
        view = self.allocator.view(handle)
        if view.shape[0] < nbytes:
            raise ModelResourceError(
                f"the memory allocator gave input {name!r} {view.shape[0]} bytes, {nbytes} needed"
            )
        return handle, view

    def check_handles(self, handles):
        """The external allocator's `handles` are blocks of this device (named error if not)."""
        for handle in handles:
            try:
                self.device.location(handle)
            except (InvalidBlock, TypeError, ValueError, OverflowError):
                raise ModelResourceError(
                    f"the memory allocator returned {handle!r}, not a block of this executor's "
                    "device (the compiled kernels read device blocks only: allocate with "
                    "rtsoa.device.allocators.allocator_for(model.device, ...) or device.malloc)"
                ) from None

    def restore(self):
        """Staging blocks a run grew back to their load-time sizes."""
        if self.allocator is not None:
            return
        for index, (name, _b, _s, _t, _d) in enumerate(self.inputs):
            staged = self.blocks[index]
            if staged is not None and staged[1].shape[0] == self.load_bytes[index]:
                continue
            self._free(index)
            self.block(index, name, self.load_bytes[index], [])

    def release(self):
        """Free every staging block (unload)."""
        for index in range(len(self.blocks)):
            self._free(index)

    def _free(self, index):
        if self.blocks[index] is not None:
            self.device.free(self.blocks[index][0], self.stream)
            self.blocks[index] = None
