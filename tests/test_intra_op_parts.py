"""Intra-op parts (rtsoa/ops/parts.py): large convolutions and pools shared by the launching
thread and helper threads (`SessionOptions(intra_op_threads=n)`).

What must hold: every shared op gives onnxruntime's values within the model tests' tolerance;
pools and depthwise convs, whose parts run the same loops on disjoint planes, give the
one-thread bits exactly; GEMM-based convs agree with one thread within 1e-5 of the output's
largest magnitude (a part's GEMM is a slice of the whole one, which the BLAS may block
differently: float reassociation); a run's bits do not change from run to run. The pool's
helpers really compute (a test hook makes the caller leave them the first part), stop when the
session closes, and the process's BLAS thread count is what it was after a run.
"""

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper
from threadpoolctl import threadpool_info

import rtsoa
from rtsoa.errors import ModelStateError, SessionOptionsError
from rtsoa.executors import Subscriber
from rtsoa.executors.calibration import CALIBRATION_LIMIT
from rtsoa.lowering import lower
from rtsoa.ops.parts import AUTO_THREADS, PartsPool
from rtsoa.runtime.model import ModelExecutor
from rtsoa.runtime.resources import (
    CALIBRATION_RUNS,
    NO_POOL_MARGIN,
    ModelResourceError,
    PartsChoice,
)
from rtsoa.testing.models import FLOAT, model, run_onnxruntime
from rtsoa.testing.models import mlp as mlp_model
from tests.model_checks import ATOL, RTOL

RNG = np.random.default_rng(11)
REASSOCIATION = 1e-5  # of the output's largest magnitude: parts' GEMMs against the whole one


def _weights(cout, cin, k):
    return (RNG.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)


def _conv(name, x, w, pads, **attributes):
    return helper.make_node("Conv", [x, w, f"{w}_b"], [name], pads=[pads] * 4, **attributes)


