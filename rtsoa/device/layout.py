"""Fixed layouts of the simulated device's arrays: columns, config slots, counters, codes.

Everything here is a plain module-level int constant, so jitted code freezes the same values
the Python wrappers use (`state.check_state` verifies a `DeviceState` against them before any
jitted code runs on it). Placements are the graph format's `Placement` enum as plain ints.
Status codes are in `status.py`.
"""

from rtsoa.graph.schema import MAX_STREAMS, Placement  # noqa: F401 - MAX_STREAMS re-exported

# ---- placements (the reference's TensorPlacement) -----------------------------------------
PLACEMENT_HBM = int(Placement.DEVICE_HBM)
PLACEMENT_P2P = int(Placement.DEVICE_P2P)
PLACEMENT_HOST = int(Placement.HOST)
PLACEMENT_FOLLOWING = int(Placement.FOLLOWING)  # resolves to host, as in the reference
NUM_PLACEMENTS = 3  # arenas: "following" has none of its own
PLACEMENT_NAMES = ("hbm", "p2p", "host", "following")

POOL_SMALL = 0
POOL_LARGE = 1

# ---- block states ----------------------------------------------------------------------------
BLOCK_UNUSED = 0  # table slot not in use
BLOCK_FREE = 1  # cached in a free list
BLOCK_ALLOCATED = 2
BLOCK_QUICK = 3  # free, parked in a quick list: not merged with its neighbours, in no free list

# ---- block table (int64 `blocks`, one 128-byte row per slot: a block's fields share cache lines)
BLK_OFFSET = 0
BLK_SIZE = 1  # rounded size owned by the block
BLK_REQUESTED = 2  # caller's size (meaningful only while allocated; stale when free)
BLK_SEGMENT = 3
BLK_PREV = 4  # address neighbour in the segment (-1: none)
BLK_NEXT = 5
BLK_STATE = 6  # BLOCK_UNUSED / BLOCK_FREE / BLOCK_ALLOCATED / BLOCK_QUICK
BLK_BIN = 7  # free-list index while free (-1 otherwise)
BLK_FREE_PREV = 8  # free-list links
BLK_FREE_NEXT = 9  # (also the quick-list link)
BLK_GENERATION = 10  # bumped at every allocation of the slot
BLK_STREAM = 11  # allocating stream (freeing stream when free)
BLK_STREAM_MASK = 12  # streams that touched this memory (record-stream semantics)
BLK_GROUP = 13  # free-list group: placement * 2 + pool
BLK_PLACEMENT = 14
NUM_BLOCK_COLUMNS = 16  # one spare column keeps rows at 128 bytes

# ---- access history (int64 `history`, shape (max_blocks, max_streams, NUM_HISTORY_COLUMNS))
HIST_USE = 0  # epoch of the stream's last access
HIST_WRITE = 1  # epoch of its last write
HIST_TASK = 2  # task of the last access
NUM_HISTORY_COLUMNS = 4  # padded: 32 bytes per (block, stream); times in `history_time`

# ---- segment table (int64 `segments`, one row per segment slot)
SEG_OFFSET = 0
SEG_SIZE = 1
SEG_PLACEMENT = 2  # -1: slot unused
SEG_POOL = 3
SEG_FIRST_BLOCK = 4  # lowest-address block of the segment
SEG_SCAN_NEXT = 5  # scratch of one growth-path scan (`growth._coalesce_free_segments`)
NUM_SEGMENT_COLUMNS = 8

