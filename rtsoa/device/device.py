"""`Device`: the Python face of the simulated device.

It validates arguments, calls the jitted functions on its `DeviceState` (`device.state`, which
is also what executors put into their runtime tuple), and turns status codes into exceptions.
"""

import dataclasses
import itertools
import json
import math
import secrets
import threading

import numpy as np

from rtsoa._jit import EntryCache
from rtsoa.abi.status import (
    STATUS_INVALID_BLOCK,
    STATUS_INVALID_COST,
    STATUS_INVALID_EVENT,
    STATUS_INVALID_PLACEMENT,
    STATUS_INVALID_SIZE,
    STATUS_INVALID_STREAM,
    STATUS_NOT_READY,
    STATUS_OK,
    STATUS_OUT_OF_MEMORY,
)
from rtsoa.device import defaults
from rtsoa.device import malloc as _allocator
from rtsoa.device import streams as _streams
from rtsoa.device.config import AllocatorConfig, resolve_cap
from rtsoa.device.cost import CostModel
from rtsoa.device.handles import block_location
from rtsoa.device.hazards import device_access
from rtsoa.device.layout import (
    BLK_GENERATION,
    BLK_OFFSET,
    BLK_PLACEMENT,
    BLK_STATE,
    BLOCK_ALLOCATED,
    CFG_HANDLE_TAG,
    CNT_HAZARDS,
    CNT_LEAKED_BLOCKS,
    HANDLE_GEN_BITS,
    HANDLE_GEN_SHIFT,
    HANDLE_TAG_COUNT,
    HANDLE_TAG_SHIFT,
    HAZ_BLOCK,
    HAZ_IS_WRITE,
    HAZ_KIND,
    HAZ_OTHER_STREAM,
    HAZ_OTHER_TASK,
    HAZ_STREAM,
    HAZ_TASK,
    HAZARD_KIND_NAMES,
    MAX_STREAMS,
    NUM_PLACEMENTS,
    PCFG_CAP,
    PLACEMENT_FOLLOWING,
    PLACEMENT_HOST,
    PLACEMENT_NAMES,
)
from rtsoa.device.plot import plot_memory
from rtsoa.device.state import (
    check_arenas,
    create_state,
    rearm_state,
    state_template,
    used_block_rows,
)
from rtsoa.device.stats import device_stats, free_memory_summary, snapshot
from rtsoa.device.trace import (
    chrome_trace_events,
    dump_trace,
    load_trace,
    trace_records,
    trace_rows,
)
from rtsoa.errors import (
    DeviceError,
    DeviceOutOfMemory,
    ExecutorBusyError,
    InvalidArgument,
    InvalidBlock,
    TooLargeError,
)
from rtsoa.graph.schema import ValueKind

_EMPTY = np.zeros(0, dtype=np.int64)
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
# Handle tags: consecutive per process from a random start, so the devices of one process never
# share a tag (up to HANDLE_TAG_COUNT of them) and two processes rarely do.
_TAGS = itertools.count(secrets.randbelow(HANDLE_TAG_COUNT))
# Statuses of arguments that are out of range: raised as InvalidArgument.
_ARGUMENT_STATUSES = (
    STATUS_INVALID_SIZE,
    STATUS_INVALID_STREAM,
    STATUS_INVALID_EVENT,
    STATUS_INVALID_PLACEMENT,
    STATUS_INVALID_COST,
)


def placement_index(placement):
    """Placement name or index -> index (0 hbm, 1 p2p, 2 host, 3 following)."""
    if isinstance(placement, str):
        try:
            return PLACEMENT_NAMES.index(placement.lower())
        except ValueError:
            raise ValueError(f"unknown placement {placement!r}; use {PLACEMENT_NAMES}") from None
    placement = int(placement)
    if not 0 <= placement <= PLACEMENT_FOLLOWING:
        raise ValueError(f"unknown placement {placement}")
    return placement


