"""`check_state` rejects every kind of damaged `DeviceState` before jitted code runs on it,
naming the field; the device's errors, placements and defaults agree with the rest of rtsoa."""

import numpy as np
import pytest

from rtsoa.abi.status import STATUS_INVALID_STATE
from rtsoa.device import (
    Device,
    DeviceError,
    DeviceStateError,
    check_state,
    defaults,
    device_for_graph,
)
from rtsoa.device.layout import (
    CFG_HAZARDS,
    CFG_NUM_EVENTS,
    CFG_NUM_STREAMS,
    CNT_BLOCK_TOP,
    CNT_HAZARDS,
    CNT_SEGMENT_HIGH,
    CNT_SEGMENT_TOP,
    PCFG_ALIGNMENT,
    PCFG_ARENA_SIZE,
    PCFG_CAP,
    PCFG_QUICK_LIMIT,
    PCFG_UNIT_SHIFT,
    PLACEMENT_FOLLOWING,
    PLACEMENT_HBM,
    PLACEMENT_HOST,
    PLACEMENT_NAMES,
    PLACEMENT_P2P,
)
from rtsoa.device.state import create_state
from rtsoa.errors import RtsoaError
from rtsoa.graph.generators import generate
from rtsoa.graph.schema import Placement

STREAMS = 2
EVENTS = 4
BLOCKS = 32
SEGMENTS = 8
TRACE = 64


def small_device(**overrides):
    settings = dict(
        hbm_bytes=1 << 20,
        p2p_bytes=1 << 16,
        host_bytes=1 << 16,
        num_streams=STREAMS,
        num_events=EVENTS,
        max_blocks=BLOCKS,
        max_segments=SEGMENTS,
        trace_capacity=TRACE,
        hazard_capacity=8,
    )
    return Device(**{**settings, **overrides})


def build_state(**overrides):
    """`create_state` of `small_device`'s settings with some sizes replaced."""
    device = small_device()
    state = device.state
    arguments = dict(
        arena_sizes=[1 << 20, 1 << 16, 1 << 16],
        config=state.config,
        placement_config=state.placement_config,
        cost=state.cost,
        max_blocks=BLOCKS,
        max_segments=SEGMENTS,
        max_streams=STREAMS,
        max_events=EVENTS,
        trace_capacity=TRACE,
        hazard_capacity=8,
    )
    return create_state(**{**arguments, **overrides})


def read_only(array):
    array = array.copy()
    array.flags.writeable = False
    return array


def with_value(array, index, value):
    array = array.copy()
    array[index] = value
    return array


def placement_row(state, column, value):
    return with_value(state.placement_config, (PLACEMENT_HBM, column), value)


