"""Real models end to end: ONNX -> lowering -> ModelExecutor, judged by onnxruntime.

Tolerances: float32 outputs within rtol 1e-4, atol 1e-5 of onnxruntime (both sum in float32,
in different orders).
"""

import re

import numpy as np
import pytest
from onnx import TensorProto, helper

import rtsoa
from rtsoa.errors import LoweringError, ModelInputError
from rtsoa.executors import KernelError
from rtsoa.graph.io import load_graph, save_graph
from rtsoa.lowering import lower
from rtsoa.runtime import load_model
from rtsoa.runtime.model import ModelStateError
from rtsoa.testing.models import FLOAT, mlp, model, run_onnxruntime

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def mlp_model():
    proto = mlp()
    graph = lower(proto)
    return proto, graph


def test_mlp_matches_onnxruntime_at_several_batch_sizes_without_relowering(mlp_model):
    proto, graph = mlp_model
    rng = np.random.default_rng(1)
    with load_model(graph) as executor:
        for batch in (1, 3, 17):
            x = rng.standard_normal((batch, 16)).astype(np.float32)
            got = executor.execute_sync({"x": x})
            want = run_onnxruntime(proto, {"x": x})
            assert got["y"].shape == (batch, 4)
            np.testing.assert_allclose(got["y"], want["y"], rtol=RTOL, atol=ATOL)
        assert executor.iterations == 3
        assert executor.device.hazard_count == 0
    assert rtsoa.is_dynamic(graph)


def test_lowered_model_saves_and_reloads(mlp_model, tmp_path):
    proto, graph = mlp_model
    path = save_graph(graph, tmp_path / "mlp.rtsoa")
    loaded = load_graph(path)
    x = np.ones((2, 16), dtype=np.float32)
    with load_model(loaded) as executor:
        got = executor.execute_sync({"x": x})
    np.testing.assert_allclose(got["y"], run_onnxruntime(proto, {"x": x})["y"], RTOL, ATOL)
    description = loaded.io_description()
    assert [entry[0] for entry in description["inputs"]] == ["x"]
    assert description["inputs"][0][3] == ("batch", 16)


def test_every_block_is_freed_after_execute(mlp_model):
    _, graph = mlp_model
    with load_model(graph) as executor:
        before = executor.device.stats()
        executor.execute_sync({"x": np.ones((4, 16), np.float32)})
        after = executor.device.stats()
    assert after["hbm"]["allocation.current"] == before["hbm"]["allocation.current"] > 0
    assert after["hbm"]["allocation.allocated"] > before["hbm"]["allocation.allocated"]


def test_input_errors_name_the_input(mlp_model):
    _, graph = mlp_model
    with load_model(graph) as executor:
        good = np.ones((2, 16), np.float32)
        cases = [
            ({}, "missing input(s) ['x']"),
            ({"x": good, "z": good}, "unexpected input(s) ['z']"),
            ({"x": good.astype(np.float64)}, "input 'x' has dtype float64"),
            ({"x": good.astype(np.float16)}, "input 'x' has dtype float16"),  # casts safely
            ({"x": good[0]}, "input 'x' has rank 1, the model takes 2"),
            ({"x": good[..., None]}, "input 'x' has rank 3, the model takes 2"),
            ({"x": np.ones((2, 15), np.float32)}, "input 'x' has shape (2, 15)"),
            ({"x": np.ones((2, 17), np.float32)}, "input 'x' has shape (2, 17)"),
        ]
        for inputs, message in cases:
            with pytest.raises(ModelInputError, match=re.escape(message)):
                executor.execute_sync(inputs)
        # the model still runs after refusing bad inputs
        assert executor.execute_sync({"x": good})["y"].shape == (2, 4)


def test_symbolic_dims_must_agree_across_inputs():
    proto = model(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        [("a", FLOAT, ["n", 3]), ("b", FLOAT, ["n", 3])],
        [("c", FLOAT, ["n", 3])],
    )
    with load_model(proto) as executor:
        a = np.ones((2, 3), np.float32)
        with pytest.raises(ModelInputError, match="symbol 'n' is 2 in input 'a'"):
            executor.execute_sync({"a": a, "b": np.ones((4, 3), np.float32)})
        with pytest.raises(ModelInputError, match="symbol 'n' is 4 in input 'a'"):
            executor.execute_sync({"a": np.ones((4, 3), np.float32), "b": a})
        np.testing.assert_array_equal(executor.execute_sync({"a": a, "b": a})["c"], 2 * a)


