"""Quick lists: freed small blocks parked unmerged by exact size, reused LIFO, flushed (merged
and listed) before the allocator grows or releases, and stream-ordered like any cached block."""

import numpy as np
import pytest
from device_checks import written_and_freed

from rtsoa.device import AllocatorConfig, Device
from rtsoa.device.replay import replay_trace
from rtsoa.device.trace import trace_rows

KiB = 1 << 10
MiB = 1 << 20


def blocks(device):
    """[(offset, size, state, quick)] of the hbm blocks in address order."""
    return [
        (b["offset"], b["size"], b["state"], b["quick"])
        for s in device.snapshot()
        if s["placement"] == "hbm"
        for b in s["blocks"]
    ]


def reserved(device):
    return device.stats()["hbm"]["reserved_bytes.current"]


def test_a_freed_small_block_is_parked_unmerged_and_reused_lifo():
    device = Device(hbm_bytes=64 * MiB)
    a, b, c = (device.malloc(n) for n in (1000, 3000, 100))  # 1024 @ 0, 3072 @ 1024, 512 @ 4096
    device.free(a)
    device.free(b)  # its free neighbour `a` is parked, so no merge either
    assert blocks(device)[:3] == [
        (0, 1024, "free", True),
        (1024, 3072, "free", True),
        (4096, 512, "allocated", False),
    ]
    hbm = device.stats()["hbm"]
    assert hbm["allocated_bytes.current"] == 512 and hbm["allocation.current"] == 1
    assert device.location(device.malloc(2900))[1] == 1024  # the parked 3072 block, exact size
    assert device.location(device.malloc(1024))[1] == 0
    d = device.malloc(1024)  # that list is empty now: carved from the segment's free tail
    assert device.location(d)[1] == 4608
    device.free(c)
    device.free(d)
    e = device.malloc(512)  # the 512 list holds c only; 1024 (d) is not a 512 request's size
    assert device.location(e)[1] == 4096
    assert device.stats()["num_quick_flushes"] == 0


def test_lists_hold_at_most_quick_depth_blocks_and_the_rest_merge_at_once():
    device = Device(hbm_bytes=64 * MiB, allocator=AllocatorConfig(quick_depth=2))
    handles = [device.malloc(512) for _ in range(4)]
    device.malloc(4096)  # keeps the segment's free tail away from the freed blocks
    for handle in handles:
        device.free(handle)
    assert blocks(device)[:3] == [
        (0, 512, "free", True),
        (512, 512, "free", True),
        (1024, 1024, "free", False),  # third and fourth free: list full, merged and listed
    ]
    assert device.state.quick_count.sum() == 2


def test_parked_blocks_are_flushed_before_the_allocator_grows():
    device = Device(hbm_bytes=64 * MiB)
    small = [device.malloc(8 * KiB) for _ in range(256)]  # fills a 2 MiB small segment exactly
    assert reserved(device) == 2 * MiB
    for handle in small[:128]:  # 1 MiB of parked 8 KiB blocks (32 per list at most)
        device.free(handle)
    assert device.state.quick_count.sum() == 32
    big = device.malloc(1 * MiB)  # fits only once the parked blocks merge with the rest
    assert device.location(big)[1] == 0
    assert reserved(device) == 2 * MiB  # no new segment
    assert device.stats()["num_quick_flushes"] == 1
    assert device.state.quick_count.sum() == 0
    assert not any(quick for *_, quick in blocks(device))


def test_release_cached_flushes_and_returns_everything():
    device = Device(hbm_bytes=64 * MiB)
    handles = [device.malloc(size) for size in (512, 1024, 8192, 3 * MiB, 512)]
    for handle in handles:
        device.free(handle)
    assert device.state.quick_count.sum() == 4
    device.release_cached()
    assert reserved(device) == 0
    assert device.state.quick_count.sum() == 0
    assert blocks(device) == []


def test_a_block_parked_by_another_stream_waits_for_an_event():
    device = Device(hbm_bytes=64 * MiB)
    offset = written_and_freed(device, 512, stream=0)
    b = device.malloc(512, stream=1)  # not ordered after stream 0's write: other memory
    assert device.location(b)[1] != offset
    device.record_event(0, stream=0)
    device.wait_event(1, 0)
    c = device.malloc(512, stream=1)  # ordered now: the parked block is reused
    assert device.location(c)[1] == offset
    device.launch(1, writes=[b, c])
    assert device.hazard_count == 0


def test_using_the_handle_of_a_parked_block_is_a_use_after_free():
    """Parking does not hide the stale handle from the hazard checker."""
    device = Device(hbm_bytes=64 * MiB)
    a = device.malloc(512)
    device.free(a)
    device.launch(0, reads=[a])
    assert [h["kind"] for h in device.hazards()] == ["use_after_free"]


@pytest.mark.parametrize(
    "config",
    [
        AllocatorConfig(quick_depth=0),
        AllocatorConfig(page_mode=True),
        AllocatorConfig.pytorch_like(),
    ],
    ids=["depth-0", "page-mode", "pytorch-like"],
)
def test_configs_without_quick_lists_merge_at_once(config):
    device = Device(hbm_bytes=64 * MiB, allocator=config)
    a, b = device.malloc(512), device.malloc(512)
    device.malloc(512)
    device.free(a)
    device.free(b)
    assert device.state.quick_count.sum() == 0
    assert blocks(device)[0][2:] == ("free", False)
    assert blocks(device)[0][1] == 2 * blocks(device)[1][1]  # merged


def test_config_validation_and_limits():
    with pytest.raises(ValueError, match="quick_depth"):
        AllocatorConfig(quick_depth=-1)
    with pytest.raises(ValueError, match="quick_max_bytes"):
        AllocatorConfig(quick_max_bytes=-1)
    # at most 16 units per placement: 8 KiB of 512 B device units, 1 KiB of 64 B host units
    device = Device(allocator=AllocatorConfig(quick_max_bytes=1 * MiB))
    handle = device.malloc(1024, placement="host")
    device.free(handle)
    assert device.state.quick_count.sum() == 1
    handle = device.malloc(1088, placement="host")  # 17 host units: merged at once
    device.free(handle)
    assert device.state.quick_count.sum() == 1


def test_replaying_the_trace_reproduces_the_offsets():
    rng = np.random.default_rng(3)
    device = Device(hbm_bytes=256 * MiB)
    live = []
    for _ in range(3000):
        if live and rng.random() < 0.48:
            device.free(live.pop(int(rng.integers(len(live)))))
        else:
            live.append(device.malloc(int(np.exp(rng.uniform(0, np.log(2 * MiB))))))
    assert device.stats()["num_quick_flushes"] > 0
    replayed = replay_trace(Device(hbm_bytes=256 * MiB), trace_rows(device.state)[0])
    assert blocks(replayed) == blocks(device)
    assert replayed.stats()["hbm"] == device.stats()["hbm"]