# ---- block handles: tag << 48 | generation << 24 | slot -------------------------------------
# The slot is the block's row, the generation counts the row's allocations (so a stale handle,
# from a double free or a use after free, is caught until the row has been reused 2**24
# times), and the tag is the device's (`CFG_HANDLE_TAG`), so a handle of another device is
# refused instead of naming an unrelated block of this one. A row's BLK_GENERATION stores
# tag << 24 | generation, which is `handle >> HANDLE_GEN_SHIFT`: one compare checks both.
HANDLE_SLOT_BITS = 24  # at most 2**24 block rows (16,777,216)
HANDLE_SLOT_MASK = (1 << HANDLE_SLOT_BITS) - 1
HANDLE_GEN_SHIFT = HANDLE_SLOT_BITS
HANDLE_GEN_BITS = 24
HANDLE_GEN_MASK = (1 << HANDLE_GEN_BITS) - 1
HANDLE_TAG_SHIFT = HANDLE_GEN_SHIFT + HANDLE_GEN_BITS  # 48
HANDLE_TAG_BITS = 15  # bit 63 stays clear: handles are non-negative, -status is an error
HANDLE_TAG_COUNT = 1 << HANDLE_TAG_BITS

# ---- global allocator config (int64 array `config`) ---------------------------------------
CFG_SMALL_SIZE = 0  # requests <= this (after rounding) use the small pool
CFG_SMALL_SEGMENT = 1  # segment size of the small pool
CFG_LARGE_SEGMENT = 2  # segment size for large requests below CFG_LARGE_SEGMENT_LIMIT
CFG_LARGE_SEGMENT_LIMIT = 3
CFG_LARGE_ROUND = 4  # larger requests get a segment of their size rounded to this
CFG_MAX_SPLIT = 5  # blocks at least this big are "oversize": never split
CFG_OVERSIZE_SLACK = 6  # an oversize block serves a request only if it wastes less than this
CFG_PAGE_MODE = 7  # 1: page-granular mode (64 KiB pages, LIFO spans by page count)
CFG_PAGE_SIZE = 8
CFG_HAZARDS = 9  # 1: hazard checker on
CFG_NUM_STREAMS = 10  # streams in use (<= 63)
CFG_NUM_EVENTS = 11
CFG_SMALL_MIN_REMAINDER = 12  # split the small pool's block only if this much is left over
CFG_LARGE_MIN_REMAINDER = 13
CFG_TRACE = 14  # 1: write events into the trace ring
CFG_RELEASE_BEFORE_GROW = 15  # 1: return wholly free cached segments before carving a new one
CFG_SEGMENT_SLACK_SHIFT = 16  # a whole free large-pool segment wastes <= its size >> this (63: off)
CFG_QUICK_DEPTH = 17  # blocks a quick list holds at most (0: quick lists off)
CFG_HANDLE_TAG = 18  # the device's handle tag, pre-shifted: tag << HANDLE_GEN_BITS
NUM_CONFIG = 19
# Allocation units, tail padding and large-segment rounding are at most this, and requests at
# most the arena (itself bounded by the machine's memory), so a request's rounding and segment
# sizes never overflow int64.
MAX_UNIT_BYTES = 1 << 48

# ---- per-placement config (int64 array `placement_config`, one row per arena) --------------
PCFG_ALIGNMENT = 0
PCFG_TAIL_PADDING = 1
PCFG_CAP = 2  # reserved bytes may not exceed this
PCFG_ARENA_SIZE = 3
PCFG_QUICK_LIMIT = 4  # rounded sizes up to this go through quick lists (0: none)
PCFG_UNIT_SHIFT = 5  # log2 of the allocation unit (alignment, or the page in page mode)
NUM_PLACEMENT_CONFIG = 6

# ---- cost model (float64 array `cost`) -------------------------------------------------------
COST_LAUNCH_LATENCY_NS = 0
COST_BYTES_PER_NS = 1
COST_FLOPS_PER_NS = 2
COST_EVENT_RECORD_NS = 3
NUM_COST = 4

