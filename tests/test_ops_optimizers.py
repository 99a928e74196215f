"""The ai.onnx.preview.training optimizers (rtsoa/lowering/training.py): Adagrad, Adam and
Momentum composed at lowering, judged by onnx.reference (onnxruntime's CPU build has none of
them) over several tensors of different shapes, the first update (T = 0: Adam without bias
correction, Momentum with beta 1) and later ones, float32 and float64, each attribute, and
the refusals naming the node."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa import InferenceSession
from rtsoa.errors import LoweringError

DOMAIN = "ai.onnx.preview.training"
SHAPES = [(3, 4), (5,), (2, 1, 3)]
LETTERS = {"Adagrad": "XGH", "Adam": "XGVH", "Momentum": "XGV"}  # inputs after R and T
RNG = np.random.default_rng(31)


def optimizer(op, groups, count, dtype=np.float32, outputs=None, **attributes):
    """A model of one `op` node over `count` tensors with `groups` inputs each (X, G, and the
    accumulators), all graph inputs; every output named unless `outputs` says which."""
    elem = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    letters = LETTERS[op]
    assert len(letters) == groups
    names = [f"{group}{i}" for group in letters for i in range(count)]
    results = [f"{group}{i}_new" for group in "X" + letters[2:] for i in range(count)]
    if outputs is not None:
        results = [name if name in outputs else "" for name in results]
    node = helper.make_node(
        op, ["R", "T", *names], results, domain=DOMAIN, name="step", **attributes
    )
    shapes = {f"{group}{i}": SHAPES[i] for group in "XGVH" for i in range(count)}
    graph = helper.make_graph(
        [node],
        "optimizer",
        [
            helper.make_tensor_value_info("R", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("T", TensorProto.INT64, []),
        ]
        + [helper.make_tensor_value_info(name, elem, shapes[name]) for name in names],
        [helper.make_tensor_value_info(name, elem, None) for name in results if name],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    )


def feeds(op, count, step, dtype=np.float32):
    values = {"R": np.array(0.1, np.float32), "T": np.array(step, np.int64)}
    for group in LETTERS[op]:
        for i in range(count):
            data = RNG.standard_normal(SHAPES[i])
            if group == "H":
                data = np.abs(data)  # a sum of squares
            values[f"{group}{i}"] = data.astype(dtype)
    return values


def check(model, inputs, rtol):
    want = ReferenceEvaluator(model).run(None, inputs)
    with InferenceSession(model) as session:
        got = session.run(None, inputs)
    assert len(got) == len(want)
    for have, expected in zip(got, want, strict=True):
        # the reference returns some in float64 (its scalars are); ONNX gives X's type
        assert have.dtype == inputs["X0"].dtype and have.shape == expected.shape
        np.testing.assert_allclose(have, expected, rtol=rtol, atol=rtol)


CASES = [
    ("Adagrad", 3, dict(decay_factor=0.1, epsilon=1e-6, norm_coefficient=0.01)),
    ("Adagrad", 3, {}),
    (
        "Adam",
        4,
        dict(alpha=0.8, beta=0.95, epsilon=1e-7, norm_coefficient=0.02, norm_coefficient_post=0.1),
    ),
    ("Adam", 4, {}),
    ("Momentum", 3, dict(alpha=0.9, beta=0.5, mode="standard", norm_coefficient=0.01)),
    ("Momentum", 3, dict(alpha=0.7, beta=0.3, mode="nesterov", norm_coefficient=0.0)),
]


@pytest.mark.parametrize("step", [0, 3])
@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("op, groups, attributes", CASES)
def test_matches_onnx_reference(op, groups, attributes, count, step):
    check(optimizer(op, groups, count, **attributes), feeds(op, count, step), 1e-5)


def numpy_step(op, inputs, count, alpha=0.9, beta=0.999, epsilon=0.0, **attributes):
    """The update as ONNX's operator definitions write it, in float64 (onnx.reference casts
    Adam's results of several tensors to float32, so it cannot judge float64)."""
    r, t = float(inputs["R"]), int(inputs["T"])
    # ONNX float attributes are float32
    alpha, beta, epsilon = (float(np.float32(value)) for value in (alpha, beta, epsilon))
    attributes = {
        key: value if isinstance(value, str) else float(np.float32(value))
        for key, value in attributes.items()
    }
    norm = attributes.get("norm_coefficient", 0.0)
    xs, others = [], []
    for i in range(count):
        x, g = inputs[f"X{i}"], inputs[f"G{i}"]
        g = norm * x + g
        if op == "Adagrad":
            h = inputs[f"H{i}"] + g * g
            rate = r / (1 + t * attributes.get("decay_factor", 0.0))
            xs.append(x - rate * g / (np.sqrt(h) + epsilon))
            others.append([h])
        elif op == "Adam":
            v = alpha * inputs[f"V{i}"] + (1 - alpha) * g
            h = beta * inputs[f"H{i}"] + (1 - beta) * g * g
            rate = r * np.sqrt(1 - beta**t) / (1 - alpha**t) if t > 0 else r
            moved = x - rate * v / (np.sqrt(h) + epsilon)
            xs.append((1 - attributes.get("norm_coefficient_post", 0.0)) * moved)
            others.append([v, h])
        else:
            v = alpha * inputs[f"V{i}"] + (beta if t > 0 else 1.0) * g
            step = v if attributes["mode"] == "standard" else g + alpha * v
            xs.append(x - r * step)
            others.append([v])
    return xs + [group[k] for k in range(len(others[0])) for group in others]


