"""What unloading gives back (`SharedWeights.release`, rtsoa/runtime/shared_weights.py): a
StreamExecutor key erased and created again, or an executor of a session without
`max_devices` unloaded, leaves no device behind (each held a 1 GiB arena and its tables until
the session closed, so erase and re-create piled them up until MemoryError); sessions with
`max_devices` keep their shared homes until `close()`."""

import numpy as np
import psutil
import pytest

from rtsoa.runtime import SharedWeights, StreamExecutor, load_executor
from rtsoa.testing.models import mlp

X = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)


@pytest.fixture(scope="module")
def proto():
    return mlp(seed=31)


def test_erase_and_create_again_keeps_one_device(proto):
    process = psutil.Process()
    with StreamExecutor(proto) as streams:
        want = streams.execute_sync("key", {"x": X})["y"]
        assert streams.erase("key")
        base = process.memory_info().rss
        for _ in range(40):
            np.testing.assert_array_equal(streams.execute_sync("key", {"x": X})["y"], want)
            assert len(streams.session.homes()) == 1
            assert streams.erase("key")
            assert streams.session.homes() == []
        grown = process.memory_info().rss - base
        assert streams.session.init_runs == 41  # one Init per device, counted after it went
    assert grown < 64 << 20, f"RSS grew by {grown / 2**20:.0f} MiB over 40 re-creations"


def test_unload_in_a_session_drops_the_executor_s_device(proto):
    with SharedWeights() as session:
        first = load_executor(proto, session=session)
        second = load_executor(first.graph, session=session)
        assert len(session.devices) == 2
        first.unload()
        assert session.devices == [second.device]
        assert second.execute_sync({"x": X})["y"].shape == (2, 4)  # its device still runs
        second.unload()
        assert session.devices == [] and session.init_runs == 2
        third = load_executor(first.graph, session=session)  # the session still places executors
        assert len(session.devices) == 1
        third.unload()


def test_a_session_with_max_devices_keeps_its_shared_homes(proto):
    with SharedWeights(max_devices=1) as session:
        first = load_executor(proto, session=session)
        device = first.device
        first.unload()
        assert session.devices == [device]  # weights stay for the next executor
        second = load_executor(first.graph, session=session)
        assert second.device is device and session.init_runs == 1
        second.unload()
