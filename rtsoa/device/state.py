"""`DeviceState`: the whole simulated device as a bundle of fixed-capacity numpy arrays.

Nothing inside is a Python object, so the state can be passed into any njit function (and be
one field of the runtime's `rt` tuple), by reference: jitted code receives one pointer to the
arrays' descriptors, not the 34 arrays (`rtsoa._bundle`). All arrays are sized once by
`create_state`; no jitted path allocates. Column meanings are the constants of `layout.py`.

Jitted code does not check bounds and tells the optimiser the tables' row widths
(`tables.assume_layout`), so a state must be checked in Python before any jitted code runs on
it: `check_state` does, for every state `create_state` builds and for any state handed in from
outside (executors call it on the device they are given).
"""

from math import prod
from typing import NamedTuple

import numpy as np

from rtsoa._bundle import bundle_class, bundle_problem
from rtsoa.device.layout import (
    BITMAP_WORDS,
    BLK_BIN,
    BLK_FREE_NEXT,
    BLK_FREE_PREV,
    BLK_NEXT,
    BLK_PREV,
    BLK_SEGMENT,
    BLK_STATE,
    BLOCK_UNUSED,
    CFG_HANDLE_TAG,
    CFG_LARGE_ROUND,
    CFG_NUM_EVENTS,
    CFG_NUM_STREAMS,
    CFG_PAGE_MODE,
    CFG_PAGE_SIZE,
    CNT_BLOCK_TOP,
    CNT_HAZARDS,
    CNT_SEGMENT_HIGH,
    CNT_SEGMENT_TOP,
    CNT_TRACE_SEQ,
    HANDLE_GEN_BITS,
    HANDLE_GEN_MASK,
    HANDLE_SLOT_BITS,
    HANDLE_SLOT_MASK,
    HANDLE_TAG_COUNT,
    HIST_TASK,
    LOCK_WORDS,
    MAX_STREAMS,
    MAX_UNIT_BYTES,
    NUM_BINS,
    NUM_BLOCK_COLUMNS,
    NUM_CONFIG,
    NUM_COST,
    NUM_COUNTERS,
    NUM_EXTRA_COLUMNS,
    NUM_HAZARD_COLUMNS,
    NUM_HISTORY_COLUMNS,
    NUM_PLACEMENT_CONFIG,
    NUM_PLACEMENTS,
    NUM_RING_COLUMNS,
    NUM_SEGMENT_COLUMNS,
    NUM_STATS,
    PCFG_ALIGNMENT,
    PCFG_ARENA_SIZE,
    PCFG_CAP,
    PCFG_QUICK_LIMIT,
    PCFG_TAIL_PADDING,
    PCFG_UNIT_SHIFT,
    PLACEMENT_HBM,
    PLACEMENT_HOST,
    PLACEMENT_NAMES,
    PLACEMENT_P2P,
    QUICK_CLASSES,
    SEG_FIRST_BLOCK,
    SEG_PLACEMENT,
)
from rtsoa.errors import DeviceStateError, TooLargeError
from rtsoa.limits import addressable_memory, check_fits, format_size