def test_lifecycle_out_of_order_is_refused(mlp_model):
    _, graph = mlp_model
    executor = load_model(graph, load=False)
    x = {"x": np.ones((1, 16), np.float32)}
    with pytest.raises(ModelStateError, match="call load"):
        executor.execute_sync(x)
    with pytest.raises(ModelStateError, match="unload"):
        executor.unload()
    executor.load()
    with pytest.raises(ModelStateError, match="load"):
        executor.load()
    executor.unload()
    with pytest.raises(ModelStateError, match="unloaded"):
        executor.execute_sync(x)
    with pytest.raises(ModelStateError, match=re.escape("load() on a model that is unloaded")):
        executor.load()  # an unloaded executor stays unloaded: load a new one instead
    with pytest.raises(ModelStateError, match="unloaded"):
        executor.execute_sync(x)


def test_unsupported_op_fails_at_lowering_naming_op_node_and_opset():
    proto = model(
        [helper.make_node("Frobnicate", ["x"], ["y"], name="frob1")],
        [("x", FLOAT, [2])],
        [("y", FLOAT, [2])],
    )
    with pytest.raises(LoweringError, match=r"Frobnicate node 'frob1' \(#0\) \(opset 17\)"):
        lower(proto)


def test_unsupported_element_type_is_named():
    proto = model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [("x", TensorProto.FLOAT6E2M3, [2])],
        [("y", TensorProto.FLOAT6E2M3, [2])],
    )
    with pytest.raises(LoweringError, match="input 'x': element type FLOAT6E2M3"):
        lower(proto)


def test_constants_fold_at_lowering():
    # y = x + (c1 * c2): the product is folded, only the Add runs
    proto = model(
        [
            helper.make_node("Mul", ["c1", "c2"], ["c3"]),
            helper.make_node("Add", ["x", "c3"], ["y"]),
        ],
        [("x", FLOAT, [3])],
        [("y", FLOAT, [3])],
        [("c1", np.array([1, 2, 3], np.float32)), ("c2", np.array([2, 2, 2], np.float32))],
    )
    graph = lower(proto)
    launches = [n for n in range(graph.num_nodes) if graph.kernel_name(n) == "OpLaunch"]
    assert len(launches) == 1
    with load_model(graph) as executor:
        y = executor.execute_sync({"x": np.zeros(3, np.float32)})["y"]
    np.testing.assert_array_equal(y, [2, 4, 6])


def test_dead_ops_are_dropped():
    proto = model(
        [
            helper.make_node("Relu", ["x"], ["unused"]),
            helper.make_node("Neg", ["x"], ["y"]),
        ],
        [("x", FLOAT, [3])],
        [("y", FLOAT, [3])],
    )
    graph = lower(proto)
    launches = [n for n in range(graph.num_nodes) if graph.kernel_name(n) == "OpLaunch"]
    assert len(launches) == 1


def test_a_multi_output_op_with_an_unread_named_output_is_kept():
    """Split gives a and b; only a is read: the Split still runs (one of its outputs is
    needed), b's block is allocated and freed unread."""
    proto = model(
        [
            helper.make_node("Split", ["x"], ["a", "b"], axis=0),
            helper.make_node("Neg", ["a"], ["y"]),
        ],
        [("x", FLOAT, [4, 3])],
        [("y", FLOAT, [2, 3])],
    )
    graph = lower(proto)
    launches = [n for n in range(graph.num_nodes) if graph.kernel_name(n) == "OpLaunch"]
    assert len(launches) == 2
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    with load_model(graph) as executor:
        got = executor.execute_sync({"x": x})["y"]
        assert executor.main.leaked_blocks == 0
    np.testing.assert_array_equal(got, run_onnxruntime(proto, {"x": x})["y"])


def test_a_call_with_an_absent_middle_input_folds():
    """Clip(c, "", hi) of constants folds at lowering like any constant call (the absent min
    is no tensor that could be unknown): only the Add of the input runs."""
    c = np.array([-3.0, 0.5, 7.0], np.float32)
    proto = model(
        [
            helper.make_node("Clip", ["c", "", "hi"], ["clipped"]),
            helper.make_node("Add", ["x", "clipped"], ["y"]),
        ],
        [("x", FLOAT, [3])],
        [("y", FLOAT, [3])],
        [("c", c), ("hi", np.float32(2.0))],
    )
    graph = lower(proto)
    launches = [n for n in range(graph.num_nodes) if graph.kernel_name(n) == "OpLaunch"]
    assert len(launches) == 1
    x = np.array([1.0, 2.0, 3.0], np.float32)
    with load_model(graph) as executor:
        got = executor.execute_sync({"x": x})["y"]
    np.testing.assert_array_equal(got, run_onnxruntime(proto, {"x": x})["y"])
    np.testing.assert_array_equal(got, x + np.minimum(c, 2.0))


