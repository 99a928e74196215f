"""Host memory of lowering: a model's weights are not copied over and over on the way to the
ExecuteGraph's constant blob.

Lowering an ONNX model holds its weights once as arrays (read from the ModelProto) and once as
the blob it emits; shape inference runs on a copy without the large initializers (ONNX's
inference serialises its input and parses its result, a second and third copy otherwise); a
BatchNormalization folded into its Conv leaves the unfolded weights unread, and they are dropped
before the graph is emitted; the builder copies each constant once, into the blob. Judged with
tracemalloc (numpy's buffers are traced), against a bound of 3 x the weights' bytes where the
steps above made 5 x; shapes against ONNX's inference of the whole model; results against
onnxruntime.
"""

import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtsoa.graph.builder import GraphBuilder
from rtsoa.lowering import import_onnx, lower
from rtsoa.runtime import InferenceSession
from rtsoa.testing.models import FLOAT, model, run_onnxruntime

CHANNELS, LAYERS = 128, 8  # 8 convs of 128 x 128 x 3 x 3 float32: 4.5 MiB of weights


def _conv_bn_stack(channels=CHANNELS, layers=LAYERS, seed=3):
    """Conv -> BatchNormalization -> Relu, `layers` times, on a 1 x channels x 8 x 8 input,
    then a Reshape by a small shape initializer (shape inference reads its values)."""
    rng = np.random.default_rng(seed)
    nodes, inits, source = [], [], "x"
    for layer in range(layers):
        w = (rng.standard_normal((channels, channels, 3, 3)) / 30).astype(np.float32)
        inits.append((f"w{layer}", w))
        for name, value in (("s", 1.0), ("b", 0.0), ("m", 0.0), ("v", 1.0)):
            inits.append((f"{name}{layer}", np.full(channels, value, np.float32)))
        nodes += [
            helper.make_node("Conv", [source, f"w{layer}"], [f"c{layer}"], pads=[1, 1, 1, 1]),
            helper.make_node(
                "BatchNormalization",
                [f"c{layer}", f"s{layer}", f"b{layer}", f"m{layer}", f"v{layer}"],
                [f"n{layer}"],
            ),
            helper.make_node("Relu", [f"n{layer}"], [f"r{layer}"]),
        ]
        source = f"r{layer}"
    inits.append(("shape", np.array([1, -1], np.int64)))
    nodes.append(helper.make_node("Reshape", [source, "shape"], ["y"]))
    proto = model(
        nodes, [("x", FLOAT, [1, channels, 8, 8])], [("y", FLOAT, None)], initializers=inits
    )
    weights = sum(numpy_helper.to_array(init).nbytes for init in proto.graph.initializer)
    return proto, weights


