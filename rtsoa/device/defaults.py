"""The simulated device's default sizes, and `device_for_graph`, the one factory that sizes a
device for a graph. `Device`'s keyword defaults, the executors' default device and the options
of `rtsoa run` all come from here."""

from rtsoa.errors import TooLargeError
from rtsoa.graph.schema import ValueKind

HBM_BYTES = 1 << 30
P2P_BYTES = 64 << 20
HOST_BYTES = 256 << 20
NUM_STREAMS = 4
NUM_EVENTS = 64
MAX_BLOCKS = 1 << 16
MAX_SEGMENTS = 4096
TRACE_CAPACITY = 1 << 16
HAZARD_CAPACITY = 1024

# A graph without memory values never allocates: it gets a tiny device of the same type (so
# both share one compiled executor loop), with the hazard checker and the trace off.
TINY_DEVICE = {
    "hbm_bytes": 1 << 16,
    "p2p_bytes": 1 << 12,
    "host_bytes": 1 << 12,
    "max_blocks": 16,
    "max_segments": 4,
    "trace_capacity": 16,
    "hazard_capacity": 16,
    "hazards": False,
    "trace": False,
}


def device_for_graph(graph, **overrides):
    """A simulated `Device` sized for `graph`.

    Streams and events come from the graph's metadata (at least one each); arenas and tables
    are the defaults above when the graph has memory values, `TINY_DEVICE` otherwise.
    `overrides` are `Device` keywords (hbm_bytes, allocator, hazards, ...) that win over both;
    None values are skipped, so a caller can pass optional settings straight through. A device
    that would not fit in memory (e.g. a graph declaring 2**31 - 1 events) raises
    `TooLargeError` naming the graph's counts, before anything is allocated.
    """
    from rtsoa.device.device import Device  # device.py imports this module for its defaults

    settings = {
        "num_streams": max(int(graph.meta.stream_count), 1),
        "num_events": max(int(graph.meta.event_count), 1),
    }
    if not (graph.value_kind == ValueKind.MEMORY_BLOCK).any():
        settings.update(TINY_DEVICE)
    settings.update({key: value for key, value in overrides.items() if value is not None})
    try:
        return Device(**settings)
    except TooLargeError as error:  # say which graph asked for it (e.g. metadata event_count)
        raise TooLargeError(
            f"graph {graph.meta.name!r} (metadata stream_count {graph.meta.stream_count:,}, "
            f"event_count {graph.meta.event_count:,}): {error}"
        ) from None
