"""External constant memory (issue 11 item 1, the reference's FileConstantMems): weights the
caller holds in device memory are used in place by Init, never uploaded again.

Outputs are judged by onnxruntime on the same model with the caller's weight values as its
initializers; that no upload copy is made is judged by the device's launch counter (Init's
uploads are its only launches), by its allocated bytes and by the outputs following a change
of the caller's memory after load."""

import re

import numpy as np
import pytest
from onnx import helper, numpy_helper

from rtsoa.errors import ModelInputError
from rtsoa.lowering import lower
from rtsoa.runtime import ModelResourceError, Session, load_executor
from rtsoa.runtime.constants import ConstantMemoryError
from rtsoa.runtime.session import model_device
from rtsoa.testing.models import FLOAT, mlp, model, run_onnxruntime

RTOL, ATOL = 1e-4, 1e-5


def initializers(proto):
    return {init.name: numpy_helper.to_array(init) for init in proto.graph.initializer}


def with_initializers(proto, values):
    """A copy of `proto` whose initializers of `values` hold those arrays (the ORT oracle)."""
    copy = type(proto)()
    copy.CopyFrom(proto)
    for init in copy.graph.initializer:
        if init.name in values:
            init.CopyFrom(numpy_helper.from_array(values[init.name], init.name))
    return copy


def on_device(device, arrays):
    """Each array copied by the caller into a block of `device`: {name: view of the block}."""
    views = {}
    for name, array in arrays.items():
        handle = device.malloc(array.nbytes)
        view = device.view(handle, array.dtype).reshape(array.shape)
        view[...] = array
        views[name] = view
    return views


def allocated(device):
    return device.stats()["hbm"]["allocated_bytes.current"]


@pytest.fixture(scope="module")
def mlp_proto():
    return mlp()


def test_outputs_match_onnxruntime_and_no_weight_is_uploaded(mlp_proto):
    rng = np.random.default_rng(4)
    values = {  # not the model's own initializers: the caller's memory is what runs
        name: rng.standard_normal(array.shape).astype(array.dtype)
        for name, array in initializers(mlp_proto).items()
    }
    x = rng.standard_normal((5, 16)).astype(np.float32)
    want = run_onnxruntime(with_initializers(mlp_proto, values), {"x": x})["y"]
    device = model_device(lower(mlp_proto))
    views = on_device(device, values)
    caller_bytes = allocated(device)
    with load_executor(mlp_proto, device=device, constant_memory=views) as executor:
        assert device.stats()["num_launches"] == 0  # Init uploaded nothing
        load_bytes = allocated(device) - caller_bytes
        assert load_bytes == 512  # the input's staging block alone
        np.testing.assert_allclose(executor.execute_sync({"x": x})["y"], want, RTOL, ATOL)
        # in place: the caller changes a weight after load and the next run reads it
        views["Wout"] *= 2
        values["Wout"] = values["Wout"] * 2
        want = run_onnxruntime(with_initializers(mlp_proto, values), {"x": x})["y"]
        np.testing.assert_allclose(executor.execute_sync({"x": x})["y"], want, RTOL, ATOL)
        assert device.hazard_count == 0
    # unload (DeInit) leaves the caller's blocks alone: the caller owns them
    assert allocated(device) == caller_bytes
    for name, view in views.items():
        np.testing.assert_array_equal(view, values[name])
        device.free(device.handle_of(view))
    assert allocated(device) == 0


def test_handles_and_read_only_views_are_accepted_and_a_partial_mapping_refused(mlp_proto):
    weights = initializers(mlp_proto)
    x = np.linspace(-1, 1, 3 * 16, dtype=np.float32).reshape(3, 16)
    want = run_onnxruntime(mlp_proto, {"x": x})["y"]
    device = model_device(lower(mlp_proto))
    views = on_device(device, weights)
    memory = dict(views, W0=device.handle_of(views["W0"]))  # a handle instead of a view
    views["b1"].flags.writeable = False  # read-only memory is fine: weights are only read
    with load_executor(mlp_proto, device=device, constant_memory=memory) as executor:
        np.testing.assert_allclose(executor.execute_sync({"x": x})["y"], want, RTOL, ATOL)
    np.testing.assert_array_equal(views["b1"], weights["b1"])
    with pytest.raises(
        ConstantMemoryError, match=r"must give every weight .* missing \['W1', 'Wout', 'b0'"
    ):
        load_executor(
            mlp_proto, device=device, constant_memory={"W0": views["W0"], "b1": views["b1"]}
        )


