"""Property test of the caching allocator on random two-stream programs (hypothesis).

Each stream allocates, writes (a launch right after the malloc), reads (a launch right before
the free) and frees only its own blocks, and the streams order themselves with events now and
then. Whatever the allocator reuses (quick lists, free lists,
cached segments, across streams), after every step:
  * the tables are consistent (`device_checks.check_invariants`) and the tracked statistics
    equal those recomputed from a snapshot;
  * live blocks never share bytes: each block's bytes still hold the stamp written at its
    allocation when it is freed;
  * the hazard checker finds nothing, because no stream touches another's memory: any reuse
    across streams must have been ordered by the allocator;
  * out of memory (64 MiB arena) raises `DeviceOutOfMemory` and leaves the device usable.
"""

from device_checks import check_invariants
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtsoa.device import AllocatorConfig, Device, DeviceOutOfMemory
from rtsoa.device.layout import PLACEMENT_HBM
from rtsoa.device.stats import snapshot_arrays, stats_from_snapshot

KiB = 1 << 10
MiB = 1 << 20

sizes = st.one_of(
    st.sampled_from([1, 512, 1000, 4096]),  # repeated sizes: quick-list and exact-fit reuse
    st.integers(1, 8 * KiB),  # the quick lists' range
    st.integers(8 * KiB, 1 * MiB),  # small pool
    st.integers(1 * MiB, 6 * MiB),  # large pool
)
operation = st.one_of(
    st.tuples(st.just("malloc"), st.integers(0, 1), sizes),
    st.tuples(st.just("free"), st.integers(0, 1), st.integers(0, 1 << 16)),
    st.tuples(st.just("malloc"), st.integers(0, 1), sizes),
    st.tuples(st.just("free"), st.integers(0, 1), st.integers(0, 1 << 16)),
    st.tuples(st.just("launch"), st.integers(0, 1), st.integers(0, 1 << 16)),
    st.tuples(st.just("order"), st.integers(0, 1), st.integers(0, 1)),
    st.tuples(st.just("sync"), st.integers(0, 1), st.integers(0, 1)),
    st.tuples(st.just("release"), st.integers(0, 1), st.integers(0, 1)),
)
configs = st.sampled_from(
    [
        AllocatorConfig(),
        AllocatorConfig(quick_depth=2),
        AllocatorConfig(quick_depth=0),
        AllocatorConfig(page_mode=True),
        AllocatorConfig.pytorch_like(),
    ]
)


def stamp(device, handle, value):
    view = device.view(handle)
    view[:] = value
    return view


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(config=configs, program=st.lists(operation, min_size=40, max_size=160))
def test_two_stream_programs_keep_the_allocator_consistent_and_hazard_free(config, program):
    device = Device(hbm_bytes=64 * MiB, allocator=config, num_streams=2, num_events=4)
    live = {0: [], 1: []}  # stream -> [(handle, stamp value)]
    next_stamp = 1
    for kind, stream, argument in program:
        mine = live[stream]
        if kind == "malloc":
            try:
                handle = device.malloc(argument, stream=stream)
            except DeviceOutOfMemory:  # the device must stay consistent and usable
                check_invariants(device)
                continue
            stamp(device, handle, next_stamp % 251)
            mine.append((handle, next_stamp % 251))
            next_stamp += 1
            device.launch(stream, bytes_moved=argument, writes=[handle])  # a kernel fills it
        elif kind == "free" and mine:
            handle, value = mine.pop(argument % len(mine))
            assert (device.view(handle) == value).all(), "a live block's bytes were overwritten"
            device.launch(stream, bytes_moved=4096, reads=[handle])  # its last reader
            device.free(handle, stream=stream)
        elif kind == "launch" and mine:
            handle, _ = mine[argument % len(mine)]
            device.launch(stream, bytes_moved=4096, writes=[handle])
        elif kind == "order":
            other = 1 - stream
            device.record_event(stream, stream=other)
            device.wait_event(stream, stream)
        elif kind == "sync":
            device.synchronize(stream if argument else None)
        elif kind == "release":
            device.release_cached()
        check_invariants(device)
        tracked = device.stats()["hbm"]
        for key, value in stats_from_snapshot(snapshot_arrays(device.state), PLACEMENT_HBM).items():
            assert tracked[key] == value, key
    assert device.hazard_count == 0, device.hazards()[:3]
    for stream, blocks in live.items():
        for handle, value in blocks:
            assert (device.view(handle) == value).all()
            device.free(handle, stream=stream)
    device.synchronize()
    device.release_cached()
    assert device.stats()["hbm"]["reserved_bytes.current"] == 0
    check_invariants(device)


def test_the_property_test_can_fail():
    """The stamp check catches overlapping live blocks (guards against a vacuous property)."""
    device = Device(hbm_bytes=64 * MiB)
    a = device.malloc(4096)
    stamp(device, a, 7)
    device.state.arena_hbm[device.location(a)[1]] = 9  # what an overlapping block would do
    assert not (device.view(a) == 7).all()
