"""Streams, events, stream-ordered reuse, hazards and the out-of-memory path."""

import numpy as np
import pytest
from device_checks import written_and_freed
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rtsoa.device import AllocatorConfig, CostModel, Device, DeviceError, DeviceOutOfMemory
from rtsoa.device.layout import BLK_OFFSET, HANDLE_SLOT_MASK

MiB = 1 << 20

# 1 us latency, 1 byte per ns, 1 flop per ns: durations are easy to add by hand
SIMPLE_COST = CostModel(launch_latency_ns=1000.0, bytes_per_ns=1.0, flops_per_ns=1.0)


def test_multi_stream_timeline_matches_hand_computed_times():
    device = Device(hbm_bytes=16 * MiB, cost=SIMPLE_COST)
    t0 = device.launch(0, bytes_moved=500)  # s0: [0, 1500]
    device.record_event(0, stream=0)  # e0 at 1500
    t1 = device.launch(1, bytes_moved=100)  # s1: [0, 1100] (runs concurrently)
    assert not device.event_query(0)  # host is still at 0
    device.wait_event(1, 0)  # s1 clock -> 1500
    t2 = device.launch(1, flops=200)  # s1: [1500, 2700]
    t3 = device.launch(0, bytes_moved=0)  # s0: [1500, 2500]
    device.synchronize(1)  # host -> 2700
    assert device.host_time == 2700.0
    assert device.event_query(0)
    t4 = device.launch(0)  # issued after the host sync: [2700, 3700]
    device.record_event(1, stream=0)
    device.event_synchronize(1)
    assert device.host_time == 3700.0
    launches = {r["handle"]: r for r in device.trace() if r["kind"] == "launch"}
    expected = {t0: (0, 1500), t1: (0, 1100), t2: (1500, 2700), t3: (1500, 2500), t4: (2700, 3700)}
    for task, (start, end) in expected.items():
        assert (launches[task]["start_ns"], launches[task]["end_ns"]) == (start, end)
        assert SIMPLE_COST.duration_ns(launches[task]["size"], launches[task]["requested"]) == (
            end - start
        )
    device.synchronize()
    assert device.stats()["device_time_ns"] == 3700.0


def test_waiting_on_an_unrecorded_event_is_a_no_op_and_priorities_are_kept():
    device = Device(hbm_bytes=16 * MiB, cost=SIMPLE_COST)
    device.launch(0, bytes_moved=1000)
    device.wait_event(1, 5)
    device.launch(1)
    assert device.stream_time(1) == 1000.0
    device.set_priority(1, -1)
    assert device.state.stream_priority[1] == -1
    with pytest.raises(DeviceError):
        device.launch(9)
    with pytest.raises(DeviceError):
        device.record_event(1000, 0)


def test_chrome_trace_has_one_track_per_stream():
    device = Device(hbm_bytes=16 * MiB, cost=SIMPLE_COST)
    handle = device.malloc(4096, stream=0)
    device.launch(0, bytes_moved=1000, writes=[handle])
    device.record_event(0, 0)
    device.wait_event(2, 0)
    device.launch(2, bytes_moved=1000, reads=[handle])
    events = device.chrome_trace(name_of_task=lambda task: f"kernel{task}")
    complete = [e for e in events if e["ph"] == "X"]
    assert [(e["tid"], e["ts"], e["dur"], e["name"]) for e in complete] == [
        ("stream 0", 0.0, 2.0, "kernel0"),
        ("stream 2", 2.0, 2.0, "kernel1"),
    ]
    assert any(e["ph"] == "C" for e in events)
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert names == {"stream 0", "stream 2"}


def test_block_freed_on_a_stream_is_reused_there_at_once():
    device = Device(hbm_bytes=64 * MiB)
    offset = written_and_freed(device, 4096, stream=0)
    b = device.malloc(4096, stream=0)
    assert device.location(b)[1] == offset


def full_small_segment(device, stream):
    """Two 1 MiB blocks filling one 2 MiB small segment, so a freed one is never merged."""
    return device.malloc(1 * MiB, stream=stream), device.malloc(1 * MiB, stream=stream)


def test_cross_stream_reuse_waits_for_an_event():
    device = Device(hbm_bytes=64 * MiB)
    a, keep = full_small_segment(device, 0)
    device.launch(0, writes=[a])
    offset = device.location(a)[1]
    device.free(a, stream=0)
    b = device.malloc(512 << 10, stream=1)  # not ordered after stream 0's use: other memory
    assert device.location(b)[1] != offset
    device.record_event(0, stream=0)
    device.wait_event(1, 0)
    c = device.malloc(1 * MiB, stream=1)  # now ordered: the freed block is the best fit
    assert device.location(c)[1] == offset
    assert device.hazard_count == 0


