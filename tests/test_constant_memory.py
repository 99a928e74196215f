"""External constant memory (the reference's FileConstantMems): weights the
caller holds in device memory are used in place by Init, never uploaded again.

Outputs are judged by onnxruntime on the same model with the caller's weight values as its
initializers; that no upload copy is made is judged by the device's launch counter (Init's
uploads are its only launches), by its allocated bytes and by the outputs following a change
of the caller's memory after load. Any subset of the weights may be external (the others are
uploaded by Init as usual), on an ONNX source and on a lowered graph saved and loaded again."""

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from rtsoa import load_graph, save_graph
from rtsoa.errors import ModelInputError
from rtsoa.lowering import lower
from rtsoa.runtime import ModelResourceError, Session, load_executor
from rtsoa.runtime.external_weights import ConstantMemoryError, init_weights, weight_names
from rtsoa.runtime.shared_weights import model_device
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


def test_handles_and_read_only_views_are_accepted(mlp_proto):
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


def input_shape(proto, symbolic=3):
    """The shape of the model's input `x`, `symbolic` for each dim without a value."""
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    return tuple(dim.dim_value if dim.HasField("dim_value") else symbolic for dim in dims)


def check_mixed_load(source, proto, external, seed):
    """Load `source` with the weights named in `external` given by the caller (new values)
    and the others uploaded by Init: outputs as onnxruntime's with those values, the given
    blocks used in place (slot = the caller's block, no upload launch, a change after load
    read by the next run), the others uploaded, and unload frees only Init's blocks."""
    rng = np.random.default_rng(seed)
    own = initializers(proto)
    values = {name: rng.standard_normal(own[name].shape).astype(np.float32) for name in external}
    x = rng.standard_normal(input_shape(proto)).astype(np.float32)
    graph = lower(proto)
    device = model_device(graph)
    views = on_device(device, values)
    caller_bytes = allocated(device)
    output = proto.graph.output[0].name
    with load_executor(source, device=device, constant_memory=views) as executor:
        blocks = {name: weight.block for name, weight in weight_names(executor.graph).items()}
        assert device.stats()["num_launches"] == len(blocks) - len(external)  # the others
        slots = executor.values.slots
        for name, view in views.items():
            assert slots[blocks[name]] == device.handle_of(view)  # in place
        for name in set(blocks) - set(external):
            assert slots[blocks[name]] not in {device.handle_of(v) for v in views.values()}
        want = run_onnxruntime(with_initializers(proto, values), {"x": x})[output]
        got = executor.execute_sync({"x": x})[output]
        np.testing.assert_allclose(got, want, RTOL, ATOL)
        changed = sorted(external)[0]
        views[changed] *= -1
        values[changed] = -values[changed]
        want = run_onnxruntime(with_initializers(proto, values), {"x": x})[output]
        np.testing.assert_allclose(executor.execute_sync({"x": x})[output], want, RTOL, ATOL)
        assert device.hazard_count == 0
    assert allocated(device) == caller_bytes  # Init's uploads freed, the caller's kept
    for name, view in views.items():
        np.testing.assert_array_equal(view, values[name])


MLP_WEIGHTS = ("W0", "W1", "Wout", "b0", "b1", "bout")


@pytest.mark.parametrize(
    "external",
    [
        ("W0",),  # one weight, the first Init uploads
        ("bout",),  # one weight, the last
        tuple(w for w in MLP_WEIGHTS if w != "W0"),  # all but one
        tuple(w for w in MLP_WEIGHTS if w != "bout"),
        ("W1", "b0"),
        ("W0", "Wout", "b1"),
    ],
    ids=lambda names: "+".join(names),
)
def test_a_mix_of_external_and_uploaded_weights_matches_onnxruntime(mlp_proto, external):
    assert sorted(initializers(mlp_proto)) == list(MLP_WEIGHTS)
    check_mixed_load(mlp_proto, mlp_proto, set(external), seed=len(external))


def shared_weights_model():
    """A and B each read by two ops (A by an Add and a Mul, B by a Mul and a Sub), C by one."""
    rng = np.random.default_rng(7)
    proto = model(
        [
            helper.make_node("Add", ["x", "A"], ["p"]),
            helper.make_node("Mul", ["p", "A"], ["q"]),
            helper.make_node("Mul", ["q", "B"], ["r"]),
            helper.make_node("Sub", ["r", "B"], ["s"]),
            helper.make_node("Add", ["s", "C"], ["y"]),
        ],
        [("x", FLOAT, ["n", 6])],
        [("y", FLOAT, ["n", 6])],
        [(name, rng.standard_normal(6).astype(np.float32)) for name in "ABC"],
    )
    return proto


