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
  * out of memory raises `DeviceOutOfMemory` and leaves the device consistent and usable:
    arenas of 4 to 64 MiB, so that a good share of the examples run out of memory
    (the test counts them; with one 64 MiB arena none ever did), plus explicit programs that
    always do (`OOM_PROGRAMS`, on every config), and the device's own count of out-of-memory
    errors equals the errors raised.
"""

from collections import Counter

import pytest
from device_checks import check_invariants
from figures import report
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rtsoa.device import AllocatorConfig, Device, DeviceOutOfMemory
from rtsoa.device.layout import CNT_FREE_SEGMENTS, PLACEMENT_HBM
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
CONFIGS = [
    AllocatorConfig(),
    AllocatorConfig(quick_depth=2),
    AllocatorConfig(quick_depth=0),
    AllocatorConfig(page_mode=True),
    AllocatorConfig.pytorch_like(),
]
configs = st.sampled_from(CONFIGS)


# Small arenas make out of memory happen (in about 3/4, 1/2, 1/4 of the programs on 4, 8 and
# 16 MiB; never on 64 MiB, where the deep-cache paths run instead).
ARENAS = st.sampled_from([4 * MiB, 4 * MiB, 8 * MiB, 16 * MiB, 64 * MiB])
EXAMPLES = 40
# Programs that run out of memory on every run, whatever hypothesis generates: the
# out-of-memory path (and recovery from it: frees, then mallocs that fit again) is checked
# each time. On a 4 MiB arena, each config: a 1 MiB block per stream, then 6 MiB (more than
# the arena), 3 MiB (more than is left), frees, and mallocs that fit after the retry path.
OOM_PROGRAMS = [
    [
        ("malloc", 0, 1 * MiB),
        ("malloc", 1, 1 * MiB),
        ("malloc", 0, 6 * MiB),
        ("malloc", 1, 3 * MiB),
        ("free", 0, 0),
        ("malloc", 1, 2 * MiB),
        ("order", 1, 0),
        ("malloc", 0, 512),
        ("release", 0, 0),
        ("malloc", 0, 3 * MiB),
    ]
]
# Generated examples (not the explicit ones) that must reach the out-of-memory path, and that
# must not: absolute floors. The share was 13-27 of 40 in six runs in a row, but one full-suite
# run generated only 4 of 40, so a share is a flaky assertion; the explicit
# programs above make the path's coverage certain instead.
EXPLICIT = [(config, program) for config in CONFIGS for program in OOM_PROGRAMS]
MIN_GENERATED_OUT_OF_MEMORY = 1
MIN_GENERATED_WITHOUT = 1


def stamp(device, handle, value):
    view = device.view(handle)
    view[:] = value
    return view


def run_program(device, program):
    """Run one two-stream program on `device`, checking the module's invariants after every
    step; raises AssertionError on the first broken one. Returns the out-of-memory errors."""
    live = {0: [], 1: []}  # stream -> [(handle, stamp value)]
    next_stamp = 1
    out_of_memory = 0
    for kind, stream, argument in program:
        mine = live[stream]
        if kind == "malloc":
            try:
                handle = device.malloc(argument, stream=stream)
            except DeviceOutOfMemory:  # the device must stay consistent and usable
                out_of_memory += 1
                check_invariants(device)
                # the path synchronised the device and released its cache before giving up
                assert device.state.counters[CNT_FREE_SEGMENTS] == 0, "a free segment stayed"
                assert (device.state.quick_count == 0).all(), "a quick list was not flushed"
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
            assert (device.view(handle) == value).all(), "a live block's bytes were overwritten"
            device.free(handle, stream=stream)
    device.synchronize()
    device.release_cached()
    assert device.stats()["hbm"]["reserved_bytes.current"] == 0, "reserved memory leaked"
    check_invariants(device)
    assert device.stats()["num_ooms"] == out_of_memory
    return out_of_memory


def test_two_stream_programs_keep_the_allocator_consistent_and_hazard_free():
    """EXAMPLES random programs and the explicit `OOM_PROGRAMS` on every config. Each explicit
    one runs out of memory at least twice; at least MIN_GENERATED_OUT_OF_MEMORY generated ones
    reach the path too (it was never reached with one 64 MiB arena), and at least
    MIN_GENERATED_WITHOUT do not."""
    figures = Counter()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(config=configs, arena=ARENAS, program=st.lists(operation, min_size=40, max_size=160))
    def case(config, arena, program):
        device = Device(hbm_bytes=arena, allocator=config, num_streams=2, num_events=4)
        out_of_memory = run_program(device, program)
        if program in OOM_PROGRAMS and arena == 4 * MiB:  # an explicit example
            assert out_of_memory >= 2, "an explicit program did not run out of memory"
            figures["explicit examples with out of memory"] += 1
            return
        figures["examples"] += 1
        figures["with out of memory"] += out_of_memory > 0
        figures["out-of-memory errors"] += out_of_memory
        figures["peak reserved MiB (max)"] = max(
            figures["peak reserved MiB (max)"],
            device.stats()["hbm"]["reserved_bytes.peak"] >> 20,
        )

    for config, program in EXPLICIT:
        case = example(config=config, arena=4 * MiB, program=program)(case)
    case()
    report(
        "test_device_properties.py (allocator programs)",
        [f"  {key}: {value}" for key, value in figures.items()],
    )
    assert figures["explicit examples with out of memory"] == len(EXPLICIT), figures
    assert figures["with out of memory"] >= MIN_GENERATED_OUT_OF_MEMORY, figures
    without = figures["examples"] - figures["with out of memory"]
    assert without >= MIN_GENERATED_WITHOUT, figures


class AliasingDevice(Device):
    """A broken allocator: every third allocation hands out the previous block again."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = 0
        self.last = None

    def malloc(self, nbytes, placement="hbm", stream=0):
        self.calls += 1
        if self.calls % 3 == 0 and self.last is not None:
            return self.last
        self.last = super().malloc(nbytes, placement, stream)
        return self.last


class LeakingDevice(Device):
    """A broken out-of-memory path: after an out-of-memory error a block stays allocated."""

    def malloc(self, nbytes, placement="hbm", stream=0):
        try:
            return super().malloc(nbytes, placement, stream)
        except DeviceOutOfMemory:
            super().malloc(512, placement, stream)
            raise


OVERLAPPING_PROGRAM = [("malloc", 0, 4096)] * 3 + [("free", 0, 0)] * 3
OUT_OF_MEMORY_PROGRAM = [("malloc", 0, 6 * MiB)] * 3 + [("free", 0, 0)] * 3


def test_the_property_test_can_fail():
    """The property's own checks, run on broken devices, fail: overlapping live blocks (the
    stamp check) and a block leaked by the out-of-memory path (the statistics / leak checks).
    Guards against a vacuous property; the correct device passes the same programs."""
    for program in (OVERLAPPING_PROGRAM, OUT_OF_MEMORY_PROGRAM):
        assert run_program(Device(hbm_bytes=8 * MiB, num_streams=2), program) >= 0
    with pytest.raises(AssertionError, match="overwritten"):
        run_program(AliasingDevice(hbm_bytes=8 * MiB, num_streams=2), OVERLAPPING_PROGRAM)
    assert run_program(Device(hbm_bytes=8 * MiB, num_streams=2), OUT_OF_MEMORY_PROGRAM) == 2
    with pytest.raises(AssertionError):
        run_program(LeakingDevice(hbm_bytes=8 * MiB, num_streams=2), OUT_OF_MEMORY_PROGRAM)
