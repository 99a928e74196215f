"""Device inputs: every size, handle, stream, event and cost entering the
simulated device is range checked with overflow-safe arithmetic; handles carry their device;
leaked blocks are counted; replayed trace rows are checked before jitted code sees them.

Each test failed on the code before this change (the comment says how)."""

import json

import numpy as np
import pytest

from rtsoa import GraphBuilder, KernelError, prepare_executor, save_graph
from rtsoa.abi.status import STATUS_INVALID_COST, STATUS_INVALID_SIZE, STATUS_OUT_OF_MEMORY
from rtsoa.cli import main
from rtsoa.device import (
    CostModel,
    Device,
    DeviceError,
    DeviceOutOfMemory,
    InvalidArgument,
    InvalidBlock,
    replay_trace,
)
from rtsoa.device.layout import (
    BLK_GENERATION,
    EV_ALLOC,
    EV_FREE,
    EV_LAUNCH,
    HANDLE_GEN_BITS,
    HANDLE_GEN_MASK,
    HANDLE_GEN_SHIFT,
    HANDLE_SLOT_MASK,
    HANDLE_TAG_SHIFT,
    NUM_TRACE_COLUMNS,
)
from rtsoa.device.trace import trace_rows
from rtsoa.graph.schema import DType, Placement, ValueKind

EXECUTORS = ("sequential", "topological", "priority")
MiB = 1 << 20
HUGE_SIZES = (2**63 - 1, 2**63 - 600, 2**62, (1 << 30) + 1)  # all above a 1 GiB arena


def small_device(**settings):
    return Device(hbm_bytes=64 * MiB, p2p_bytes=MiB, host_bytes=MiB, **settings)


@pytest.mark.parametrize("nbytes", HUGE_SIZES)
def test_a_request_above_the_arena_is_out_of_memory_and_changes_nothing(nbytes):
    # before: 2**63 - 600 overflowed the rounding and got a block with negative bytes,
    # 2**63 - 1 a 512-byte block
    device = Device(hbm_bytes=1 << 30)
    keep = device.malloc(1000)
    with pytest.raises(DeviceOutOfMemory) as raised:
        device.malloc(nbytes)
    assert raised.value.status == STATUS_OUT_OF_MEMORY and raised.value.requested == nbytes
    hbm = device.stats()["hbm"]
    assert hbm["allocation.current"] == 1
    assert hbm["allocated_bytes.current"] == 1024 and hbm["requested_bytes.current"] == 1000
    assert device.stats()["num_ooms"] == 1
    device.free(keep)
    assert device.stats()["hbm"]["allocated_bytes.current"] == 0


@pytest.mark.parametrize("nbytes", (-1, -(2**63)))
def test_negative_sizes_are_invalid(nbytes):
    device = small_device()
    with pytest.raises(InvalidArgument) as raised:
        device.malloc(nbytes)
    assert raised.value.status == STATUS_INVALID_SIZE
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize("nbytes", (2**63, 2**64 + 5, -(2**63) - 1, 1.5, "12", None))
def test_sizes_that_are_not_int64_are_refused_by_name(nbytes):
    # before: OverflowError / TypeError from Numba's argument conversion
    with pytest.raises(InvalidArgument, match="nbytes"):
        small_device().malloc(nbytes)


def test_a_request_of_exactly_the_arena_is_served():
    device = Device(hbm_bytes=4 * MiB, p2p_bytes=MiB, host_bytes=MiB)
    handle = device.malloc(4 * MiB)
    assert device.location(handle) == ("hbm", 0, 4 * MiB)
    device.free(handle)


@pytest.mark.parametrize("bytes_moved, flops", [(-1, 0), (0, -1), (-(2**63), 0)])
def test_a_launch_with_a_negative_cost_is_refused_and_the_clock_stays(bytes_moved, flops):
    # before: the stream clock moved backwards
    device = small_device()
    device.launch(0, bytes_moved=1 << 20)
    before = device.stream_time(0)
    launches = device.stats()["num_launches"]
    with pytest.raises(InvalidArgument) as raised:
        device.launch(0, bytes_moved=bytes_moved, flops=flops)
    assert raised.value.status == STATUS_INVALID_COST
    assert device.stream_time(0) == before and device.stats()["num_launches"] == launches


def test_a_launch_whose_end_time_is_not_finite_is_refused():
    device = small_device(cost=CostModel(bytes_per_ns=1e-300))
    with pytest.raises(InvalidArgument):
        device.launch(0, bytes_moved=2**62)
    assert device.stream_time(0) == 0.0


def test_cost_models_must_be_finite():
    with pytest.raises(ValueError, match="finite"):
        CostModel(launch_latency_ns=float("inf"))
    with pytest.raises(ValueError, match="finite"):
        CostModel(bytes_per_ns=float("nan"))


