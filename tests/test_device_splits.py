"""How the caching allocator splits blocks and serves its quick lists: the minimum remainders,
the large-segment slack rule, placements kept apart, parked blocks beside listed ones. Many of
these were written to catch mutants of `_take_listed` (docs/mutation-report.md)."""

import pytest
from device_checks import block_size, blocks_of, check_invariants

from rtsoa.device import AllocatorConfig, Device

KiB = 1 << 10
MiB = 1 << 20


def _a_parked_block_beside_a_listed_one():
    """One 2 MiB small segment, full: a (512 B, parked in quick list 0 once freed) at 0,
    b (1 MiB - 512, listed once freed) at 512, c (1 MiB, live) at 1 MiB."""
    device = Device(hbm_bytes=64 * MiB)
    a = device.malloc(512)
    b = device.malloc(1 * MiB - 512)
    c = device.malloc(1 * MiB)
    assert [device.location(h)[1] for h in (a, b, c)] == [0, 512, 1 * MiB]
    device.free(b)
    device.free(a)
    assert device.state.quick_count.sum() == 1
    return device, c


def test_quick_lists_stay_parked_while_a_listed_block_fits():
    """A request that a listed block serves leaves the quick lists alone (flushing them is
    for when nothing fits). Caught mutant (mutation testing): `_take_listed`'s `slot < 0 and
    quick_flush(...)` -> `or` (every listed allocation flushed the quick lists)."""
    device, _ = _a_parked_block_beside_a_listed_one()
    handle = device.malloc(4096)  # b's block fits
    assert device.location(handle)[1] == 512
    assert device.state.quick_count.sum() == 1


def test_a_parked_block_that_merges_into_a_fit_is_used_before_growing():
    """Nothing listed fits 1 MiB, but flushing the quick lists merges a (512 B) with b's
    1 MiB - 512 into a 1 MiB block at 0: the request takes it and no segment is carved.
    Caught mutant (mutation testing): `quick_flush(...) > 0` -> `> 1` (one flushed block
    not searched again: a new segment instead)."""
    device, _ = _a_parked_block_beside_a_listed_one()
    handle = device.malloc(1 * MiB)
    assert device.location(handle)[1] == 0
    assert device.state.quick_count.sum() == 0
    assert device.stats()["hbm"]["reserved_bytes.current"] == 2 * MiB


def test_a_parked_host_block_never_serves_another_request():
    """Requests above the quick lists' sizes have no list (index -1): they must not look at
    any. The host's 16-unit list (1 KiB blocks) is the last list, where index -1 would land in
    Python and in unchecked jitted code alike. Caught mutant (mutation testing):
    `_try_malloc`'s `quick >= 0` -> `>= -1`."""
    device = Device(hbm_bytes=64 * MiB, host_bytes=64 * MiB)
    device.free(device.malloc(1024, placement="host"))  # parked in the host's last list
    assert device.state.quick_count[-1] == 1
    handle = device.malloc(1 * MiB)
    assert device.location(handle)[0] == "hbm"
    assert block_size(device, handle) == 1 * MiB
    assert device.state.quick_count[-1] == 1


def test_without_the_slack_rule_a_freed_large_segment_is_split():
    """segment_slack_shift=None: a wholly free large segment is best fit and split like any
    block. Caught mutant (mutation testing): `_take_listed`'s `segment_slack_shift < 63` ->
    `<= 63` (None read as a slack rule: handed out whole)."""
    config = AllocatorConfig(segment_slack_shift=None, release_before_grow=False)
    device = Device(hbm_bytes=64 * MiB, allocator=config)
    big = device.malloc(8 * MiB)
    offset = device.location(big)[1]
    device.free(big)
    handle = device.malloc(2 * MiB)
    assert device.location(handle)[1] == offset
    assert block_size(device, handle) == 2 * MiB
    check_invariants(device)


@pytest.mark.parametrize(("left", "split"), [(4096, True), (3584, False)])
def test_a_block_is_split_when_at_least_the_minimum_remainder_is_left(left, split):
    """small_min_remainder=4096: 4096 B left over is split off, 3584 B is not (the block is
    handed out whole). Caught mutant (mutation testing): `remainder >=
    dev.config[CFG_SMALL_MIN_REMAINDER + pool]` -> `>`."""
    config = AllocatorConfig(small_min_remainder=4096, quick_depth=0)
    device = Device(hbm_bytes=64 * MiB, allocator=config)
    device.malloc(1 * MiB)
    handle = device.malloc(1 * MiB - left)
    expected = 1 * MiB - left if split else 1 * MiB
    assert block_size(device, handle) == expected
    check_invariants(device)


def test_an_exact_fit_leaves_no_empty_block_with_a_zero_minimum_remainder():
    """small_min_remainder=0 splits any remainder, but an exact fit has none: no zero-byte
    block. Caught mutants (mutation testing): `remainder > 0` -> `>= 0` / `> -1`."""
    config = AllocatorConfig(small_min_remainder=0, quick_depth=0)
    device = Device(hbm_bytes=64 * MiB, allocator=config)
    handles = [device.malloc(1 * MiB), device.malloc(1 * MiB)]  # the 2 MiB segment, exactly
    assert blocks_of(device) == [(0, 1 * MiB, "allocated"), (1 * MiB, 1 * MiB, "allocated")]
    check_invariants(device)
    for handle in handles:
        device.free(handle)


