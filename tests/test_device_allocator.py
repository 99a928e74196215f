"""Caching allocator: statistics vs snapshots, exact split / merge offsets, pools, modes."""

import os

import numpy as np
import pytest
from device_checks import block_size, blocks_of, check_invariants

from rtsoa.abi.status import (
    STATUS_INVALID_PLACEMENT,
    STATUS_INVALID_SIZE,
    STATUS_INVALID_STREAM,
    STATUS_OUT_OF_MEMORY,
    STATUS_TOO_MANY_SEGMENTS,
)
from rtsoa.device import AllocatorConfig, Device, DeviceError, DeviceOutOfMemory, InvalidBlock
from rtsoa.device import device as device_module
from rtsoa.device.layout import BLOCK_ALLOCATED, MAX_UNIT_BYTES, PCFG_CAP, PLACEMENT_HBM
from rtsoa.device.stats import snapshot_arrays, stats_from_snapshot
from rtsoa.testing.workloads import OP_ALLOC, random_sequence

KiB = 1 << 10
MiB = 1 << 20


@pytest.mark.parametrize("alloc_probability", [0.53, 0.73])
@pytest.mark.parametrize("page_mode", [False, True])
def test_stats_match_snapshot_after_every_step(alloc_probability, page_mode):
    steps = 700 if page_mode else 1500
    sequence = random_sequence(seed=7, steps=steps, alloc_probability=alloc_probability)
    device = Device(
        hbm_bytes=4 << 30,
        allocator=AllocatorConfig(page_mode=page_mode),
        trace_capacity=1 << 12,
    )
    handles = {}
    live_requested = 0
    peak_requested = 0
    peak_allocated = 0
    peak_reserved = 0
    for step in range(steps):
        tensor = int(sequence.ids[step])
        if sequence.ops[step] == OP_ALLOC:
            size = int(sequence.sizes[step])
            handles[tensor] = (device.malloc(size), size)
            live_requested += size
        else:
            handle, size = handles.pop(tensor)
            device.free(handle)
            live_requested -= size
        tracked = device.stats()["hbm"]
        recomputed = stats_from_snapshot(snapshot_arrays(device.state), PLACEMENT_HBM)
        for key, value in recomputed.items():
            assert tracked[key] == value, (step, key)
        assert tracked["requested_bytes.current"] == live_requested
        peak_requested = max(peak_requested, live_requested)
        peak_allocated = max(peak_allocated, tracked["allocated_bytes.current"])
        peak_reserved = max(peak_reserved, tracked["reserved_bytes.current"])
        if step % 100 == 0:
            check_invariants(device)
    check_invariants(device)
    tracked = device.stats()["hbm"]
    assert tracked["requested_bytes.peak"] == peak_requested == sequence.live_bytes_peak()
    assert tracked["allocated_bytes.peak"] == peak_allocated
    assert tracked["reserved_bytes.peak"] == peak_reserved
    assert tracked["allocation.allocated"] == int((sequence.ops == OP_ALLOC).sum())
    assert tracked["allocation.allocated"] - tracked["allocation.freed"] == len(handles)


def test_split_and_merge_exact_offsets():
    device = Device(hbm_bytes=64 * MiB, allocator=AllocatorConfig(quick_depth=0))  # merge at once
    a = device.malloc(1000)  # rounds to 1024 at offset 0
    b = device.malloc(3000)  # 3072 at 1024
    c = device.malloc(100)  # 512 at 4096
    assert [device.location(h)[1] for h in (a, b, c)] == [0, 1024, 4096]
    rest = 2 * MiB - 4608
    assert blocks_of(device) == [
        (0, 1024, "allocated"),
        (1024, 3072, "allocated"),
        (4096, 512, "allocated"),
        (4608, rest, "free"),
    ]
    device.free(b)
    assert blocks_of(device)[1] == (1024, 3072, "free")
    d = device.malloc(2000)  # best fit: the 3072 hole, split into 2048 + 1024
    assert device.location(d)[1] == 1024
    assert blocks_of(device)[1:3] == [(1024, 2048, "allocated"), (3072, 1024, "free")]
    device.free(c)  # merges with both free neighbours: 3072..2 MiB
    assert blocks_of(device)[2:] == [(3072, 2 * MiB - 3072, "free")]
    device.free(a)
    device.free(d)  # merges left and right: the whole segment is one free block again
    assert blocks_of(device) == [(0, 2 * MiB, "free")]
    check_invariants(device)