def test_huge_launch_costs_are_accepted_and_keep_the_clock_monotone():
    device = small_device()
    device.launch(0, bytes_moved=2**63 - 1, flops=2**63 - 1)
    first = device.stream_time(0)
    device.launch(0, bytes_moved=2**63 - 1)
    assert np.isfinite(first) and device.stream_time(0) > first


def test_a_foreign_handle_is_refused_and_frees_nothing():
    # before: both devices made the same handle for the same sequence, so freeing the other
    # device's handle freed an unrelated live block of this one
    mine, other = small_device(), small_device()
    kept = mine.malloc(4096)
    foreign = other.malloc(4096)
    assert kept != foreign
    for call in (mine.free, mine.view, mine.location):
        with pytest.raises(InvalidBlock, match="another device"):
            call(foreign)
    with pytest.raises(InvalidBlock):
        mine.access(0, foreign, True)  # not a use-after-free hazard of this device: refused
    assert mine.hazard_count == 0
    assert mine.stats()["hbm"]["allocation.current"] == 1
    mine.free(kept)
    other.free(foreign)


def test_stale_handles_stay_refused_and_reused_slots_get_new_handles():
    device = small_device()
    first = device.malloc(512)
    device.free(first)
    second = device.malloc(512)  # the same row, next generation
    assert second != first
    with pytest.raises(InvalidBlock, match="stale"):
        device.view(first)
    with pytest.raises(InvalidBlock):
        device.free(first)
    device.launch(0)
    device.access(0, first, False)  # a stale handle of this device is a hazard, not an error
    assert device.hazards()[0]["kind"] == "use_after_free"
    device.free(second)


def test_a_generation_wraps_within_its_bits_and_keeps_the_tag():
    """A row's stored generation is `tag << 24 | count`; a malloc counts up within the count's
    bits and ORs the device's tag above, so after 2**24 allocations of a row the count wraps
    to 0 with the tag intact (the handle stays non-negative and this device's). Mutations
    caught: no mask in `handles.next_generation` (the count carries into the tag: the handle
    is refused as another device's), no tag (the same)."""
    device = small_device()
    first = device.malloc(512)
    slot = first & HANDLE_SLOT_MASK
    device.free(first)
    blocks = device.state.blocks
    assert int(blocks[slot, BLK_GENERATION]) >> HANDLE_GEN_BITS == device.handle_tag
    # the row's count at its largest: the next malloc of the row wraps it
    blocks[slot, BLK_GENERATION] = (device.handle_tag << HANDLE_GEN_BITS) | HANDLE_GEN_MASK
    again = device.malloc(512)  # the quick list hands the same row out again
    assert again & HANDLE_SLOT_MASK == slot
    assert again >> HANDLE_GEN_SHIFT == device.handle_tag << HANDLE_GEN_BITS  # count 0, tag kept
    assert device.location(again)[2] == 512
    device.free(again)
    with pytest.raises(InvalidBlock):  # a double free
        device.free(again)


def test_rows_reused_after_a_reset_carry_the_new_tag():
    """After `reset()` (every row back on its stack, a new tag) the same row's handles carry
    the new tag, and the row's handle from before the reset is refused as such."""
    device = small_device()
    before = device.malloc(4096)
    device.free(before)
    device.reset()
    after = device.malloc(4096)
    assert after & HANDLE_SLOT_MASK == before & HANDLE_SLOT_MASK
    assert after >> HANDLE_TAG_SHIFT == device.handle_tag
    assert device.location(after)[2] == 4096
    with pytest.raises(InvalidBlock, match="before this device's reset"):
        device.free(before)
    device.free(after)


def test_handles_never_match_across_many_devices_of_one_process():
    handles = {small_device(trace=False, hazards=False).malloc(64) for _ in range(40)}
    assert len(handles) == 40


def test_bad_streams_and_events_are_typed_errors():
    device = small_device()
    for call in (
        lambda: device.malloc(64, stream=99),
        lambda: device.malloc(64, stream=2**70),
        lambda: device.launch(stream=-1),
        lambda: device.record_event(10**6),
        lambda: device.wait_event(0, -5),
        lambda: device.event_query(2**64),
        lambda: device.stream_time(4),
    ):
        with pytest.raises(InvalidArgument):
            call()


def alloc_graph(nbytes=4096, free=True, launch=(4096, 0), stream_count=1):
    """AllocMemory -> LaunchKernel -> (FreeMemory)."""
    b = GraphBuilder(stream_count=stream_count)
    alloc = b.add_node("AllocMemory", attributes=[nbytes])
    block = b.add_value(ValueKind.MEMORY_BLOCK, DType.UINT8, Placement.DEVICE_HBM, producer=alloc)
    launch_node = b.add_node("LaunchKernel", attributes=list(launch), inputs=[block])
    b.add_edge(alloc, launch_node)
    if free:
        free_node = b.add_node("FreeMemory", inputs=[block])
        b.add_edge(launch_node, free_node)
    return b.finalize()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_alloc_nodes_with_huge_sizes_fail_with_out_of_memory(executor):
    # before: the block got negative bytes and a view of the whole arena; the free crashed
    for nbytes in (2**63 - 600, 2**63 - 1):
        ex = prepare_executor(alloc_graph(nbytes), executor)
        with pytest.raises(KernelError) as raised:
            ex.run()
        assert raised.value.status == STATUS_OUT_OF_MEMORY and raised.value.node == 0
        assert ex.device.stats()["hbm"]["allocation.current"] == 0