@pytest.mark.parametrize("placement", ["hbm", "p2p", "host"])
@pytest.mark.parametrize("size", [64 * KiB, 4 * MiB])
def test_free_blocks_serve_only_requests_of_their_placement(placement, size):
    """Free listed blocks of every placement and both pools (above the quick lists' sizes),
    then a request of each size: it gets a block of its own placement, and a freed block of
    its placement and size is found again (no new segment). Caught mutants (mutation testing,
    allocator): `_take_listed`'s `group = placement * 2 + pool` -> `placement **
    2` (p2p's small pool searched hbm's large-pool lists) and `placement // 2` (p2p and host
    searched the lists of hbm or of each other)."""
    names = ["hbm", "p2p", "host"]
    device = Device(hbm_bytes=64 * MiB, p2p_bytes=64 * MiB, host_bytes=64 * MiB)
    held = [device.malloc(s, placement=name) for name in names for s in (64 * KiB, 4 * MiB)]
    for handle in held:
        device.free(handle)
    reserved = {name: device.stats()[name]["reserved_bytes.current"] for name in names}
    handle = device.malloc(size, placement=placement)
    assert device.location(handle)[0] == placement
    assert {name: device.stats()[name]["reserved_bytes.current"] for name in names} == reserved
    check_invariants(device)


@pytest.mark.parametrize(("left", "split"), [(1 * MiB, True), (512 * KiB, False)])
def test_a_large_block_is_split_when_at_least_the_large_minimum_remainder_is_left(left, split):
    """large_min_remainder=1 MiB: a freed 8 MiB large-pool block serving 8 MiB - `left` is
    split when 1 MiB is left, handed out whole when 512 KiB is. Caught mutant (mutation
    testing, allocator): `_take_listed`'s `CFG_SMALL_MIN_REMAINDER + pool` ->
    `- pool` (the large pool read the config row before the small pool's minimum:
    num_events)."""
    config = AllocatorConfig(
        large_min_remainder=1 * MiB, segment_slack_shift=None, release_before_grow=False
    )
    device = Device(hbm_bytes=64 * MiB, allocator=config)
    device.free(device.malloc(8 * MiB))
    handle = device.malloc(8 * MiB - left)
    assert block_size(device, handle) == (8 * MiB - left if split else 8 * MiB)
    check_invariants(device)


def test_a_listed_block_in_slot_zero_leaves_the_quick_lists_parked():
    """The first block of the first segment sits in slot 0 of the block table: found by the
    search (slot 0 is a slot, not a miss), it leaves the quick lists alone. Caught mutant
    (mutation testing, allocator): `_take_listed`'s `slot < 0 and quick_flush(...)`
    -> `slot <= 0` (a hit in slot 0 flushed the quick lists)."""
    device = Device(hbm_bytes=64 * MiB)
    first = device.malloc(1 * MiB - 512)  # slot 0, offset 0
    parked = device.malloc(512)
    device.malloc(1 * MiB)
    assert device.location(first)[1] == 0
    device.free(first)
    device.free(parked)
    assert device.state.quick_count.sum() == 1
    handle = device.malloc(4096)  # the first block fits
    assert device.location(handle)[1] == 0
    assert device.state.quick_count.sum() == 1


def test_a_new_segment_of_exactly_max_split_is_never_split():
    """max_split = 21 MiB: a request of 21 MiB - 4 KiB gets a dedicated segment rounded up to
    64 KiB, exactly max_split: "at least max_split", so oversize, and handed out whole rather
    than split around the 4 KiB left over (the config's rule: blocks at least this big are
    never split). Caught mutant (mutation testing, allocator): `_take_listed`'s
    `block_size < max_split` -> `<=`."""
    device = Device(hbm_bytes=64 * MiB, allocator=AllocatorConfig(max_split=21 * MiB))
    handle = device.malloc(21 * MiB - 4 * KiB)
    assert block_size(device, handle) == 21 * MiB
    check_invariants(device)


def test_only_a_reused_whole_large_segment_is_handed_out_unsplit():
    """With the default slack rule (1/8), a wholly free large segment reused by a request that
    wastes less than an eighth of it is handed out whole; a wholly free small segment is split
    like any block. Caught mutants (mutation testing, allocator): `_take_listed`'s
    `pool != POOL_SMALL` -> `==` and `<=` (the rule applied to the small pool instead), `>=`
    (to both pools) and `<` (to neither)."""
    device = Device(hbm_bytes=64 * MiB)
    device.free(device.malloc(8 * MiB))
    large = device.malloc(8 * MiB - 512 * KiB)
    assert block_size(device, large) == 8 * MiB
    device.free(device.malloc(64 * KiB))
    small = device.malloc(64 * KiB)
    assert block_size(device, small) == 64 * KiB
    check_invariants(device)


def test_a_one_byte_remainder_is_split_off_with_a_one_byte_unit():
    """alignment_device=1 (a power of two, so allowed): the unit and so the default minimum
    remainder are 1 byte, and a block one byte larger than the request is split. Caught
    mutant (mutation testing, allocator): `_take_listed`'s `remainder > 0` -> `> 1`
    (equivalent only while every unit is at least 2 bytes)."""
    config = AllocatorConfig(alignment_device=1, quick_depth=0)
    device = Device(hbm_bytes=64 * MiB, allocator=config)
    device.malloc(1 * MiB)
    handle = device.malloc(1 * MiB - 1)
    assert block_size(device, handle) == 1 * MiB - 1
    check_invariants(device)