@pytest.mark.parametrize("external", [("A",), ("B",), ("A", "C"), ("B", "C"), ("A", "B")])
def test_weights_read_by_two_ops_can_be_external_or_uploaded(external):
    proto = shared_weights_model()
    check_mixed_load(proto, proto, set(external), seed=11)


@pytest.mark.parametrize("external", [("W0",), ("b0", "W1", "Wout", "bout"), MLP_WEIGHTS])
def test_a_saved_lowered_graph_names_its_weights(mlp_proto, tmp_path, external):
    """Lowering records the weights' names: a lowered graph saved and loaded again takes
    constant_memory by name (no ONNX model needed)."""
    path = save_graph(lower(mlp_proto), tmp_path / "mlp.rtsoa")
    names = weight_names(load_graph(path))
    assert sorted(names) == list(MLP_WEIGHTS)
    assert all(names[name].shape == array.shape for name, array in initializers(mlp_proto).items())
    check_mixed_load(path, mlp_proto, set(external), seed=3)
    check_mixed_load(load_graph(path), mlp_proto, set(external), seed=5)


def test_the_committed_lowered_mlp_takes_constant_memory():
    """datasets/mlp.rtsoa (the lowered example of docs/models.md) names its weights: it was lowered
    by an rtsoa that records them (regenerate it with `python datasets/make_models.py`)."""
    datasets = Path(__file__).resolve().parent.parent / "datasets"
    proto = onnx.load(datasets / "mlp.onnx")
    names = weight_names(load_graph(datasets / "mlp.rtsoa"))
    assert sorted(names) == sorted(initializers(proto))
    check_mixed_load(datasets / "mlp.rtsoa", proto, {"W0", "bout"}, seed=7)


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


def without_weight_names(graph):
    """`graph` as saved by an rtsoa whose lowering did not name the weights."""
    keep = ~np.isin(graph.tensor_value, [weight.block for weight in init_weights(graph)])
    return graph._replace(
        tensor_value=graph.tensor_value[keep],
        tensor_name=tuple(np.asarray(graph.tensor_name, dtype=object)[keep]),
        tensor_rank=graph.tensor_rank[keep],
        tensor_dim_start=graph.tensor_dim_start[keep],
    )


def test_every_misuse_names_the_weight(mlp_proto, tmp_path):
    graph = lower(mlp_proto)
    saved = save_graph(graph, tmp_path / "mlp.rtsoa")
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
        ({"W0": other.handle_of(foreign)}, "['W0'] is not a live block of the model's device: "),
        ({"W0": other.handle_of(foreign)}, "belongs to another device"),
        ({"W0": small}, "is a block of 16 bytes; the weight needs 2048 (float32 [16, 32])"),
        ({"W0": host}, "constant_memory['W0'] is host memory; weights live in hbm"),
        ({"W0": good, "b0": device.handle_of(good)}, "is the block of constant_memory['W0']"),
    ]
    for source in (mlp_proto, saved):  # by name from the ONNX model or the saved graph
        for memory, message in cases:
            with pytest.raises(ConstantMemoryError, match=re.escape(message)) as error:
                load_executor(source, device=device, constant_memory=memory)
            assert error.value.weight == (None if isinstance(memory, list) else list(memory)[-1])
            assert isinstance(error.value, ModelInputError)
    unnamed = without_weight_names(graph)
    assert weight_names(unnamed) is None and sorted(weight_names(graph)) == sorted(weights)
    with pytest.raises(ConstantMemoryError, match="the graph does not name its weights") as error:
        load_executor(unnamed, device=device, constant_memory={"W0": good})
    assert "lower the ONNX model again" in str(error.value)
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
    with pytest.raises(ConstantMemoryError, match=r"no weight 'W' uploaded by Init .* \['Wt'\]"):
        load_executor(proto, device=device, constant_memory={"W": view})
    # the folded constant is the model's weight, under its own name
    folded = on_device(device, {"Wt": np.ascontiguousarray(w.T)})
    with load_executor(proto, device=device, constant_memory=folded) as executor:
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        np.testing.assert_array_equal(executor.execute_sync({"x": x})["y"], x @ w.T)
