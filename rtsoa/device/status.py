"""Status codes of the simulated device and their names.

Plain module-level int constants, so jitted code freezes the same values the Python wrappers
use. Device status codes live in 100-199 so they never clash with kernel statuses; 0 is success
everywhere. `device_malloc` returns a block handle (>= 0) or the negated status code. The
column layouts of the device's arrays are in `layout.py`.
"""

# ---- status codes (100-199) ----------------------------------------------------------------
STATUS_OK = 0
STATUS_OUT_OF_MEMORY = 101  # no block, no segment within the cap / arena, after all retries
STATUS_INVALID_BLOCK = 102  # stale handle, double free, or a handle that was never allocated
STATUS_INVALID_STREAM = 103
STATUS_INVALID_EVENT = 104
STATUS_INVALID_PLACEMENT = 105
STATUS_NOT_READY = 106  # event_query: the event has not completed at the current host time
STATUS_TOO_MANY_BLOCKS = 107  # block table full (raise max_blocks)
STATUS_TOO_MANY_SEGMENTS = 108  # segment table full (raise max_segments)
STATUS_INVALID_SIZE = 109  # negative request (or, from `Device`, not an int64)
STATUS_INVALID_STATE = 110  # a DeviceState breaks the layout contract (`state.check_state`)
STATUS_VIEW_TOO_LARGE = 111  # a typed view needs more bytes than its block holds (kernels.tensors)
STATUS_INVALID_COST = 112  # a launch with negative bytes / flops, or a non-finite end time

STATUS_NAMES = {
    STATUS_OK: "OK",
    STATUS_OUT_OF_MEMORY: "OUT_OF_MEMORY",
    STATUS_INVALID_BLOCK: "INVALID_BLOCK",
    STATUS_INVALID_STREAM: "INVALID_STREAM",
    STATUS_INVALID_EVENT: "INVALID_EVENT",
    STATUS_INVALID_PLACEMENT: "INVALID_PLACEMENT",
    STATUS_NOT_READY: "NOT_READY",
    STATUS_TOO_MANY_BLOCKS: "TOO_MANY_BLOCKS",
    STATUS_TOO_MANY_SEGMENTS: "TOO_MANY_SEGMENTS",
    STATUS_INVALID_SIZE: "INVALID_SIZE",
    STATUS_INVALID_STATE: "INVALID_STATE",
    STATUS_VIEW_TOO_LARGE: "VIEW_TOO_LARGE",
    STATUS_INVALID_COST: "INVALID_COST",
}
