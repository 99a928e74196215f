"""Reserved memory on executor runs of lowered graphs stays bounded by live memory.

An executor run never synchronises the host, so wholly free cached segments cannot be released
to the arena (their uses are not known complete); the allocator must reuse them stream-ordered
(merge adjacent ones, cut them to size) instead of carving fresh arena memory next to them.
"""

import pytest

from rtsoa.executors import prepare_executor
from rtsoa.generators import generate


def reserved_over_requested(nodes, streams):
    graph = generate("lowered", nodes, seed=1, streams=streams)
    ex = prepare_executor(graph, "sequential")
    ex.run()
    device = ex.device
    device.synchronize()
    assert device.hazard_count == 0, device.hazards()[:3]
    hbm = device.stats()["hbm"]
    assert hbm["allocated_bytes.current"] == 0
    return hbm["reserved_bytes.peak"] / hbm["requested_bytes.peak"]


@pytest.mark.parametrize("streams", [1, 2])
def test_lowered_run_reserved_peak_stays_close_to_requested_peak(streams):
    short = reserved_over_requested(4000, streams)
    long = reserved_over_requested(16000, streams)
    assert short <= 1.35, short
    assert long <= 1.35, long
    assert long <= short * 1.1, (short, long)  # no growth with run length