def test_best_fit_prefers_the_smallest_hole():
    device = Device(hbm_bytes=64 * MiB, allocator=AllocatorConfig(quick_depth=0))
    handles = [device.malloc(size) for size in (4096, 512, 2048, 512)]
    device.free(handles[0])  # hole of 4096 at 0
    device.free(handles[2])  # hole of 2048 at 4608
    chosen = device.malloc(1500)
    assert device.location(chosen)[1] == 4608


def test_alignment_padding_and_host_placement():
    device = Device(hbm_bytes=64 * MiB, allocator=AllocatorConfig(tail_padding=32))
    a = device.malloc(512)  # 512 + 32 padding -> 1024
    b = device.malloc(0)  # still one unit
    assert blocks_of(device)[:2] == [(0, 1024, "allocated"), (1024, 512, "allocated")]
    h = device.malloc(100, placement="following")  # host: 64-byte unit, no padding
    g = device.malloc(1, placement="host")
    assert device.location(h) == ("host", 0, 100)
    assert device.location(g) == ("host", 128, 1)
    assert device.stats()["host"]["allocated_bytes.current"] == 192
    for handle in (a, b, h, g):
        device.free(handle)


def test_page_mode_rounds_to_pages_and_carves_two_mib_chunks():
    device = Device(hbm_bytes=64 * MiB, allocator=AllocatorConfig(page_mode=True))
    a = device.malloc(1)
    b = device.malloc(70 * KiB)
    assert blocks_of(device)[:2] == [(0, 64 * KiB, "allocated"), (64 * KiB, 128 * KiB, "allocated")]
    large = device.malloc(3 * MiB + 1)  # own span, rounded to pages
    segments = device.snapshot()
    assert sorted(s["size"] for s in segments) == [2 * MiB, 3 * MiB + 64 * KiB]
    for handle in (a, b, large):
        device.free(handle)


def test_small_and_large_pools_do_not_share_segments():
    device = Device(hbm_bytes=256 * MiB, allocator=AllocatorConfig.pytorch_like())
    small = device.malloc(1 * MiB)  # small pool (<= 1 MiB)
    large = device.malloc(1 * MiB + 1)  # large pool: a 20 MiB segment
    pools = {s["pool"]: s["size"] for s in device.snapshot()}
    assert pools == {"small": 2 * MiB, "large": 20 * MiB}
    inside = device.malloc(11 * MiB)  # fits the large segment's 19 MiB of free space
    huge = device.malloc(25 * MiB - 5)  # >= 10 MiB: own segment rounded up to 2 MiB
    assert sorted(s["size"] for s in device.snapshot()) == [2 * MiB, 20 * MiB, 26 * MiB]
    device.free(inside)
    for handle in (small, large, huge):
        device.free(handle)


def test_oversize_blocks_are_never_split():
    # without releases before growth or the whole-segment slack rule: the oversize rule alone
    config = AllocatorConfig(
        max_split=32 * MiB,
        oversize_slack=8 * MiB,
        release_before_grow=False,
        segment_slack_shift=None,
    )
    device = Device(hbm_bytes=512 * MiB, allocator=config)
    big = device.malloc(40 * MiB)
    big_offset = device.location(big)[1]
    device.free(big)
    medium = device.malloc(2 * MiB)  # below max_split: must not take the oversize block
    assert device.location(medium)[1] != big_offset
    reused = device.malloc(36 * MiB)  # oversize, wastes 4 MiB < slack: the whole block
    assert device.location(reused)[1] == big_offset
    sizes = [b[1] for b in blocks_of(device) if b[0] == big_offset]
    assert sizes == [40 * MiB]
    device.free(reused)
    still_fits = device.malloc(33 * MiB)  # wastes 7 MiB < 8 MiB of slack: allowed
    assert device.location(still_fits)[1] == big_offset


