"""Every status code rtsoa's jitted code returns, one IntEnum per range, and `describe(code)`.

0 is success everywhere. The ranges never overlap, so a code alone says who produced it:

- `DeviceStatus` (101-199): the simulated device (`device_malloc` returns a block handle >= 0
  or the negated code);
- `OpStatus` (2001-2099): a compute op's shape inference or compute (`rtsoa.ops.abi`);
- `ModelStatus` (2101-2199): the kernels of lowered models (op nodes, control flow);
- `RuntimeStatus` (from RESERVED_STATUS_BASE = 1,000,000,000): the runtime's own codes. A kernel
  returning one of them asks the executor for something (end the run, continue on one
  successor) instead of failing; only kernels registered for it may ask (see
  `rtsoa.kernels.status`). Codes from NOTIFY_BASE up are `notify(k)`: continue on successor k.

Any other non-zero int32 below RESERVED_STATUS_BASE is a user kernel's own failure code.

Jitted code may use the members directly (Numba types them as integer constants:
`np.int32(DeviceStatus.OUT_OF_MEMORY)`, `status == OpStatus.BAD_SHAPE`). The `STATUS_*` names
below are the same codes as plain ints, for code that mixes them with int32 arithmetic (Numba
does not unify an IntEnum member with an int32 in one variable).
"""

import enum

import numpy as np

from rtsoa.abi.operands import MAX_RANK

STATUS_OK = 0
RESERVED_STATUS_BASE = 1_000_000_000


class DeviceStatus(enum.IntEnum):
    """Statuses of the simulated device (101-199)."""

    OUT_OF_MEMORY = 101  # no block, no segment within the cap / arena, after all retries
    INVALID_BLOCK = 102  # stale handle, double free, or a handle that was never allocated
    INVALID_STREAM = 103
    INVALID_EVENT = 104
    INVALID_PLACEMENT = 105
    NOT_READY = 106  # event_query: the event has not completed at the current host time
    TOO_MANY_BLOCKS = 107  # block table full (raise max_blocks)
    TOO_MANY_SEGMENTS = 108  # segment table full (raise max_segments)
    INVALID_SIZE = 109  # negative request (or, from `Device`, not an int64)
    INVALID_STATE = 110  # a DeviceState breaks the layout contract (`state.check_state`)
    VIEW_TOO_LARGE = 111  # a typed view needs more bytes than its block holds (abi.views)
    INVALID_COST = 112  # a launch with negative bytes / flops, or a non-finite end time


class OpStatus(enum.IntEnum):
    """Statuses of a compute op's infer / compute (2001-2099)."""

    BAD_DTYPE = 2001  # an input dtype the op does not support, or mismatched dtypes
    BAD_SHAPE = 2002  # incompatible shapes (broadcast, inner dimensions, ...)
    BAD_ATTRIBUTE = 2003  # an attribute value the op cannot use
    NEEDS_DATA = 2004  # infer needs an input's data that is not available (lowering time)
    RANK = 2005  # a result would have more than MAX_RANK dimensions
    UNKNOWN = 2006  # an op code the entry does not know
    BAD_INDEX = 2007  # an index input out of range (Gather, ...)
    MISSING_INPUT = 2008  # a required input is absent
    TOO_LARGE = 2009  # a result's size overflows int64 bytes
    ARITY = 2010  # input / output counts outside what the op takes
    EXCEPTION = 2011  # an exception escaped the op's compiled code (the entry caught it)


class ModelStatus(enum.IntEnum):
    """Statuses of the kernels of lowered models (2101-2199)."""

    BAD_OP_NODE = 2101  # header / input counts do not match the node
    NO_OP_LIBRARY = 2102  # the graph's op table has no entry address for the op
    BAD_TENSOR = 2103  # a shape row is unset / out of range, or a size overflows
    CONSTANT_RANGE = 2104  # a constant's bytes lie outside the constant blob or its block
    SHAPE_CHANGED = 2105  # a launch's output shape differs from the one allocated
    NOT_A_SCALAR = 2111  # a condition / trip count tensor does not hold exactly one element
    SCALAR_DTYPE = 2112  # its element type is not an integer or bool (or not int64: counter)
    NO_SHAPE_ROWS = 2113  # the graph's values have no shape rows (not a lowered model)


