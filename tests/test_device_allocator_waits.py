"""Waits the allocator inserts to reuse cached memory across streams without the host: counted,
traced, drawn in the Chrome trace, and timed exactly as an event wait would be."""

from rtsoa.device import Device
from rtsoa.executors import prepare_executor
from rtsoa.graph.generators import generate

MiB = 1 << 20


def test_inserted_wait_is_counted_traced_and_timed():
    device = Device(hbm_bytes=64 * MiB, num_streams=2)
    block = device.malloc(8 * MiB, stream=1)
    task = device.launch(stream=1, bytes_moved=16_000_000, writes=[block])  # 2 us + 10 us
    device.free(block, stream=1)  # cached; the host has not seen the launch complete
    assert device.stream_time(1) == 12_000.0 and device.stream_time(0) == 0.0

    # A large request on stream 0: the cached segment is not ordered before stream 0 and
    # cannot be released without a sync, so the allocator orders stream 0 after stream 1
    # (an inserted wait) and reuses it instead of growing.
    again = device.malloc(8 * MiB, stream=0)
    assert device.location(again)[1] == 0  # the freed block's memory
    stats = device.stats()
    assert stats["num_allocator_waits"] == 1
    assert stats["hbm"]["reserved_bytes.current"] == 8 * MiB  # reused, not grown
    assert device.stream_time(0) == 12_000.0  # waited for stream 1's launch to end

    waits = [r for r in device.trace() if r["kind"] == "allocator_wait"]
    assert len(waits) == 1
    assert waits[0]["stream"] == 0 and waits[0]["handle"] == 1
    assert (waits[0]["start_ns"], waits[0]["end_ns"]) == (0.0, 12_000.0)

    chrome = [e for e in device.chrome_trace() if e["name"].startswith("allocator wait")]
    assert chrome == [
        {
            "name": "allocator wait for stream 1",
            "ph": "X",
            "pid": "device",
            "tid": "stream 0",
            "ts": 0.0,
            "dur": 12.0,
            "args": {"stream": 1, "placement": 0},
        }
    ]
    # the reuse is ordered: a write on stream 0 raises no hazard against stream 1's launch
    device.launch(stream=0, writes=[again])
    assert device.hazard_count == 0 and task == 0
    device.free(again, stream=0)


def test_no_wait_when_the_stream_is_already_ordered():
    device = Device(hbm_bytes=64 * MiB, num_streams=2)
    block = device.malloc(8 * MiB, stream=1)
    device.launch(stream=1, bytes_moved=16_000_000, writes=[block])
    device.free(block, stream=1)
    device.record_event(0, stream=1)
    device.wait_event(0, 0)  # the program orders stream 0 after stream 1 itself
    device.malloc(8 * MiB, stream=0)
    assert device.stats()["num_allocator_waits"] == 0
    assert not [r for r in device.trace() if r["kind"] == "allocator_wait"]


def test_lowered_two_stream_run_traces_every_wait_it_counts():
    ex = prepare_executor(generate("lowered", 2000, seed=6, streams=2), "sequential")
    ex.run()
    device = ex.device
    counted = device.stats()["num_allocator_waits"]
    assert counted > 0  # this graph reuses cached memory across its two streams
    assert device.stats()["num_trace_events"] <= device.state.trace.shape[0]  # ring not wrapped
    traced = [r for r in device.trace() if r["kind"] == "allocator_wait"]
    assert len(traced) == counted
    assert all(r["end_ns"] >= r["start_ns"] and r["handle"] != r["stream"] for r in traced)
    drawn = [e for e in device.chrome_trace() if e["name"].startswith("allocator wait")]
    assert len(drawn) == counted
    assert device.hazard_count == 0  # the inserted waits order every reuse


def _cached_without_sync(device, sizes_mib, stream=0):
    """Blocks of `sizes_mib` (one large segment each, at increasing addresses), written by a
    launch on `stream` that the host never waits for."""
    handles = [device.malloc(size * MiB, stream=stream) for size in sizes_mib]
    device.launch(stream=stream, bytes_moved=1_000, writes=handles)
    return handles


def _segment_events(device):
    return [
        (r["kind"], r["offset"] // MiB, r["size"] // MiB)
        for r in device.trace()
        if r["kind"] in ("segment_alloc", "segment_free")
    ]


def test_cached_neighbours_merge_in_address_order_whatever_their_rows():
    """Wholly free cached segments the host has not seen complete merge with their address
    neighbours before the allocator grows (`growth._coalesce_free_segments`): a run of three
    becomes one segment at the lowest address whichever order their rows were freed in; a live
    segment stops the run. Segment rows are numbered in allocation order here, so freeing the
    highest address first makes row order and address order disagree."""
    device = Device(hbm_bytes=256 * MiB)
    a, b, c, d, e, f = _cached_without_sync(device, [4, 4, 4, 4, 4, 4])
    for handle in (d, c, b, f):  # b, c, d adjacent at 4-16 MiB; f alone at 20; a, e live
        device.free(handle)
    before = len(_segment_events(device))
    big = device.malloc(12 * MiB)  # no single 4 MiB segment fits: b + c + d merged, reused
    assert device.location(big)[1] == 4 * MiB
    assert device.stats()["hbm"]["reserved_bytes.current"] == 24 * MiB  # nothing grown
    assert device.stats()["num_allocator_waits"] == 0  # same stream: ordered already
    assert segments_of(device) == [(0, 4), (4, 12), (16, 4), (20, 4)]
    # b (row 1) absorbs c, then d, each merge traced as two frees and the merged alloc; the
    # merged segment is then taken whole for the request
    assert _segment_events(device)[before:] == [
        ("segment_free", 4, 4),
        ("segment_free", 8, 4),
        ("segment_alloc", 4, 8),
        ("segment_free", 4, 8),
        ("segment_free", 12, 4),
        ("segment_alloc", 4, 12),
        ("segment_free", 4, 12),
        ("segment_alloc", 4, 12),
    ]
    device.launch(stream=0, writes=[big])
    assert device.hazard_count == 0
    for handle in (a, e, big):
        device.free(handle)


def test_a_segment_not_ordered_before_the_stream_stops_the_merge_until_the_allocator_waits():
    """The middle segment of a run was last used on another stream: the stream-ordered merge
    stops at it, so a large request merges all three only with an inserted wait."""
    device = Device(hbm_bytes=256 * MiB, num_streams=2)
    a, b, c, d, e = _cached_without_sync(device, [4, 4, 4, 4, 4])
    device.record_event(0, stream=0)
    device.wait_event(1, 0)  # stream 1 ordered after stream 0's writes
    device.launch(stream=1, bytes_moved=16_000_000, writes=[c])  # c used on stream 1 last
    device.free(c, stream=1)
    for handle in (b, d):
        device.free(handle)
    big = device.malloc(12 * MiB)
    assert device.location(big)[1] == 4 * MiB
    stats = device.stats()
    assert stats["num_allocator_waits"] == 1  # stream 0 now waits for stream 1's launch
    assert stats["hbm"]["reserved_bytes.current"] == 20 * MiB
    assert segments_of(device) == [(0, 4), (4, 12), (16, 4)]
    device.launch(stream=0, writes=[big])
    assert device.hazard_count == 0
    for handle in (a, e, big):
        device.free(handle)


def segments_of(device):
    return sorted((s["offset"] // MiB, s["size"] // MiB) for s in device.snapshot())