# DeviceState's fields: (dtype, shape, written by jitted code; typed read-only when not). A shape
# entry is a layout constant or the name of a dimension that `_dimensions` reads off the state.
_FIELDS = {
    # arenas: one byte array per placement; addresses are offsets into them
    "arena_hbm": (np.uint8, ("hbm_bytes",), True),
    "arena_p2p": (np.uint8, ("p2p_bytes",), True),
    "arena_host": (np.uint8, ("host_bytes",), True),
    "config": (np.int64, (NUM_CONFIG,), False),
    "placement_config": (np.int64, (NUM_PLACEMENTS, NUM_PLACEMENT_CONFIG), False),
    "cost": (np.float64, (NUM_COST,), False),
    "counters": (np.int64, (NUM_COUNTERS,), True),
    "stats": (np.int64, (NUM_PLACEMENTS, NUM_STATS), True),
    # blocks: one row per slot (columns `layout.BLK_*`), kept together for cache locality
    "blocks": (np.int64, ("max_blocks", NUM_BLOCK_COLUMNS), True),
    # history: per (block, stream) `HIST_*`; history_time: end time of its last access
    "history": (np.int64, ("max_blocks", "max_streams", NUM_HISTORY_COLUMNS), True),
    "history_time": (np.float64, ("max_blocks", "max_streams"), True),
    # slot stacks of unused block and segment rows (popped from the top)
    "block_slots": (np.int32, ("max_blocks",), True),
    "segments": (np.int64, ("max_segments", NUM_SEGMENT_COLUMNS), True),
    "segment_slots": (np.int32, ("max_segments",), True),
    # arena free ranges per placement, sorted by offset (segments are carved from these)
    "range_offset": (np.int64, (NUM_PLACEMENTS, "range_capacity"), True),
    "range_size": (np.int64, (NUM_PLACEMENTS, "range_capacity"), True),
    "range_count": (np.int64, (NUM_PLACEMENTS,), True),
    # free lists: head per (placement, pool, size class), a bitmap of non-empty classes
    "bin_head": (np.int32, (NUM_PLACEMENTS * 2 * NUM_BINS,), True),
    "bin_bitmap": (np.int64, (NUM_PLACEMENTS * 2 * BITMAP_WORDS,), True),
    # quick lists: head and length per (placement, size in units - 1), by BLK_FREE_NEXT
    "quick_head": (np.int64, (NUM_PLACEMENTS * QUICK_CLASSES,), True),
    "quick_count": (np.int64, (NUM_PLACEMENTS * QUICK_CLASSES,), True),
    # streams and events: clocks in ns, vector clocks (epochs); event_time -1: not recorded
    "stream_clock": (np.float64, ("max_streams",), True),
    "stream_priority": (np.int32, ("max_streams",), True),
    "stream_last_task": (np.int64, ("max_streams",), True),
    "stream_vc": (np.int64, ("max_streams", "max_streams"), True),
    "host_clock": (np.float64, (1,), True),
    "host_vc": (np.int64, ("max_streams",), True),
    "event_time": (np.float64, ("max_events",), True),
    "event_stream": (np.int32, ("max_events",), True),
    "event_vc": (np.int64, ("max_events", "max_streams"), True),
    # trace ring (one 32-byte row per event, `trace_extra` for what does not fit), hazards
    "trace": (np.int64, ("trace_capacity", NUM_RING_COLUMNS), True),
    "trace_extra": (np.int64, ("trace_capacity", NUM_EXTRA_COLUMNS), True),
    "hazards": (np.int64, ("hazard_capacity", NUM_HAZARD_COLUMNS), True),
    "hazard_time": (np.float64, ("hazard_capacity", 2), True),
    # the device lock of a run whose workers call into the device at once (`device.lock`)
    "lock": (np.int64, (LOCK_WORDS,), True),
}


DeviceState = bundle_class(
    "DeviceState",
    __name__,
    {field: (dtype, len(shape), written) for field, (dtype, shape, written) in _FIELDS.items()},
    doc="""Simulated device state (arena bytes, allocator tables, streams, events, stats, trace):
    the arrays of `_FIELDS`, passed to jitted code by reference (`rtsoa._bundle`).""",
)