class RuntimeStatus(enum.IntEnum):
    """The runtime's reserved statuses (from RESERVED_STATUS_BASE)."""

    # The graph's work is done for this run: stop without error (the reference's
    # end-of-sequence). (1_000_000_002 was "notify the successor in a state slot": the choice
    # now travels in the status itself, see NOTIFY_BASE.)
    END_OF_SEQUENCE = 1_000_000_001
    UNKNOWN_KERNEL = 1_000_000_003  # the dispatch switch got an id it does not know (a bug)
    QUEUE_OVERFLOW = 1_000_000_004  # a malformed control-flow graph made a node ready twice
    STEP_LIMIT = 1_000_000_005  # a queue executor ran its step limit (a loop never exited)
    BAD_NOTIFY = 1_000_000_006  # a kernel asked for successor k, but the node has none
    # A kernel returned a reserved status it is not registered to return (end-of-sequence from
    # a kernel without `ends_sequence=True`, or a code only the executors produce).
    RESERVED_NOT_REGISTERED = 1_000_000_007
    # The run was asked to stop (cancel(), a timeout, Ctrl-C): only the executor loops return
    # it, and the executor raises RunCancelled / RunTimeout / RunInterrupted.
    CANCELLED = 1_000_000_008
    # The multithread run made no progress: every outstanding node is a Free waiting for a
    # Launch that cannot be submitted.
    NO_PROGRESS = 1_000_000_100
    # From here up: "notify only successor (status - NOTIFY_BASE)".
    NOTIFY_BASE = 1_100_000_000


STATUS_RANGES = (DeviceStatus, OpStatus, ModelStatus, RuntimeStatus)
MAX_NOTIFY = int(np.iinfo(np.int32).max) - RuntimeStatus.NOTIFY_BASE

# Plain-int names of the codes (see the module docstring), grouped as the enums are.
STATUS_OUT_OF_MEMORY = int(DeviceStatus.OUT_OF_MEMORY)
STATUS_INVALID_BLOCK = int(DeviceStatus.INVALID_BLOCK)
STATUS_INVALID_STREAM = int(DeviceStatus.INVALID_STREAM)
STATUS_INVALID_EVENT = int(DeviceStatus.INVALID_EVENT)
STATUS_INVALID_PLACEMENT = int(DeviceStatus.INVALID_PLACEMENT)
STATUS_NOT_READY = int(DeviceStatus.NOT_READY)
STATUS_TOO_MANY_BLOCKS = int(DeviceStatus.TOO_MANY_BLOCKS)
STATUS_TOO_MANY_SEGMENTS = int(DeviceStatus.TOO_MANY_SEGMENTS)
STATUS_INVALID_SIZE = int(DeviceStatus.INVALID_SIZE)
STATUS_INVALID_STATE = int(DeviceStatus.INVALID_STATE)
STATUS_VIEW_TOO_LARGE = int(DeviceStatus.VIEW_TOO_LARGE)
STATUS_INVALID_COST = int(DeviceStatus.INVALID_COST)

STATUS_OP_BAD_DTYPE = int(OpStatus.BAD_DTYPE)
STATUS_OP_BAD_SHAPE = int(OpStatus.BAD_SHAPE)
STATUS_OP_BAD_ATTRIBUTE = int(OpStatus.BAD_ATTRIBUTE)
STATUS_OP_NEEDS_DATA = int(OpStatus.NEEDS_DATA)
STATUS_OP_RANK = int(OpStatus.RANK)
STATUS_OP_UNKNOWN = int(OpStatus.UNKNOWN)
STATUS_OP_BAD_INDEX = int(OpStatus.BAD_INDEX)
STATUS_OP_MISSING_INPUT = int(OpStatus.MISSING_INPUT)
STATUS_OP_TOO_LARGE = int(OpStatus.TOO_LARGE)
STATUS_OP_ARITY = int(OpStatus.ARITY)
STATUS_OP_EXCEPTION = int(OpStatus.EXCEPTION)

STATUS_BAD_OP_NODE = int(ModelStatus.BAD_OP_NODE)
STATUS_NO_OP_LIBRARY = int(ModelStatus.NO_OP_LIBRARY)
STATUS_BAD_TENSOR = int(ModelStatus.BAD_TENSOR)
STATUS_CONSTANT_RANGE = int(ModelStatus.CONSTANT_RANGE)
STATUS_SHAPE_CHANGED = int(ModelStatus.SHAPE_CHANGED)
STATUS_NOT_A_SCALAR = int(ModelStatus.NOT_A_SCALAR)
STATUS_SCALAR_DTYPE = int(ModelStatus.SCALAR_DTYPE)
STATUS_NO_SHAPE_ROWS = int(ModelStatus.NO_SHAPE_ROWS)

STATUS_END_OF_SEQUENCE = int(RuntimeStatus.END_OF_SEQUENCE)
STATUS_UNKNOWN_KERNEL = int(RuntimeStatus.UNKNOWN_KERNEL)
STATUS_QUEUE_OVERFLOW = int(RuntimeStatus.QUEUE_OVERFLOW)
STATUS_STEP_LIMIT = int(RuntimeStatus.STEP_LIMIT)
STATUS_BAD_NOTIFY = int(RuntimeStatus.BAD_NOTIFY)
STATUS_RESERVED_NOT_REGISTERED = int(RuntimeStatus.RESERVED_NOT_REGISTERED)
STATUS_CANCELLED = int(RuntimeStatus.CANCELLED)
STATUS_NO_PROGRESS = int(RuntimeStatus.NO_PROGRESS)
STATUS_NOTIFY_BASE = int(RuntimeStatus.NOTIFY_BASE)

