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