def aligned_zeros(shape, dtype, alignment=64):
    """Zeroed array whose data starts on a cache-line boundary (numpy only promises 16 bytes),
    so a 128-byte table row spans two cache lines, not three."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    raw = np.zeros(count * dtype.itemsize + alignment, dtype=np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start : start + count * dtype.itemsize].view(dtype).reshape(shape)


def create_state(
    arena_sizes,
    config,
    placement_config,
    cost,
    max_blocks,
    max_segments,
    max_streams,
    max_events,
    trace_capacity,
    hazard_capacity,
):
    """Allocate a fresh `DeviceState` and `check_state` it (raises `DeviceStateError` for
    sizes jitted code cannot run on); arrays are zeroed lazily by the OS until touched.

    Sizes that would not fit in memory raise `TooLargeError` with the estimate before anything
    is allocated: the arenas against RAM + swap (they are only reserved until used), the tables
    against the memory available (they are written at creation).
    """
    arena_sizes = [int(size) for size in arena_sizes]
    dimensions = {
        "max_blocks": max_blocks,
        "max_segments": max_segments,
        "range_capacity": max_segments + 2,
        "max_streams": max_streams,
        "max_events": max_events,
        "trace_capacity": trace_capacity,
        "hazard_capacity": hazard_capacity,
    }
    _check_fits(arena_sizes, dimensions)
    arenas = [np.zeros(size, dtype=np.uint8) for size in arena_sizes]
    range_capacity = max_segments + 2
    range_offset = np.zeros((NUM_PLACEMENTS, range_capacity), dtype=np.int64)
    range_size = np.zeros((NUM_PLACEMENTS, range_capacity), dtype=np.int64)
    range_count = np.zeros(NUM_PLACEMENTS, dtype=np.int64)
    for placement, size in enumerate(arena_sizes):
        if size > 0:
            range_size[placement, 0] = size
            range_count[placement] = 1
    blocks = aligned_zeros((max_blocks, NUM_BLOCK_COLUMNS), np.int64)
    blocks[:, [BLK_SEGMENT, BLK_PREV, BLK_NEXT, BLK_BIN, BLK_FREE_PREV, BLK_FREE_NEXT]] = -1
    blocks[:, BLK_STATE] = BLOCK_UNUSED
    history = aligned_zeros((max_blocks, max_streams, NUM_HISTORY_COLUMNS), np.int64)
    history[:, :, HIST_TASK] = -1
    segments = aligned_zeros((max_segments, NUM_SEGMENT_COLUMNS), np.int64)
    segments[:, [SEG_PLACEMENT, SEG_FIRST_BLOCK]] = -1
    counters = np.zeros(NUM_COUNTERS, dtype=np.int64)
    counters[CNT_BLOCK_TOP] = max_blocks
    counters[CNT_SEGMENT_TOP] = max_segments
    state = DeviceState(
        arena_hbm=arenas[0],
        arena_p2p=arenas[1],
        arena_host=arenas[2],
        config=config.astype(np.int64),
        placement_config=placement_config.astype(np.int64),
        cost=cost.astype(np.float64),
        counters=counters,
        stats=np.zeros((NUM_PLACEMENTS, NUM_STATS), dtype=np.int64),
        blocks=blocks,
        history=history,
        history_time=np.zeros((max_blocks, max_streams), dtype=np.float64),
        # popped from the top: slot 0 is handed out first
        block_slots=np.arange(max_blocks - 1, -1, -1, dtype=np.int32),
        segments=segments,
        segment_slots=np.arange(max_segments - 1, -1, -1, dtype=np.int32),
        range_offset=range_offset,
        range_size=range_size,
        range_count=range_count,
        bin_head=np.full(NUM_PLACEMENTS * 2 * NUM_BINS, -1, dtype=np.int32),
        bin_bitmap=np.zeros(NUM_PLACEMENTS * 2 * BITMAP_WORDS, dtype=np.int64),
        quick_head=np.full(NUM_PLACEMENTS * QUICK_CLASSES, -1, dtype=np.int64),
        quick_count=np.zeros(NUM_PLACEMENTS * QUICK_CLASSES, dtype=np.int64),
        stream_clock=np.zeros(max_streams, dtype=np.float64),
        stream_priority=np.zeros(max_streams, dtype=np.int32),
        stream_last_task=np.full(max_streams, -1, dtype=np.int64),
        stream_vc=np.zeros((max_streams, max_streams), dtype=np.int64),
        host_clock=np.zeros(1, dtype=np.float64),
        host_vc=np.zeros(max_streams, dtype=np.int64),
        event_time=np.full(max_events, -1.0, dtype=np.float64),
        event_stream=np.full(max_events, -1, dtype=np.int32),
        event_vc=np.zeros((max_events, max_streams), dtype=np.int64),
        trace=aligned_zeros((trace_capacity, NUM_RING_COLUMNS), np.int64),
        trace_extra=aligned_zeros((trace_capacity, NUM_EXTRA_COLUMNS), np.int64),
        hazards=np.zeros((hazard_capacity, NUM_HAZARD_COLUMNS), dtype=np.int64),
        hazard_time=np.zeros((hazard_capacity, 2), dtype=np.float64),
        lock=aligned_zeros((LOCK_WORDS,), np.int64),
    )
    check_state(state)
    return state


def table_bytes(dimensions):
    """Bytes of a state's tables (every field but the arenas) for these dimensions."""
    total = 0
    for field, (dtype, shape, _) in _FIELDS.items():
        if not field.startswith("arena_"):
            total += np.dtype(dtype).itemsize * prod(dimensions.get(size, size) for size in shape)
    return total