def test_record_stream_semantics_for_blocks_used_on_several_streams():
    device = Device(hbm_bytes=64 * MiB)
    a, keep = full_small_segment(device, 0)
    offset = device.location(a)[1]
    device.launch(0, writes=[a])
    device.record_event(0, 0)
    device.wait_event(1, 0)
    device.launch(1, reads=[a])  # a side stream reads the block
    device.free(a, stream=0)
    b = device.malloc(512 << 10, stream=0)  # stream 1 may still be reading: not reused
    assert device.location(b)[1] != offset
    device.record_event(1, stream=1)
    device.wait_event(0, 1)
    c = device.malloc(1 * MiB, stream=0)
    assert device.location(c)[1] == offset
    assert device.hazard_count == 0


def test_unordered_cross_stream_access_is_a_hazard():
    device = Device(hbm_bytes=64 * MiB, cost=SIMPLE_COST)
    a = device.malloc(4096, stream=0)
    writer = device.launch(0, bytes_moved=100, writes=[a])
    reader = device.launch(1, reads=[a])  # no event: races with the writer
    hazards = device.hazards()
    assert len(hazards) == 1
    hazard = hazards[0]
    assert hazard["kind"] == "unordered_access"
    assert (hazard["block"], hazard["task"], hazard["stream"]) == (a, reader, 1)
    assert (hazard["other_task"], hazard["other_stream"]) == (writer, 0)
    assert (hazard["time_ns"], hazard["other_time_ns"]) == (1000.0, 1100.0)
    # ordered by an event: no new hazard
    device.record_event(3, 0)
    device.wait_event(1, 3)
    device.launch(1, reads=[a])
    assert device.hazard_count == 1


def test_concurrent_reads_are_not_hazards_but_write_after_read_is():
    device = Device(hbm_bytes=64 * MiB)
    a = device.malloc(4096, stream=0)
    device.launch(0, writes=[a])
    device.synchronize(0)
    device.launch(1, reads=[a])
    device.launch(2, reads=[a])
    assert device.hazard_count == 0
    device.launch(0, writes=[a])  # overwrites while streams 1 and 2 may still read
    assert [(h["stream"], h["other_stream"]) for h in device.hazards()] == [(0, 1), (0, 2)]


def test_use_after_free_and_unordered_reuse_are_hazards():
    device = Device(hbm_bytes=64 * MiB)
    a = device.malloc(4096, stream=0)
    device.launch(0, writes=[a])
    device.free(a, stream=0)
    device.launch(0, reads=[a])
    assert device.hazards()[-1]["kind"] == "use_after_free"
    # memory reused on stream 0, then touched from stream 1 without ordering
    b = device.malloc(4096, stream=0)
    device.launch(1, writes=[b])
    last = device.hazards()[-1]
    assert last["kind"] == "unordered_access" and last["other_stream"] == 0
    assert device.hazard_count == 2


def test_hazard_checker_can_be_switched_off():
    device = Device(hbm_bytes=64 * MiB, hazards=False)
    a = device.malloc(4096, stream=0)
    device.launch(0, writes=[a])
    device.launch(1, reads=[a])
    device.free(a)
    device.launch(0, reads=[a])
    assert device.hazard_count == 0
    # stream-ordered reuse still holds without the checker
    offset = device.location(device.malloc(4096, stream=0))[1]
    assert offset != 0


@pytest.mark.parametrize("release_before_grow", [True, False])
def test_out_of_memory_retries_then_raises_and_recovers(release_before_grow):
    config = AllocatorConfig(release_before_grow=release_before_grow)
    device = Device(hbm_bytes=8 * MiB, p2p_bytes=0, host_bytes=1 * MiB, allocator=config)
    handles = [device.malloc(1 * MiB) for _ in range(8)]  # four 2 MiB small segments
    with pytest.raises(DeviceOutOfMemory) as caught:
        device.malloc(3 * MiB)
    error = caught.value
    assert (error.requested, error.allocated, error.reserved) == (3 * MiB, 8 * MiB, 8 * MiB)
    assert error.largest_free == 0 and error.fragmentation == 0.0
    message = str(error)
    for text in ("3.00 MiB", "8.00 MiB allocated", "8.00 MiB reserved", "largest free block"):
        assert text in message
    stats = device.stats()
    assert stats["num_ooms"] == 1 and stats["num_alloc_retries"] == 1
    assert stats["num_stream_syncs"] == 1 and stats["num_device_syncs"] == 1
    assert any(r["kind"] == "oom" for r in device.trace())
    # still usable: free the small blocks (cached), and the large request succeeds once the
    # wholly free small segments are released: before growing (default), or by the OOM retry
    for handle in handles[:4]:
        device.free(handle)
    big = device.malloc(3 * MiB)
    stats = device.stats()
    assert stats["num_ooms"] == 1
    assert stats["num_alloc_retries"] == (1 if release_before_grow else 2)
    assert stats["num_growth_releases"] == (1 if release_before_grow else 0)
    assert stats["hbm"]["segment.freed"] == 2
    assert device.location(big)[0] == "hbm"


