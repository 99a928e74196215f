"""Run summaries shared by `rtsoa run` and batch jobs: the device's figures of a run and the
device's events for a Chrome trace.

Below the command line and batch in the layers (both import it); it reads a device only.
"""

from rtsoa.device.layout import PCFG_QUICK_LIMIT

DEVICE_PID = 2  # the device's process id in a Chrome trace (the host-side node slices are 1)


def numeric_ids(events):
    """Integer thread ids plus process / thread name records, as every trace viewer expects."""
    names = {}
    for event in events:
        tid = event.get("tid")
        if isinstance(tid, str):
            event["tid"] = names.setdefault(tid, len(names) + 1)
    meta = [{"name": "process_name", "ph": "M", "pid": DEVICE_PID, "args": {"name": "device"}}]
    meta += [
        {"name": "thread_name", "ph": "M", "pid": DEVICE_PID, "tid": tid, "args": {"name": name}}
        for name, tid in names.items()
    ]
    return meta + events


def device_trace_events(device):
    """The device's stream tasks as Chrome trace events (process DEVICE_PID), to add to a
    host trace (`rtsoa.executors.Tracer.trace()["traceEvents"]`)."""
    return numeric_ids(device.chrome_trace(pid=DEVICE_PID))


def device_summary(device, time_ns_per_run, waits_start, profile):
    """Peak memory per placement and in total, simulated time per run, hazard count, the
    cross-stream waits the allocator inserted to reuse cached memory during the timed runs, and
    the allocator profile with its effective quick-list depth (0 where no size has a list)."""
    stats = device.stats()
    quick_on = bool(device.state.placement_config[:, PCFG_QUICK_LIMIT].any())  # page mode: none
    placements = {
        name: {
            "peak_allocated_bytes": stats[name]["allocated_bytes.peak"],
            "peak_reserved_bytes": stats[name]["reserved_bytes.peak"],
        }
        for name in ("hbm", "p2p", "host")
    }
    return {
        "time_ns_per_run": time_ns_per_run,
        "hazards": device.hazard_count,
        "leaked_blocks": device.leaked_blocks,  # over every run so far (each reclaims its own)
        "allocator_waits": stats["num_allocator_waits"] - waits_start,
        "peak_allocated_bytes": sum(p["peak_allocated_bytes"] for p in placements.values()),
        "peak_reserved_bytes": sum(p["peak_reserved_bytes"] for p in placements.values()),
        "placements": placements,
        "allocator": {
            "profile": profile,
            "quick_depth": device.allocator_config.quick_depth if quick_on else 0,
        },
    }