def test_double_free_and_stale_handles_are_rejected():
    device = Device(hbm_bytes=64 * MiB)
    handle = device.malloc(4096)
    device.free(handle)
    with pytest.raises(InvalidBlock):
        device.free(handle)
    again = device.malloc(4096)  # same slot and memory, new generation
    assert again != handle and device.location(again)[1] == 0
    with pytest.raises(InvalidBlock):
        device.view(handle)
    device.free(again)


def test_views_are_real_arena_memory():
    device = Device(hbm_bytes=64 * MiB)
    a = device.malloc(16 * 4)
    b = device.malloc(16 * 4)
    device.view(a, np.float32)[:] = np.arange(16, dtype=np.float32)
    device.view(b, np.float32)[:] = 2.0
    placement, offset, size = device.location(a)
    raw = device.state.arena_hbm[offset : offset + size].view(np.float32)
    np.testing.assert_array_equal(raw, np.arange(16, dtype=np.float32))
    assert device.view(b, np.float32).sum() == 32.0


def test_caps_absolute_and_fraction():
    device = Device(hbm_bytes=64 * MiB, caps={"hbm": 0.25})
    assert device.state.placement_config[0, 2] == 16 * MiB
    device = Device(hbm_bytes=64 * MiB, caps={"hbm": 5 * MiB})
    handles = [device.malloc(1 * MiB) for _ in range(4)]  # two 2 MiB small segments
    assert device.stats()["hbm"]["reserved_bytes.current"] == 4 * MiB
    with pytest.raises(ValueError):
        Device(caps={"gpu": 0.5})
    for handle in handles:
        device.free(handle)


def test_totals_and_freed_match_a_reference_and_free_blocks_report_no_request():
    # `freed` is derived (allocated - current) and a free block's BLK_REQUESTED is left stale
    # by the jitted code: both must still read exactly as a NumPy-free reference says
    sequence = random_sequence(seed=3, steps=600, alloc_probability=0.6)
    device = Device(hbm_bytes=1 << 30, trace_capacity=1 << 12)
    handles = {}
    totals = {"requested_bytes": [0, 0], "allocated_bytes": [0, 0], "allocation": [0, 0]}
    for step in range(sequence.ops.size):
        tensor = int(sequence.ids[step])
        if sequence.ops[step] == OP_ALLOC:
            size = int(sequence.sizes[step])
            handle = device.malloc(size)
            rounded = next(
                b["size"] for s in device.snapshot() for b in s["blocks"] if b["handle"] == handle
            )
            handles[tensor] = (handle, size, rounded)
            for name, amount in zip(totals, (size, rounded, 1), strict=True):
                totals[name][0] += amount
        else:
            handle, size, rounded = handles.pop(tensor)
            device.free(handle)
            for name, amount in zip(totals, (size, rounded, 1), strict=True):
                totals[name][1] += amount
        if step % 50 == 0:
            tracked = device.stats()["hbm"]
            for name, (allocated, freed) in totals.items():
                assert tracked[f"{name}.allocated"] == allocated, (step, name)
                assert tracked[f"{name}.freed"] == freed, (step, name)
            free_blocks = [
                b for s in device.snapshot() for b in s["blocks"] if b["state"] == "free"
            ]
            assert all(b["requested"] == 0 for b in free_blocks)
            arrays = snapshot_arrays(device.state)
            assert (arrays["block_requested"][arrays["block_state"] != BLOCK_ALLOCATED] == 0).all()