# (name, damage to a good state, field named, words of the message)
DAMAGE = [
    ("not an array", lambda s: s._replace(blocks=s.blocks.tolist()), "blocks", "numpy array"),
    ("wrong dtype", lambda s: s._replace(blocks=s.blocks.astype(np.int32)), "blocks", "dtype"),
    ("byte order", lambda s: s._replace(cost=s.cost.astype(">f8")), "cost", "dtype"),
    ("ndim", lambda s: s._replace(counters=s.counters[:, None]), "counters", "dimensions"),
    ("layout", lambda s: s._replace(blocks=np.asfortranarray(s.blocks)), "blocks", "contiguous"),
    ("read-only", lambda s: s._replace(counters=read_only(s.counters)), "counters", "read-only"),
    (
        "read-only arena",
        lambda s: s._replace(arena_hbm=read_only(s.arena_hbm)),
        "arena_hbm",
        "read",
    ),
    ("width", lambda s: s._replace(blocks=np.zeros((BLOCKS, 15), np.int64)), "blocks", "shape"),
    (
        "history streams",
        lambda s: s._replace(history=np.zeros((BLOCKS, STREAMS + 1, 4), np.int64)),
        "history",
        "max_streams=2",
    ),
    ("vc streams", lambda s: s._replace(host_vc=np.zeros(3, np.int64)), "host_vc", "max_streams"),
    (
        "event table",
        lambda s: s._replace(event_vc=np.zeros((EVENTS + 1, STREAMS), np.int64)),
        "event_vc",
        "max_events=4",
    ),
    (
        "trace extra rows",
        lambda s: s._replace(trace_extra=np.zeros((TRACE // 2, 4), np.int64)),
        "trace_extra",
        "trace_capacity=64",
    ),
    (
        "hazard times",
        lambda s: s._replace(hazard_time=np.zeros((9, 2), np.float64)),
        "hazard_time",
        "hazard_capacity",
    ),
    (
        "range table",
        lambda s: s._replace(range_size=np.zeros((3, SEGMENTS + 1), np.int64)),
        "range_size",
        "range_capacity=10",
    ),
    ("slot stack", lambda s: s._replace(block_slots=s.block_slots[:-1]), "block_slots", "shape"),
    ("config length", lambda s: s._replace(config=s.config[:-1]), "config", "shape"),
    ("bins", lambda s: s._replace(bin_head=s.bin_head[:-1]), "bin_head", "shape"),
    ("quick lists", lambda s: s._replace(quick_count=s.quick_count[:-1]), "quick_count", "shape"),
    ("arena size", lambda s: s._replace(arena_hbm=s.arena_hbm[:-1]), "arena_hbm", "hbm_bytes"),
    (
        "arena size in config",
        lambda s: s._replace(placement_config=placement_row(s, PCFG_ARENA_SIZE, 1 << 21)),
        "arena_hbm",
        "hbm_bytes=2097152",
    ),
    (
        "streams in use",
        lambda s: s._replace(config=with_value(s.config, CFG_NUM_STREAMS, STREAMS + 1)),
        "config",
        "streams in use",
    ),
    (
        "events in use",
        lambda s: s._replace(config=with_value(s.config, CFG_NUM_EVENTS, EVENTS + 1)),
        "config",
        "events in use",
    ),
    (
        "block stack top",
        lambda s: s._replace(counters=with_value(s.counters, CNT_BLOCK_TOP, BLOCKS + 1)),
        "counters",
        "CNT_BLOCK_TOP",
    ),
    (
        "segment stack top",
        lambda s: s._replace(counters=with_value(s.counters, CNT_SEGMENT_TOP, SEGMENTS + 1)),
        "counters",
        "CNT_SEGMENT_TOP",
    ),
    (
        "segment high mark",
        lambda s: s._replace(counters=with_value(s.counters, CNT_SEGMENT_HIGH, SEGMENTS + 1)),
        "counters",
        "CNT_SEGMENT_HIGH",
    ),
    (
        "negative counter",
        lambda s: s._replace(counters=with_value(s.counters, CNT_HAZARDS, -1)),
        "counters",
        "negative",
    ),
    (
        "free ranges",
        lambda s: s._replace(range_count=with_value(s.range_count, 0, SEGMENTS + 3)),
        "range_count",
        "free-range count",
    ),
    (
        "alignment",
        lambda s: s._replace(placement_config=placement_row(s, PCFG_ALIGNMENT, 384)),
        "placement_config",
        "not a power of two",
    ),
    (
        "unit shift",
        lambda s: s._replace(placement_config=placement_row(s, PCFG_UNIT_SHIFT, 10)),
        "placement_config",
        "unit shift",
    ),
    (
        "quick-list limit",
        lambda s: s._replace(placement_config=placement_row(s, PCFG_QUICK_LIMIT, 17 * 512)),
        "placement_config",
        "quick-list limit",
    ),
    (
        "cap",
        lambda s: s._replace(placement_config=placement_row(s, PCFG_CAP, (1 << 20) + 1)),
        "placement_config",
        "cap",
    ),
]


def test_a_fresh_state_passes():
    check_state(small_device().state)
    check_state(Device().state)


def test_tables_jitted_code_only_reads_may_be_read_only():
    state = small_device().state
    check_state(state._replace(config=read_only(state.config), cost=read_only(state.cost)))


@pytest.mark.parametrize(
    "damage, field, words", [d[1:] for d in DAMAGE], ids=[d[0] for d in DAMAGE]
)
def test_damaged_state_is_rejected_naming_the_field(damage, field, words):
    with pytest.raises(DeviceStateError, match=words) as raised:
        check_state(damage(small_device().state))
    assert raised.value.field == field
    assert f"field {field!r}" in str(raised.value)


def test_not_a_device_state():
    state = small_device().state
    with pytest.raises(DeviceStateError, match="a DeviceState expected") as raised:
        check_state(tuple(state))
    assert raised.value.field == "state"


@pytest.mark.parametrize(
    "sizes, field, words",
    [
        ({"trace_capacity": 48}, "trace", "not a power of two"),
        ({"max_streams": 64}, "stream_clock", "max_streams must be in 1..63"),
        ({"max_blocks": 0}, "blocks", "2\\*\\*24"),
        ({"max_segments": 0}, "segments", "at least one row"),
    ],
)
def test_create_state_checks_the_state_it_builds(sizes, field, words):
    with pytest.raises(DeviceStateError, match=words) as raised:
        build_state(**sizes)
    assert raised.value.field == field


def test_device_and_from_trace_reject_sizes_jitted_code_cannot_run_on(tmp_path):
    with pytest.raises(DeviceStateError, match="power of two"):
        small_device(trace_capacity=48)
    device = small_device()
    device.dump_trace(tmp_path / "dev.npz")
    arrays = dict(np.load(tmp_path / "dev.npz"))
    settings = str(arrays["settings"])
    assert '"trace_capacity": 64' in settings
    arrays["settings"] = np.array(settings.replace('"trace_capacity": 64', '"trace_capacity": 24'))
    np.savez(tmp_path / "dev.npz", **arrays)
    with pytest.raises(DeviceStateError, match="capacity 24") as raised:
        Device.from_trace(tmp_path / "dev.npz")
    assert raised.value.field == "trace"


def test_device_errors_are_rtsoa_errors_and_runtime_errors():
    assert issubclass(DeviceError, RtsoaError) and issubclass(DeviceError, RuntimeError)
    error = DeviceStateError("blocks", "wrong")
    assert isinstance(error, DeviceError) and error.status == STATUS_INVALID_STATE
    with pytest.raises(RtsoaError):
        small_device().free(12345)


def test_device_placements_are_the_graph_placements():
    assert (PLACEMENT_HBM, PLACEMENT_P2P, PLACEMENT_HOST, PLACEMENT_FOLLOWING) == (
        Placement.DEVICE_HBM,
        Placement.DEVICE_P2P,
        Placement.HOST,
        Placement.FOLLOWING,
    )
    for value in (PLACEMENT_HBM, PLACEMENT_P2P, PLACEMENT_HOST, PLACEMENT_FOLLOWING):
        assert type(value) is int  # jitted code freezes plain ints, not enum members
    assert len(PLACEMENT_NAMES) == len(Placement)


def test_device_for_graph_sizes_from_the_graph_and_takes_overrides():
    lowered = generate("lowered", 200, seed=1, streams=2)
    device = device_for_graph(lowered)
    assert device.num_streams == 2 and device.state.arena_hbm.shape[0] == defaults.HBM_BYTES
    assert device.state.blocks.shape[0] == defaults.MAX_BLOCKS
    chain = device_for_graph(generate("chain", 10, seed=0))
    assert chain.state.arena_hbm.shape[0] == defaults.TINY_DEVICE["hbm_bytes"]
    assert chain.num_streams == 1
    bigger = device_for_graph(lowered, hbm_bytes=1 << 28, hazards=None)
    assert bigger.state.arena_hbm.shape[0] == 1 << 28
    assert bigger.state.config[CFG_HAZARDS] == 1  # None keeps the default