def check_arenas(arena_sizes):
    """TooLargeError unless arenas of these sizes (hbm, p2p, host) fit this machine: they are
    reserved, lazily zeroed buffers, so their sum must stay within RAM + swap."""
    if min(arena_sizes) < 0:
        raise DeviceStateError("arena", f"negative arena size in {arena_sizes}")
    arenas = sum(arena_sizes)
    limit = addressable_memory()
    if arenas > limit:
        raise TooLargeError(
            f"device arenas of {format_size(arenas)} (hbm, p2p, host: {arena_sizes}) are more "
            f"than this machine's memory ({format_size(limit)})"
        )


def _check_fits(arena_sizes, dimensions):
    """TooLargeError (with the estimate) for a device this machine cannot hold."""
    check_arenas(arena_sizes)
    tables = table_bytes(dimensions)
    what = (
        f"a device's tables (events {dimensions['max_events']:,}, streams "
        f"{dimensions['max_streams']:,}, blocks {dimensions['max_blocks']:,}, segments "
        f"{dimensions['max_segments']:,})"
    )
    check_fits(what, tables)


# counters that index a table: name, index, (the table, the dimension the value may reach)
_COUNTER_BOUNDS = (
    ("CNT_BLOCK_TOP", CNT_BLOCK_TOP, "block_slots", "max_blocks"),
    ("CNT_SEGMENT_TOP", CNT_SEGMENT_TOP, "segment_slots", "max_segments"),
    ("CNT_SEGMENT_HIGH", CNT_SEGMENT_HIGH, "segments", "max_segments"),
)


def check_state(state):
    """Check that `state` is a `DeviceState` jitted code may run on, or raise
    `DeviceStateError` naming the first offending field.

    Every field must be a C-contiguous, aligned numpy array of its dtype and dimension count
    (the type the `DeviceState` bundle compiles it as, `rtsoa._bundle.bundle_problem`), writeable
    where jitted code writes, with the layout's row widths; the tables' sizes must agree with
    each other (max_blocks, max_segments, max_streams <= MAX_STREAMS, max_events, a
    power-of-two trace capacity, the hazard capacity) and the arenas with the placement
    config; the slot-stack tops, the segment high-water mark and the free-range counts must
    point inside their tables; the stream / event counts in `config` must fit the tables.
    The tables' contents (links, free lists) are not checked.
    """
    if not isinstance(state, DeviceState):
        raise DeviceStateError("state", f"a DeviceState expected, got {type(state).__name__}")
    problem = bundle_problem(state)  # each array's type, as the bundle compiles it
    if problem is not None:
        raise DeviceStateError(*problem)
    fixed = [field for field, spec in _FIELDS.items() if all(type(n) is int for n in spec[1])]
    for field in fixed:  # first: the placement config gives the arena sizes
        _check_shape(state, field, {})
    dimensions = _dimensions(state)
    for field in [field for field in _FIELDS if field not in fixed]:
        _check_shape(state, field, dimensions)
    _check_sizes(state, dimensions)
    _check_placement_config(state)


def _check_shape(state, field, dimensions):
    shape = _FIELDS[field][1]
    expected = tuple(dimensions.get(size, size) for size in shape)
    actual = getattr(state, field).shape
    if actual != expected:
        named = ", ".join(
            f"{size}={dimensions[size]}" if size in dimensions else str(size) for size in shape
        )
        raise DeviceStateError(field, f"shape {actual}, expected ({named})")


