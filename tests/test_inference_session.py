"""The public model entry, `rtsoa.InferenceSession` with `rtsoa.SessionOptions`, judged against
onnxruntime: outputs on the committed example models (datasets/mlp.onnx and its input set,
rtsoa.testing.models), inputs and outputs with names, dtypes and symbolic dims, options checked
with typed errors, and the deprecated entries it replaces (they warn and still work).
"""

import dataclasses
import importlib
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import rtsoa
from rtsoa.errors import ModelInputError, RtsoaError, SessionOptionsError
from rtsoa.graph.io import load_graph
from rtsoa.lowering import lower
from rtsoa.runtime import ModelExecutor
from rtsoa.runtime.npz import read_inputs
from rtsoa.testing.models import FLOAT, model, run_onnxruntime, small_cnn, transformer_block

DATASETS = Path(__file__).resolve().parent.parent / "datasets"
MLP = DATASETS / "mlp.onnx"
RTOL, ATOL = 1e-4, 1e-5


def onnxruntime_session(proto):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(proto.SerializeToString(), options)


@pytest.fixture(scope="module")
def mlp_proto():
    return onnx.load(MLP)


@pytest.fixture(scope="module")
def mlp_inputs():
    return read_inputs(DATASETS / "mlp-inputs.npz")


def test_every_source_gives_onnxruntime_outputs(mlp_proto, mlp_inputs):
    """A path, its bytes, the ModelProto, the lowered graph and the committed saved graph."""
    want = run_onnxruntime(mlp_proto, mlp_inputs)
    sources = [str(MLP), MLP, MLP.read_bytes(), mlp_proto, lower(mlp_proto)]
    sources.append(str(DATASETS / "mlp.rtsoa"))
    for source in sources:
        with rtsoa.InferenceSession(source) as session:
            assert isinstance(session, ModelExecutor) and session.state == "loaded"
            [y] = session.run(["y"], mlp_inputs)
            np.testing.assert_allclose(y, want["y"], rtol=RTOL, atol=ATOL)
            everything = session.run(None, mlp_inputs)
            assert len(everything) == 1
            np.testing.assert_array_equal(everything[0], y)
            np.testing.assert_array_equal(session.run([], mlp_inputs)[0], y)
            np.testing.assert_array_equal(session.execute_sync(mlp_inputs)["y"], y)
        assert session.state == "unloaded"


@pytest.mark.parametrize("make", [small_cnn, transformer_block], ids=["cnn", "transformer"])
def test_example_models_match_onnxruntime(make):
    proto = make()
    shape = [2 if isinstance(d, str) else d for d in _ort_shape(proto)]
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    want = run_onnxruntime(proto, {"x": x})
    session = rtsoa.InferenceSession(proto.SerializeToString())
    try:
        got = session.run(list(want), {"x": x})
    finally:
        session.close()
    for name, array in zip(want, got, strict=True):
        np.testing.assert_allclose(array, want[name], rtol=RTOL, atol=ATOL, err_msg=name)


def _ort_shape(proto):
    return onnxruntime_session(proto).get_inputs()[0].shape


def _arguments(values):
    return [(value.name, value.type, value.shape) for value in values]


def test_inputs_and_outputs_as_onnxruntime_describes_them(mlp_proto):
    expected = onnxruntime_session(mlp_proto)
    with rtsoa.InferenceSession(MLP) as session:
        assert _arguments(session.get_inputs()) == _arguments(expected.get_inputs())
        assert _arguments(session.get_outputs()) == _arguments(expected.get_outputs())
        [x] = session.get_inputs()
        assert x == rtsoa.TensorInfo("x", np.dtype(np.float32), ["batch", 16])


def test_unknown_dims_and_other_element_types():
    proto = model(
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("Cast", ["k"], ["b"], to=TensorProto.FLOAT),
        ],
        [("x", FLOAT, ["n", None, 3]), ("k", TensorProto.INT64, [2])],
        [("a", FLOAT, ["n", None, 3]), ("b", FLOAT, [2])],
    )
    expected = onnxruntime_session(proto)
    with rtsoa.InferenceSession(proto) as session:
        assert _arguments(session.get_inputs()) == _arguments(expected.get_inputs())
        # an output's unknown dim: onnxruntime says None, rtsoa the symbol that ONNX shape
        # inference named it at import (unk__N); everything else is the same
        outputs = _arguments(session.get_outputs())
        assert outputs[1] == _arguments(expected.get_outputs())[1]
        name, kind, shape = outputs[0]
        assert (name, kind, shape[0], shape[2]) == ("a", "tensor(float)", "n", 3)
        assert shape[1] is None or shape[1].startswith("unk__")
        assert session.get_inputs()[1].dtype == np.int64
        x = np.linspace(-1, 1, 2 * 5 * 3, dtype=np.float32).reshape(2, 5, 3)
        k = np.array([3, -4], dtype=np.int64)
        b, a = session.run(["b", "a"], {"x": x, "k": k})
        want = expected.run(["b", "a"], {"x": x, "k": k})
        np.testing.assert_array_equal(b, want[0])
        np.testing.assert_array_equal(a, want[1])


