"""Reruns that keep the shapes (`rtsoa/runtime/kept.py`): a run whose inputs have the shapes of
the previous successful run skips Main's shape inference, when every shape of Main follows from
the input shapes alone. Outputs are judged by onnxruntime (rtol 1e-4 / atol 1e-5, float32, as
tests/test_models.py) on every run, kept or full.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper
from test_models_control_flow import if_model

from rtsoa.executors import KernelError, Profiler
from rtsoa.kernels.abi import SHAPE_DIMS
from rtsoa.kernels.checksum import expected_checksum
from rtsoa.kernels.compute import STATUS_SHAPE_CHANGED
from rtsoa.lowering import lower
from rtsoa.runtime import load_model
from rtsoa.runtime.kept_shapes import kept_shapes_graph
from rtsoa.testing.models import FLOAT, mlp, model, run_onnxruntime

RTOL, ATOL = 1e-4, 1e-5


def batch(rows, seed):
    return {"x": np.random.default_rng(seed).standard_normal((rows, 16)).astype(np.float32)}


@pytest.fixture(scope="module")
def mlp_proto():
    return mlp(seed=21, layers=6)


def test_reruns_at_the_same_shapes_keep_them_and_agree_with_onnxruntime(mlp_proto):
    graph = lower(mlp_proto)
    assert kept_shapes_graph(graph) is not None
    with load_model(graph) as executor:
        kept = []
        for index, rows in enumerate([2, 2, 2, 5, 5, 2, 1, 1, 5]):
            inputs = batch(rows, index)
            before = executor.kept_runs
            got = executor.execute_sync(inputs)["y"]
            kept.append(executor.kept_runs - before)
            want = run_onnxruntime(mlp_proto, inputs)["y"]
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
        assert kept == [0, 1, 1, 0, 1, 0, 0, 1, 0]


def test_the_kept_graph_folds_the_same_checksum(mlp_proto):
    graph = lower(mlp_proto)
    kept = kept_shapes_graph(graph)
    assert "OpInferShape" not in kept.kernel_names and "OpInferShapeKept" in kept.kernel_names
    nodes = graph.nodes_of()
    assert expected_checksum(kept, nodes) == expected_checksum(graph, nodes)


def reshape_by_input():
    """y = Reshape(x, shape): the shape is data the shape inference reads."""
    return model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [("x", FLOAT, [2, 6]), ("shape", TensorProto.INT64, [2])],
        [("y", FLOAT, None)],
    )


def test_models_whose_shapes_depend_on_data_or_branches_always_run_in_full():
    reshaping = reshape_by_input()
    graph = lower(reshaping)
    assert kept_shapes_graph(graph) is None
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    with load_model(graph) as executor:
        for shape in ([3, 4], [3, 4], [4, 3], [12, 1]):  # same input shapes, other data
            inputs = {"x": x, "shape": np.array(shape, dtype=np.int64)}
            got = executor.execute_sync(inputs)["y"]
            np.testing.assert_array_equal(got, x.reshape(shape))
        assert executor.kept_runs == 0
    branching = if_model()
    graph = lower(branching)
    assert kept_shapes_graph(graph) is None
    with load_model(graph) as executor:
        for sign in (1, 1, -1, -1):  # same shape, the other branch gives another shape
            inputs = {"x": np.full((2, 3), sign, dtype=np.float32)}
            got = executor.execute_sync(inputs)
            want = run_onnxruntime(branching, inputs)
            for name in ("y", "z"):
                np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL)
        assert executor.kept_runs == 0


def test_a_profiled_run_shows_every_shape_inference(mlp_proto):
    with load_model(lower(mlp_proto)) as executor:
        executor.execute_sync(batch(2, 0))
        profiler = Profiler()
        executor.execute_sync(batch(2, 1), subscriber=profiler)
        assert executor.kept_runs == 0
        assert profiler.by_kernel()["OpInferShape"][0] == 7  # 6 x MatMulBias (fused), Gemm
        executor.execute_sync(batch(2, 2))
        assert executor.kept_runs == 1


def test_after_a_failed_run_the_next_run_infers_again(mlp_proto):
    with load_model(lower(mlp_proto), hbm_bytes=1 << 20) as executor:
        executor.execute_sync(batch(2, 0))
        executor.execute_sync(batch(2, 1))
        assert executor.kept_runs == 1
        with pytest.raises(KernelError):
            executor.execute_sync(batch(6_000, 2))  # the input fits; Main runs out of memory
        inputs = batch(2, 3)
        got = executor.execute_sync(inputs)["y"]
        assert executor.kept_runs == 1  # a full run: the failed one may have left shapes
        np.testing.assert_allclose(
            got, run_onnxruntime(mlp_proto, inputs)["y"], rtol=RTOL, atol=ATOL
        )
        executor.execute_sync(batch(2, 4))
        assert executor.kept_runs == 2


def test_a_wrong_kept_shape_stops_at_the_launch_check(mlp_proto):
    """If a kept shape were wrong (here: written over between runs), the launch's check
    against the op's shape inference stops the run with a status; the next run is full."""
    graph = lower(mlp_proto)
    with load_model(graph) as executor:
        executor.execute_sync(batch(2, 0))
        infer = graph.kernel_names.index("OpInferShape")
        first = int(np.flatnonzero(graph.node_kernel == infer)[0])  # the first MatMul's
        value = int(graph.outputs(first)[0])
        executor.values.shapes[value, SHAPE_DIMS + 1] -= 1  # its last dim: the block holds it
        with pytest.raises(KernelError) as caught:
            executor.execute_sync(batch(2, 1))
        assert caught.value.status == STATUS_SHAPE_CHANGED
        inputs = batch(2, 2)
        got = executor.execute_sync(inputs)["y"]
        np.testing.assert_allclose(
            got, run_onnxruntime(mlp_proto, inputs)["y"], rtol=RTOL, atol=ATOL
        )