def test_the_out_of_memory_path_retries_counts_and_traces():
    """A request that fits only once another stream's pending use is complete: the first retry
    (sync the requesting stream, release) fails, the second (sync the device, release)
    succeeds, which is one retry and no out-of-memory error. A request that never fits: one
    retry and one error per request, each traced as `oom` without a block. Caught mutants
    (mutation testing): the retry counted twice; the second retry's success taken for a
    failure (`!=` -> `<`, counting an OOM and tracing it); the `oom` record's handle or
    offset changed; the submission wait counted 0 or 2 times."""
    device = Device(hbm_bytes=2 * MiB, num_streams=2)
    block = device.malloc(512 * KiB, stream=1)
    device.launch(stream=1, bytes_moved=10**8, writes=[block])  # pending until a sync
    device.free(block, stream=1)
    device.malloc(64 * KiB, stream=0)  # the cached segment is stream 1's until the device syncs
    stats = device.stats()
    assert (stats["num_alloc_retries"], stats["num_ooms"]) == (1, 0)
    assert (stats["num_stream_syncs"], stats["num_device_syncs"]) == (1, 1)
    assert stats["num_submission_waits"] == 1
    assert "oom" not in [record["kind"] for record in device.trace()]

    device = Device(hbm_bytes=8 * MiB)
    device.malloc(6 * MiB)
    for _ in range(2):
        with pytest.raises(DeviceOutOfMemory):
            device.malloc(6 * MiB)
    stats = device.stats()
    assert (stats["num_alloc_retries"], stats["num_ooms"], stats["num_device_syncs"]) == (2, 2, 2)
    assert stats["num_submission_waits"] == 2
    ooms = [record for record in device.trace() if record["kind"] == "oom"]
    assert len(ooms) == 2
    for record in ooms:
        assert (record["handle"], record["offset"], record["size"]) == (-1, -1, 6 * MiB)
        assert (record["requested"], record["stream"]) == (6 * MiB, 0)


def test_freed_small_blocks_are_parked_by_size_and_served_again():
    """One 512 B unit has quick list 0, two units list 1. Caught mutants (mutation testing):
    device_free's `quick < 0` -> `quick <= 0` (one-unit blocks merged instead) and
    -> `quick != 0` (only one-unit blocks parked)."""
    device = Device(hbm_bytes=8 * MiB)
    first = device.malloc(100)
    second = device.malloc(1000)
    keep = device.malloc(100)  # a live neighbour, so a merge would not be invisible
    offsets = device.location(first)[1], device.location(second)[1]
    device.free(first)
    device.free(second)
    assert device.state.quick_count[:2].tolist() == [1, 1]
    assert device.state.quick_count.sum() == 2
    again = device.malloc(512), device.malloc(1024)
    assert tuple(device.location(handle)[1] for handle in again) == offsets
    assert device.state.quick_count.sum() == 0
    for handle in (*again, keep):
        device.free(handle)


@pytest.mark.parametrize("stream", [-1, 2, 3])
def test_free_on_an_invalid_stream_is_refused_and_keeps_the_block(stream):
    """Caught mutants (mutation testing) of device_free's stream check: `or` -> `and`,
    `>=` -> `==` / `>`, `< 0` -> `< -1`."""
    device = Device(hbm_bytes=8 * MiB, num_streams=2)
    handle = device.malloc(4096)
    with pytest.raises(DeviceError) as info:
        device.free(handle, stream=stream)
    assert info.value.status == STATUS_INVALID_STREAM
    assert device.stats()["hbm"]["allocation.current"] == 1
    device.free(handle, stream=1)
    assert device.stats()["hbm"]["allocation.current"] == 0