def test_inputs_of_the_maximum_rank_run_and_one_above_is_refused():
    """A rank-8 input (MAX_RANK) runs; a rank-9 array is refused naming the input."""
    dims = [2, 1, 3, 1, 2, 1, 1, 2]
    proto = model(
        [helper.make_node("Neg", ["x"], ["y"])], [("x", FLOAT, dims)], [("y", FLOAT, dims)]
    )
    x = np.arange(24, dtype=np.float32).reshape(dims)
    with load_model(lower(proto)) as executor:
        np.testing.assert_array_equal(executor.execute_sync({"x": x})["y"], -x)
        with pytest.raises(ModelInputError, match="input 'x' has rank 9 > 8"):
            executor.execute_sync({"x": x.reshape([*dims, 1])})


def test_a_tampered_op_header_fails_with_a_status_not_a_crash(mlp_model):
    _, graph = mlp_model
    launch = next(n for n in range(graph.num_nodes) if graph.kernel_name(n) == "OpLaunch")
    pool = graph.attr_pool.copy()
    pool[graph.attr_offsets[launch] + 1] = 50  # claims 50 inputs
    tampered = graph._replace(attr_pool=pool)
    with load_model(tampered) as executor:
        with pytest.raises(KernelError, match="OpLaunch"):
            executor.execute_sync({"x": np.ones((1, 16), np.float32)})


def test_a_user_converter_lowers_a_custom_op():
    import user_converters  # noqa: F401  (registers com.example.Swish)

    node = helper.make_node("Swish", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph(
        [node],
        "swish",
        [helper.make_tensor_value_info("x", FLOAT, [5])],
        [helper.make_tensor_value_info("y", FLOAT, [5])],
    )
    proto = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
    )
    x = np.linspace(-3, 3, 5).astype(np.float32)
    with load_model(proto) as executor:
        y = executor.execute_sync({"x": x})["y"]
    np.testing.assert_allclose(y, x / (1 + np.exp(-x)), rtol=1e-6)


def test_transformer_block_with_a_symbolic_sequence_length_at_three_lengths():
    from rtsoa.testing.models import transformer_block

    proto = transformer_block()
    graph = lower(proto)
    assert rtsoa.is_dynamic(graph)
    rng = np.random.default_rng(5)
    with load_model(graph) as executor:
        for seq in (1, 7, 20):
            x = rng.standard_normal((2, seq, 32)).astype(np.float32)
            got = executor.execute_sync({"x": x})["y"]
            want = run_onnxruntime(proto, {"x": x})["y"]
            assert got.shape == (2, seq, 32)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert executor.device.hazard_count == 0


def test_small_cnn_with_a_residual_block():
    from rtsoa.testing.models import small_cnn

    proto = small_cnn()
    rng = np.random.default_rng(6)
    with load_model(proto) as executor:
        for batch in (1, 3):
            x = rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)
            got = executor.execute_sync({"x": x})["y"]
            want = run_onnxruntime(proto, {"x": x})["y"]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        assert executor.device.hazard_count == 0


# ONNX If and Loop: tests/test_models_control_flow.py


@pytest.mark.parametrize("streams", [1, 2])
def test_lowered_models_run_with_zero_hazards_on_one_and_two_streams(streams):
    proto = mlp(seed=4, layers=3)
    graph = lower(proto, streams=streams)
    assert graph.meta.stream_count == streams
    kernels = {graph.kernel_name(n) for n in range(graph.num_nodes)}
    assert ("StreamWaitEvent" in kernels) == (streams > 1)
    x = np.random.default_rng(2).standard_normal((6, 16)).astype(np.float32)
    with load_model(graph) as executor:
        for _ in range(3):
            got = executor.execute_sync({"x": x})["y"]
            np.testing.assert_allclose(got, run_onnxruntime(proto, {"x": x})["y"], RTOL, ATOL)
        assert executor.device.hazard_count == 0
        assert executor.main.leaked_blocks == 0


def test_the_committed_example_model_is_current():
    # op codes are positions in the sorted op names: a saved model must be re-lowered when
    # the op set changes (python datasets/make_models.py); this catches a stale one
    from pathlib import Path

    datasets = Path(__file__).resolve().parent.parent / "datasets"
    saved = load_graph(datasets / "mlp.rtsoa")
    fresh = lower(datasets / "mlp.onnx")
    np.testing.assert_array_equal(saved.attr_pool, fresh.attr_pool)
    assert saved.kernel_names == fresh.kernel_names
