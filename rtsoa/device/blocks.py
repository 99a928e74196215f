"""Blocks inside a segment: split on allocation, merge with free neighbours, quick-list flush.

A segment's blocks are address neighbours linked through BLK_PREV / BLK_NEXT. A block handed
out is cut to the request (`split`, the remainder becomes a free block after it); a freed block
absorbs its free neighbours and is listed (`merge_and_list`), unless it is parked in a quick
list, whose blocks `quick_flush` merges and lists later (before growing, on release and out of
memory).
"""

from rtsoa._jit import jit_inline_ir, jit_inline_llvm, jit_out_of_line
from rtsoa.device.freelists import bin_push, bin_remove
from rtsoa.device.hazards import history_copy, history_merge
from rtsoa.device.layout import (
    BLK_FREE_NEXT,
    BLK_GROUP,
    BLK_NEXT,
    BLK_OFFSET,
    BLK_PLACEMENT,
    BLK_PREV,
    BLK_SEGMENT,
    BLK_SIZE,
    BLK_STATE,
    BLK_STREAM,
    BLOCK_FREE,
    CNT_FREE_SEGMENTS,
    CNT_QUICK_FLUSHES,
    NUM_PLACEMENTS,
    QUICK_CLASSES,
)
from rtsoa.device.tables import pop_block_slot, push_block_slot, whole_segment


@jit_inline_ir
def split(dev, slot, size, group):
    """Cut `slot` to `size` bytes; the remainder becomes a free block after it (if a slot is
    left: with a full block table the whole block is handed out unsplit)."""
    blocks = dev.blocks
    rest = pop_block_slot(dev)
    if rest < 0:
        return
    after = blocks[slot, BLK_NEXT]
    blocks[rest, BLK_OFFSET] = blocks[slot, BLK_OFFSET] + size
    blocks[rest, BLK_SIZE] = blocks[slot, BLK_SIZE] - size
    blocks[rest, BLK_SEGMENT] = blocks[slot, BLK_SEGMENT]
    blocks[rest, BLK_PREV] = slot
    blocks[rest, BLK_NEXT] = after
    if after >= 0:
        blocks[after, BLK_PREV] = rest
    blocks[slot, BLK_NEXT] = rest
    blocks[rest, BLK_STATE] = BLOCK_FREE
    blocks[rest, BLK_STREAM] = blocks[slot, BLK_STREAM]
    blocks[rest, BLK_GROUP] = group
    blocks[rest, BLK_PLACEMENT] = blocks[slot, BLK_PLACEMENT]
    history_copy(dev, rest, slot)
    blocks[slot, BLK_SIZE] = size
    bin_push(dev, rest, group)


@jit_inline_ir
def _merge_next(dev, slot, after):
    """Absorb `after` (the address successor, in no free list) into `slot`."""
    blocks = dev.blocks
    history_merge(dev, slot, after)
    blocks[slot, BLK_SIZE] += blocks[after, BLK_SIZE]
    beyond = blocks[after, BLK_NEXT]
    blocks[slot, BLK_NEXT] = beyond
    if beyond >= 0:
        blocks[beyond, BLK_PREV] = slot
    push_block_slot(dev, after)


@jit_inline_llvm  # typed once, not at each of its two call sites (asv ColdStart: compile time)
def merge_and_list(dev, slot):
    """Merge a free block (in no list) with its free address neighbours and list the result."""
    blocks = dev.blocks
    before = blocks[slot, BLK_PREV]
    if before >= 0 and blocks[before, BLK_STATE] == BLOCK_FREE:
        bin_remove(dev, before)
        _merge_next(dev, before, slot)
        slot = before
    after = blocks[slot, BLK_NEXT]
    if after >= 0 and blocks[after, BLK_STATE] == BLOCK_FREE:
        bin_remove(dev, after)
        _merge_next(dev, slot, after)
    bin_push(dev, slot, blocks[slot, BLK_GROUP])
    if whole_segment(dev, slot):
        dev.counters[CNT_FREE_SEGMENTS] += 1


@jit_out_of_line
def quick_flush(dev, placement):
    """Merge and list every block parked in the quick lists of `placement` (all when < 0), as
    their frees would have without quick lists; returns the number of blocks flushed."""
    blocks = dev.blocks
    flushed = 0
    first = 0 if placement < 0 else placement * QUICK_CLASSES
    last = NUM_PLACEMENTS * QUICK_CLASSES if placement < 0 else first + QUICK_CLASSES
    for index in range(first, last):
        slot = dev.quick_head[index]
        while slot >= 0:
            following = blocks[slot, BLK_FREE_NEXT]
            blocks[slot, BLK_STATE] = BLOCK_FREE
            merge_and_list(dev, slot)  # neighbours still parked merge when they are flushed
            flushed += 1
            slot = following
        dev.quick_head[index] = -1
        dev.quick_count[index] = 0
    if flushed > 0:
        dev.counters[CNT_QUICK_FLUSHES] += 1
    return flushed