def test_options_reach_the_session(mlp_proto, mlp_inputs):
    options = rtsoa.SessionOptions(executor="sequential", hbm_bytes=1 << 24)
    with rtsoa.InferenceSession(MLP, options) as session:
        assert session.options is options
        assert session.main.name == "sequential"
        assert session.device.stats()["hbm"]["reserved_bytes.current"] <= 1 << 24
    graph = lower(mlp_proto)
    want = run_onnxruntime(mlp_proto, mlp_inputs)["y"]
    with rtsoa.SharedWeights(max_devices=1) as weights:
        shared = rtsoa.SessionOptions(shared_weights=weights)
        first, second = (rtsoa.InferenceSession(graph, shared) for _ in range(2))
        assert first.device is second.device and weights.init_runs == 1
        for session in (first, second):
            np.testing.assert_allclose(session.run(None, mlp_inputs)[0], want, rtol=RTOL, atol=ATOL)
            session.close()
            session.close()  # closing twice is harmless
    created = rtsoa.InferenceSession.created(graph)
    assert created.state == "created"
    with created.load():
        np.testing.assert_allclose(created.run(None, mlp_inputs)[0], want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    ("threads", "executor", "expected"),
    [(1, "auto", "sequential"), (1, "priority", "priority"), (2, "auto", "multithread")]
    + [(3, "multithread", "multithread"), (None, "auto", "sequential")],
)
def test_threads_choose_the_executor_and_keep_the_answers(threads, executor, expected, mlp_inputs):
    """`threads` as onnxruntime users set intra_op_num_threads: 1 a one-thread executor, more
    the multithread executor's workers; the outputs are the same."""
    options = rtsoa.SessionOptions(executor=executor, threads=threads)
    with rtsoa.InferenceSession(MLP, options) as session:
        assert session.main.name == expected
        if expected == "multithread":
            assert session.main.threads == threads
        got = session.run(None, mlp_inputs)[0]
    with rtsoa.InferenceSession(MLP) as reference:
        np.testing.assert_array_equal(got, reference.run(None, mlp_inputs)[0])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"executor": "bogus"}, "SessionOptions.executor: unknown executor 'bogus'; choose one"),
        ({"executor": 1}, "SessionOptions.executor: unknown executor 1"),
        ({"hbm_bytes": 0}, "SessionOptions.hbm_bytes: a positive number of bytes, got 0"),
        ({"hbm_bytes": True}, "SessionOptions.hbm_bytes: a positive number of bytes, got True"),
        ({"hbm_bytes": "1GiB"}, "SessionOptions.hbm_bytes: a positive number of bytes"),
        ({"device": "cpu"}, "SessionOptions.device: a rtsoa.device.Device or None, got str"),
        ({"shared_weights": object()}, "SessionOptions.shared_weights: a SharedWeights or None"),
        ({"base_dir": 3}, "SessionOptions.base_dir: a directory path or None, got int"),
        ({"threads": 0}, "SessionOptions.threads: 1 .. 64, got 0"),
        ({"threads": 65}, "SessionOptions.threads: 1 .. 64, got 65"),
        ({"threads": 2.0}, "SessionOptions.threads: an int or None, got float"),
        ({"threads": True}, "SessionOptions.threads: an int or None, got bool"),
        ({"threads": 1, "executor": "multithread"}, "SessionOptions.threads: the multithread"),
        ({"threads": 2, "executor": "sequential"}, "SessionOptions.threads: 2 threads need"),
    ],
)
def test_bad_options_are_typed_errors_naming_the_field(fields, message):
    with pytest.raises(SessionOptionsError) as error:
        rtsoa.SessionOptions(**fields)
    assert str(error.value).startswith(message)
    assert isinstance(error.value, RtsoaError) and isinstance(error.value, ValueError)


def test_bad_calls_are_typed_errors(mlp_inputs):
    with pytest.raises(
        SessionOptionsError, match="options must be a rtsoa.SessionOptions, got dict"
    ):
        rtsoa.InferenceSession(MLP, {"executor": "sequential"})
    with pytest.raises(ModelInputError, match="no such file or directory"):
        rtsoa.InferenceSession(DATASETS / "missing.onnx")
    with pytest.raises(ModelInputError, match="a model is an ExecuteGraph, .* got int"):
        rtsoa.InferenceSession(123)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rtsoa.SessionOptions().executor = "sequential"
    with rtsoa.InferenceSession(MLP) as session:
        with pytest.raises(
            ModelInputError, match=r"'z' is not an output of the model \(outputs: y"
        ):
            session.run(["z"], mlp_inputs)
        with pytest.raises(ModelInputError, match="output_names must be a list"):
            session.run("y", mlp_inputs)
        with pytest.raises(ModelInputError):
            session.run(None, {})  # the input is missing: the model's own check names it


