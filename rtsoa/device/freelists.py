"""Segregated free lists of the caching allocator: size classes, a bitmap, best / good fit.

Free blocks sit in doubly linked lists per (placement, pool, size class), linked through the
block table's BLK_FREE_PREV / BLK_FREE_NEXT columns. Classes are exact below 16 bytes, then 16
per power of two (6.25 % apart); a bitmap word per 32 classes marks the non-empty ones, so the
first non-empty class at or above a size is found with one `tzcnt` per word (as in TLSF).

Search (`find_block`): best fit among the eligible blocks of the request's own class (its list
mixes blocks smaller and larger than the request), else the first eligible block of the next
non-empty class: every block there fits and is at most one class (6.25 %) from the best fit, so
the search never walks more than one list end to end. Page mode takes the first eligible block
in LIFO order, like the reference's span lists. A block is eligible when it is not an oversize
block refused by the no-split rule and every recorded use of its memory is ordered before the
requesting stream (`hazards.reusable_on`).

Quick lists (`quick_push` / `quick_pop`) sit in front of the free lists: per placement, one
LIFO list per exact size of 1..QUICK_CLASSES allocation units, linked through BLK_FREE_NEXT.
A freed block parked there is not merged with its neighbours (they see BLOCK_QUICK, not
BLOCK_FREE) and costs a push; a request of its size pops it when it is usable on the requesting
stream. The allocator flushes them (`blocks.quick_flush`) before it grows or releases.
"""

from rtsoa._jit import jit_inline_ir, jit_inline_llvm
from rtsoa.device.bits import floor_log2, lowest_bit
from rtsoa.device.hazards import reusable_on
from rtsoa.device.layout import (
    BLK_BIN,
    BLK_FREE_NEXT,
    BLK_FREE_PREV,
    BLK_GROUP,
    BLK_NEXT,
    BLK_PREV,
    BLK_SIZE,
    BLK_STATE,
    BLOCK_QUICK,
    CFG_MAX_SPLIT,
    CFG_OVERSIZE_SLACK,
    CFG_PAGE_MODE,
    CFG_QUICK_DEPTH,
    CFG_SEGMENT_SLACK_SHIFT,
    NUM_BINS,
    PCFG_QUICK_LIMIT,
    PCFG_UNIT_SHIFT,
    POOL_LARGE,
    QUICK_CLASSES,
    SUB_BINS_LOG2,
)

_WORD_SHIFT = 5  # 32 classes per bitmap word (status.BITMAP_BITS)
_WORD_MASK = 31


@jit_inline_ir
def size_class(size):
    """Free-list class of a size: exact below 16, then 16 classes per power of two."""
    if size < 16:
        return size
    exponent = floor_log2(size)
    sub = (size >> (exponent - SUB_BINS_LOG2)) & ((1 << SUB_BINS_LOG2) - 1)
    return (exponent << SUB_BINS_LOG2) + sub


@jit_inline_llvm  # typed once, not at each call site (Numba-IR inlining)
def bin_push(dev, slot, group):
    """Put a free block at the head of its class list (LIFO)."""
    blocks = dev.blocks
    index = group * NUM_BINS + size_class(blocks[slot, BLK_SIZE])
    head = dev.bin_head[index]
    blocks[slot, BLK_FREE_PREV] = -1
    blocks[slot, BLK_FREE_NEXT] = head
    if head >= 0:
        blocks[head, BLK_FREE_PREV] = slot
    dev.bin_head[index] = slot
    blocks[slot, BLK_BIN] = index
    dev.bin_bitmap[index >> _WORD_SHIFT] |= 1 << (index & _WORD_MASK)


@jit_inline_llvm  # typed once, not at each call site (Numba-IR inlining)
def bin_remove(dev, slot):
    """Unlink a free block from its class list (clearing the bitmap bit of an emptied class)."""
    blocks = dev.blocks
    index = blocks[slot, BLK_BIN]
    before = blocks[slot, BLK_FREE_PREV]
    after = blocks[slot, BLK_FREE_NEXT]
    if before >= 0:
        blocks[before, BLK_FREE_NEXT] = after
    else:
        dev.bin_head[index] = after
        if after < 0:
            dev.bin_bitmap[index >> _WORD_SHIFT] &= ~(1 << (index & _WORD_MASK))
    if after >= 0:
        blocks[after, BLK_FREE_PREV] = before
    # BLK_BIN and the links are left stale: they are read only while the block is listed


