"""Sequences and optionals as graph inputs and outputs, and SequenceMap, judged by onnx.reference.

A model taking a sequence is lowered per run's sequence (`rtsoa.lowering.sequence_io`) by the
`SequenceSession` that `rtsoa.InferenceSession` returns for it
(`rtsoa.runtime.sequence_session`); the backend and `rtsoa run` use the same specialisation.
Outputs are compared with onnx.reference's, bad input must be a typed error naming the input.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import rtsoa
import rtsoa.backend
from rtsoa.cli import main
from rtsoa.errors import LoweringError, ModelInputError
from rtsoa.runtime.sequence_session import SequenceSession

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64
OPSET = 17


def _model(nodes, inputs, outputs, opset=OPSET):
    graph = helper.make_graph(nodes, "sequences", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _sequence(name, elem=FLOAT, shape=None):
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def _optional(name, elem=FLOAT, sequence=False):
    inner = (
        helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, None))
        if sequence
        else helper.make_tensor_type_proto(elem, None)
    )
    return helper.make_value_info(name, helper.make_optional_type_proto(inner))


def _same(have, want):
    """`have` equals onnx.reference's `want` (arrays, lists of them, None) in type and value."""
    if want is None:
        assert have is None
    elif isinstance(want, list):
        assert isinstance(have, list) and len(have) == len(want)
        for item, expected in zip(have, want, strict=True):
            _same(item, expected)
    else:
        assert have.dtype == want.dtype and have.shape == want.shape
        np.testing.assert_allclose(have, want, rtol=1e-6)


def _check(proto, feeds, model=None):
    """Run `feeds` through rtsoa and onnx.reference; the outputs must agree."""
    want = ReferenceEvaluator(proto).run(None, feeds)
    if model is None:
        with rtsoa.InferenceSession(proto) as fresh:
            have = fresh.run(None, feeds)
    else:
        have = model.run(None, feeds)
    for item, expected in zip(have, want, strict=True):
        _same(item, expected)
    return have


RNG = np.random.default_rng(0)


def _arrays(count, shape=(2, 3), dtype=np.float32):
    return [RNG.standard_normal(shape).astype(dtype) for _ in range(count)]


# a sequence in, its concatenation, its length and the sequence with one tensor appended out
CONCAT = _model(
    [
        helper.make_node("ConcatFromSequence", ["xs"], ["joined"], axis=0),
        helper.make_node("SequenceLength", ["xs"], ["length"]),
        helper.make_node("SequenceInsert", ["xs", "t"], ["more"]),
    ],
    [_sequence("xs", shape=[None, 3]), helper.make_tensor_value_info("t", FLOAT, [None, 3])],
    [
        helper.make_tensor_value_info("joined", FLOAT, [None, 3]),
        helper.make_tensor_value_info("length", INT64, []),
        _sequence("more", shape=[None, 3]),
    ],
)


def test_a_sequence_input_is_lowered_per_signature_and_outputs_come_back_as_lists():
    model = rtsoa.InferenceSession(CONCAT)
    assert isinstance(model, SequenceSession)
    with model:
        assert [(i.name, i.kind) for i in model.get_inputs()] == [
            ("xs", "sequence"),
            ("t", "tensor"),
        ]
        assert [o.kind for o in model.get_outputs()] == ["tensor", "tensor", "sequence"]
        t = _arrays(1)[0]
        for count in (1, 3, 1):  # the second run of length 1 reuses its specialisation
            _check(CONCAT, {"xs": _arrays(count), "t": t}, model)
        assert model.describe()["specialisations"] == 2
        _check(CONCAT, {"xs": _arrays(2, shape=(1, 3)), "t": t}, model)  # other shapes
        assert model.describe()["specialisations"] == 3


def test_an_empty_sequence_input_and_an_empty_sequence_output():
    proto = _model(
        [
            helper.make_node("SequenceLength", ["xs"], ["length"]),
            helper.make_node("Identity", ["xs"], ["same"]),
        ],
        [_sequence("xs")],
        [helper.make_tensor_value_info("length", INT64, []), _sequence("same")],
    )
    with rtsoa.InferenceSession(proto) as model:
        length, same = model.run(None, {"xs": []})
        assert int(length) == 0 and same == []
        _check(proto, {"xs": _arrays(2)}, model)


def test_a_sequence_output_of_split_to_sequence():
    proto = _model(
        [helper.make_node("SplitToSequence", ["x"], ["parts"], axis=1, keepdims=0)],
        [helper.make_tensor_value_info("x", FLOAT, ["n", 4])],
        [_sequence("parts")],
    )
    x = _arrays(1, shape=(3, 4))[0]
    [parts] = _check(proto, {"x": x})
    assert len(parts) == 4 and np.array_equal(parts[2], x[:, 2])


def test_optional_inputs_given_and_absent_and_optional_outputs():
    proto = _model(
        [
            helper.make_node("OptionalHasElement", ["maybe"], ["has"]),
            helper.make_node("Identity", ["maybe"], ["passed"]),
            helper.make_node("OptionalHasElement", ["maybe_seq"], ["has_seq"]),
        ],
        [_optional("maybe"), _optional("maybe_seq", sequence=True)],
        [
            helper.make_tensor_value_info("has", TensorProto.BOOL, []),
            _optional("passed"),
            helper.make_tensor_value_info("has_seq", TensorProto.BOOL, []),
        ],
        opset=18,
    )
    with rtsoa.InferenceSession(proto) as model:
        assert [i.kind for i in model.get_inputs()] == ["optional", "optional_sequence"]
        x = _arrays(1)[0]
        has, passed, has_seq = model.run(None, {"maybe": x, "maybe_seq": None})
        assert bool(has) and np.array_equal(passed, x) and not bool(has_seq)
        has, passed, has_seq = model.run(None, {"maybe": None, "maybe_seq": _arrays(2)})
        assert not bool(has) and passed is None and bool(has_seq)