def _dimensions(state):
    """The sizes the tables must agree on, read off the state."""
    arena_sizes = state.placement_config[:, PCFG_ARENA_SIZE].tolist()
    return {
        "hbm_bytes": arena_sizes[PLACEMENT_HBM],
        "p2p_bytes": arena_sizes[PLACEMENT_P2P],
        "host_bytes": arena_sizes[PLACEMENT_HOST],
        "max_blocks": state.blocks.shape[0],
        "max_segments": state.segments.shape[0],
        "range_capacity": state.segments.shape[0] + 2,
        "max_streams": state.stream_clock.shape[0],
        "max_events": state.event_time.shape[0],
        "trace_capacity": state.trace.shape[0],
        "hazard_capacity": state.hazards.shape[0],
    }


def _check_sizes(state, dimensions):
    """Table sizes and the counters and config values that index the tables."""
    if not 1 <= dimensions["max_blocks"] <= HANDLE_SLOT_MASK + 1:
        raise DeviceStateError(
            "blocks",
            f"needs 1 .. 2**{HANDLE_SLOT_BITS} rows (a handle holds a {HANDLE_SLOT_BITS}-bit slot)",
        )
    tag = int(state.config[CFG_HANDLE_TAG])
    if tag & HANDLE_GEN_MASK or not 0 <= tag >> HANDLE_GEN_BITS < HANDLE_TAG_COUNT:
        raise DeviceStateError("config", f"handle tag {tag:#x} is not tag << {HANDLE_GEN_BITS}")
    if dimensions["max_segments"] < 1:
        raise DeviceStateError("segments", "needs at least one row")
    if not 1 <= dimensions["max_streams"] <= MAX_STREAMS:
        raise DeviceStateError("stream_clock", f"max_streams must be in 1..{MAX_STREAMS}")
    capacity = dimensions["trace_capacity"]
    if capacity < 1 or capacity & (capacity - 1):
        raise DeviceStateError("trace", f"capacity {capacity} is not a power of two")
    streams = state.config[CFG_NUM_STREAMS]
    if not 1 <= streams <= dimensions["max_streams"]:
        raise DeviceStateError("config", f"{streams} streams in use, tables for 1..max_streams")
    events = state.config[CFG_NUM_EVENTS]
    if not 0 <= events <= dimensions["max_events"]:
        raise DeviceStateError("config", f"{events} events in use, tables for 0..max_events")
    if (state.counters < 0).any():
        raise DeviceStateError(
            "counters", f"negative counters at {np.flatnonzero(state.counters < 0)}"
        )
    for name, counter, table, dimension in _COUNTER_BOUNDS:
        if state.counters[counter] > dimensions[dimension]:
            raise DeviceStateError("counters", f"{name} points past the end of {table}")
    if ((state.range_count < 0) | (state.range_count > dimensions["range_capacity"])).any():
        raise DeviceStateError("range_count", "a free-range count is outside range_offset")


def _check_placement_config(state):
    """Allocation units and quick-list limits (which index the quick lists), caps."""
    page_mode = state.config[CFG_PAGE_MODE] != 0
    for placement, row in enumerate(state.placement_config):
        name = PLACEMENT_NAMES[placement]
        unit = state.config[CFG_PAGE_SIZE] if page_mode else row[PCFG_ALIGNMENT]
        if unit < 1 or unit & (unit - 1) or row[PCFG_ALIGNMENT] < 1:
            raise DeviceStateError("placement_config", f"{name}: unit {unit} not a power of two")
        for what, value in (
            ("unit", unit),
            ("tail padding", row[PCFG_TAIL_PADDING]),
            ("large-segment rounding", state.config[CFG_LARGE_ROUND]),
        ):
            if not 0 <= value <= MAX_UNIT_BYTES:  # sums with a request never overflow then
                raise DeviceStateError("placement_config", f"{name}: {what} outside 0..2**48")
        if row[PCFG_UNIT_SHIFT] != int(unit).bit_length() - 1:
            raise DeviceStateError("placement_config", f"{name}: unit shift is not log2({unit})")
        if row[PCFG_QUICK_LIMIT] > QUICK_CLASSES * unit:
            raise DeviceStateError(
                "placement_config", f"{name}: quick-list limit > {QUICK_CLASSES} units"
            )
        if not 0 <= row[PCFG_CAP] <= row[PCFG_ARENA_SIZE]:
            raise DeviceStateError("placement_config", f"{name}: cap outside 0..arena size")