def test_out_of_memory_path_syncs_other_streams_before_releasing_their_blocks():
    device = Device(hbm_bytes=4 * MiB)
    handles = [device.malloc(1 * MiB, stream=1) for _ in range(4)]
    for handle in handles:
        device.launch(1, writes=[handle])
        device.free(handle, stream=1)
    big = device.malloc(3 * MiB, stream=0)  # needs stream 1 synchronised first
    stats = device.stats()
    assert stats["num_device_syncs"] == 1 and stats["num_ooms"] == 0
    assert device.location(big)[1] == 0
    assert device.hazard_count == 0


def test_kernels_call_the_device_from_njit_code():
    from numba import njit

    from rtsoa.device import block_bytes, device_free, device_launch, device_malloc

    @njit
    def kernel(dev, out):
        empty = np.zeros(0, dtype=np.int64)
        handle = device_malloc(dev, 0, 64, 1)
        if handle < 0:
            return np.int32(-handle)
        values = block_bytes(dev, handle).view(np.float32)
        for i in range(values.shape[0]):
            values[i] = i * 0.5
        writes = np.full(1, handle, dtype=np.int64)
        status = device_launch(dev, 1, 64, 16, empty, writes)
        out[0] = handle
        out[1] = np.int64(values.sum())
        return status + device_free(dev, handle, 1)

    device = Device(hbm_bytes=16 * MiB)
    out = np.zeros(2, dtype=np.int64)
    assert kernel(device.state, out) == 0
    assert out[1] == int(sum(i * 0.5 for i in range(16)))
    assert device.stats()["num_launches"] == 1
    offset = device.state.blocks[out[0] & HANDLE_SLOT_MASK, BLK_OFFSET]  # freed: read the table
    np.testing.assert_array_equal(
        device.state.arena_hbm[offset : offset + 64].view(np.float32), np.arange(16) * 0.5
    )


_CLOCKS = ("stream_clock", "stream_vc", "host_clock", "host_vc")


def _clocks(device):
    return [getattr(device.state, name).copy() for name in _CLOCKS]


def _synchronize_changes_a_clock(device):
    """Synchronise a fresh device holding `device`'s clocks (a device synchronise reads and
    writes nothing else) and say whether any clock changed; `device` is left alone."""
    before = _clocks(device)
    probe = Device(hbm_bytes=1 * MiB, cost=SIMPLE_COST, num_streams=device.num_streams)
    for name, values in zip(_CLOCKS, before, strict=True):
        getattr(probe.state, name)[...] = values
    probe.synchronize()
    return not all(np.array_equal(x, y) for x, y in zip(_clocks(probe), before, strict=True))


@settings(max_examples=40, deadline=None)
# stream 1's work ends before stream 0's, the host syncs stream 0 only: every clock is in the
# past but the host has not seen stream 1's epoch (a predicate on clocks alone says True)
@example([(0, 0, 3), (0, 1, 0), (3, 0, 0)])
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 3)), max_size=12))
def test_is_synchronized_says_whether_a_synchronize_would_change_a_clock(program):
    """`Device.is_synchronized()` (read in Python; the CLI skips its synchronise when it is
    True) against what `synchronize()` does: True exactly when synchronising would leave every
    stream clock, vector clock and the host's unchanged, after every step of programs mixing
    launches (zero-byte ones too), events, waits, single-stream syncs and stream-ordered
    malloc / free."""
    device = Device(hbm_bytes=16 * MiB, cost=SIMPLE_COST, num_streams=4)
    handles = []
    for op, a, b in program:
        if op == 0:
            device.launch(a, bytes_moved=100 * b)
        elif op == 1:
            device.record_event(b, stream=a)
        elif op == 2:
            device.wait_event(a, b)
        elif op == 3:
            device.synchronize(a)
        elif op == 4:
            handles.append(device.malloc(4096 * (b + 1), stream=a))
        elif handles:
            device.free(handles.pop(), stream=a)
        assert device.is_synchronized() == (not _synchronize_changes_a_clock(device)), (op, a, b)


def test_a_fresh_device_is_synchronized_and_a_launch_makes_it_not():
    device = Device(hbm_bytes=16 * MiB, cost=SIMPLE_COST)
    assert device.is_synchronized()
    assert not _synchronize_changes_a_clock(device)
    device.launch(1, bytes_moved=10)
    assert not device.is_synchronized()
    assert _synchronize_changes_a_clock(device)
    device.synchronize()
    assert device.is_synchronized()
