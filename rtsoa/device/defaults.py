"""The simulated device's default sizes. `Device`'s keyword defaults and `Device.for_graph`,
the one factory that sizes a device for a graph (the executors' default device, the options of
`rtsoa run`), take them from here."""

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
