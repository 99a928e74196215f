"""Trace ring (dump / load / replay), memory plot, allocators factory, static planner."""

import numpy as np
import pytest

from rtsoa.device import (
    AllocatorConfig,
    CostModel,
    Device,
    DeviceOutOfMemory,
    allocator_for,
    create_external_allocator,
    live_bytes_peak,
    load_trace,
    plan_greedy_by_size,
    replay_trace,
)
from rtsoa.device.layout import (
    CFG_HANDLE_TAG,
    EV_ALLOC,
    TRACE_ALLOCATED_AFTER,
    TRACE_KIND,
    TRACE_OFFSET,
    TRACE_RESERVED_AFTER,
    TRACE_SIZE,
)
from rtsoa.device.trace import trace_rows
from rtsoa.testing.workloads import OP_ALLOC, random_sequence

MiB = 1 << 20


def without_handles(snapshot):
    """A snapshot with its handles dropped (they hold the device's tag)."""
    return [
        {**segment, "blocks": [{**b, "handle": None} for b in segment["blocks"]]}
        for segment in snapshot
    ]


def run_two_stream_workload(device, seed=3, steps=400):
    """Random allocations on two streams, with launches, events and a sync in between."""
    sequence = random_sequence(seed, steps, 0.6)
    rng = np.random.default_rng(seed)
    handles = {}
    for step in range(steps):
        stream = int(rng.integers(0, 2))
        tensor = int(sequence.ids[step])
        if sequence.ops[step] == OP_ALLOC:
            handle = device.malloc(int(sequence.sizes[step]), stream=stream)
            handles[tensor] = (handle, stream)
            device.launch(stream, bytes_moved=int(sequence.sizes[step]), writes=[handle])
        else:
            handle, owner = handles.pop(tensor)
            device.free(handle, stream=owner)
        if step % 50 == 25:
            device.record_event(step % 7, stream=stream)
            device.wait_event(1 - stream, step % 7)
        if step % 150 == 149:
            device.synchronize(stream)
    return handles


def test_trace_dump_and_replay_reproduce_offsets_and_stats(tmp_path):
    device = Device(hbm_bytes=2 << 30, trace_capacity=1 << 12)
    run_two_stream_workload(device)
    path = tmp_path / "device-trace.npz"
    device.dump_trace(path)
    loaded = load_trace(path)
    assert loaded["first_sequence"] == 0
    replayed = replay_trace(Device(hbm_bytes=2 << 30, trace_capacity=1 << 12), loaded["rows"])
    original_rows, _, _ = trace_rows(device.state)
    replay_rows, _, _ = trace_rows(replayed.state)
    alloc = original_rows[:, TRACE_KIND] == EV_ALLOC
    alloc_replayed = replay_rows[:, TRACE_KIND] == EV_ALLOC
    np.testing.assert_array_equal(
        original_rows[alloc][:, [TRACE_OFFSET, TRACE_SIZE]],
        replay_rows[alloc_replayed][:, [TRACE_OFFSET, TRACE_SIZE]],
    )
    for key in ("allocated_bytes.peak", "reserved_bytes.peak", "allocation.allocated"):
        assert device.stats()["hbm"][key] == replayed.stats()["hbm"][key]
    assert replayed.stats()["device_time_ns"] == device.stats()["device_time_ns"]


def test_a_dumped_trace_rebuilds_its_device_and_replays_exactly(tmp_path):
    """The dump carries the device's settings: replay needs no knowledge of how it was built."""
    device = Device(
        hbm_bytes=1 << 30,
        allocator=AllocatorConfig.pytorch_like(quick_depth=8, tail_padding=32),
        cost=CostModel(launch_latency_ns=1500.0),
        caps={"hbm": 0.5},
        num_streams=3,
        num_events=16,
        trace_capacity=1 << 12,
    )
    run_two_stream_workload(device)
    path = tmp_path / "device-trace.npz"
    device.dump_trace(path)
    rebuilt = Device.from_trace(path)
    assert rebuilt.allocator_config == device.allocator_config
    assert rebuilt.cost_model == device.cost_model
    for name in ("config", "placement_config", "cost"):
        rebuilt_row, row = getattr(rebuilt.state, name), getattr(device.state, name)
        if name == "config":  # every device has its own handle tag
            assert rebuilt_row[CFG_HANDLE_TAG] != row[CFG_HANDLE_TAG]
            rebuilt_row, row = (
                np.delete(rebuilt_row, CFG_HANDLE_TAG),
                np.delete(row, CFG_HANDLE_TAG),
            )
        np.testing.assert_array_equal(rebuilt_row, row)
    replay_trace(rebuilt, load_trace(path)["rows"])
    assert without_handles(rebuilt.snapshot()) == without_handles(device.snapshot())
    assert rebuilt.stats()["hbm"] == device.stats()["hbm"]
    assert rebuilt.stats()["device_time_ns"] == device.stats()["device_time_ns"]


