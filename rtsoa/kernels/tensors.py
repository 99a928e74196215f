"""Typed tensor views over device arena memory, for kernels compiled without reference counting.

`block_view(rt.device, handle, (rows, cols), np.float32)` returns `(status, array)`: a
C-contiguous array of that dtype and shape (a tuple of integers of one type) over the live
block's bytes in its arena: `rtsoa.abi.views.array_over`, built in LLVM with no meminfo, so a
kernel compiled without the reference-counting runtime (the default) may use it.

Safety: the view never reaches past the block. When the handle is stale or freed, a dimension
is negative, or the shape needs more bytes than the block was allocated with, `status` is
non-zero and the array has zero elements (every dimension 0), so a kernel that ignores the
status still cannot touch other memory. The view is valid until the block is freed.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir
from rtsoa.abi.status import STATUS_INVALID_BLOCK, STATUS_VIEW_TOO_LARGE
from rtsoa.abi.views import array_over, itemsize
from rtsoa.device import block_location
from rtsoa.device.arena import resolve_placement
from rtsoa.device.layout import PLACEMENT_HOST, PLACEMENT_P2P


@jit_inline_ir
def block_view(dev, handle, shape, dtype):
    """(status, view): `shape` elements of `dtype` over block `handle`; see the module doc."""
    placement, offset, nbytes = block_location(dev, handle)
    size = itemsize(dtype)
    # one dimension at a time, so a huge shape cannot overflow the element count
    fits = placement >= 0
    count = np.int64(1)
    for dim in shape:
        if dim < 0 or (dim > 0 and count > nbytes // size // dim):
            fits = False
        count *= max(dim, 0)
    status = np.int32(0)
    if placement < 0:
        status = np.int32(STATUS_INVALID_BLOCK)
        placement = PLACEMENT_HOST
        offset = np.int64(0)
    elif not fits:
        status = np.int32(STATUS_VIEW_TOO_LARGE)
    keep = np.int64(1 if status == 0 else 0)
    resolved = resolve_placement(placement)
    if resolved == PLACEMENT_HOST:
        return status, array_over(dev.arena_host, offset, keep, shape, dtype)
    if resolved == PLACEMENT_P2P:
        return status, array_over(dev.arena_p2p, offset, keep, shape, dtype)
    return status, array_over(dev.arena_hbm, offset, keep, shape, dtype)


@jit_inline_ir
def value_view(rt, value, shape, dtype):
    """(status, view) of the block whose handle is in value `value`'s slot."""
    return block_view(rt.device, rt.values.slots[value], shape, dtype)