# ---- re-arming a used state (Device.reset) ---------------------------------------------------
# Tables written row by row from the top: a reset re-arms only the rows a device has used (a
# default device's tables are ~22 MiB, and rewriting them all costs what building a new one
# does). Each is restored from a copy of its just-built row 0, which equals every other row.
_ROW_TABLES = (
    "blocks",
    "history",
    "history_time",
    "segments",
    "trace",
    "trace_extra",
    "hazards",
    "hazard_time",
)
_SLOT_STACKS = ("block_slots", "segment_slots")
# Never written after creation (configuration) or deliberately kept (arena bytes, see reset).
_KEPT = ("arena_hbm", "arena_p2p", "arena_host", "placement_config", "cost")
_SCAN_CHUNK = 4096  # block rows looked at per step when finding the rows a device has used


class StateTemplate(NamedTuple):
    """What `rearm_state` restores: copies of a just-built state's small arrays (counters,
    statistics, free lists, streams, events, config) and one row of each row table."""

    arrays: dict  # field -> copy of the just-built array
    rows: dict  # field -> copy of its row 0 (every row of a just-built table is equal)


def state_template(state):
    """The `StateTemplate` of `state`, which must be just built (by `create_state`)."""
    skipped = set(_ROW_TABLES) | set(_SLOT_STACKS) | set(_KEPT)
    arrays = {
        field: getattr(state, field).copy() for field in state._fields if field not in skipped
    }
    rows = {field: getattr(state, field)[0].copy() for field in _ROW_TABLES}
    return StateTemplate(arrays=arrays, rows=rows)


def used_block_rows(state):
    """1 + the highest block row a state has ever used (0 when none).

    Rows are handed out from the bottom of the slot stack in increasing order (slot 0 first)
    and a row in use always has its segment set (`BLK_SEGMENT` >= 0, kept when the row is
    unused again), so the used rows are a prefix: scanned in chunks until one holds no used
    row, never the whole table of a device that used few rows."""
    blocks = state.blocks
    total = blocks.shape[0]
    in_use = total - int(state.counters[CNT_BLOCK_TOP])  # rows on loan right now
    used = 0
    for start in range(0, total, _SCAN_CHUNK):
        filled = np.flatnonzero(blocks[start : start + _SCAN_CHUNK, BLK_SEGMENT] >= 0)
        if filled.shape[0] == 0:
            break
        used = start + int(filled[-1]) + 1
    return max(used, in_use)


def rearm_state(state, template):
    """Return `state` to the contents it had when `template` was taken, in place: no array is
    reallocated (executors keep their references), row tables are re-armed only in the rows
    used, the arenas' bytes are left as they are. Returns the number of block rows re-armed."""
    counters = state.counters
    trace_rows = min(int(counters[CNT_TRACE_SEQ]), state.trace.shape[0])
    hazard_rows = min(int(counters[CNT_HAZARDS]), state.hazards.shape[0])
    block_rows = used_block_rows(state)
    segment_rows = int(counters[CNT_SEGMENT_HIGH])
    counts = {
        "blocks": block_rows,
        "history": block_rows,
        "history_time": block_rows,
        "segments": segment_rows,
        "trace": trace_rows,
        "trace_extra": trace_rows,
        "hazards": hazard_rows,
        "hazard_time": hazard_rows,
    }
    for field, count in counts.items():
        getattr(state, field)[:count] = template.rows[field]
    # a just-built slot stack holds size - 1 .. 0 (popped from the top, slot 0 first): the used
    # rows' slots sit in its top `count` positions
    for stack, count in ((state.block_slots, block_rows), (state.segment_slots, segment_rows)):
        size = stack.shape[0]
        stack[size - count :] = np.arange(count - 1, -1, -1, dtype=stack.dtype)
    for field, array in template.arrays.items():
        np.copyto(getattr(state, field), array)
    return block_rows
