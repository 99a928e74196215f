"""The allocator's tables: slot stacks of the block and segment tables, statistics, row facts.

Unused rows of `dev.blocks` and `dev.segments` sit on stacks (`dev.block_slots`,
`dev.segment_slots`, tops in `counters[CNT_BLOCK_TOP]` / `counters[CNT_SEGMENT_TOP]`); a row
is popped when a block or segment is made and pushed back when it is merged away or released.
Statistics keep current / peak / allocated-total columns per placement (`layout.STAT_*`).
Everything here is inlined into its callers at Numba IR level.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir
from rtsoa.device.bits import assume
from rtsoa.device.layout import (
    BLK_NEXT,
    BLK_PREV,
    BLK_STATE,
    BLOCK_UNUSED,
    CNT_BLOCK_TOP,
    CNT_SEGMENT_TOP,
    NUM_BLOCK_COLUMNS,
    NUM_EXTRA_COLUMNS,
    NUM_HISTORY_COLUMNS,
    NUM_RING_COLUMNS,
    NUM_STATS,
    SEG_FIRST_BLOCK,
    SEG_PLACEMENT,
    STAT_CURRENT,
    STAT_PEAK,
    STAT_TOTAL,
)


@jit_inline_ir
def assume_layout(dev):
    """Tell the optimiser the tables' row widths: a row index then costs a shift instead of a
    multiply by a run-time width, on every pointer-chasing step through the free lists and
    neighbour links. `state.check_state` verifies these widths in Python before any jitted code
    runs on a state (a false assumption would be undefined behaviour)."""
    assume(dev.blocks.shape[1] == NUM_BLOCK_COLUMNS)
    assume(dev.history.shape[2] == NUM_HISTORY_COLUMNS)
    assume(dev.trace.shape[1] == NUM_RING_COLUMNS)
    assume(dev.trace_extra.shape[1] == NUM_EXTRA_COLUMNS)
    assume(dev.stats.shape[1] == NUM_STATS)


@jit_inline_ir
def stat_add(dev, placement, group, amount):
    """Add `amount` to a statistic's current value (and its peak and allocated total)."""
    stats = dev.stats
    current = stats[placement, group + STAT_CURRENT] + amount
    stats[placement, group + STAT_CURRENT] = current
    if current > stats[placement, group + STAT_PEAK]:  # rare in steady state: skip the store
        stats[placement, group + STAT_PEAK] = current
    stats[placement, group + STAT_TOTAL] += amount


@jit_inline_ir
def stat_sub(dev, placement, group, amount):
    """Subtract `amount` from a statistic's current value."""
    # the freed total is derived (allocated - current): one store per free
    dev.stats[placement, group + STAT_CURRENT] -= amount


@jit_inline_ir
def pop_block_slot(dev):
    """An unused block row, or -1 when the block table is full."""
    top = dev.counters[CNT_BLOCK_TOP]
    if top == 0:
        return -1
    dev.counters[CNT_BLOCK_TOP] = top - 1
    return np.int64(dev.block_slots[top - 1])


@jit_inline_ir
def push_block_slot(dev, slot):
    """Mark block row `slot` unused and put it back on its stack."""
    dev.blocks[slot, BLK_STATE] = BLOCK_UNUSED  # the other columns of an unused row are stale
    top = dev.counters[CNT_BLOCK_TOP]
    dev.block_slots[top] = slot
    dev.counters[CNT_BLOCK_TOP] = top + 1


@jit_inline_ir
def pop_segment_slot(dev):
    """An unused segment row, or -1 when the segment table is full. The row stays marked
    unused until `segments.fill_segment` writes it."""
    top = dev.counters[CNT_SEGMENT_TOP]
    if top == 0:
        return -1
    dev.counters[CNT_SEGMENT_TOP] = top - 1
    return np.int64(dev.segment_slots[top - 1])


@jit_inline_ir
def push_segment_slot(dev, segment):
    """Mark segment row `segment` unused and put it back on its stack."""
    dev.segments[segment, SEG_PLACEMENT] = -1
    dev.segments[segment, SEG_FIRST_BLOCK] = -1
    top = dev.counters[CNT_SEGMENT_TOP]
    dev.segment_slots[top] = segment
    dev.counters[CNT_SEGMENT_TOP] = top + 1


@jit_inline_ir
def whole_segment(dev, slot):
    """The block spans its whole segment (no address neighbours)."""
    return dev.blocks[slot, BLK_PREV] < 0 and dev.blocks[slot, BLK_NEXT] < 0
