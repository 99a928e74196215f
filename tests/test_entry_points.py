"""Compiled entry points (`rtsoa._jit.entry_point`) unbox without checking types: every call
site checks them where its arguments are built, so a wrong type is a TypeError (or the
device's InvalidArgument), never memory read as another type."""

import numpy as np
import pytest

from rtsoa import load_graph
from rtsoa._jit import EntryCache, checked_entry_point, jit
from rtsoa.device import Device, InvalidArgument
from rtsoa.executors.base import prepare_executor


@jit(cache=False)
def _total(owner, values):
    return owner[0] + values.sum()


def test_entry_cache_refuses_an_argument_of_another_dtype():
    owner = np.ones(1, dtype=np.int64)
    calls = EntryCache()
    values = np.arange(4, dtype=np.int64)
    assert calls.entry((owner,), "k", _total, (owner, values))(owner, values) == 7
    with pytest.raises(TypeError, match="argument 0 has another type"):
        calls.entry((owner,), "k", _total, (owner, values.astype(np.float32)))
    with pytest.raises(TypeError):
        calls.entry((owner,), "k", _total, (owner, values[::2]))  # not contiguous
    replaced = np.ones(1, dtype=np.int64)  # a new owner: a new entry, typed afresh
    assert calls.entry((replaced,), "k", _total, (replaced, values))(replaced, values) == 7


def test_checked_entry_point_refuses_another_dtype_on_every_call():
    owner = np.ones(1, dtype=np.int64)
    values = np.arange(4, dtype=np.int64)
    entry = checked_entry_point(_total, (owner, values))
    assert entry(owner, values) == 7
    with pytest.raises(TypeError, match="_total"):
        entry(owner, values.astype(np.float64))
    with pytest.raises(TypeError):
        entry(owner.astype(np.int32), values)


def test_the_device_site_refuses_a_float_before_its_entry():
    device = Device(hbm_bytes=1 << 20)
    with pytest.raises(InvalidArgument):
        device.malloc(np.float64(64.0))
    with pytest.raises(InvalidArgument):
        device.malloc(64, stream=np.float32(0.0))


def _executor():
    from pathlib import Path

    graph = load_graph(Path(__file__).parents[1] / "datasets" / "random-10k.rtsoa")
    return prepare_executor(graph, "sequential")


def test_the_executor_sites_refuse_a_replaced_array_of_another_dtype():
    executor = _executor()
    executor.run()
    record = executor.record()
    executor._execute(record)
    executor._record = record.astype(np.float64)  # the loop's entry was made for int64
    with pytest.raises(TypeError, match="another type"):
        executor._execute(executor._record)
    if executor._leak_values.shape[0]:
        executor._leak_values = executor._leak_values.astype(np.float32)
        with pytest.raises(TypeError):
            executor._reclaim_leaks()
