"""Reserved memory on executor runs of lowered graphs stays bounded by live memory.

An executor run never synchronises the host, so wholly free cached segments cannot be released
to the arena (their uses are not known complete); the allocator must reuse them stream-ordered
(merge adjacent ones, cut them to size) instead of carving fresh arena memory next to them.

The ratio varies a lot from graph to graph (1.1-1.6 over seeds: the allocator's choices are
chaotic, one different early choice changes the whole run), so the bounds are over several
seeds. Seed 2 at 16k nodes on one stream used to reach 2.48: merged free segments kept the
small pool, and one small request then pinned a 40 MiB span for small blocks only.
"""

import numpy as np
import pytest

from rtsoa.testing.workloads import lowered_reserved_over_requested as reserved_over_requested

SEEDS = (1, 2, 3, 4, 5, 6)


@pytest.mark.parametrize("streams", [1, 2])
def test_lowered_run_reserved_peak_stays_close_to_requested_peak(streams):
    short = [reserved_over_requested(4000, streams, seed) for seed in SEEDS]
    long = [reserved_over_requested(16000, streams, seed) for seed in SEEDS]
    assert max(short) <= 1.7, short
    assert max(long) <= 1.7, long
    assert np.mean(long) <= np.mean(short) * 1.1, (short, long)  # no growth with run length