def test_a_trace_without_usable_settings_says_so(tmp_path):
    from rtsoa.device.trace import dump_trace

    device = Device(hbm_bytes=64 * MiB)
    device.malloc(100)
    dump_trace(device.state, tmp_path / "bare.npz")
    with pytest.raises(ValueError, match="no device settings"):
        Device.from_trace(tmp_path / "bare.npz")
    device.dump_trace(tmp_path / "odd.npz")
    arrays = dict(np.load(tmp_path / "odd.npz"))
    arrays["settings"] = np.array('{"allocator": {"no_such_knob": 1}, "cost": {}}')
    np.savez(tmp_path / "odd.npz", **arrays)
    with pytest.raises(ValueError, match="odd.npz: unusable device settings.*no_such_knob"):
        Device.from_trace(tmp_path / "odd.npz")


def test_trace_ring_wraps_and_keeps_the_newest_events():
    device = Device(hbm_bytes=64 * MiB, trace_capacity=8)
    handles = [device.malloc(512 * (k + 1)) for k in range(10)]
    records = device.trace()
    assert len(records) == 8
    assert records[-1]["kind"] == "alloc" and records[-1]["size"] == 5120
    assert device.stats()["num_trace_events"] == 11  # 10 allocs + 1 segment
    for handle in handles:
        device.free(handle)


def test_trace_can_be_switched_off():
    device = Device(hbm_bytes=64 * MiB, trace=False)
    device.free(device.malloc(100))
    assert device.trace() == []