def test_initializers_of_equal_contents_are_told_apart_by_name():
    zeros = np.zeros(4, np.float32)
    proto = model(
        [helper.make_node("Add", ["x", "A"], ["y"]), helper.make_node("Mul", ["x", "B"], ["z"])],
        [("x", FLOAT, [4])],
        [("y", FLOAT, [4]), ("z", FLOAT, [4])],
        [("A", zeros), ("B", zeros)],
    )
    values = {"A": np.full(4, 1.0, np.float32), "B": np.full(4, 3.0, np.float32)}
    x = np.arange(4, dtype=np.float32)
    want = run_onnxruntime(with_initializers(proto, values), {"x": x})
    device = model_device(lower(proto))
    with load_executor(proto, device=device, constant_memory=on_device(device, values)) as ex:
        got = ex.execute_sync({"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["z"], want["z"])


def test_every_misuse_names_the_weight(mlp_proto):
    graph = lower(mlp_proto)
    weights = initializers(mlp_proto)
    device = model_device(graph)
    good = on_device(device, {"W0": weights["W0"]})["W0"]
    small = device.malloc(16)
    freed = device.malloc(weights["W0"].nbytes)
    device.free(freed)
    host = device.malloc(weights["W0"].nbytes, "host")
    other = model_device(graph)
    foreign = on_device(other, {"W0": weights["W0"]})["W0"]
    wide = device.view(device.malloc(2 * weights["W0"].nbytes), np.float32).reshape(16, 64)
    cases = [
        ([("W0", good)], "constant_memory must be a dict of weight name"),
        ({"W9": good}, "constant_memory['W9']: the model has no weight 'W9' uploaded by Init"),
        ({"W0": good.astype(np.float64)}, "has dtype float64, the weight is float32"),
        ({"W0": good[:8]}, "has shape (8, 32), the weight is [16, 32]"),
        ({"W0": wide[:, ::2]}, "constant_memory['W0'] is not C-contiguous"),
        ({"W0": wide.reshape(-1)[1:513].reshape(16, 32)}, "is not 512-byte aligned"),
        ({"W0": np.array(weights["W0"])}, "constant_memory['W0'] is not memory of the model's"),
        ({"W0": foreign}, "is not memory of the model's device"),
        ({"W0": [1.0]}, "must be a device array (device.view) or a block handle, got list"),
        ({"W0": True}, "got bool"),
        ({"W0": freed}, "constant_memory['W0'] is not a live block of the model's device"),
        ({"W0": small}, "is a block of 16 bytes; the weight needs 2048 (float32 [16, 32])"),
        ({"W0": host}, "constant_memory['W0'] is host memory; weights live in hbm"),
        ({"W0": good, "b0": device.handle_of(good)}, "is the block of constant_memory['W0']"),
    ]
    for memory, message in cases:
        with pytest.raises(ConstantMemoryError, match=re.escape(message)) as error:
            load_executor(mlp_proto, device=device, constant_memory=memory)
        assert error.value.weight == (None if isinstance(memory, list) else list(memory)[-1])
        assert isinstance(error.value, ModelInputError)
    with pytest.raises(ConstantMemoryError, match="the graph does not name its weights"):
        load_executor(graph, device=device, constant_memory={"W0": good})
    with pytest.raises(ModelResourceError, match="pass the device it was allocated on"):
        load_executor(mlp_proto, constant_memory={"W0": good})
    with pytest.raises(ModelResourceError, match="give that device"):
        load_executor(mlp_proto, session=Session(), constant_memory={"W0": good})
    with pytest.raises(ModelInputError, match="a StreamExecutor runs its streams"):
        load_executor(mlp_proto, stream_executor=True, constant_memory={"W0": good})
    assert allocated(device) > 0 and device.stats()["num_launches"] == 0  # nothing loaded


def test_a_weight_folded_at_lowering_is_not_a_weight_of_the_model():
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    proto = model(
        [
            helper.make_node("Transpose", ["W"], ["Wt"]),  # folded: Wt is the uploaded constant
            helper.make_node("MatMul", ["x", "Wt"], ["y"]),
        ],
        [("x", FLOAT, [2, 4])],
        [("y", FLOAT, [2, 3])],
        [("W", w)],
    )
    device = model_device(lower(proto))
    view = on_device(device, {"W": w})["W"]
    with pytest.raises(ConstantMemoryError, match=r"no weight 'W' uploaded by Init .* are \[\]"):
        load_executor(proto, device=device, constant_memory={"W": view})