def rounded(nbytes, padding, unit):
    """What a request occupies, by ceiling division: at least one unit."""
    return max(unit, -(-(nbytes + padding) // unit) * unit)


@pytest.mark.parametrize(
    ("page_mode", "padding", "placement", "unit", "sizes"),
    [
        (False, 0, "hbm", 512, [0, 1, 511, 512, 513, 1000, 4096, 4097]),
        (False, 0, "hbm", 512, [1 * MiB + 1, 3 * MiB + 512]),  # large: split off new segments
        (False, 32, "hbm", 512, [0, 480, 481, 992, 993, 1000, 1024]),
        (False, 32, "host", 64, [0, 1, 64, 65, 1000]),  # host adds no tail padding
        (True, 32, "hbm", 64 * KiB, [1, 65504, 65505, 3 * 65536]),
        (True, 0, "host", 64 * KiB, [1, 65536, 65537]),
    ],
)
def test_requests_round_up_to_whole_units(page_mode, padding, placement, unit, sizes):
    """Each request occupies size + tail padding rounded up to the placement's unit (the page
    in page mode), one unit at least: checked against a ceiling division, at exact multiples
    and one byte either side. Caught mutants (mutation testing) of `round_request`:
    `padded + unit - 1` -> `+ 1` / `- 0` / `- 2`, `nbytes + padding` -> `|` / `^` (the same
    as `+` when the bits do not overlap: 1000 and 32 do); `_take_listed`'s `whole = False` ->
    `True` (a new large segment handed out unsplit)."""
    config = AllocatorConfig(page_mode=page_mode, tail_padding=padding, quick_depth=0)
    device = Device(hbm_bytes=64 * MiB, host_bytes=64 * MiB, allocator=config)
    host_padding = 0 if placement == "host" else padding
    handles = [device.malloc(size, placement=placement) for size in sizes]
    for size, handle in zip(sizes, handles, strict=True):
        assert block_size(device, handle) == rounded(size, host_padding, unit), size
    for handle in handles:
        device.free(handle)


@pytest.mark.parametrize("stream", [-1, 2, 3])
def test_malloc_on_an_invalid_stream_is_refused(stream):
    """`Device.malloc` leaves the stream check to `device_malloc` (kernels call it with the
    graph's streams). Caught mutants (mutation testing) of that check: `or` -> `and`, `>=` ->
    `==` / `>`, `< 0` -> `< -1`, the status not negated."""
    device = Device(hbm_bytes=8 * MiB, num_streams=2)
    with pytest.raises(DeviceError) as info:
        device.malloc(4096, stream=stream)
    assert info.value.status == STATUS_INVALID_STREAM
    stats = device.stats()
    assert stats["hbm"]["allocation.current"] == 0
    assert stats["hbm"]["reserved_bytes.current"] == 0
    device.free(device.malloc(4096, stream=1), stream=1)


@pytest.mark.parametrize("placement", [-1, 4, 5])
def test_malloc_of_an_unknown_placement_is_refused(placement):
    """`Device` maps names to 0-3 before calling `device_malloc`, so its own check is reached
    only by jitted callers: called directly (the function `Device` uses), a placement outside
    0..3 gives -STATUS_INVALID_PLACEMENT and touches nothing. Caught mutants (mutation
    testing): `or` -> `and`, `< 0` -> `< -1`, the status not negated."""
    device = Device(hbm_bytes=8 * MiB)
    result = device_module._allocator.device_malloc(device.state, placement, 4096, 0)
    assert int(result) == -STATUS_INVALID_PLACEMENT
    assert device.stats()["hbm"]["reserved_bytes.current"] == 0


def test_requests_beyond_two_to_the_48_are_refused_before_rounding():
    """Up to 2**48 bytes a request takes the ordinary path (one retry, then out of memory);
    above it, it is refused at once (no retry: nothing to round). Caught mutant (mutation
    testing): the bound's `>` -> `>=`."""
    device = Device(hbm_bytes=8 * MiB)
    with pytest.raises(DeviceOutOfMemory):
        device.malloc(1 << 48)
    assert (device.stats()["num_alloc_retries"], device.stats()["num_ooms"]) == (1, 1)
    with pytest.raises(DeviceOutOfMemory):
        device.malloc((1 << 48) + 1)
    assert (device.stats()["num_alloc_retries"], device.stats()["num_ooms"]) == (1, 2)


@pytest.mark.parametrize("nbytes", [-1, -4096, -(1 << 62)])
def test_a_negative_size_from_a_jitted_caller_is_refused(nbytes):
    """`Device.malloc` refuses a negative size in Python, so `device_malloc`'s own check is
    reached only by jitted callers: called directly, a negative size gives
    -STATUS_INVALID_SIZE and touches nothing. Caught mutants (mutation testing, after c937952):
    `nbytes < 0` -> `< -1`; the status returned positive, inverted, `not`-ed."""
    device = Device(hbm_bytes=8 * MiB)
    result = device_module._allocator.device_malloc(device.state, PLACEMENT_HBM, nbytes, 0)
    assert int(result) == -STATUS_INVALID_SIZE
    stats = device.stats()
    assert stats["hbm"]["reserved_bytes.current"] == 0
    assert (stats["num_alloc_retries"], stats["num_ooms"]) == (0, 0)


def _claims_two_to_the_48_bytes(device):
    """Make `device`'s HBM free-range table and cap claim 2**48 bytes (the largest arena the
    configuration admits). malloc only does bookkeeping on offsets, so requests up to 2**48
    are served from it; their blocks must never be written."""
    device.state.range_size[PLACEMENT_HBM, 0] = MAX_UNIT_BYTES
    device.state.placement_config[PLACEMENT_HBM, PCFG_CAP] = MAX_UNIT_BYTES
    return device.state


def test_requests_above_two_to_the_48_are_refused_even_by_an_arena_that_large():
    """malloc clamps a size above 2**48 to 2**48 + 1 for the rounding (so no sum overflows);
    the clamped request must still fail on an arena of 2**48 bytes, while 2**48 and 2**47 are
    served from it (the arena really is that large). Caught mutants (mutation testing, after
    c937952): the clamp `MAX_UNIT_BYTES + 1` -> `- 1`, `* 1`, `// 1`, `** 1`, `+ 0`, `>> 1`
    (each lets a clamped request of 2**48 + 1 B be served by a block of 2**48 or 2**47 B).
    The clamps `| 1`, `^ 1` (both 2**48 + 1), `+ 2` and `<< 1` are equivalent: every clamp
    above 2**48 fails on every arena the configuration admits."""
    malloc = device_module._allocator.device_malloc
    for nbytes in ((1 << 48) + 1, (1 << 48) + (1 << 21), 1 << 60, (1 << 63) - 1):
        device = Device(hbm_bytes=8 * MiB)
        state = _claims_two_to_the_48_bytes(device)
        assert int(malloc(state, PLACEMENT_HBM, nbytes, 0)) == -STATUS_OUT_OF_MEMORY
        stats = device.stats()
        assert stats["hbm"]["reserved_bytes.current"] == 0
        assert (stats["num_alloc_retries"], stats["num_ooms"]) == (0, 1)
    for nbytes in (1 << 48, (1 << 48) - 1, 1 << 47):
        device = Device(hbm_bytes=8 * MiB)
        state = _claims_two_to_the_48_bytes(device)
        assert int(malloc(state, PLACEMENT_HBM, nbytes, 0)) >= 0
        assert device.stats()["hbm"]["reserved_bytes.current"] >= nbytes


def test_a_full_segment_table_is_not_an_out_of_memory():
    """No free segment row is its own error, returned at once: no out-of-memory retry (which
    would synchronise streams for nothing). Caught mutant (mutation testing): `device_malloc`'s
    `handle != -STATUS_OUT_OF_MEMORY` -> `>` (every other negative status took the retry)."""
    device = Device(hbm_bytes=64 * MiB, max_segments=1)
    kept = device.malloc(4096)  # the small segment: the only row
    with pytest.raises(DeviceError) as info:
        device.malloc(4 * MiB)  # a large request needs a second segment
    assert info.value.status == STATUS_TOO_MANY_SEGMENTS
    stats = device.stats()
    assert (stats["num_alloc_retries"], stats["num_stream_syncs"], stats["num_ooms"]) == (0, 0, 0)
    device.free(kept)


def test_the_device_runs_as_plain_python_for_mutation_testing():
    """RTSOA_PURE_PYTHON_DEVICE=1 (the allocator's mutation runs, mutation/allocator.toml)
    makes the device functions plain Python; Device's entry-point calls must take them as
    they are (they once called `.compile` on them and every call failed)."""
    import subprocess
    import sys

    code = (
        "from rtsoa.device import Device\n"
        "d = Device(hbm_bytes=1 << 20)\n"
        "h = d.malloc(1000)\n"
        "d.view(h)[:] = 7\n"
        "d.free(h)\n"
        "d.synchronize(0)\n"
        "d.synchronize()\n"
        "print(d.stats()['hbm']['allocation.allocated'])\n"
    )
    env = {**os.environ, "RTSOA_PURE_PYTHON_DEVICE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1"]
