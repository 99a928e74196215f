"""Block handles: `tag << 48 | generation << 24 | slot` (`layout.HANDLE_*`), so a stale handle
(double free, use after free) and a handle of another device are caught. The accessors kernels
use to reach a live block's memory."""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_inline_llvm, jit_with_nrt
from rtsoa.device.arena import arena_of
from rtsoa.device.layout import (
    BLK_GENERATION,
    BLK_OFFSET,
    BLK_PLACEMENT,
    BLK_REQUESTED,
    BLK_STATE,
    BLOCK_ALLOCATED,
    CFG_HANDLE_TAG,
    HANDLE_GEN_BITS,
    HANDLE_GEN_MASK,
    HANDLE_GEN_SHIFT,
    HANDLE_SLOT_MASK,
    HANDLE_TAG_SHIFT,
)


@jit_inline_ir
def make_handle(generation, slot):
    """The handle of block row `slot` whose tagged generation (`next_generation`) is
    `generation`."""
    return (generation << HANDLE_GEN_SHIFT) | slot


@jit_inline_ir
def next_generation(dev, stored):
    """The tagged generation of a row's next allocation, from its stored one: the count wraps
    within its bits, and the device's tag goes above it."""
    return ((stored + 1) & HANDLE_GEN_MASK) | dev.config[CFG_HANDLE_TAG]


@jit_inline_ir
def foreign_handle(dev, handle):
    """True when `handle` is negative or carries another device's tag."""
    return handle < 0 or (handle >> HANDLE_TAG_SHIFT) != (
        dev.config[CFG_HANDLE_TAG] >> HANDLE_GEN_BITS
    )


@jit_inline_ir
def block_slot(dev, handle):
    """Slot of a live handle, or -1 when the handle is stale / invalid."""
    slot = handle & HANDLE_SLOT_MASK
    if handle < 0 or slot >= dev.blocks.shape[0]:
        return -1
    if dev.blocks[slot, BLK_STATE] != BLOCK_ALLOCATED:
        return -1
    if dev.blocks[slot, BLK_GENERATION] != (handle >> HANDLE_GEN_SHIFT):
        return -1
    return slot


@jit_inline_llvm  # per launch: a real call would copy `dev` (34 arrays)
def block_location(dev, handle):
    """(placement, offset, requested bytes) of a live block; placement -1 if stale."""
    slot = block_slot(dev, handle)
    if slot < 0:
        return -1, np.int64(0), np.int64(0)
    blocks = dev.blocks
    return blocks[slot, BLK_PLACEMENT], blocks[slot, BLK_OFFSET], blocks[slot, BLK_REQUESTED]


@jit_with_nrt  # returns an array view: needs the reference-counting runtime
def block_bytes(dev, handle):
    """The arena bytes of a live block (length = requested size); empty if the handle is stale.

    Kernels compute on this view, e.g. `block_bytes(dev, h).view(np.float32)`.
    """
    placement, offset, size = block_location(dev, handle)
    if placement < 0:
        return dev.arena_host[0:0]
    arena = arena_of(dev, placement)
    return arena[offset : offset + size]
