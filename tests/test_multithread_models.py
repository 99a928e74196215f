"""A lowered CNN on the multithread executor: the same bits as the sequential executor for
every thread count and either sharing of the host work, with no hazard.

No kernel is split across threads, so whichever worker runs a node computes the same bits:
the outputs compare exactly, with no float tolerance. Under `sharing="auto"` the first runs
of each executor alternate the two plans ("classes", "host"), so five runs cover both.
"""

import numpy as np
import pytest

from rtsoa.executors import multithread
from rtsoa.lowering import lower
from rtsoa.runtime import load_model
from rtsoa.testing.cnn import inception

RUNS = 1 + 2 * 2 * multithread.CALIBRATION_RUNS  # Main once, then the kept-shapes Main


@pytest.fixture(scope="module")
def inception_case():
    """(lowered Inception-v1, small: four parallel branches per block; input; sequential y)."""
    graph = lower(inception(width=0.125, size=32, classes=10, blocks=3))
    x = np.random.default_rng(3).standard_normal((2, 3, 32, 32)).astype(np.float32)
    with load_model(graph, executor="sequential") as model:
        want = model.execute_sync({"x": x})["y"]
    return graph, x, want


@pytest.mark.parametrize("threads", [2, 3, 4, 8])
def test_inception_gives_the_sequential_bits_on_any_thread_count(inception_case, threads):
    graph, x, want = inception_case
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(multithread, "default_threads", lambda: threads)
        model = load_model(graph, executor="multithread")
    assert model._main.threads == threads  # prepared at load, with the patched default
    with model:
        for _ in range(RUNS):
            got = model.execute_sync({"x": x})["y"]
            assert got.dtype == want.dtype and np.array_equal(got, want)
        assert model.device.hazard_count == 0