def _convs():
    """One model with a shared conv of every kind `_conv_shared` has: im2col tiles (64 -> 64 on
    56 x 56, no Winograd), a strided stem from stride phases, 1 x 1 as a plain GEMM, depthwise,
    grouped, Winograd with a residual and Relu (FusedConv and WinogradConv), a full im2col on a
    7 x 7 plane, and the pools."""
    shapes = {
        "w_stem": (32, 3, 7),  # stride 2: phased
        "w_tile": (64, 32, 3),  # 56 x 56, 288 x 3136 floats: im2col row tiles
        "w_point": (64, 64, 1),  # 1 x 1: the input as the GEMM's matrix
        "w_depth": (64, 1, 3),  # depthwise
        "w_group": (64, 32, 3),  # two groups
        "w_wino": (64, 64, 3),  # Winograd (with the residual and Relu fused)
        "w_small": (96, 64, 3),  # 7 x 7, stride 4 from 28 x 28: a whole im2col
    }
    initializers = []
    for name, (cout, cin, k) in shapes.items():
        initializers.append((name, _weights(cout, cin, k)))
        initializers.append((f"{name}_b", RNG.standard_normal(cout).astype(np.float32)))
    nodes = [
        _conv("stem", "x", "w_stem", 3, strides=[2, 2]),  # 32 x 56 x 56
        _conv("tile", "stem", "w_tile", 1),  # 64 x 56 x 56
        _conv("point", "tile", "w_point", 0),
        _conv("depth", "point", "w_depth", 1, group=64),
        _conv("grouped", "depth", "w_group", 1, group=2),
        _conv("wino", "grouped", "w_wino", 1),
        helper.make_node("Add", ["wino", "grouped"], ["sum"]),
        helper.make_node("Relu", ["sum"], ["relu"]),
        helper.make_node("MaxPool", ["relu"], ["max"], kernel_shape=[3, 3], strides=[2, 2]),
        helper.make_node(
            "AveragePool", ["max"], ["avg"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),  # 64 x 27 x 27
        _conv("y", "avg", "w_small", 1, strides=[4, 4]),  # 96 x 7 x 7
    ]
    return model(nodes, [("x", FLOAT, [2, 3, 112, 112])], [("y", FLOAT, None)], initializers)


@pytest.fixture(scope="module")
def convs():
    proto = _convs()
    inputs = {"x": RNG.standard_normal((2, 3, 112, 112)).astype(np.float32)}
    return proto, lower(proto), inputs


def _session(graph, threads, leave=0):
    session = rtsoa.InferenceSession(graph, rtsoa.SessionOptions(intra_op_threads=threads))
    if leave:
        session.parts_pool.leave_to_helpers(leave)
    return session


def test_shared_convs_and_pools_agree_with_one_thread_and_onnxruntime(convs):
    proto, graph, inputs = convs
    one = _session(graph, 1)
    two = _session(graph, 2, leave=1)  # helpers take each task's first part
    assert one.parts_pool is None
    want = one.run(None, inputs)[0]
    first = two.run(None, inputs)[0]
    pool = two.parts_pool
    assert pool.shared >= 10 and pool.helped >= pool.shared, (pool.shared, pool.helped)
    again = two.run(None, inputs)[0]
    np.testing.assert_array_equal(first, again)  # the same parts every run
    scale = np.abs(want).max()
    assert np.abs(first - want).max() <= REASSOCIATION * scale
    oracle = run_onnxruntime(proto, inputs)["y"]
    np.testing.assert_allclose(first, oracle, rtol=RTOL, atol=ATOL * scale)
    one.close()
    two.close()


def _narrow_model(element, dtype):
    """GEMMs of few output channels, split by columns (`P_COLUMNS`): a 1 x 1 conv to 8
    channels fused with a residual and Relu on 112 x 112, and after a max pool, a whole
    im2col (3 x 3, dilation 2: no stride phases) to 12 channels on 52 x 52."""
    shapes = {"w_narrow": (8, 32, 1), "w_side": (8, 32, 1), "w_dilated": (12, 8, 3)}
    initializers = []
    for name, (cout, cin, k) in shapes.items():
        initializers.append((name, _weights(cout, cin, k).astype(dtype)))
        initializers.append((f"{name}_b", RNG.standard_normal(cout).astype(dtype)))
    nodes = [
        _conv("narrow", "x", "w_narrow", 0),
        _conv("side", "x", "w_side", 0),
        helper.make_node("Add", ["narrow", "side"], ["sum"]),
        helper.make_node("Relu", ["sum"], ["relu"]),
        helper.make_node("MaxPool", ["relu"], ["half"], kernel_shape=[2, 2], strides=[2, 2]),
        _conv("y", "half", "w_dilated", 0, dilations=[2, 2]),
    ]
    return model(nodes, [("x", element, [1, 32, 112, 112])], [("y", element, None)], initializers)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_narrow_gemms_split_by_columns_agree_with_one_thread(dtype):
    element = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    proto = _narrow_model(element, dtype)
    graph = lower(proto)
    x = {"x": RNG.standard_normal((1, 32, 112, 112)).astype(dtype)}
    one = _session(graph, 1)
    two = _session(graph, 2, leave=1)  # helpers take each task's first part
    want = one.run(None, x)[0]
    got = two.run(None, x)[0]
    pool = two.parts_pool
    # tasks: the two 1 x 1 convs' columns, the dilated conv's im2col and columns (the pool is
    # below its grain; with output channels as parts, the GEMMs of 8 and 12 would be whole)
    assert pool.shared == 4 and pool.helped >= 4, (pool.shared, pool.helped)
    np.testing.assert_array_equal(two.run(None, x)[0], got)
    scale = np.abs(want).max()
    tolerance = REASSOCIATION if dtype == np.float32 else 1e-12
    assert np.abs(got - want).max() <= tolerance * scale
    if dtype == np.float32:  # onnxruntime has no float64 Conv (one thread is judged elsewhere)
        oracle = run_onnxruntime(proto, x)["y"]
        np.testing.assert_allclose(got, oracle, rtol=RTOL, atol=ATOL * scale)
    one.close()
    two.close()


def _pool_model():
    nodes = [
        # padded: `_max_pool_3x3`'s planes (the convs' unpadded one takes the phases)
        helper.make_node(
            "MaxPool", ["x"], ["m"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
        ),
        helper.make_node("AveragePool", ["m"], ["a"], kernel_shape=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node(
            "Conv", ["a", "w"], ["y"], group=48, pads=[1, 1, 1, 1]
        ),  # depthwise, no bias
    ]
    w = _weights(48, 1, 3)
    return model(nodes, [("x", FLOAT, [1, 48, "h", "w"])], [("y", FLOAT, None)], [("w", w)])


def test_pools_and_depthwise_parts_keep_the_one_thread_bits():
    graph = lower(_pool_model())
    x = RNG.standard_normal((1, 48, 64, 64)).astype(np.float32)
    x[0, 5, 10, 10] = np.nan  # a NaN reaches its windows, whichever thread computes them
    x[0, 40, 3, 3] = -0.0
    one = _session(graph, 1)
    two = _session(graph, 2, leave=1)
    want = one.run(None, {"x": x})[0]
    got = two.run(None, {"x": x})[0]
    assert two.parts_pool.helped >= 3  # max pool, average pool, depthwise
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got).tolist() == np.signbit(want).tolist()
    one.close()
    two.close()


def test_batch_normalizations_share_channels_and_keep_the_one_thread_bits():
    """A BatchNormalization that no conv precedes (nothing to fold it into) stays an op, fused
    with its Relu: its channels are parts, each computed as the whole op computes it."""
    channels = 64
    rng = np.random.default_rng(5)
    parameters = [
        ("scale", rng.standard_normal(channels).astype(np.float32)),
        ("bias", rng.standard_normal(channels).astype(np.float32)),
        ("mean", rng.standard_normal(channels).astype(np.float32)),
        ("var", rng.uniform(0.5, 2.0, channels).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("BatchNormalization", ["r", "scale", "bias", "mean", "var"], ["y"]),
    ]
    proto = model(nodes, [("x", FLOAT, [1, channels, 64, 64])], [("y", FLOAT, None)], parameters)
    graph = lower(proto)
    x = rng.standard_normal((1, channels, 64, 64)).astype(np.float32)
    x[0, 7, 1, 2] = np.nan
    one = _session(graph, 1)
    two = _session(graph, 2, leave=1)
    want = one.run(None, {"x": x})[0]
    got = two.run(None, {"x": x})[0]
    assert two.parts_pool.shared == 2 and two.parts_pool.helped >= 2  # both ops shared
    np.testing.assert_array_equal(got, want)
    oracle = run_onnxruntime(proto, {"x": x})["y"]
    np.testing.assert_allclose(got, oracle, rtol=RTOL, atol=ATOL)
    one.close()
    two.close()


def test_small_ops_run_whole():
    """Below the grains nothing is shared: no task, no helper work."""
    graph = lower(_pool_model())
    session = _session(graph, 2)
    session.run(None, {"x": np.ones((1, 48, 4, 4), np.float32)})
    assert session.parts_pool.shared == 0
    session.close()


def test_the_blas_thread_count_is_restored_after_a_run(convs):
    _proto, graph, inputs = convs
    session = _session(graph, 2)
    session.run(None, inputs)  # loads the BLAS
    before = [(info["filepath"], info["num_threads"]) for info in threadpool_info()]
    session.run(None, inputs)
    after = [(info["filepath"], info["num_threads"]) for info in threadpool_info()]
    assert after == before
    session.close()


def _helpers():
    return [thread for thread in threading.enumerate() if thread.name == "rtsoa-parts"]


def test_closing_stops_the_helpers_and_ops_then_run_whole(convs):
    _proto, graph, inputs = convs
    before = len(_helpers())
    executor = ModelExecutor(graph, intra_op_threads=3).load()
    pool = executor.parts_pool
    assert pool.threads == 3 and len(_helpers()) == before + 2
    executor.execute_sync(inputs)
    executor.unload()
    assert pool.closed and len(_helpers()) == before and pool.address == 0
    assert all(e.parts_pool is None for e in executor.executors)
    pool.close()  # twice: nothing


def test_a_pool_without_helpers_and_its_arguments():
    pool = PartsPool(1)
    assert pool.address == 0 and pool.threads == 1
    with pool.running():  # nothing to mark
        pass
    pool.close()
    for bad in (0, 257, True, 2.0, "2"):
        with pytest.raises((TypeError, ValueError)):
            PartsPool(bad)


def test_helpers_claim_nothing_while_a_task_is_being_written():
    """A caller writes a task's words (PARTS first) before it publishes the task in CLAIM. A
    new pool's zero CLAIM word once read as generation 0 open at part 0: a helper that saw
    PARTS then claimed part 0 of the first task from its half-written words (an op failed with
    status 2010, its operand counts not yet written; with an entry address of 0, as here, the
    process crashes). Run in a child process for that reason."""
    code = textwrap.dedent(
        """
        import time
        from rtsoa.ops.parts import CLAIM, CLOSED, HELPED, PARTS, PartsPool
        pool = PartsPool(3)
        with pool.running():  # helpers poll
            pool.block[PARTS] = 2  # a task half-written: no entry address, no arguments yet
            time.sleep(0.3)
            print(pool.block[CLAIM] & 0xFFFFFFFF == CLOSED, pool.helped)
        pool.close()
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "0"], done.stdout


@pytest.mark.parametrize("bad", [0, -1, 1000, True, 1.5, "2"])
def test_bad_intra_op_thread_counts_are_refused_by_name(bad, convs):
    with pytest.raises(SessionOptionsError, match="intra_op_threads"):
        rtsoa.SessionOptions(intra_op_threads=bad)
    with pytest.raises(ModelResourceError, match="intra_op_threads"):
        ModelExecutor(convs[1], intra_op_threads=bad)


def test_two_threads_running_two_pooled_sessions_at_once(convs):
    """Each session's pool is its own; two runs at once on two threads keep their bits."""
    _proto, graph, inputs = convs
    sessions = [_session(graph, 2) for _ in range(2)]
    want = sessions[0].run(None, inputs)[0]
    results, errors = [], []

    def work(session):
        try:
            for _ in range(3):
                results.append(session.run(None, inputs)[0])
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(s,)) for s in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 6
    for got in results:
        np.testing.assert_array_equal(got, want)
    for session in sessions:
        session.close()


def test_the_multithread_executor_launches_share_one_pool(convs):
    """Two executor workers launching ops at once: one owns the pool, the other computes the
    same parts of its op on its own thread, so the bits are the sequential executor's with a
    pool of the same size, whoever computed what; the hazard checker stays at 0."""
    _proto, graph, inputs = convs
    sequential = _session(graph, 2)
    want = sequential.run(None, inputs)[0]
    options = rtsoa.SessionOptions(executor="multithread", threads=2, intra_op_threads=2)
    session = rtsoa.InferenceSession(graph, options)
    for _ in range(3):
        np.testing.assert_array_equal(session.run(None, inputs)[0], want)
    assert session.device.hazard_count == 0
    session.close()
    sequential.close()


def test_a_model_with_convolutions_gets_a_pool_by_default(convs):
    _proto, graph, inputs = convs
    session = rtsoa.InferenceSession(graph)
    cores = len(os.sched_getaffinity(0))
    assert session.intra_op_threads == min(cores, AUTO_THREADS)
    assert (session.parts_pool is not None) == (cores > 1)
    session.close()
    mlp = rtsoa.InferenceSession(lower(mlp_model()))
    assert mlp.intra_op_threads == 1 and mlp.parts_pool is None  # no op to share
    mlp.close()


def _calibrated(session, fake):
    """`session`'s calibration timings replaced by `fake` ({threads: seconds})."""
    choice = session.parts_choice
    timed = choice.timed
    seen = []

    def fake_timed(threads, seconds):
        seen.append(threads)
        timed(threads, fake[threads])

    choice.timed = fake_timed
    return seen


@pytest.mark.parametrize("faster", [2, 1])
def test_the_automatic_pool_is_kept_only_where_it_is_faster(convs, monkeypatch, faster):
    """intra_op_threads left to rtsoa: after a warm-up run, two timed runs with the pool and
    two without alternate, and the faster is kept (the timings are the test's, so each outcome
    is reached on any machine). Without the pool the runs have the one-thread bits and its
    helpers stop."""
    monkeypatch.setattr("rtsoa.ops.parts.os.sched_getaffinity", lambda pid: {0, 1})
    _proto, graph, inputs = convs
    one = _session(graph, 1)
    want = one.run(None, inputs)[0]
    one.close()
    before = len(_helpers())
    session = rtsoa.InferenceSession(graph)
    assert session.intra_op_threads == 2 and session.parts_choice.auto
    pool = session.parts_pool
    seen = _calibrated(session, {2: 1.0, 1: 1.5} if faster == 2 else {2: 1.5, 1: 1.0})
    shared = []
    for _ in range(5):
        got = session.run(None, inputs)[0]
        shared.append(pool.shared)
        assert np.abs(got - want).max() <= REASSOCIATION * np.abs(want).max()
    assert seen == [2, 1, 2, 1]  # the first run untimed, then alternating
    grew = [b - a for a, b in zip(shared, shared[1:], strict=False)]  # runs 2 .. 5
    assert grew[1::2] == [0, 0] and min(grew[0::2]) > 0  # no pool in runs 3 and 5
    assert session.parts_choice.chosen == faster
    after = session.run(None, inputs)[0]
    if faster == 2:
        assert session.parts_pool is pool and pool.shared > shared[-1]
    else:
        np.testing.assert_array_equal(after, want)  # ops whole: the one-thread bits
        assert session.parts_pool is None and pool.closed and len(_helpers()) == before
        assert all(e.parts_pool is None for e in session.executors)
    session.close()


def test_the_calibration_times_plain_runs_at_the_first_shapes_only():
    choice = PartsChoice(2, auto=True)
    first, other = ((2, 3),), ((4, 3),)
    assert choice.next_run(first, plain=True) == (2, False)  # the warm-up
    assert choice.next_run(other, plain=True) == (2, False)  # other shapes: not timed
    assert choice.next_run(first, plain=False) == (2, False)  # subscribers: not timed
    for threads, seconds in ((2, 3.0), (1, 2.0), (2, 2.5), (1, 9.0)):
        assert choice.next_run(first, plain=True) == (threads, True)
        assert choice.chosen is None
        choice.timed(threads, seconds)
    assert choice.chosen == 1  # the fastest run of each decides: 2.0 against 2.5
    assert choice.next_run(first, plain=True) == (1, False)


@pytest.mark.parametrize(("no_pool", "chosen"), [(0.96, 2), (0.95, 1)])
def test_a_near_tie_keeps_the_pool(no_pool, chosen):
    """No pool wins only by NO_POOL_MARGIN (5 %): within it, the timing noise of a tie keeps
    the pool."""
    choice = PartsChoice(2, auto=True)
    choice.next_run(((1,),), plain=True)
    for threads, seconds in ((2, 1.0), (1, no_pool), (2, 1.2), (1, 1.3)):
        assert choice.next_run(((1,),), plain=True) == (threads, True)
        choice.timed(threads, seconds)
    assert NO_POOL_MARGIN == 0.95 and choice.chosen == chosen


@pytest.mark.parametrize(("threads", "auto"), [(2, False), (1, True), (1, False)])
def test_a_chosen_thread_count_is_not_measured(threads, auto):
    choice = PartsChoice(threads, auto=auto)
    assert not choice.auto and choice.chosen == threads
    assert choice.next_run(((1,),), plain=True) == (threads, False)


def test_calibrate_runs_until_the_pool_is_chosen(convs, monkeypatch):
    """`calibrate` makes the warm-up and the four timed runs, no more: runs timed afterwards
    (a benchmark's, `rtsoa run --repeat`'s) count no trial."""
    monkeypatch.setattr("rtsoa.ops.parts.os.sched_getaffinity", lambda pid: {0, 1})
    _proto, graph, inputs = convs
    session = rtsoa.InferenceSession(graph)
    seen = _calibrated(session, {2: 1.0, 1: 1.5})
    assert session.calibrating and session.parts_choice.calibration_runs == 0
    assert session.calibrate(inputs) == 1 + 2 * CALIBRATION_RUNS
    assert seen == [2, 1, 2, 1] and session.parts_choice.chosen == 2
    assert not session.calibrating and session.calibrate(inputs) == 0
    session.close()


def test_calibrate_stops_when_its_runs_are_not_timed(convs, monkeypatch):
    """Runs a subscriber watches are never timed: `calibrate` gives up after the run that did
    not count instead of running to its limit, and calibrates once the subscriber is gone."""
    monkeypatch.setattr("rtsoa.ops.parts.os.sched_getaffinity", lambda pid: {0, 1})
    _proto, graph, inputs = convs
    session = rtsoa.InferenceSession(graph)
    watcher = session.add_subscriber(Subscriber())
    assert session.calibrate(inputs) == 1 and session.calibrating
    session.remove_subscriber(watcher)
    assert session.calibrate(inputs) == 1 + 2 * CALIBRATION_RUNS and not session.calibrating
    session.close()


def test_a_session_with_its_threads_given_has_nothing_to_calibrate(convs):
    _proto, graph, inputs = convs
    session = _session(graph, 2)
    assert not session.calibrating and session.calibrate(inputs) == 0
    session.close()


def test_calibrate_needs_a_loaded_model(convs, monkeypatch):
    monkeypatch.setattr("rtsoa.ops.parts.os.sched_getaffinity", lambda pid: {0, 1})
    _proto, graph, inputs = convs
    model = ModelExecutor(graph)
    assert model.calibrating  # the pool is still to be measured, once loaded
    with pytest.raises(ModelStateError, match="calibrate on a model that is created"):
        model.calibrate(inputs)
    model.load()
    model.unload()
    with pytest.raises(ModelStateError, match="call load"):
        model.calibrate(inputs)


def test_calibrate_settles_the_pool_and_the_multithread_plans_together(convs, monkeypatch):
    """A multithread model with its pool left to rtsoa times both choices in the same runs
    (the plans those of the executor its reruns keep the shapes with):
    `calibrate` runs until neither is left, and the answer stays within reassociation."""
    monkeypatch.setattr("rtsoa.ops.parts.os.sched_getaffinity", lambda pid: {0, 1})
    _proto, graph, inputs = convs
    one = _session(graph, 1)
    want = one.run(None, inputs)[0]
    one.close()
    session = rtsoa.InferenceSession(graph, rtsoa.SessionOptions(executor="multithread"))
    assert session.parts_choice.calibrating and session.main.calibrating
    runs = session.calibrate(inputs)
    reruns = session.executors[-1]  # the executor keeping the first run's shapes
    plans = len(reruns.plans)
    assert max(1 + 2 * CALIBRATION_RUNS, plans * CALIBRATION_RUNS) <= runs <= CALIBRATION_LIMIT
    assert not session.calibrating and reruns.calibration_runs == plans * CALIBRATION_RUNS
    got = session.run(None, inputs)[0]
    assert np.abs(got - want).max() <= REASSOCIATION * np.abs(want).max()
    session.close()