# What each code means, for error messages: the one table, keyed by member (a test checks
# that every member of every range has a line). Device codes are described by their names.
_MEANINGS = {
    OpStatus.BAD_DTYPE: "unsupported or mismatched input dtype",
    OpStatus.BAD_SHAPE: "incompatible input shapes",
    OpStatus.BAD_ATTRIBUTE: "bad attribute value",
    OpStatus.NEEDS_DATA: "shape depends on input data not available",
    OpStatus.RANK: f"result rank above {MAX_RANK}",
    OpStatus.UNKNOWN: "unknown op code",
    OpStatus.BAD_INDEX: "index out of range",
    OpStatus.MISSING_INPUT: "a required input is absent",
    OpStatus.TOO_LARGE: "result too large",
    OpStatus.ARITY: "input or output count the op does not take",
    OpStatus.EXCEPTION: (
        "an exception was raised inside the op's compiled code (for example a MemoryError from "
        "a host-side buffer too large to allocate); its outputs were not written"
    ),
    ModelStatus.BAD_OP_NODE: "op node: header and inputs / outputs do not match",
    ModelStatus.NO_OP_LIBRARY: "op node: the graph's op table has no entry for its op",
    ModelStatus.BAD_TENSOR: "op node: a tensor shape is unset, out of range or too large",
    ModelStatus.CONSTANT_RANGE: "constant outside the constant blob or its block",
    ModelStatus.SHAPE_CHANGED: "op node: output shape differs from the allocated one",
    ModelStatus.NOT_A_SCALAR: (
        "control flow: a condition or trip count tensor does not hold exactly one element"
    ),
    ModelStatus.SCALAR_DTYPE: (
        "control flow: a condition or trip count tensor's element type is not an integer or bool"
    ),
    ModelStatus.NO_SHAPE_ROWS: (
        "control flow: the graph's values have no shape rows (not a lowered model)"
    ),
    RuntimeStatus.END_OF_SEQUENCE: "end of sequence",
    RuntimeStatus.UNKNOWN_KERNEL: "unknown kernel id in dispatch",
    RuntimeStatus.QUEUE_OVERFLOW: "ready queue overflow (malformed control flow)",
    RuntimeStatus.STEP_LIMIT: (
        "step limit reached (a loop did not terminate, or a node of a graph without loops ran "
        "twice; see max_steps)"
    ),
    RuntimeStatus.BAD_NOTIFY: "a switch chose a successor the node does not have",
    RuntimeStatus.RESERVED_NOT_REGISTERED: (
        "a kernel returned a reserved status it is not registered to return (end of sequence "
        "needs ends_sequence=True; the executors' own codes come from no kernel)"
    ),
    RuntimeStatus.CANCELLED: "the run was cancelled (cancel(), a timeout or Ctrl-C)",
    RuntimeStatus.NO_PROGRESS: (
        "no progress: every outstanding node is a Free waiting for a Launch that cannot run"
    ),
}


def status_member(code):
    """The enum member of `code` (DeviceStatus.OUT_OF_MEMORY for 101), or None for success,
    notify codes and user kernels' own codes."""
    code = int(code)
    if code >= STATUS_NOTIFY_BASE:
        return None
    for enum_class in STATUS_RANGES:
        if code in enum_class._value2member_map_:
            return enum_class(code)
    return None


def meaning(code):
    """The plain meaning of `code` without its range prefix ("incompatible input shapes",
    "OUT_OF_MEMORY"), or None where `describe` has none."""
    member = status_member(code)
    if member is None:
        return None
    if isinstance(member, DeviceStatus):
        return member.name
    return _MEANINGS[member]


def describe(code):
    """What status `code` means, for error messages: "ok", "device: OUT_OF_MEMORY",
    "op: incompatible input shapes", "notify successor 2", ...; None for a user kernel's own
    failure code (rtsoa cannot know what it means)."""
    code = int(code)
    if code == STATUS_OK:
        return "ok"
    if code >= STATUS_NOTIFY_BASE:
        return f"notify successor {code - STATUS_NOTIFY_BASE}"
    member = status_member(code)
    if isinstance(member, DeviceStatus):
        return f"device: {member.name}"
    if isinstance(member, OpStatus):
        return f"op: {_MEANINGS[member]}"
    return meaning(code)


def status_label(code):
    """A short label of `code` for a message prefix: the member's name (OUT_OF_MEMORY), or the
    number itself for codes outside the enums."""
    if int(code) == STATUS_OK:
        return "OK"
    member = status_member(code)
    return member.name if member is not None else str(code)


def is_reserved(status):
    """True for the runtime's own codes (never a kernel's failure code)."""
    return status >= RESERVED_STATUS_BASE