def test_plot_memory_writes_a_png(tmp_path):
    device = Device(hbm_bytes=1 << 30, trace_capacity=1 << 12)
    run_two_stream_workload(device, steps=200)
    path = device.plot_memory(tmp_path / "mem.png")
    with open(path, "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"


def test_allocator_factory_and_external_allocators():
    device = Device(hbm_bytes=64 * MiB)
    host = allocator_for(device, "following")
    assert host.placement == "host"
    handle = host.alloc(100)
    host.view(handle)[:] = 7
    assert device.location(handle) == ("host", 0, 100)
    host.free(handle)
    hbm = allocator_for(device, "hbm", stream=1)
    h = hbm.alloc(4096)
    assert device.location(h)[0] == "hbm"
    hbm.free(h)

    buffers = {}

    def alloc(nbytes):
        buffers[len(buffers)] = np.zeros(nbytes, dtype=np.uint8)
        return len(buffers) - 1

    external = create_external_allocator(alloc, buffers.pop, buffers.__getitem__, "p2p")
    handle = external.alloc(16)
    external.view(handle, np.float32)[:] = 1.5
    assert buffers[handle].view(np.float32).tolist() == [1.5] * 4
    external.free(handle)
    assert not buffers
    with pytest.raises(ValueError):
        external.alloc(-1)


def brute_force_peak(first, last, sizes):
    horizon = int(last.max()) + 1
    live = np.zeros(horizon + 1, dtype=np.int64)
    for start, end, size in zip(first, last, sizes, strict=True):
        live[start : end + 1] += size
    return int(live.max())


def test_planner_exact_small_case():
    # t: 0..3; A [0,1] 100, B [1,2] 50, C [2,3] 100, D [3,3] 30
    plan = plan_greedy_by_size([0, 1, 2, 3], [1, 2, 3, 3], [100, 50, 100, 30])
    # largest first: A at 0, C at 0 (no overlap with A), B above both (100), D above C (100)
    assert plan.offsets.tolist() == [0, 100, 0, 100]
    assert plan.arena_size == 150 and plan.lower_bound == 150 and plan.ratio == 1.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_planner_is_valid_and_near_the_lower_bound(seed):
    rng = np.random.default_rng(seed)
    n = 300
    first = rng.integers(0, 400, n)
    last = first + rng.integers(0, 60, n)
    sizes = rng.integers(1, 1 << 16, n)
    plan = plan_greedy_by_size(first, last, sizes, alignment=64)
    aligned = (sizes + 63) // 64 * 64
    assert plan.lower_bound == brute_force_peak(first, last, aligned)
    assert plan.lower_bound == live_bytes_peak(first, last, aligned)
    assert (plan.offsets % 64 == 0).all()
    ends = plan.offsets + aligned
    assert ends.max() == plan.arena_size
    for i in range(n):  # no two tensors alive together overlap in memory
        alive = (first <= last[i]) & (first[i] <= last)
        alive[i] = False
        overlap = (plan.offsets < ends[i]) & (plan.offsets[i] < ends)
        assert not (alive & overlap).any()
    assert plan.arena_size >= plan.lower_bound
    assert plan.ratio < 1.25


def assert_valid_plan(plan, first, last, sizes):
    ends = plan.offsets + sizes
    order = np.argsort(first, kind="stable")
    for i in range(sizes.size):  # no two tensors alive together overlap in memory
        alive = (first <= last[i]) & (first[i] <= last)
        alive[i] = False
        overlap = (plan.offsets < ends[i]) & (plan.offsets[i] < ends)
        assert not (alive & overlap).any(), i
    assert order.size == sizes.size and ends.max(initial=0) == plan.arena_size


def test_planner_on_the_random_sequences():
    for probability in (0.53, 0.73):
        sequence = random_sequence(11, 2000, probability)
        plan = plan_greedy_by_size(*sequence.lifetimes())
        assert plan.lower_bound == sequence.live_bytes_peak()
        assert plan.ratio <= 1.10, plan.ratio


@pytest.mark.parametrize("order", ["size", "area", "size_sqrt_duration"])
def test_every_planner_order_gives_a_valid_plan(order):
    first, last, sizes = random_sequence(5, 1200, 0.55).lifetimes()
    plan = plan_greedy_by_size(first, last, sizes, orders=(order,))
    assert plan.strategy == order
    assert_valid_plan(plan, first, last, sizes)
    best = plan_greedy_by_size(first, last, sizes)
    assert best.arena_size <= plan.arena_size
    assert_valid_plan(best, first, last, sizes)
    with pytest.raises(ValueError):
        plan_greedy_by_size(first, last, sizes, orders=("fifo",))


@pytest.mark.parametrize("alloc_probability", [0.53, 0.73])
def test_planner_target_on_the_issue_sequences(alloc_probability):
    """Static plan <= 1.05 x the live-bytes lower bound (seeds 0..2, 4000 steps)."""
    for seed in (0, 1, 2):
        first, last, sizes = random_sequence(seed, 4000, alloc_probability).lifetimes()
        plan = plan_greedy_by_size(first, last, sizes)
        assert plan.ratio <= 1.05, (seed, plan.ratio, plan.strategy)
        assert_valid_plan(plan, first, last, sizes)


def test_trace_keeps_fractional_launch_times():
    from rtsoa.device import CostModel

    device = Device(hbm_bytes=16 * MiB, cost=CostModel(launch_latency_ns=0.5, bytes_per_ns=3.0))
    handle = device.malloc(100, stream=1)
    device.launch(1, bytes_moved=10, writes=[handle])
    device.free(handle, stream=1)
    records = device.trace()
    assert [r["kind"] for r in records] == ["segment_alloc", "alloc", "launch", "free"]
    launch = records[2]
    assert (launch["start_ns"], launch["end_ns"]) == (0.0, 0.5 + 10 / 3.0)
    assert (launch["placement"], launch["stream"], launch["size"]) == (None, 1, 10)
    assert records[3]["start_ns"] == records[3]["end_ns"] == 0.5 + 10 / 3.0
    assert records[1]["allocated_after"] == 512 and records[3]["allocated_after"] == 0


def test_trace_rows_that_do_not_fit_the_packed_ring_row_stay_exact():
    device = Device(hbm_bytes=6 << 30, p2p_bytes=0, host_bytes=0, trace_capacity=16)
    big = (5 << 30) + 3  # size and requested beyond the packed row's 32-bit fields
    handle = device.malloc(big)
    with pytest.raises(DeviceOutOfMemory):
        device.malloc(2 << 30)  # the OOM row carries offset -1
    device.free(handle)
    records = device.trace()
    alloc = next(r for r in records if r["kind"] == "alloc")
    assert (alloc["requested"], alloc["offset"], alloc["handle"]) == (big, 0, handle)
    assert alloc["size"] == (big + 511) & -512  # rounded to the device alignment
    assert alloc["allocated_after"] == alloc["size"]
    oom = next(r for r in records if r["kind"] == "oom")
    assert (oom["offset"], oom["requested"]) == (-1, 2 << 30)
    assert records[-1]["kind"] == "free" and records[-1]["allocated_after"] == 0


def test_trace_bytes_after_each_event_match_the_statistics_after_a_wrapped_ring():
    device = Device(hbm_bytes=256 * MiB, trace_capacity=32)
    rng = np.random.default_rng(5)
    live, expected = [], []
    for _ in range(200):
        if live and rng.random() < 0.45:
            device.free(live.pop(int(rng.integers(len(live)))))
        else:
            live.append(device.malloc(int(rng.integers(1, 3 * MiB))))
        if len(live) > 12:
            device.release_cached()
        hbm = device.stats()["hbm"]
        count = device.stats()["num_trace_events"]
        expected.append((count, hbm["allocated_bytes.current"], hbm["reserved_bytes.current"]))
    rows, _, first = trace_rows(device.state)
    assert first == expected[-1][0] - 32
    for count, allocated, reserved in expected:
        index = count - 1 - first  # the last event of that step
        if index >= 0:
            assert rows[index, TRACE_ALLOCATED_AFTER] == allocated
            assert rows[index, TRACE_RESERVED_AFTER] == reserved