@pytest.mark.parametrize("executor", EXECUTORS)
def test_launch_nodes_with_negative_costs_fail(executor):
    ex = prepare_executor(alloc_graph(launch=(-4096, 0)), executor)
    with pytest.raises(KernelError) as raised:
        ex.run()
    assert raised.value.status == STATUS_INVALID_COST
    assert ex.device.stats()["hbm"]["allocation.current"] == 0  # released after the failure


@pytest.mark.parametrize("executor", EXECUTORS)
def test_leaked_blocks_are_counted_per_run_and_reclaimed(executor):
    # before: each run left its block allocated and nothing said so
    ex = prepare_executor(alloc_graph(free=False), executor)
    for run in range(1, 4):
        ex.run()
        assert ex.leaked_blocks == 1
        assert ex.device.leaked_blocks == run
        assert ex.device.stats()["num_leaked_blocks"] == run
        assert ex.device.stats()["hbm"]["allocation.current"] == 0
    clean = prepare_executor(alloc_graph(free=True), executor)
    clean.run()
    assert clean.leaked_blocks == 0 and clean.device.leaked_blocks == 0


def test_rtsoa_run_prints_leaked_blocks(tmp_path, capsys):
    path = tmp_path / "leaky.rtsoa"
    save_graph(alloc_graph(free=False), path)
    assert main(["run", str(path), "--repeat", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["device"]["leaked_blocks"] == 4  # the first (warm-up) run and three timed
    assert main(["run", str(path), "--repeat", "2"]) == 0
    assert "leaked blocks 3" in capsys.readouterr().out


def recorded_rows():
    device = small_device()
    handles = [device.malloc(size) for size in (100, 5000, 3 * MiB)]
    device.launch(0, bytes_moved=1000)
    for handle in handles:
        device.free(handle)
    return trace_rows(device.state)[0]


def test_replay_refuses_rows_of_the_wrong_shape_or_type():
    rows = recorded_rows()
    # before: a 3-column array was read past its rows by jitted code
    for bad in (rows[:, :3], rows[0], rows.astype(np.float64), np.zeros((2, 12), np.int64)):
        with pytest.raises(ValueError, match="trace rows"):
            replay_trace(small_device(), bad)
    unknown = rows.copy()
    unknown[1, 0] = 99
    with pytest.raises(ValueError, match="trace row 1: unknown event kind 99"):
        replay_trace(small_device(), unknown)


def test_replay_of_crafted_handles_does_not_allocate_by_their_value():
    # before: the slot map was sized by the largest slot in the rows (2**32 entries here)
    rows = np.zeros((2, NUM_TRACE_COLUMNS), dtype=np.int64)
    rows[:, 0] = (EV_ALLOC, EV_FREE)
    rows[:, 2] = -1  # handle
    rows[0, 5] = 4096  # requested
    device = replay_trace(small_device(), rows)
    assert device.stats()["hbm"]["allocation.allocated"] == 1
    assert device.stats()["hbm"]["allocation.current"] == 0


@pytest.mark.parametrize(
    "kind, column, value",
    [
        (EV_LAUNCH, 4, -1),  # negative bytes: the clock would move backwards
        (EV_ALLOC, 5, 2**63 - 600),  # overflowing size
        (EV_ALLOC, 5, -7),
        (EV_ALLOC, 1, 17),  # placement
        (EV_ALLOC, 6, 1000),  # stream
    ],
)
def test_replay_refuses_out_of_range_rows_with_the_row(kind, column, value):
    rows = np.zeros((2, NUM_TRACE_COLUMNS), dtype=np.int64)
    rows[0, 0] = EV_ALLOC
    rows[0, 5] = 64
    rows[1, 0] = kind
    rows[1, 5] = 64
    rows[1, 2] = 1
    rows[1, column] = value
    device = small_device()
    with pytest.raises(DeviceError, match="trace row 1"):
        replay_trace(device, rows)
    assert device.stats()["hbm"]["allocation.current"] == 1  # row 0 replayed, row 1 nothing
    assert device.stream_time(0) == 0.0


def test_replay_still_reproduces_a_recorded_trace():
    rows = recorded_rows()
    replayed = replay_trace(small_device(), rows)
    assert (trace_rows(replayed.state)[0][:, 3:6] == rows[:, 3:6]).all()  # offsets and sizes