@jit_inline_llvm  # typed once, not at each call site (Numba-IR inlining)
def eligible(dev, slot, size, stream, max_split):
    """The free block may serve a `size`-byte request on `stream` (see module docstring)."""
    blocks = dev.blocks
    block_size = blocks[slot, BLK_SIZE]
    if block_size >= max_split:
        if size < max_split or block_size - size >= dev.config[CFG_OVERSIZE_SLACK]:
            return False
    shift = dev.config[CFG_SEGMENT_SLACK_SHIFT]
    if (
        shift < 63
        and (blocks[slot, BLK_GROUP] & 1) == POOL_LARGE
        and blocks[slot, BLK_PREV] < 0
        and blocks[slot, BLK_NEXT] < 0
        and block_size - size > block_size >> shift
    ):
        return False  # a whole large segment much bigger than the request: grow instead
    return reusable_on(dev, slot, stream)


@jit_inline_llvm  # typed once, not at each of its two call sites in _take_listed
def find_block(dev, group, size, stream):
    """An eligible free block of at least `size` bytes in the group's lists, or -1."""
    blocks = dev.blocks
    first_fit = dev.config[CFG_PAGE_MODE] != 0
    max_split = dev.config[CFG_MAX_SPLIT]
    index = group * NUM_BINS + size_class(size)
    best = -1
    best_size = 0
    slot = dev.bin_head[index]
    while slot >= 0:  # own class: blocks on both sides of `size`, take the best fit
        block_size = blocks[slot, BLK_SIZE]
        if (
            block_size >= size
            and (best < 0 or block_size < best_size)
            and eligible(dev, slot, size, stream, max_split)
        ):
            best = slot
            best_size = block_size
            if block_size == size or first_fit:
                break
        slot = blocks[slot, BLK_FREE_NEXT]
    if best >= 0:
        return best
    limit = (group + 1) * NUM_BINS
    index += 1
    while index < limit:  # higher classes: every block fits, take the first eligible one
        word = index >> _WORD_SHIFT
        bits = dev.bin_bitmap[word] & (-1 << (index & _WORD_MASK))
        while bits == 0:
            word += 1
            if (word << _WORD_SHIFT) >= limit:
                return -1
            bits = dev.bin_bitmap[word]
        index = (word << _WORD_SHIFT) + lowest_bit(bits)
        slot = dev.bin_head[index]
        while slot >= 0:
            if eligible(dev, slot, size, stream, max_split):
                return slot
            slot = blocks[slot, BLK_FREE_NEXT]
        index += 1
    return -1


@jit_inline_ir
def quick_index(dev, placement, size):
    """Quick list of a rounded size of `placement`, or -1 when the size has none."""
    if size > dev.placement_config[placement, PCFG_QUICK_LIMIT]:
        return -1
    return (
        placement * QUICK_CLASSES + (size >> dev.placement_config[placement, PCFG_UNIT_SHIFT]) - 1
    )


@jit_inline_ir
def quick_push(dev, slot, index):
    """Park a freed block (neither merged nor listed) in quick list `index`; False when full."""
    count = dev.quick_count[index]
    if count >= dev.config[CFG_QUICK_DEPTH]:
        return False
    dev.blocks[slot, BLK_STATE] = BLOCK_QUICK
    dev.blocks[slot, BLK_FREE_NEXT] = dev.quick_head[index]
    dev.quick_head[index] = slot
    dev.quick_count[index] = count + 1
    return True


@jit_inline_ir
def quick_pop(dev, index, stream):
    """Take the head of quick list `index` if it is usable on `stream`, else -1."""
    slot = dev.quick_head[index]
    if slot < 0:
        return -1
    if not reusable_on(dev, slot, stream):
        return -1
    dev.quick_head[index] = dev.blocks[slot, BLK_FREE_NEXT]
    dev.quick_count[index] -= 1
    return slot