def test_deprecated_entries_warn_and_still_work(mlp_proto, mlp_inputs):
    want = run_onnxruntime(mlp_proto, mlp_inputs)["y"]
    graph = lower(mlp_proto)
    with pytest.warns(DeprecationWarning, match="rtsoa.load_executor is deprecated"):
        executor = rtsoa.load_executor(graph, executor="topological")
    with pytest.warns(DeprecationWarning, match="rtsoa.runtime.load_model is deprecated"):
        model_executor = rtsoa.runtime.load_model(graph, load=False)
    assert model_executor.state == "created"
    model_executor.load()
    for session in (executor, model_executor):
        assert isinstance(session, rtsoa.InferenceSession)
        np.testing.assert_allclose(
            session.execute_sync(mlp_inputs)["y"], want, rtol=RTOL, atol=ATOL
        )
        session.unload()
    assert executor.main.name == "topological"
    with pytest.warns(DeprecationWarning, match="use rtsoa.SharedWeights"):
        assert rtsoa.Session is rtsoa.SharedWeights
    with pytest.warns(DeprecationWarning, match="use rtsoa.SharedWeights"):
        from rtsoa.runtime import Session  # noqa: F401


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("rtsoa.runtime.session", "rtsoa.runtime.shared_weights", "model_device"),
        ("rtsoa.runtime.kept", "rtsoa.runtime.kept_shapes", "kept_shapes_graph"),
        ("rtsoa.runtime.constants", "rtsoa.runtime.external_weights", "weight_names"),
        ("rtsoa.runtime.commands", "rtsoa.runtime.npz", "read_inputs"),
    ],
)
def test_renamed_modules_warn_and_still_work(monkeypatch, old, new, name):
    monkeypatch.delitem(sys.modules, old, raising=False)  # as in a fresh process
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated"):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)


def test_moved_lowering_names_warn_and_still_work():
    from rtsoa.lowering import calls

    with pytest.warns(DeprecationWarning, match="use rtsoa.lowering.calls.op_call"):
        from rtsoa.lowering.lower import op_call
    assert op_call is calls.op_call


def test_a_saved_model_graph_loads_as_a_session(tmp_path, mlp_inputs):
    graph = load_graph(DATASETS / "mlp.rtsoa")
    with rtsoa.InferenceSession(graph) as session:
        assert [info.name for info in session.get_inputs()] == list(mlp_inputs)


def test_session_options_fuse_chooses_the_lowering_s_fusions(tmp_path):
    """`SessionOptions.fuse` reaches the lowering of an ONNX model (path, bytes, ModelProto):
    every fusion but "winograd" gives the direct conv's bits, the default its Winograd form
    within the stated bound; on a lowered graph it is an error, as base_dir is."""
    from rtsoa.graph.inspect import op_counts
    from rtsoa.lowering.fuse import FUSIONS

    weights = (np.random.default_rng(8).standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    proto = model([node], [("x", FLOAT, [1, 64, 14, 14])], [("y", FLOAT, None)], [("w", weights)])
    path = tmp_path / "conv.onnx"
    onnx.save(proto, path)
    x = {"x": np.random.default_rng(9).standard_normal((1, 64, 14, 14)).astype(np.float32)}
    direct = [name for name in FUSIONS if name != "winograd"]
    options = rtsoa.SessionOptions(fuse=direct)
    assert options.fuse == tuple(sorted(direct))
    with rtsoa.InferenceSession(lower(proto, fuse=direct)) as session:
        want = session.run(None, x)[0]
    for source in (path, proto.SerializeToString(), proto):
        with rtsoa.InferenceSession(source, options) as session:
            assert op_counts(session.graph) == {"Conv": 1}
            np.testing.assert_array_equal(session.run(None, x)[0], want)
        with rtsoa.InferenceSession(source) as session:
            assert op_counts(session.graph) == {"WinogradConv": 1}
            got = session.run(None, x)[0]
            assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    with pytest.raises(ModelInputError, match="fuse applies to ONNX models"):
        rtsoa.InferenceSession(lower(proto), options)
    for bad in ("winograd", ["winograd", "wingorad"], 2):
        with pytest.raises(SessionOptionsError, match="SessionOptions.fuse"):
            rtsoa.SessionOptions(fuse=bad)