def _int64(name, value, status=STATUS_INVALID_SIZE):
    """`value` as a Python int within int64 (what jitted code takes), else InvalidArgument
    naming it: a float, a string or 2**64 never reaches Numba's conversion."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidArgument(status, f"{name} must be an integer, got {value!r}")
    value = int(value)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise InvalidArgument(status, f"{name} {value} does not fit in int64")
    return value


def _byte_count(name, value):
    """An arena size as a non-negative int (integral floats such as 1e9 too), else ValueError
    naming it; whether it fits the machine is `create_state`'s check."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be a whole number of bytes, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be non-negative, got {value}")
    return int(value)


class Device:
    """A simulated accelerator: arenas, caching allocator, streams / events, hazard checker.

    Sizes are bytes per placement (arenas are zeroed lazily by the OS, so large arenas are
    cheap until touched). `caps` maps a placement name to an absolute cap (int bytes) or a
    fraction of the arena (float); the default is the whole arena (the reference uses 95 %).
    `hazards` switches the hazard checker, `trace` the trace ring (both on by default; both off
    for speed). Default sizes are those of `defaults.py` (`device_for_graph` sizes a device for
    a graph); `create_state` runs `check_state` on the state it builds, so a device whose sizes
    jitted code cannot run on raises `DeviceStateError` here, before any jitted call.
    """

    def __init__(
        self,
        hbm_bytes=defaults.HBM_BYTES,
        p2p_bytes=defaults.P2P_BYTES,
        host_bytes=defaults.HOST_BYTES,
        *,
        allocator=None,
        cost=None,
        caps=None,
        hazards=True,
        trace=True,
        num_streams=defaults.NUM_STREAMS,
        num_events=defaults.NUM_EVENTS,
        max_blocks=defaults.MAX_BLOCKS,
        max_segments=defaults.MAX_SEGMENTS,
        trace_capacity=defaults.TRACE_CAPACITY,
        hazard_capacity=defaults.HAZARD_CAPACITY,
    ):
        if not 1 <= num_streams <= MAX_STREAMS:
            raise ValueError(f"num_streams must be in 1..{MAX_STREAMS}")
        if num_events < 1 or max_blocks < 2 or max_segments < 1:
            raise ValueError("num_events, max_blocks and max_segments must be positive")
        self.allocator_config = allocator or AllocatorConfig()
        self.cost_model = cost or CostModel()
        arena_sizes = [
            _byte_count("hbm_bytes", hbm_bytes),
            _byte_count("p2p_bytes", p2p_bytes),
            _byte_count("host_bytes", host_bytes),
        ]
        check_arenas(arena_sizes)  # before the config rows, which must hold the sizes
        caps = caps or {}
        unknown = set(caps) - set(PLACEMENT_NAMES[:NUM_PLACEMENTS])
        if unknown:
            raise ValueError(f"caps for unknown placements {sorted(unknown)}")
        cap_values = [
            resolve_cap(caps.get(PLACEMENT_NAMES[p]), arena_sizes[p]) for p in range(NUM_PLACEMENTS)
        ]
        # Held by an executor's run: the jitted device code is not thread-safe, so two runs on
        # one device from two threads are refused rather than corrupting the allocator.
        self.run_lock = threading.Lock()
        config = self.allocator_config.config_array(num_streams, num_events, hazards, trace)
        self.handle_tag = next(_TAGS) % HANDLE_TAG_COUNT  # in every handle this device makes
        config[CFG_HANDLE_TAG] = self.handle_tag << HANDLE_GEN_BITS
        self._calls = EntryCache()  # the jitted calls below, without type dispatch
        self.state = create_state(
            arena_sizes,
            config,
            self.allocator_config.placement_array(arena_sizes, cap_values),
            self.cost_model.to_array(),
            max_blocks,
            max_segments,
            num_streams,
            num_events,
            trace_capacity,
            hazard_capacity,
        )
        self._template = state_template(self.state)  # what reset() restores
        self._retired_tags = set()  # tags of this device before its resets
        self.num_streams = num_streams
        self.num_events = num_events
        self._settings = {  # what `from_trace` needs to build the same device again
            "hbm_bytes": arena_sizes[0],
            "p2p_bytes": arena_sizes[1],
            "host_bytes": arena_sizes[2],
            "caps": {PLACEMENT_NAMES[p]: cap_values[p] for p in range(NUM_PLACEMENTS)},
            "hazards": bool(hazards),
            "trace": bool(trace),
            "num_streams": num_streams,
            "num_events": num_events,
            "max_blocks": max_blocks,
            "max_segments": max_segments,
            "trace_capacity": trace_capacity,
            "hazard_capacity": hazard_capacity,
            "allocator": dataclasses.asdict(self.allocator_config),
            "cost": dataclasses.asdict(self.cost_model),
        }

    def reset(self):
        """Return the device to its just-built state without reallocating its arenas or
        tables, in place (executors prepared on it stay valid): every block and segment gone,
        statistics and counters zeroed, the trace and hazard tables emptied, clocks, streams
        and events as new, and a new handle tag, so handles from before the reset are refused
        as a new device would refuse them. The next run then gives the same statistics, trace
        and checksum as on a new device of the same settings. The arenas' bytes are not
        cleared (a new device's are zero): memory a kernel reads before writing it holds what
        the last run left, as on a real device. Refused (ExecutorBusyError) during a run."""
        if not self.run_lock.acquire(blocking=False):
            raise ExecutorBusyError(
                "reset() of a device in use by an executor's run; reset it between runs"
            )
        try:
            rearm_state(self.state, self._template)
            self._retired_tags.add(self.handle_tag)
            self.handle_tag = next(_TAGS) % HANDLE_TAG_COUNT
            self.state.config[CFG_HANDLE_TAG] = self.handle_tag << HANDLE_GEN_BITS
        finally:
            self.run_lock.release()
        return self

    @classmethod
    def for_graph(cls, graph, **overrides):
        """A simulated device sized for `graph`: the one factory the executors, the model API
        and `rtsoa run` use.

        Streams and events come from the graph's metadata (at least one each); arenas and tables
        are the defaults of `defaults.py` when the graph has memory values,
        `defaults.TINY_DEVICE` otherwise. `overrides` are `Device` keywords (hbm_bytes,
        allocator, hazards, ...) that win over both; None values are skipped, so a caller can
        pass optional settings straight through. A device that would not fit in memory (e.g. a
        graph declaring 2**31 - 1 events) raises `TooLargeError` naming the graph's counts,
        before anything is allocated.
        """
        settings = {
            "num_streams": max(int(graph.meta.stream_count), 1),
            "num_events": max(int(graph.meta.event_count), 1),
        }
        if not (graph.value_kind == ValueKind.MEMORY_BLOCK).any():
            settings.update(defaults.TINY_DEVICE)
        settings.update({key: value for key, value in overrides.items() if value is not None})
        try:
            return cls(**settings)
        except TooLargeError as error:  # say which graph asked for it (metadata event_count)
            raise TooLargeError(
                f"graph {graph.meta.name!r} (metadata stream_count {graph.meta.stream_count:,}, "
                f"event_count {graph.meta.event_count:,}): {error}"
            ) from None

    @classmethod
    def from_trace(cls, path):
        """A fresh device with the settings of the device that wrote the trace at `path`
        (arenas, caps, streams, table sizes, allocator and cost model), to replay it on. The
        settings come from a file: the new state is checked like any other (`DeviceStateError`
        for sizes jitted code cannot run on)."""
        loaded = load_trace(path)
        if "settings" not in loaded:
            raise ValueError(
                f"{path}: the trace has no device settings (written by trace.dump_trace without "
                "them); build the Device yourself and call replay_trace"
            )
        try:
            settings = json.loads(str(loaded["settings"]))
            allocator = AllocatorConfig(**settings.pop("allocator"))
            cost = CostModel(**settings.pop("cost"))
            return cls(allocator=allocator, cost=cost, **settings)
        except (TypeError, KeyError, ValueError) as error:
            raise ValueError(f"{path}: unusable device settings in the trace: {error}") from None

    # ---- memory ------------------------------------------------------------------------------
    def malloc(self, nbytes, placement="hbm", stream=0):
        """Allocate and return a block handle; raises `DeviceOutOfMemory` when full (or when
        `nbytes` exceeds the arena), `InvalidArgument` for a negative or non-int64 size or a
        bad placement or stream."""
        index = placement_index(placement)
        nbytes = _int64("nbytes", nbytes)
        stream = _int64("stream", stream, STATUS_INVALID_STREAM)
        result = int(self._calls.call(_allocator.device_malloc, self.state, index, nbytes, stream))
        if result >= 0:
            return result
        status = -result
        if status == STATUS_OUT_OF_MEMORY:
            raise self._out_of_memory(index, nbytes)
        self._check(status, "malloc", nbytes, placement, stream)

    def _out_of_memory(self, placement, nbytes):
        resolved = PLACEMENT_HOST if placement == PLACEMENT_FOLLOWING else placement
        stats = self.stats()[PLACEMENT_NAMES[resolved]]
        largest, _, fragmentation = free_memory_summary(self.state, resolved)
        cap = int(self.state.placement_config[resolved, PCFG_CAP])
        return DeviceOutOfMemory(
            PLACEMENT_NAMES[resolved],
            nbytes,
            stats["allocated_bytes.current"],
            stats["reserved_bytes.current"],
            cap,
            largest,
            fragmentation,
        )

    def free(self, handle, stream=0):
        """Free a block on `stream` (reusable on that stream at once, elsewhere after events).
        A stale handle, or one of another device, raises `InvalidBlock` and frees nothing."""
        handle = self._handle(handle)
        stream = _int64("stream", stream, STATUS_INVALID_STREAM)
        self._check(
            self._calls.call(_allocator.device_free, self.state, handle, stream), "free", handle
        )

    def _handle(self, handle):
        """`handle` as an int64, or InvalidBlock (naming the owner when it is another device's)."""
        handle = _int64("handle", handle, STATUS_INVALID_BLOCK)
        if handle < 0:
            raise InvalidBlock(STATUS_INVALID_BLOCK, f"handle {handle} is negative")
        tag = handle >> HANDLE_TAG_SHIFT
        if tag != self.handle_tag and tag in self._retired_tags:
            raise InvalidBlock(
                STATUS_INVALID_BLOCK,
                f"handle {handle:#x} is from before this device's reset() (tag {tag}, the "
                f"device's is now {self.handle_tag})",
            )
        if tag != self.handle_tag:
            raise InvalidBlock(
                STATUS_INVALID_BLOCK,
                f"handle {handle:#x} belongs to another device (tag {tag}, this device's is "
                f"{self.handle_tag})",
            )
        return handle

    def _live_block(self, handle):
        handle = self._handle(handle)
        placement, offset, size = self._calls.call(block_location, self.state, handle)
        if placement < 0:
            raise InvalidBlock(STATUS_INVALID_BLOCK, f"stale or unknown handle {handle:#x}")
        return placement, int(offset), int(size)

    def view(self, handle, dtype=np.uint8):
        """The block's arena bytes (its requested length) viewed as `dtype`; writable."""
        placement, offset, size = self._live_block(handle)
        arena = (self.state.arena_hbm, self.state.arena_p2p, self.state.arena_host)[placement]
        return arena[offset : offset + size].view(dtype)

    def handle_of(self, array):
        """The handle of the live block whose memory `array` (a view of this device's arena,
        as `view` returns) starts at; InvalidBlock when it does not start at a live block (a
        copy, another device's memory, a view into the middle of a block)."""
        if not isinstance(array, np.ndarray):
            raise InvalidArgument(
                STATUS_INVALID_BLOCK, f"a numpy array expected, got {type(array).__name__}"
            )
        address = array.__array_interface__["data"][0]
        arenas = (self.state.arena_hbm, self.state.arena_p2p, self.state.arena_host)
        starts = [arena.__array_interface__["data"][0] for arena in arenas]
        inside = [
            p
            for p, (arena, start) in enumerate(zip(arenas, starts, strict=True))
            if start <= address < start + arena.shape[0]
        ]
        if not inside:
            raise InvalidBlock(STATUS_INVALID_BLOCK, "the array is not memory of this device")
        placement, start = inside[0], starts[inside[0]]
        blocks = self.state.blocks[: used_block_rows(self.state)]
        found = np.flatnonzero(
            (blocks[:, BLK_STATE] == BLOCK_ALLOCATED)
            & (blocks[:, BLK_PLACEMENT] == placement)
            & (blocks[:, BLK_OFFSET] == address - start)
        )
        if found.shape[0] == 0:
            raise InvalidBlock(
                STATUS_INVALID_BLOCK,
                f"the array starts at {PLACEMENT_NAMES[placement]} offset {address - start}, "
                "which is not the start of a live block",
            )
        slot = int(found[0])
        return int(blocks[slot, BLK_GENERATION]) << HANDLE_GEN_SHIFT | slot

    def location(self, handle):
        """(placement name, offset, requested bytes) of a live block."""
        placement, offset, size = self._live_block(handle)
        return PLACEMENT_NAMES[placement], offset, size

    def release_cached(self):
        """Synchronise the device, then return every wholly free segment to the arenas."""
        _streams.device_synchronize(self.state)
        return int(_allocator.release_cached(self.state, -1))

    empty_cache = release_cached

    # ---- streams and events ------------------------------------------------------------------
    def launch(self, stream=0, bytes_moved=0, flops=0, reads=(), writes=()):
        """Launch a simulated kernel; returns its task id. Hazards are recorded, not raised.
        Negative bytes or flops (or a cost whose end time is not finite) raise InvalidArgument
        and leave the clocks alone; a foreign handle in `reads` / `writes` raises InvalidBlock
        (the task is issued by then)."""
        stream = _int64("stream", stream, STATUS_INVALID_STREAM)
        bytes_moved = _int64("bytes_moved", bytes_moved, STATUS_INVALID_COST)
        flops = _int64("flops", flops, STATUS_INVALID_COST)
        reads = self._handles("reads", reads)
        writes = self._handles("writes", writes)
        status = _streams.device_launch(self.state, stream, bytes_moved, flops, reads, writes)
        self._check(status, "launch", stream, bytes_moved, flops)
        return int(self.state.stream_last_task[stream])

    @staticmethod
    def _handles(name, handles):
        if not len(handles):
            return _EMPTY
        return np.array([_int64(name, h, STATUS_INVALID_BLOCK) for h in handles], dtype=np.int64)

    def access(self, stream, handle, is_write):
        """Declare one more block access of the last task launched on `stream`. A stale handle
        is recorded as a use-after-free hazard; another device's handle raises InvalidBlock."""
        stream = _int64("stream", stream, STATUS_INVALID_STREAM)
        handle = _int64("handle", handle, STATUS_INVALID_BLOCK)
        self._check(device_access(self.state, stream, handle, bool(is_write)), "access", handle)

    def record_event(self, event, stream=0):
        event = _int64("event", event, STATUS_INVALID_EVENT)
        stream = _int64("stream", stream, STATUS_INVALID_STREAM)
        status = self._calls.call(_streams.event_record, self.state, event, stream)
        self._check(status, "record", event, stream)

    def wait_event(self, stream, event):
        stream = _int64("stream", stream, STATUS_INVALID_STREAM)
        event = _int64("event", event, STATUS_INVALID_EVENT)
        status = self._calls.call(_streams.stream_wait_event, self.state, stream, event)
        self._check(status, "wait", stream, event)

    def synchronize(self, stream=None):
        """Synchronise one stream, or the whole device when `stream` is None."""
        if stream is None:
            self._check(
                self._calls.call(_streams.device_synchronize, self.state), "device_synchronize"
            )
        else:
            stream = _int64("stream", stream, STATUS_INVALID_STREAM)
            status = self._calls.call(_streams.stream_synchronize, self.state, stream)
            self._check(status, "synchronize", stream)

    def is_synchronized(self):
        """True when `synchronize()` would change no clock: every stream's work ended by the
        host's time, and the host and every stream already know each other's epochs (it would
        still count one sync and trace it). Read from the state in Python: no compile."""
        streams = self.num_streams
        state = self.state
        if (state.stream_clock[:streams] > state.host_clock[0]).any():
            return False
        # device_synchronize raises host_vc to each column's max, then every row to host_vc
        return bool((state.stream_vc[:streams, :streams] == state.host_vc[:streams]).all())

    def event_synchronize(self, event):
        event = _int64("event", event, STATUS_INVALID_EVENT)
        self._check(_streams.event_synchronize(self.state, event), "event_synchronize", event)

    def event_query(self, event):
        """True when the event has completed at the current host time."""
        event = _int64("event", event, STATUS_INVALID_EVENT)
        status = int(_streams.event_query(self.state, event))
        if status == STATUS_NOT_READY:
            return False
        self._check(status, "event_query", event)
        return True

    def set_priority(self, stream, priority):
        stream = _int64("stream", stream, STATUS_INVALID_STREAM)
        priority = _int64("priority", priority, STATUS_INVALID_STREAM)
        self._check(_streams.set_stream_priority(self.state, stream, priority), "prio", stream)

    def stream_time(self, stream):
        stream = _int64("stream", stream, STATUS_INVALID_STREAM)
        if not 0 <= stream < self.num_streams:
            raise InvalidArgument(
                STATUS_INVALID_STREAM, f"stream {stream} not in 0..{self.num_streams - 1}"
            )
        return float(self.state.stream_clock[stream])

    @property
    def host_time(self):
        return float(self.state.host_clock[0])

    def _check(self, status, what, *args):
        status = int(status)
        if status == STATUS_OK:
            return
        if status == STATUS_INVALID_BLOCK:
            raise InvalidBlock(status, f"{what}{args}")
        if status in _ARGUMENT_STATUSES:
            raise InvalidArgument(status, f"{what}{args}")
        raise DeviceError(status, f"{what}{args}")

    # ---- observability -----------------------------------------------------------------------
    def stats(self):
        """Statistics per placement plus device-wide counters (see `stats.device_stats`)."""
        return device_stats(self.state)

    def snapshot(self):
        """Segments and blocks in address order (see `stats.snapshot`)."""
        return snapshot(self.state)

    def hazards(self):
        """Recorded hazards as dicts: kind, block, both tasks and streams, and the times."""
        count = min(int(self.state.counters[CNT_HAZARDS]), self.state.hazards.shape[0])
        result = []
        for row, times in zip(
            self.state.hazards[:count], self.state.hazard_time[:count], strict=True
        ):
            result.append(
                {
                    "kind": HAZARD_KIND_NAMES[int(row[HAZ_KIND])],
                    "block": int(row[HAZ_BLOCK]),
                    "task": int(row[HAZ_TASK]),
                    "stream": int(row[HAZ_STREAM]),
                    "other_task": int(row[HAZ_OTHER_TASK]),
                    "other_stream": int(row[HAZ_OTHER_STREAM]),
                    "is_write": bool(row[HAZ_IS_WRITE]),
                    "time_ns": float(times[0]),
                    "other_time_ns": float(times[1]),
                }
            )
        return result

    @property
    def hazard_count(self):
        return int(self.state.counters[CNT_HAZARDS])

    @property
    def leaked_blocks(self):
        """Blocks executor runs on this device left allocated at their end, over all runs (each
        run reclaims its own; see `Executor.run`)."""
        return int(self.state.counters[CNT_LEAKED_BLOCKS])

    def trace(self):
        """The trace ring's events (oldest first) as dicts."""
        rows, times, _ = trace_rows(self.state)
        return trace_records(rows, times)

    def dump_trace(self, path):
        """Write the trace ring and this device's settings to `path` (.npz); replay it with
        `replay_trace(Device.from_trace(path), load_trace(path)["rows"])`."""
        dump_trace(self.state, path, settings=json.dumps(self._settings))

    def chrome_trace(self, pid="device", name_of_task=None):
        """Chrome-trace event dicts of the device timeline (one track per stream)."""
        return chrome_trace_events(self.state, pid=pid, name_of_task=name_of_task)

    def plot_memory(self, path, title=None):
        """Draw allocated / reserved bytes over the trace's events into a PNG."""
        return plot_memory(self.state, path, title=title)


# The factory as a function, for callers that take one (`rtsoa.device.device_for_graph`).
device_for_graph = Device.for_graph