# ---- device-wide counters (int64 array `counters`) ------------------------------------------
CNT_TRACE_SEQ = 0  # events ever written to the trace ring
CNT_TASKS = 1  # launches ever issued (task ids are 0..)
CNT_HAZARDS = 2  # hazards ever detected (the table keeps the first `hazard capacity`)
CNT_BLOCK_TOP = 3  # free block slots left on the slot stack
CNT_SEGMENT_TOP = 4  # free segment slots left on its stack
CNT_ALLOC_RETRIES = 5
CNT_OOMS = 6
CNT_STREAM_SYNCS = 7
CNT_DEVICE_SYNCS = 8
CNT_EVENT_SYNCS = 9
CNT_CACHE_FLUSHES = 10  # release of cached segments back to the arena
CNT_SUBMISSION_WAITS = 11  # "wait for pending launch submissions" step of the OOM path
CNT_LAUNCHES = 12
CNT_EVENT_RECORDS = 13
CNT_STREAM_WAITS = 14
CNT_FREE_SEGMENTS = 15  # cached segments that are one free block (release candidates)
CNT_GROWTH_RELEASES = 16  # releases of free segments made before carving a new segment
CNT_SEGMENT_HIGH = 17  # 1 + the highest segment slot ever used (release scans stop there)
CNT_ALLOCATOR_WAITS = 18  # cross-stream waits the allocator inserted to reuse cached memory
CNT_QUICK_FLUSHES = 19  # quick-list flushes (their blocks merged and listed before growing)
CNT_LEAKED_BLOCKS = 20  # blocks executor runs left allocated at their end (reclaimed then)
NUM_COUNTERS = 21

# The device lock (`DeviceState.lock`, `rtsoa.device.lock`): its word and, a cache line away,
# whether the run in progress has several workers calling into the device at once
LOCK_HELD = 0
LOCK_SHARED = 8
LOCK_WORDS = 16

# ---- per-placement statistics (int64 array `stats`, one row per arena) ---------------------
# Each tracked quantity has current / peak / allocated-total columns; the freed total is
# derived (allocated - current) by `stats.placement_stats`, so a free updates one column.
STAT_CURRENT = 0
STAT_PEAK = 1
STAT_TOTAL = 2  # column 3 of each group is spare
STAT_ALLOCATED_BYTES = 0  # sum of block sizes handed out (rounded, incl. unsplit remainder)
STAT_REQUESTED_BYTES = 4  # sum of the sizes callers asked for
STAT_ALLOCATED_COUNT = 8
STAT_RESERVED_BYTES = 12  # sum of segment sizes carved from the arena
STAT_SEGMENT_COUNT = 16
NUM_STATS = 20
STAT_GROUPS = {
    "allocated_bytes": STAT_ALLOCATED_BYTES,
    "requested_bytes": STAT_REQUESTED_BYTES,
    "allocation": STAT_ALLOCATED_COUNT,
    "reserved_bytes": STAT_RESERVED_BYTES,
    "segment": STAT_SEGMENT_COUNT,
}

# ---- trace ring buffer (int64 array `trace` of shape (capacity, NUM_TRACE_COLUMNS)) --------
TRACE_KIND = 0
TRACE_PLACEMENT = 1
TRACE_HANDLE = 2  # block handle, segment slot, task id or event id depending on kind
TRACE_OFFSET = 3
TRACE_SIZE = 4  # block / segment size, or bytes moved by a launch
TRACE_REQUESTED = 5  # requested bytes, or flops of a launch
TRACE_STREAM = 6
TRACE_ALLOCATED_AFTER = 7  # allocated bytes of the placement after the event
TRACE_RESERVED_AFTER = 8  # reserved bytes of the placement after the event
NUM_TRACE_COLUMNS = 9
# `trace_rows` returns rows in this layout plus (start, end) times in ns. In the ring itself an
# event is one 32-byte row of `dev.trace` (int64, shape (capacity, NUM_RING_COLUMNS)), half a
# cache line, so the hot malloc / free path writes half the ring memory of a 64-byte row:
RING_TIME = 0  # bits of the float64 start time (events end when they start unless extended)
RING_HANDLE = 1  # full 64 bits
RING_HEADER = 2  # kind | (placement + 1) << 8 | (stream + 1) << 12 | flags | offset << 24
RING_SIZES = 3  # size | requested << 32 (packed rows only)
NUM_RING_COLUMNS = 4
RING_STREAM_SHIFT = 12  # 8 bits: streams < MAX_STREAMS
RING_EXTENDED = 1 << 20  # flag: offset / size / requested / end time are in `trace_extra`
RING_OFFSET_SHIFT = 24
# A row is packed when offset < 2**40 (1 TiB), size and requested < 2**32 (4 GiB) and the event
# ends when it starts; anything else (launches, an OOM's offset -1, a 5 GiB block) is an
# extended row: the header says so and the same row of `dev.trace_extra` (shape (capacity,
# NUM_EXTRA_COLUMNS), written only for such rows) holds the exact values. Allocated / reserved
# bytes after each event are not stored: `trace.trace_rows` derives them backwards from the
# current statistics (every change of those statistics is a traced event).
RING_OFFSET_LIMIT_BITS = 40
RING_SIZE_LIMIT_BITS = 32
EXTRA_OFFSET = 0
EXTRA_SIZE = 1
EXTRA_REQUESTED = 2
EXTRA_END = 3  # bits of the float64 end time
NUM_EXTRA_COLUMNS = 4

