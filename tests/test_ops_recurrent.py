"""LSTM, GRU and RNN beyond the ONNX node suite: every direction with and without biases,
initial states, sequence lengths (0 included) and clip; peepholes and input_forget (LSTM),
linear_before_reset (GRU); every activation function with its alpha / beta; all against
onnxruntime (single thread). Layout 1, float64 and a zero batch, which onnxruntime's CPU
kernels do not run, against onnx.reference. A lowered two-layer encoder over a symbolic
sequence length, run at two lengths, and the refusals.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from rtsoa.errors import LoweringError, OpError
from rtsoa.lowering import lower
from rtsoa.ops.abi import STATUS_OP_BAD_ATTRIBUTE, STATUS_OP_BAD_INDEX, STATUS_OP_BAD_SHAPE
from rtsoa.ops.host import run_numpy
from rtsoa.testing.models import run_onnxruntime
from tests.model_checks import run_and_compare, run_clean

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
OUTPUTS = {"LSTM": ["Y", "Y_h", "Y_c"], "GRU": ["Y", "Y_h"], "RNN": ["Y", "Y_h"]}
NAMES = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
ELEMENT = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE}
rng = np.random.default_rng(122)


def inputs_for(
    op,
    seq=5,
    batch=3,
    width=4,
    hidden=6,
    direction="forward",
    layout=0,
    bias=True,
    lengths=None,
    initial=True,
    peepholes=False,
    kind=np.float32,
):
    """The op's inputs, random (None: absent), in ONNX order, trailing absent ones dropped."""
    dirs = 2 if direction == "bidirectional" else 1
    gh = GATES[op] * hidden
    states = (batch, dirs, hidden) if layout else (dirs, batch, hidden)

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(kind)

    values = [
        normal(*((batch, seq, width) if layout else (seq, batch, width))),
        normal(dirs, gh, width, scale=0.5),
        normal(dirs, gh, hidden, scale=0.5),
        normal(dirs, 2 * gh) if bias else None,
        None if lengths is None else np.array(lengths, np.int32),
        normal(*states) if initial else None,
    ]
    if op == "LSTM":
        values += [normal(*states) if initial else None]
        values += [normal(dirs, 3 * hidden) if peepholes else None]
    while values[-1] is None:
        values.pop()
    return values


def feeds_of(values):
    """The present inputs by name."""
    return {
        name: value
        for name, value in zip(NAMES[: len(values)], values, strict=True)
        if value is not None
    }