@pytest.mark.parametrize("step", [0, 5])
@pytest.mark.parametrize("op, groups, attributes", CASES)
def test_float64_matches_the_definitions(op, groups, attributes, step):
    model = optimizer(op, groups, 2, np.float64, **attributes)
    inputs = feeds(op, 2, step, np.float64)
    with InferenceSession(model) as session:
        got = session.run(None, inputs)
    want = numpy_step(op, inputs, 2, **attributes)
    assert len(got) == len(want)
    for have, expected in zip(got, want, strict=True):
        assert have.dtype == np.float64
        np.testing.assert_allclose(have, expected, rtol=1e-12, atol=1e-12)


def test_only_the_tensors_named_are_computed():
    model = optimizer("Adam", 4, 2, outputs={"X0_new", "H1_new"})
    check(model, feeds("Adam", 2, 2), 1e-5)


@pytest.mark.parametrize(
    "model, message",
    [
        (optimizer("Momentum", 3, 1, alpha=0.9, beta=0.5, norm_coefficient=0.0), "mode None"),
        (optimizer("Momentum", 3, 1, alpha=0.9, mode="standard", norm_coefficient=0.0), "'beta'"),
        (
            optimizer("Momentum", 3, 1, alpha=0.9, beta=0.5, mode="heavy", norm_coefficient=0),
            "mode 'heavy'",
        ),
    ],
    ids=["no-mode", "no-beta", "bad-mode"],
)
def test_bad_attributes_are_refused_naming_the_node(model, message):
    with pytest.raises(LoweringError, match=message) as caught:
        InferenceSession(model)
    assert "Momentum node 'step'" in str(caught.value)


def test_wrong_input_counts_and_types_are_refused():
    model = optimizer("Adagrad", 3, 2)
    del model.graph.node[0].input[-1]  # 2 + 5 inputs: not 3 per tensor
    with pytest.raises(LoweringError, match="3 tensors per optimized tensor"):
        InferenceSession(model)
    model = optimizer("Adagrad", 3, 1)
    for value in model.graph.input[2:]:
        value.type.tensor_type.elem_type = TensorProto.INT32
    with pytest.raises(LoweringError, match="float32 or float64"):
        InferenceSession(model)