def _traced_peak(function, *args):
    """(result, the traced peak over the start in bytes) of function(*args)."""
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        result = function(*args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak - start


def test_lowering_holds_a_models_weights_at_most_three_times():
    lower(_conv_bn_stack(channels=4, layers=1)[0])  # the ops loaded: not lowering's memory
    proto, weights = _conv_bn_stack()
    graph, peak = _traced_peak(lower, proto)
    assert graph.constants.nbytes >= weights * 0.99  # the folded weights, every byte
    assert peak <= 3 * weights, f"lowering peaked at {peak / weights:.2f} x the weights"


def test_the_lowered_stack_matches_onnxruntime():
    proto, _ = _conv_bn_stack(channels=16, layers=3)
    x = np.random.default_rng(0).standard_normal((1, 16, 8, 8)).astype(np.float32)
    with InferenceSession(proto) as session:
        (ours,) = session.run(None, {"x": x})
    theirs = run_onnxruntime(proto, {"x": x})["y"]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_shapes_match_onnx_inference_of_the_whole_model():
    proto, _ = _conv_bn_stack(layers=2)
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    expected = {
        info.name: tuple(d.dim_value for d in info.type.tensor_type.shape.dim)
        for info in list(inferred.graph.value_info) + list(inferred.graph.output)
    }
    assert expected["y"] == (1, CHANNELS * 64)  # read from the Reshape's shape initializer
    graph = import_onnx(proto)
    for name, dims in expected.items():
        assert tuple(graph.tensors[name].dims) == dims, name


def test_import_leaves_the_callers_model_as_it_was():
    proto, _ = _conv_bn_stack(layers=2)
    before = proto.SerializeToString()
    graph = import_onnx(proto)
    assert proto.SerializeToString() == before
    for init in proto.graph.initializer:  # every weight read, large ones included
        np.testing.assert_array_equal(graph.tensors[init.name].data, numpy_helper.to_array(init))
    assert list(graph.inputs) == ["x"]  # the large initializers are no graph inputs


def test_a_callers_compute_graph_keeps_its_constants():
    proto, _ = _conv_bn_stack(channels=8, layers=2)
    graph = import_onnx(proto)
    held = {name: tensor.data for name, tensor in graph.tensors.items() if tensor.is_constant}
    lower(graph)
    for name, data in held.items():  # the folded-away weights too
        assert graph.tensors[name].data is data, name


def test_old_exporters_initializers_listed_as_inputs():
    """Large initializers also listed as graph inputs (IR < 4 exporters) are still constants
    and still give the shape inference their types."""
    w = np.random.default_rng(1).standard_normal((64, 40)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "old",
        [
            helper.make_tensor_value_info("x", FLOAT, [2, 64]),
            helper.make_tensor_value_info("w", FLOAT, [64, 40]),
        ],
        [helper.make_tensor_value_info("y", FLOAT, None)],
        [numpy_helper.from_array(w, "w")],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=3)
    imported = import_onnx(proto)
    assert imported.inputs == ["x"]
    assert tuple(imported.tensors["y"].dims) == (2, 40)
    x = np.ones((2, 64), np.float32)
    with InferenceSession(proto) as session:
        (ours,) = session.run(None, {"x": x})
    np.testing.assert_allclose(ours, x @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "data",
    [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.arange(12, dtype=np.int16).reshape(3, 4).T,  # not contiguous
        np.array(7.5),  # 0-d
        np.array([True, False, True]),
        b"\x01\x02\x03",
        bytearray(b"\x04\x05"),
        memoryview(b"\x06\x07\x08"),
        np.zeros(0, np.float64),
    ],
    ids=["float32", "transposed", "0-d", "bool", "bytes", "bytearray", "memoryview", "empty"],
)
def test_add_constant_stores_the_bytes(data):
    builder = GraphBuilder()
    first = builder.add_constant(b"head")
    offset, length = builder.add_constant(data)
    expected = np.ascontiguousarray(data).tobytes() if isinstance(data, np.ndarray) else bytes(data)
    assert first == (0, 4) and (offset, length) == (4, len(expected))
    blob = builder.finalize(validate=False).constants
    assert blob.tobytes() == b"head" + expected


def test_a_copied_constant_is_taken_when_added_a_viewed_one_when_finalized():
    builder = GraphBuilder()
    copied = np.arange(4, dtype=np.int32)
    viewed = np.arange(4, dtype=np.int32)
    builder.add_constant(copied)
    builder.add_constant(viewed, copy=False)
    copied[:] = -1
    viewed[:] = 9
    blob = builder.finalize(validate=False).constants.view(np.int32)
    np.testing.assert_array_equal(blob, [0, 1, 2, 3, 9, 9, 9, 9])


def test_each_finalize_gives_its_own_blob():
    builder = GraphBuilder()
    builder.add_constant(np.arange(3, dtype=np.uint8), copy=False)
    first = builder.finalize(validate=False).constants
    second = builder.finalize(validate=False).constants
    assert first is not second and not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, second)


def test_string_initializers_are_not_stripped_for_inference():
    """A large string initializer stays in the copy given to shape inference (its length
    is not its dims' product of bytes): the model still lowers to host steps."""
    words = np.array([f"w{i}" for i in range(1500)], dtype=object)
    proto = model(
        [helper.make_node("Identity", ["words"], ["y"])],
        [],
        [("y", TensorProto.STRING, [1500])],
        initializers=[("words", words)],
    )
    graph = import_onnx(proto)
    assert list(graph.tensors["y"].dims) == [1500]