def node_model(op, values, outputs=None, opset=22, **attributes):
    outputs = OUTPUTS[op] if outputs is None else outputs
    names = [name if name in feeds_of(values) else "" for name in NAMES[: len(values)]]
    element = ELEMENT[values[0].dtype]
    graph = helper.make_graph(
        [helper.make_node(op, names, outputs, **attributes)],
        op.lower(),
        [
            helper.make_tensor_value_info(
                name, TensorProto.INT32 if name == "sequence_lens" else element, value.shape
            )
            for name, value in feeds_of(values).items()
        ],
        [helper.make_tensor_value_info(name, element, None) for name in outputs if name],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def check(op, judge="onnxruntime", attributes=None, **shape):
    """The op through run_numpy against `judge`, every output."""
    attributes = {"hidden_size": shape.get("hidden", 6), **(attributes or {})}
    values = inputs_for(op, **shape)
    if shape.get("direction"):
        attributes["direction"] = shape["direction"]
    if shape.get("layout"):
        attributes["layout"] = shape["layout"]
    model = node_model(op, values, **attributes)
    feeds = feeds_of(values)
    if judge == "reference":
        want = ReferenceEvaluator(model).run(None, feeds)
    else:
        want = [run_onnxruntime(model, feeds)[name] for name in OUTPUTS[op]]
    got = run_numpy(op, values, attributes, n_out=len(OUTPUTS[op]))
    tolerance = 1e-12 if values[0].dtype == np.float64 else 2e-5
    for name, mine, theirs in zip(OUTPUTS[op], got, want, strict=True):
        assert mine.shape == theirs.shape and mine.dtype == theirs.dtype, name
        np.testing.assert_allclose(mine, theirs, rtol=tolerance, atol=tolerance, err_msg=name)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_every_direction_with_and_without_optional_inputs(op, direction):
    check(op, direction=direction)
    check(op, direction=direction, bias=False, initial=False)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_sequence_lengths_and_clip(op):
    """Rows shorter than the sequence (one of length 0: zero states) in both directions;
    clip small enough to bound most gate inputs."""
    check(op, direction="bidirectional", lengths=[5, 0, 3])
    check(op, direction="reverse", lengths=[2, 5, 1], attributes={"clip": 0.5})


def test_lstm_peepholes_and_input_forget():
    check("LSTM", direction="bidirectional", peepholes=True)
    check("LSTM", peepholes=True, attributes={"input_forget": 1})


def test_gru_linear_before_reset():
    check("GRU", direction="bidirectional", attributes={"linear_before_reset": 1})
    check("GRU", lengths=[1, 4, 5], attributes={"linear_before_reset": 1, "clip": 0.8})


@pytest.mark.parametrize(
    "op, attributes",
    [
        ("RNN", {"activations": ["LeakyRelu"], "activation_alpha": [0.3]}),
        ("RNN", {"activations": ["Relu"]}),
        ("RNN", {"activations": ["ThresholdedRelu"], "activation_alpha": [0.4]}),
        ("RNN", {"activations": ["Affine"], "activation_alpha": [0.4], "activation_beta": [0.3]}),
        (
            "RNN",
            {"activations": ["ScaledTanh"], "activation_alpha": [0.4], "activation_beta": [2.5]},
        ),
        ("GRU", {"activations": ["HardSigmoid", "Softsign"]}),  # defaults 0.2 / 0.5
        ("GRU", {"activations": ["HardSigmoid", "Elu"], "activation_alpha": [0.3, 0.5]}),
        ("RNN", {"activations": ["Softplus"]}),
        ("RNN", {"activations": ["Elu"]}),  # default alpha 1.0
        ("LSTM", {"activations": ["Sigmoid", "LeakyRelu", "Softsign"]}),  # default 0.01
        (
            "LSTM",
            {
                "activations": ["HardSigmoid", "Tanh", "Affine"],
                "activation_alpha": [0.3, 0.7],
                "activation_beta": [0.4, 0.1],
            },
        ),
    ],
)
def test_activation_functions_with_alpha_and_beta(op, attributes):
    """alpha / beta are consumed in order by the functions that take them."""
    check(op, attributes=attributes)


def test_bidirectional_activation_lists():
    attributes = {
        "activations": ["Relu", "LeakyRelu"],
        "activation_alpha": [0.2],
    }
    check("RNN", direction="bidirectional", attributes=attributes)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_layout_1_and_float64_against_onnx_reference(op):
    check(op, judge="reference", direction="bidirectional", layout=1)
    check(op, judge="reference", direction="reverse", kind=np.float64)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_zero_sizes(op):
    """No steps (the states are zeros, as onnxruntime's RNN gives them; its LSTM and GRU
    abort), no batch rows, no input features."""
    values = inputs_for(op, seq=0, direction="bidirectional")
    outputs = run_numpy(op, values, {"direction": "bidirectional"}, n_out=len(OUTPUTS[op]))
    assert outputs[0].shape == (0, 2, 3, 6)
    for state in outputs[1:]:
        assert state.shape == (2, 3, 6)
        np.testing.assert_array_equal(state, 0.0)
    if op == "RNN":
        check(op, seq=0)
    check(op, judge="reference", batch=0, layout=1)
    check(op, judge="reference", width=0)


def test_a_length_outside_the_sequence_fails_with_bad_index():
    values = inputs_for("GRU", lengths=[6, 1, 1])
    with pytest.raises(OpError) as error:
        run_numpy("GRU", values, {}, n_out=2)
    assert error.value.status == STATUS_OP_BAD_INDEX
    values[4] = np.array([-1, 1, 1], np.int32)
    with pytest.raises(OpError) as error:
        run_numpy("GRU", values, {}, n_out=2)
    assert error.value.status == STATUS_OP_BAD_INDEX


def test_shapes_and_codes_the_op_refuses():
    values = inputs_for("LSTM")
    with pytest.raises(OpError) as error:  # W of another hidden size
        run_numpy("LSTM", [values[0], values[1][:, :20], values[2]], {}, n_out=3)
    assert error.value.status == STATUS_OP_BAD_SHAPE
    with pytest.raises(OpError) as error:
        run_numpy("LSTM", values, {"hidden_size": 5}, n_out=3)
    assert error.value.status == STATUS_OP_BAD_SHAPE
    with pytest.raises(OpError) as error:
        run_numpy("LSTM", values, {"activations": ["Sigmoid", "Tanh", "Swish"]}, n_out=3)
    assert error.value.status == STATUS_OP_BAD_ATTRIBUTE


# -- lowered ----------------------------------------------------------------------------------


def test_only_the_final_state_wanted():
    """Y left out (an empty name) while Y_h is an output."""
    values = inputs_for("LSTM", direction="bidirectional")
    model = node_model(
        "LSTM", values, outputs=["", "Y_h"], direction="bidirectional", hidden_size=6
    )
    feeds = feeds_of(values)
    got = run_clean(lower(model), feeds)
    want = run_onnxruntime(model, feeds)
    assert sorted(got) == ["Y_h"]
    np.testing.assert_allclose(got["Y_h"], want["Y_h"], rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_two_layer_encoder_over_a_symbolic_sequence_length(op):
    """X [seq, 2, 8] -> a bidirectional layer (Y reshaped to [seq, 2, 2 * 16]) -> a forward
    layer -> Y_h; weights random initializers, seq symbolic, run at lengths 3 and 11."""
    gates, width, hidden, batch = GATES[op], 8, 16, 2
    weights = {
        "W1": rng.standard_normal((2, gates * hidden, width)) * 0.3,
        "R1": rng.standard_normal((2, gates * hidden, hidden)) * 0.3,
        "B1": rng.standard_normal((2, 2 * gates * hidden)) * 0.1,
        "W2": rng.standard_normal((1, gates * hidden, 2 * hidden)) * 0.3,
        "R2": rng.standard_normal((1, gates * hidden, hidden)) * 0.3,
        "B2": rng.standard_normal((1, 2 * gates * hidden)) * 0.1,
        "merged": np.array([0, 0, -1], np.int64),
    }
    nodes = [
        helper.make_node(
            op, ["x", "W1", "R1", "B1"], ["y1"], direction="bidirectional", hidden_size=hidden
        ),
        helper.make_node("Transpose", ["y1"], ["y1t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["y1t", "merged"], ["h1"]),
        helper.make_node(op, ["h1", "W2", "R2", "B2"], ["", "state"], hidden_size=hidden),
    ]
    graph = helper.make_graph(
        nodes,
        "encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", batch, width])],
        [helper.make_tensor_value_info("state", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.asarray(value, np.float32 if k != "merged" else None), k)
            for k, value in weights.items()
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 10
    runs = [{"x": rng.standard_normal((n, batch, width)).astype(np.float32)} for n in (3, 11)]
    run_and_compare(model, runs)


# -- refusals at lowering ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op, attributes, opset, named",
    [
        ("RNN", {"direction": "sideways"}, 22, "direction 'sideways'"),
        ("GRU", {"activations": ["Sigmoid"]}, 22, "1 activations given; GRU forward takes 2"),
        ("RNN", {"activations": ["Gelu"]}, 22, "activation function 'Gelu'"),
        ("RNN", {"activations": ["ThresholdedRelu"]}, 22, "needs its activation_alpha"),
        ("RNN", {"activations": ["Affine"], "activation_alpha": [1.0]}, 22, "activation_beta"),
        ("LSTM", {"layout": 0}, 13, "'layout' is defined from opset 14"),
        ("LSTM", {"layout": 2}, 22, "layout 2 is not 0 or 1"),
        ("LSTM", {"input_forget": 2}, 22, "input_forget 2"),
        ("GRU", {"linear_before_reset": 1}, 1, "defined from opset 3"),
        ("RNN", {"clip": 0.0}, 22, "clip 0.0 is not positive"),
        ("RNN", {"hidden_size": 5}, 22, "hidden_size 5 needs"),
        ("RNN", {"direction": "bidirectional"}, 22, "R has 1 direction"),
    ],
)
def test_attributes_are_refused_by_name(op, attributes, opset, named):
    values = inputs_for(op, bias=False, initial=False)
    model = node_model(op, values, opset=opset, **attributes)
    with pytest.raises(LoweringError, match=named) as error:
        lower(model)
    assert f"{op} node" in str(error.value)


def test_int64_sequence_lengths_are_refused_by_name():
    values = inputs_for("RNN", lengths=[1, 2, 3])
    model = node_model("RNN", values)
    model.graph.input[4].type.tensor_type.elem_type = TensorProto.INT64
    with pytest.raises(LoweringError, match=r"input 4 \('sequence_lens'\) has element type int64"):
        lower(model)