EV_ALLOC = 1
EV_FREE = 2
EV_SEGMENT_ALLOC = 3
EV_SEGMENT_FREE = 4
EV_OOM = 5
EV_LAUNCH = 6
EV_EVENT_RECORD = 7
EV_STREAM_WAIT = 8
EV_STREAM_SYNC = 9
EV_DEVICE_SYNC = 10
EV_EVENT_SYNC = 11
EV_ALLOCATOR_WAIT = 12  # handle column: the stream waited for; stream column: the waiting one
EVENT_KIND_NAMES = {
    EV_ALLOC: "alloc",
    EV_FREE: "free",
    EV_SEGMENT_ALLOC: "segment_alloc",
    EV_SEGMENT_FREE: "segment_free",
    EV_OOM: "oom",
    EV_LAUNCH: "launch",
    EV_EVENT_RECORD: "event_record",
    EV_STREAM_WAIT: "stream_wait_event",
    EV_STREAM_SYNC: "stream_synchronize",
    EV_DEVICE_SYNC: "device_synchronize",
    EV_EVENT_SYNC: "event_synchronize",
    EV_ALLOCATOR_WAIT: "allocator_wait",
}

# ---- hazards (int64 array `hazards` of shape (capacity, NUM_HAZARD_COLUMNS)) ---------------
HAZ_KIND = 0
HAZ_BLOCK = 1  # the handle the kernel declared
HAZ_TASK = 2
HAZ_STREAM = 3
HAZ_OTHER_TASK = 4  # -1 when unknown (e.g. the free of a stale handle)
HAZ_OTHER_STREAM = 5
HAZ_IS_WRITE = 6
NUM_HAZARD_COLUMNS = 7
# `hazard_time` (float64, shape (capacity, 2)): this task's start, the other task's end.

HAZARD_USE_AFTER_FREE = 1  # the handle is stale: its block was freed (and maybe reused)
HAZARD_UNORDERED_ACCESS = 2  # cross-stream access (or reuse) not ordered by events
HAZARD_KIND_NAMES = {
    HAZARD_USE_AFTER_FREE: "use_after_free",
    HAZARD_UNORDERED_ACCESS: "unordered_access",
}

# ---- size classes of the free lists ----------------------------------------------------------
SUB_BINS_LOG2 = 4  # 16 classes per power of two (6.25 % apart)
NUM_BINS = 64 << SUB_BINS_LOG2
BITMAP_BITS = 32  # bins per int64 bitmap word (sign bit never used)
BITMAP_WORDS = NUM_BINS // BITMAP_BITS
# quick lists: per placement, one LIFO list per size of 1..QUICK_CLASSES allocation units
QUICK_CLASSES = 1 << SUB_BINS_LOG2