def _map_model():
    """SequenceMap of a body adding a tensor to each element and taking its shape."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["element", "bias"], ["sum"]),
            helper.make_node("Shape", ["element"], ["shape"]),
        ],
        "body",
        [helper.make_tensor_value_info("element", FLOAT, None)]
        + [helper.make_tensor_value_info("bias", FLOAT, None)],
        [
            helper.make_tensor_value_info("sum", FLOAT, None),
            helper.make_tensor_value_info("shape", INT64, None),
        ],
    )
    return _model(
        [helper.make_node("SequenceMap", ["xs", "bias"], ["sums", "shapes"], body=body)],
        [_sequence("xs"), helper.make_tensor_value_info("bias", FLOAT, None)],
        [_sequence("sums"), _sequence("shapes", INT64)],
    )


def test_sequence_map_with_a_tensor_input_and_two_outputs():
    proto = _map_model()
    with rtsoa.InferenceSession(proto) as model:
        bias = np.float32([1.5, -2.0, 0.25])
        elements = [RNG.standard_normal((k + 1, 3)).astype(np.float32) for k in range(3)]
        # onnx.reference's SequenceMap fails on a tensor input: judged by numpy
        sums, shapes = model.run(None, {"xs": elements, "bias": bias})
        _same(sums, [element + bias for element in elements])
        _same(shapes, [np.array(element.shape, np.int64) for element in elements])
        assert model.run(None, {"xs": [], "bias": bias}) == [[], []]


def test_sequence_map_of_two_sequences_refuses_different_lengths():
    body = helper.make_graph(
        [helper.make_node("Mul", ["a", "b"], ["product"])],
        "body",
        [helper.make_tensor_value_info(n, FLOAT, None) for n in "ab"],
        [helper.make_tensor_value_info("product", FLOAT, None)],
    )
    proto = _model(
        [helper.make_node("SequenceMap", ["xs", "ys"], ["products"], body=body, name="map")],
        [_sequence("xs"), _sequence("ys")],
        [_sequence("products")],
    )
    with rtsoa.InferenceSession(proto) as model:
        _check(proto, {"xs": _arrays(2), "ys": _arrays(2)}, model)
        with pytest.raises(LoweringError, match=r"SequenceMap node 'map' .* different lengths"):
            model.run(None, {"xs": _arrays(2), "ys": _arrays(3)})


def test_bad_sequence_inputs_are_typed_errors_naming_the_input():
    with rtsoa.InferenceSession(CONCAT) as model:
        t = _arrays(1)[0]
        with pytest.raises(ModelInputError, match="input 'xs' is a sequence of tensors"):
            model.run(None, {"xs": t, "t": t})
        with pytest.raises(ModelInputError, match="input 't' is a tensor"):
            model.run(None, {"xs": [t], "t": [t]})
        mixed = [t, t.astype(np.float64)]
        with pytest.raises(ModelInputError, match="input 'xs': a sequence's elements share"):
            model.run(None, {"xs": mixed, "t": t})
        with pytest.raises(ModelInputError, match="the model declares float32"):
            model.run(None, {"xs": [t.astype(np.float64)], "t": t})
        with pytest.raises(ModelInputError, match="not an optional: None given"):
            model.run(None, {"xs": None, "t": t})
        with pytest.raises(ModelInputError, match="input 'xs' is not given"):
            model.run(None, {"t": t})
        many = [np.zeros(1, np.float32)] * (rtsoa.limits.LoweringLimits().sequence_elements + 1)
        with pytest.raises(ModelInputError, match="LoweringLimits.sequence_elements"):
            model.run(None, {"xs": many, "t": t})
        assert model.describe()["specialisations"] == 0


def test_the_backend_and_rtsoa_run_take_sequences(tmp_path):
    t = _arrays(1)[0]
    xs = _arrays(2)
    outputs = rtsoa.backend.run_model(CONCAT, {"xs": xs, "t": t})
    assert outputs.length == 2 and len(outputs.more) == 3
    np.testing.assert_array_equal(outputs.joined, np.concatenate(xs))
    path = tmp_path / "concat.onnx"
    path.write_bytes(CONCAT.SerializeToString())
    inputs, results = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, **{"xs[0]": xs[0], "xs[1]": xs[1], "t": t})
    assert main(["run", str(path), "--inputs", str(inputs), "--outputs", str(results)]) == 0
    with np.load(results) as written:
        assert sorted(written.files) == ["joined", "length", "more[0]", "more[1]", "more[2]"]
        np.testing.assert_array_equal(written["more[2]"], t)
        np.testing.assert_array_equal(written["joined"], np.concatenate(xs))


def test_a_position_fed_as_an_input_is_part_of_the_signature():
    proto = _model(
        [helper.make_node("SequenceAt", ["xs", "k"], ["chosen"])],
        [_sequence("xs"), helper.make_tensor_value_info("k", INT64, [])],
        [helper.make_tensor_value_info("chosen", FLOAT, None)],
    )
    xs = _arrays(3)
    with rtsoa.InferenceSession(proto) as model:
        for k in (0, -1, 2, 0):
            _check(proto, {"xs": xs, "k": np.array(k, np.int64)}, model)
        assert model.describe()["specialisations"] == 3
        with pytest.raises(LoweringError, match="position 3 is out of range"):
            model.run(None, {"xs": xs, "k": np.array(3, np.int64)})
