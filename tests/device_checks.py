"""Helpers shared by the device tests: structural invariants of the allocator tables, and a
block written and freed on a stream."""

import numpy as np

from rtsoa.device.layout import (
    BLK_FREE_NEXT,
    BLK_SIZE,
    BLK_STATE,
    BLOCK_FREE,
    BLOCK_QUICK,
    CNT_FREE_SEGMENTS,
    PCFG_UNIT_SHIFT,
    QUICK_CLASSES,
)


def check_invariants(device):
    """Blocks tile their segments exactly; no two listed free neighbours; the free lists hold
    exactly the listed free blocks, the quick lists exactly the parked ones, by size; the
    count of wholly free segments (release candidates) is exact."""
    state = device.state
    whole_free = 0
    for segment in device.snapshot():
        blocks = segment["blocks"]
        whole_free += len(blocks) == 1 and blocks[0]["state"] == "free" and not blocks[0]["quick"]
        position = segment["offset"]
        previous_free = False
        for block in segment["blocks"]:
            assert block["offset"] == position
            assert block["size"] > 0
            free = block["state"] == "free" and not block["quick"]
            assert not (free and previous_free), "adjacent free blocks were not merged"
            previous_free = free
            position += block["size"]
        assert position == segment["offset"] + segment["size"]
    assert state.counters[CNT_FREE_SEGMENTS] == whole_free
    free = np.flatnonzero(state.blocks[:, BLK_STATE] == BLOCK_FREE)
    listed = []
    for head in state.bin_head[state.bin_head >= 0]:
        slot = int(head)
        while slot >= 0:
            listed.append(slot)
            slot = int(state.blocks[slot, BLK_FREE_NEXT])
    assert sorted(listed) == sorted(free.tolist())
    parked = []
    for index, head in enumerate(state.quick_head):
        slot = int(head)
        count = 0
        placement, units = divmod(index, QUICK_CLASSES)
        size = (units + 1) << int(state.placement_config[placement, PCFG_UNIT_SHIFT])
        while slot >= 0:
            assert state.blocks[slot, BLK_SIZE] == size
            parked.append(slot)
            count += 1
            slot = int(state.blocks[slot, BLK_FREE_NEXT])
        assert count == state.quick_count[index]
    assert sorted(parked) == np.flatnonzero(state.blocks[:, BLK_STATE] == BLOCK_QUICK).tolist()


def written_and_freed(device, size, stream):
    """Allocate `size` bytes on `stream`, let a kernel there write them, free them on `stream`;
    returns their offset (to see where a later request lands)."""
    handle = device.malloc(size, stream=stream)
    device.launch(stream, writes=[handle])
    offset = device.location(handle)[1]
    device.free(handle, stream=stream)
    return offset


def blocks_of(device, placement="hbm"):
    """[(offset, size, state)] of every block of the placement, in address order."""
    result = []
    for segment in device.snapshot():
        if segment["placement"] == placement:
            result.extend((b["offset"], b["size"], b["state"]) for b in segment["blocks"])
    return sorted(result)


def block_size(device, handle):
    """Bytes of the block `handle` occupies (its rounded size), from the snapshot."""
    return next(b["size"] for s in device.snapshot() for b in s["blocks"] if b["handle"] == handle)
