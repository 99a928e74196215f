"""Pow with an exponent of another element type and Clip on integers
(`rtsoa.lowering.mixed_types`), beyond the node suite: every base / exponent pairing numpy
computes, broadcasting, zero-size tensors, Clip with either bound, both, crossed bounds and
one-element bounds of rank 1, against numpy's definition (onnx.reference computes
`np.power(x, y).astype(x.dtype)` and `np.clip`) and onnxruntime where it runs the case; the
refusals name the node."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.errors import LoweringError
from rtsoa.lowering import lower
from rtsoa.testing.models import run_onnxruntime
from tests.model_checks import run_clean

ELEMENT = {
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.int16): TensorProto.INT16,
    np.dtype(np.uint16): TensorProto.UINT16,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.uint32): TensorProto.UINT32,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.uint64): TensorProto.UINT64,
}
rng = np.random.default_rng(146)


def model_of(op, feeds, output_kind, attributes=None, constants=None, opset=18):
    """One node named `the_node` over graph inputs `feeds` then constant inputs `constants`
    ({name: array or None for an absent input})."""
    constants = constants or {}
    names = list(feeds) + [name if value is not None else "" for name, value in constants.items()]
    nodes = [
        helper.make_node(
            "Constant",
            [],
            [name],
            value=helper.make_tensor(
                name, ELEMENT[value.dtype], value.shape, value.reshape(-1).tolist()
            ),
        )
        for name, value in constants.items()
        if value is not None
    ]
    nodes.append(helper.make_node(op, names, ["y"], name="the_node", **(attributes or {})))
    graph = helper.make_graph(
        nodes,
        "mixed",
        [helper.make_tensor_value_info(n, ELEMENT[a.dtype], a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info("y", ELEMENT[np.dtype(output_kind)], None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


POWERS = [
    (np.float32, np.int32),
    (np.float32, np.int64),
    (np.float32, np.uint32),
    (np.float64, np.int8),
    (np.float16, np.int64),
    (np.int32, np.float32),
    (np.int64, np.float64),
    (np.int32, np.int64),
    (np.int64, np.uint8),
    (np.float32, np.float64),
]


@pytest.mark.parametrize("base_kind, exponent_kind", POWERS)
def test_pow_of_mixed_types(base_kind, exponent_kind):
    base = rng.integers(-4, 5, (2, 3)).astype(base_kind)
    if np.dtype(base_kind).kind == "f":
        base = (base + rng.random((2, 3))).astype(base_kind)
    exponent = rng.integers(0, 4, (3,)).astype(exponent_kind)
    if np.dtype(exponent_kind).kind == "f":
        exponent = (exponent + 0.5).astype(exponent_kind)
        base = np.abs(base)  # a fractional power of a negative number is NaN
    feeds = {"x": base, "e": exponent}
    got = run_clean(lower(model_of("Pow", feeds, base_kind)), feeds)["y"]
    with np.errstate(invalid="ignore"):
        want = np.power(base.astype(np.float64), exponent.astype(np.float64)).astype(base_kind)
    if np.dtype(base_kind).kind in "iu" and np.dtype(exponent_kind).kind in "iu":
        want = np.power(base.astype(np.int64), exponent.astype(np.int64)).astype(base_kind)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_pow_of_mixed_types_matches_onnxruntime_and_zero_size():
    feeds = {"x": rng.random((4, 5)).astype(np.float32), "e": np.arange(5, dtype=np.int64)}
    model = model_of("Pow", feeds, np.float32)
    got = run_clean(lower(model), feeds)["y"]
    np.testing.assert_allclose(got, run_onnxruntime(model, feeds)["y"], rtol=1e-6)
    empty = {"x": np.zeros((0, 5), np.float32), "e": np.arange(5, dtype=np.int64)}
    got = run_clean(lower(model_of("Pow", empty, np.float32)), empty)["y"]
    assert got.shape == (0, 5) and got.dtype == np.float32


# Pow with a uint64 exponent, and the ones still refused: tests/test_ops_pow_uint64.py


CLIPS = [
    (np.int8, -5, 7),
    (np.uint8, 3, None),
    (np.int16, None, -2),
    (np.uint16, 10, 20),
    (np.int32, 9, -9),  # min above max: every element is max
    (np.uint32, None, None),
    (np.int64, -(2**40), 2**40),
    (np.uint64, 5, 2**63),
]


@pytest.mark.parametrize("kind, low, high", CLIPS)
def test_clip_on_integers(kind, low, high):
    info = np.iinfo(kind)
    x = rng.integers(info.min, info.max, (3, 4), dtype=kind, endpoint=True)
    x[0, :2] = (info.min, info.max)
    bounds = {
        "low": None if low is None else np.array(low, kind),
        "high": None if high is None else np.array(high, kind),
    }
    got = run_clean(lower(model_of("Clip", {"x": x}, kind, constants=bounds)), {"x": x})["y"]
    want = x
    if low is not None:
        want = np.maximum(want, kind(low))
    if high is not None:
        want = np.minimum(want, kind(high))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_clip_on_integers_matches_onnxruntime_with_rank_1_bounds():
    x = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    bounds = {"low": np.array([-2], np.int32), "high": np.array([3], np.int32)}
    model = model_of("Clip", {"x": x}, np.int32, constants=bounds)
    got = run_clean(lower(model), {"x": x})["y"]
    assert got.shape == (3, 4)
    np.testing.assert_array_equal(got, run_onnxruntime(model, {"x": x})["y"])
    scalar = np.array(-3, np.int32)  # a 0-d x keeps its rank with rank-1 bounds
    model = model_of("Clip", {"x": scalar}, np.int32, constants=bounds)
    got = run_clean(lower(model), {"x": scalar})
    assert got["y"].shape == () and got["y"] == -2


def test_clip_on_integers_refuses_a_bound_that_is_not_a_scalar():
    x = np.arange(4, dtype=np.int8)
    bounds = {"low": np.array([0, 1], np.int8), "high": None}
    with pytest.raises(LoweringError, match=r"the_node.*Clip's min 'low' has shape \[2\]"):
        lower(model_of("Clip", {"x": x}, np.int8, constants=bounds))


def test_clip_on_integers_refuses_a_bound_of_unknown_shape():
    x, low = np.arange(4, dtype=np.int8), np.array(1, np.int8)
    model = model_of("Clip", {"x": x, "low": low}, np.int8)
    model.graph.input[1].type.tensor_type.ClearField("shape")
    with pytest.raises(LoweringError, match=r"the_node.*shape of Clip's min 'low' is not known"):
        lower(model)
