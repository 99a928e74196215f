"""`Device.reset()`: a used device returned to its just-built state in place.

The judge is a new device of the same settings given the reset device's handle tag (the only
thing two new devices differ in): before the next run every state array but the arenas must be
equal to the new one's, and after the same run on both the statistics, the trace, the hazards,
the result and every state array again."""

import numpy as np
import pytest

from rtsoa import prepare_executor
from rtsoa.device import Device, device_for_graph
from rtsoa.device.layout import BLK_SEGMENT, CFG_HANDLE_TAG, HANDLE_GEN_BITS
from rtsoa.device.state import used_block_rows
from rtsoa.errors import InvalidBlock
from rtsoa.executors import ExecutorBusyError, KernelError
from rtsoa.graph.generators import generate

ARENAS = ("arena_hbm", "arena_p2p", "arena_host")


def new_device_like(device, **settings):
    """A new device with `device`'s settings and handle tag (so handles compare equal)."""
    twin = Device(**settings)
    twin.handle_tag = device.handle_tag
    twin.state.config[CFG_HANDLE_TAG] = device.handle_tag << HANDLE_GEN_BITS
    return twin


def assert_same_state(state, other):
    for field in state._fields:
        if field not in ARENAS:
            np.testing.assert_array_equal(getattr(state, field), getattr(other, field), field)


def run_and_observe(executor):
    result = executor.run()
    device = executor.device
    device.synchronize()
    return result, device.stats(), device.trace(), device.hazards(), device.host_time


@pytest.mark.parametrize("streams", [1, 2])
def test_a_reset_device_runs_like_a_new_one(streams):
    graph = generate("lowered", 3000, seed=5, streams=streams)
    settings = {"num_streams": streams, "num_events": max(int(graph.meta.event_count), 1)}
    device = device_for_graph(graph)
    executor = prepare_executor(graph, device=device)
    first = run_and_observe(executor)
    assert first[1]["hbm"]["allocated_bytes.peak"] > 0 and len(first[2]) > 1000
    arrays = [np.asarray(array).ctypes.data for array in device.state]
    tag = device.handle_tag
    for _ in range(2):  # twice: a reset of a reset device too
        device.reset()
        assert device.handle_tag != tag
        tag = device.handle_tag
        # in place: the executor prepared on it keeps its arrays
        assert [np.asarray(array).ctypes.data for array in device.state] == arrays
        new = new_device_like(device, **settings)
        assert_same_state(device.state, new.state)
        again = run_and_observe(executor)
        fresh = run_and_observe(prepare_executor(graph, device=new))
        assert again[0] == fresh[0] == first[0]  # status, nodes, checksum
        assert again[1:] == fresh[1:]  # stats, trace, hazards, device time
        assert again[1] == first[1] and again[4] == first[4]
        assert_same_state(device.state, new.state)


def test_reset_after_out_of_memory_growth_and_cache_release():
    """A small arena: the run fails out of memory midway (retries, cache releases); a reset
    device then runs a smaller graph exactly as a new device does."""
    big = generate("lowered", 4000, seed=2, min_bytes=1 << 20, max_bytes=4 << 20)
    small = generate("lowered", 600, seed=3, max_bytes=1 << 16)
    settings = {"hbm_bytes": 24 << 20, "num_events": 4}
    device = Device(**settings)
    with pytest.raises(KernelError, match="OUT_OF_MEMORY"):
        prepare_executor(big, device=device).run()
    assert device.stats()["num_ooms"] > 0
    device.reset()
    new = new_device_like(device, **settings)
    assert_same_state(device.state, new.state)
    assert run_and_observe(prepare_executor(small, device=device)) == run_and_observe(
        prepare_executor(small, device=new)
    )
    assert_same_state(device.state, new.state)


def test_used_block_rows_is_the_highest_row_ever_used():
    graph = generate("lowered", 2000, seed=9)
    device = device_for_graph(graph)
    assert used_block_rows(device.state) == 0
    prepare_executor(graph, device=device).run()
    handles = [device.malloc(1 << 10) for _ in range(5)]
    filled = np.flatnonzero(device.state.blocks[:, BLK_SEGMENT] >= 0)  # the whole column
    assert used_block_rows(device.state) == filled[-1] + 1 > 5
    for handle in handles:
        device.free(handle)


def test_handles_from_before_a_reset_are_refused():
    device = Device(hbm_bytes=1 << 24)
    handle = device.malloc(4096)
    device.reset()
    assert device.stats()["hbm"]["allocated_bytes.current"] == 0
    with pytest.raises(InvalidBlock, match=r"is from before this device's reset\(\)"):
        device.free(handle)
    with pytest.raises(InvalidBlock, match=r"from before this device's reset\(\)"):
        device.view(handle)
    again = device.malloc(4096)  # same row and offset as the first block, another handle
    assert again != handle and device.location(again)[1] == 0
    other = Device(hbm_bytes=1 << 24)
    with pytest.raises(InvalidBlock, match="belongs to another device"):
        device.free(other.malloc(64))


def test_reset_during_a_run_is_refused():
    device = Device(hbm_bytes=1 << 24)
    with device.run_lock:  # what an executor's run holds
        with pytest.raises(ExecutorBusyError, match=r"reset\(\) of a device in use"):
            device.reset()
    device.reset()
