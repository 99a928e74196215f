"""The lowering's Conv -> Add -> Relu / Clip fusion (rtsoa/lowering/fuse.py, op FusedConv).

A fused chain must give the unfused ops' results bit for bit (the same float operations in the
same order, NaN included) and onnxruntime's within the model tests' tolerance; a chain whose
result could differ (a residual that broadcasts, an intermediate read elsewhere or returned, a
Clip bound computed at run time) is left as the model has it.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.graph.inspect import op_counts
from rtsoa.lowering import lower
from rtsoa.ops.host import OpError, infer_shapes, run_numpy
from rtsoa.testing.cnn import mobilenet_v2, resnet
from rtsoa.testing.models import FLOAT, model, run_onnxruntime
from tests.model_checks import ATOL, RTOL, run_clean

RNG = np.random.default_rng(5)
DOUBLE = TensorProto.DOUBLE


def _check(proto, inputs, fused_ops, oracle=True):
    """Lower with and without fusion: the fused graph has `fused_ops` FusedConv ops, both give
    the same bits, and (float32) onnxruntime's values. Returns the fused graph's op counts."""
    fused = lower(proto)
    plain = lower(proto, fuse=False)
    counts = op_counts(fused)
    assert counts.get("FusedConv", 0) == fused_ops, counts
    assert "FusedConv" not in op_counts(plain)
    got = run_clean(fused, inputs)
    unfused = run_clean(plain, inputs)
    want = run_onnxruntime(proto, inputs) if oracle else unfused
    for name, expected in want.items():
        assert got[name].dtype == expected.dtype and got[name].shape == expected.shape, name
        np.testing.assert_array_equal(got[name], unfused[name])
        np.testing.assert_allclose(got[name], expected, rtol=RTOL, atol=ATOL, equal_nan=True)
    return counts


def _weights(cout, cin, k=3, dtype=np.float32):
    return (RNG.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(dtype)


def _block(nodes, extra_outputs=(), dims=(1, 4, 6, 6), elem=FLOAT, dtype=np.float32, inits=()):
    """A model over input x (and a residual input r) of `dims` with output y."""
    channels = dims[1]
    initializers = [
        ("w", _weights(channels, channels, dtype=dtype)),
        ("bias", RNG.standard_normal(channels).astype(dtype)),
        *inits,
    ]
    outputs = [("y", elem, None)] + [(name, elem, None) for name in extra_outputs]
    return model(nodes, [("x", elem, list(dims)), ("r", elem, list(dims))], outputs, initializers)


def _inputs(dims=(1, 4, 6, 6), dtype=np.float32):
    return {
        "x": RNG.standard_normal(dims).astype(dtype),
        "r": RNG.standard_normal(dims).astype(dtype),
    }


def _add_relu(add=("c", "r")):
    return [helper.make_node("Add", list(add), ["s"]), helper.make_node("Relu", ["s"], ["y"])]


def _conv(bias=True, out="c"):
    inputs = ["x", "w", "bias"] if bias else ["x", "w"]
    return helper.make_node("Conv", inputs, [out], pads=[1, 1, 1, 1])


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("residual_first", [True, False])
def test_conv_add_relu_is_one_op(bias, residual_first):
    nodes = [_conv(bias), *_add_relu(("r", "c") if residual_first else ("c", "r"))]
    counts = _check(_block(nodes), _inputs(), fused_ops=1)
    assert set(counts) == {"FusedConv"}


def test_conv_relu_conv_add_and_clip_each_fuse():
    bounds = [("lo", np.array(0.0, np.float32)), ("hi", np.array(0.5, np.float32))]
    nodes = [
        _conv(),
        helper.make_node("Relu", ["c"], ["a"]),
        helper.make_node("Conv", ["a", "w"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r"], ["s"]),
        helper.make_node("Conv", ["s", "w", "bias"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c3", "lo", "hi"], ["y"]),
    ]
    counts = _check(_block(nodes, inits=bounds), _inputs(), fused_ops=3)
    assert set(counts) == {"FusedConv"}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_add_clip_is_one_op_with_the_clip_ops_bits(bias, dtype):
    """Conv -> Add of a residual -> Clip (Relu6's bounds, and bounds a float32 cannot hold for
    float64) in one pass over Y: the unfused ops' bits, NaN and infinities included."""
    elem = FLOAT if dtype == np.float32 else DOUBLE
    for low, high in ((0.0, 6.0), (-0.1, 0.3)):
        bounds = [("lo", np.array(low, dtype)), ("hi", np.array(high, dtype))]
        nodes = [_conv(bias), *_add_relu()[:1], helper.make_node("Clip", ["s", "lo", "hi"], ["y"])]
        proto = _block(nodes, elem=elem, dtype=dtype, inits=bounds)
        inputs = _inputs(dtype=dtype)
        inputs["r"][0, 1, 2, :] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30]
        _check(proto, inputs, fused_ops=1, oracle=dtype == np.float32)


def test_clip_with_one_bound_and_clip_attributes_fuse():
    nodes = [_conv(), helper.make_node("Clip", ["c", "", "hi"], ["y"])]
    hi = [("hi", np.array(0.25, np.float32))]
    _check(_block(nodes, inits=hi), _inputs(), fused_ops=1)
    old = model(
        [_conv(), helper.make_node("Clip", ["c"], ["y"], min=-0.1, max=0.3)],
        [("x", FLOAT, [1, 4, 6, 6])],
        [("y", FLOAT, None)],
        [("w", _weights(4, 4)), ("bias", RNG.standard_normal(4).astype(np.float32))],
        opset=10,
    )
    _check(old, {"x": RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)}, fused_ops=1)


def test_nan_and_negative_zero_pass_through_as_the_ops_give_them():
    nodes = [_conv(), *_add_relu()]
    inputs = _inputs()
    inputs["r"][0, 1, 2, :] = np.nan
    inputs["r"][0, 2, 3, 1] = np.inf
    inputs["x"][0, 0, 0, 0] = np.nan  # NaN through the GEMM into several outputs
    _check(_block(nodes), inputs, fused_ops=1)


def test_float64_and_a_symbolic_batch_fuse():
    nodes = [_conv(), *_add_relu()]
    proto = _block(nodes, dims=("N", 4, 6, 6), elem=DOUBLE, dtype=np.float64)
    for batch in (1, 3):
        # onnxruntime's CPU Conv has no float64 kernel: the unfused ops are the oracle
        _check(proto, _inputs((batch, 4, 6, 6), np.float64), fused_ops=1, oracle=False)


def test_grouped_depthwise_and_pointwise_convs_fuse():
    for group, k in ((4, 3), (2, 3), (1, 1)):
        w = _weights(4, 4 // group, k)
        pads = [k // 2] * 4
        nodes = [
            helper.make_node("Conv", ["x", "w", "bias"], ["c"], pads=pads, group=group),
            helper.make_node("Add", ["r", "c"], ["s"]),
            helper.make_node("Relu", ["s"], ["y"]),
        ]
        proto = model(
            nodes,
            [("x", FLOAT, [2, 4, 5, 5]), ("r", FLOAT, [2, 4, 5, 5])],
            [("y", FLOAT, None)],
            [("w", w), ("bias", RNG.standard_normal(4).astype(np.float32))],
        )
        _check(proto, _inputs((2, 4, 5, 5)), fused_ops=1)


@pytest.mark.parametrize(("k", "stride"), [(3, 1), (3, 2), (5, 2)])
def test_depthwise_convs_fuse_clip_and_residual(k, stride):
    """Depthwise convs (3 x 3: the phase kernel, 5 x 5: the row kernel) fused with Clip
    (MobileNet's Relu6) and with residual + Relu, bit for bit as the unfused ops, a channel
    with an infinite weight among them (the 3 x 3 kernel takes its taps one by one)."""
    channels, size = 6, 11
    out = (size + 2 * (k // 2) - k) // stride + 1
    w = _weights(channels, 1, k)
    w[2, 0, k // 2, k // 2] = np.inf  # the centre tap: never in the padding (ONNX's 0 * inf)
    bounds = [("lo", np.array(0.0, np.float32)), ("hi", np.array(6.0, np.float32))]
    initializers = [("w", w), ("bias", RNG.standard_normal(channels).astype(np.float32))]
    conv = helper.make_node(
        "Conv", ["x", "w", "bias"], ["c"], pads=[k // 2] * 4, group=channels, strides=[stride] * 2
    )
    inputs = {
        "x": 4 * RNG.standard_normal((2, channels, size, size)).astype(np.float32),
        "r": RNG.standard_normal((2, channels, out, out)).astype(np.float32),
    }
    clip = model(
        [conv, helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
        [("x", FLOAT, [2, channels, size, size])],
        [("y", FLOAT, None)],
        initializers + bounds,
    )
    _check(clip, {"x": inputs["x"]}, fused_ops=1)
    residual = model(
        [conv, *_add_relu()],
        [("x", FLOAT, [2, channels, size, size]), ("r", FLOAT, [2, channels, out, out])],
        [("y", FLOAT, None)],
        initializers,
    )
    _check(residual, inputs, fused_ops=1)


def test_chains_that_could_differ_are_not_fused():
    relu = helper.make_node("Relu", ["s"], ["y"])
    add = helper.make_node("Add", ["c", "r"], ["s"])
    # the conv's result is also returned
    counts = _check(_block([_conv(), add, relu], extra_outputs=["c"]), _inputs(), fused_ops=0)
    assert counts == {"Conv": 1, "Add": 1, "Relu": 1}
    # the conv's result read twice
    twice = [_conv(), add, helper.make_node("Mul", ["s", "c"], ["y"])]
    _check(_block(twice), _inputs(), fused_ops=0)
    # a residual that broadcasts: (1, C, 1, 1)
    broadcast = model(
        [_conv(), helper.make_node("Add", ["c", "z"], ["s"]), relu],
        [("x", FLOAT, [1, 4, 6, 6])],
        [("y", FLOAT, None)],
        [
            ("w", _weights(4, 4)),
            ("bias", RNG.standard_normal(4).astype(np.float32)),
            ("z", RNG.standard_normal((1, 4, 1, 1)).astype(np.float32)),
        ],
    )
    counts = _check(broadcast, {"x": RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)}, 0)
    assert counts["Add"] == 1 and counts["Relu"] == 1
    # a Clip bound that is a graph input: computed at run time
    clip = model(
        [_conv(), helper.make_node("Clip", ["c", "lo"], ["y"])],
        [("x", FLOAT, [1, 4, 6, 6]), ("lo", FLOAT, [])],
        [("y", FLOAT, None)],
        [("w", _weights(4, 4)), ("bias", RNG.standard_normal(4).astype(np.float32))],
    )
    inputs = {"x": RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)}
    inputs["lo"] = np.array(0.1, np.float32)
    _check(clip, inputs, fused_ops=0)
    # the Add's result returned: Conv + Add fuse, the Relu stays
    counts = _check(_block([_conv(), add, relu], extra_outputs=["s"]), _inputs(), fused_ops=1)
    assert counts["Relu"] == 1 and "Add" not in counts


@pytest.mark.parametrize("residual_first", [True, False])
def test_a_residual_named_before_the_conv_output_fuses(residual_first):
    """Which Add operand is the residual is decided by name equality, not by name order: "r"
    sorts before the conv output "z" here (before "c" in the other tests)."""
    add = ("r", "z") if residual_first else ("z", "r")
    nodes = [_conv(out="z"), *_add_relu(add)]
    counts = _check(_block(nodes), _inputs(), fused_ops=1)
    assert set(counts) == {"FusedConv"}


def test_only_conv_chains_with_known_equal_dims_fuse():
    """Chains that are not a Conv's (an Add or a Mul before the Relu: names either side of
    "Conv"), a residual larger than the conv's output (the sum broadcasts the conv), and a
    conv and residual of unknown dims: left as the model has them."""
    for op in ("Add", "Mul"):
        nodes = [helper.make_node(op, ["x", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
        _check(_block(nodes), _inputs(), fused_ops=0)
    relu = helper.make_node("Relu", ["s"], ["y"])
    larger = model(
        [_conv(), helper.make_node("Add", ["c", "r"], ["s"]), relu],
        [("x", FLOAT, [1, 4, 6, 6]), ("r", FLOAT, [2, 4, 6, 6])],
        [("y", FLOAT, None)],
        [("w", _weights(4, 4)), ("bias", RNG.standard_normal(4).astype(np.float32))],
    )
    inputs = {
        "x": RNG.standard_normal((1, 4, 6, 6)).astype(np.float32),
        "r": RNG.standard_normal((2, 4, 6, 6)).astype(np.float32),
    }
    counts = _check(larger, inputs, fused_ops=0)
    assert counts["Add"] == 1 and counts["Relu"] == 1
    unknown = model(
        [_conv(), helper.make_node("Add", ["c", "r"], ["s"]), relu],
        [("x", FLOAT, None), ("r", FLOAT, None)],
        [("y", FLOAT, None)],
        [("w", _weights(4, 4)), ("bias", RNG.standard_normal(4).astype(np.float32))],
    )
    inputs = {
        "x": RNG.standard_normal((1, 4, 6, 6)).astype(np.float32),
        "r": RNG.standard_normal((1, 4, 1, 1)).astype(np.float32),  # broadcasts at run time
    }
    _check(unknown, inputs, fused_ops=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_clip_without_min_keeps_the_dtypes_lowest_value(dtype):
    """Clip's absent min is the dtype's lowest value (ONNX), and so is the fused op's: -inf
    becomes float32's lowest, and float64 values below float32's range stay as they are."""
    elem = FLOAT if dtype == np.float32 else DOUBLE
    w = np.abs(_weights(4, 4, dtype=dtype)) + dtype(0.01)  # positive: -inf stays -inf, no NaN
    proto = model(
        [_conv(), helper.make_node("Clip", ["c", "", "hi"], ["y"])],
        [("x", elem, [1, 4, 6, 6])],
        [("y", elem, None)],
        [("w", w), ("bias", np.zeros(4, dtype)), ("hi", np.array(0.25, dtype))],
    )
    x = RNG.standard_normal((1, 4, 6, 6)).astype(dtype)
    x[0, 1, 2, 2] = -np.inf if dtype == np.float32 else -1e300
    # onnxruntime's CPU Conv has no float64 kernel: there the unfused ops are the oracle
    counts = _check(proto, {"x": x}, fused_ops=1, oracle=dtype == np.float32)
    assert counts == {"FusedConv": 1}
    lowest = run_clean(lower(proto), {"x": x})["y"].min()
    assert lowest == np.finfo(np.float32).min if dtype == np.float32 else lowest < -1e299


def test_a_residual_computed_after_the_conv_is_waited_for():
    """The shortcut conv comes after the main conv in the model: the fused op must sit where
    the Add was, after the shortcut is computed."""
    nodes = [
        _conv(out="main"),
        helper.make_node("Conv", ["x", "w"], ["short"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["main", "short"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    counts = _check(_block(nodes), _inputs(), fused_ops=1)
    assert counts == {"Conv": 1, "FusedConv": 1}


@pytest.mark.parametrize("build", [resnet, mobilenet_v2], ids=["resnet", "mobilenet_v2"])
def test_cnn_architectures_fuse_every_activation_and_residual(build):
    proto = build(size=32, classes=10, width=0.25, stages=2)
    x = {proto.graph.input[0].name: RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)}
    fused = lower(proto)
    counts = op_counts(fused)
    assert counts.get("FusedConv", 0) > 0
    assert "Relu" not in counts and "Clip" not in counts
    got = run_clean(fused, x)
    want = run_onnxruntime(proto, x)
    for output, expected in want.items():
        np.testing.assert_allclose(got[output], expected, rtol=RTOL, atol=ATOL)


def test_fusions_are_chosen_by_name():
    proto = resnet(size=32, classes=10, width=0.25, stages=2)
    counts = op_counts(lower(proto, fuse=("batch_norm",)))
    assert "BatchNormalization" not in counts and "FusedConv" not in counts and "Relu" in counts
    counts = op_counts(lower(proto, fuse=("conv_activation",)))  # a BN between: nothing fuses
    assert "BatchNormalization" in counts and "FusedConv" not in counts
    counts = op_counts(lower(proto, fuse=("batch_norm", "conv_activation")))
    assert "FusedConv" in counts and "Relu" not in counts
    with pytest.raises(ValueError, match="unknown fusion"):
        lower(proto, fuse=("fold_everything",))


def test_fused_conv_refuses_operands_it_cannot_compute():
    x = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    w = _weights(3, 2)
    bias = np.ones(3, np.float32)
    z = RNG.standard_normal((1, 3, 2, 2)).astype(np.float32)
    relu = {"activation": 1}
    (out,), _ = infer_shapes("FusedConv", [x, w, bias, z], relu)
    assert out.dims == (1, 3, 2, 2)
    got = run_numpy("FusedConv", [x, w, bias, z], relu)[0]
    unfused = run_numpy("Conv", [x, w, bias])[0]
    np.testing.assert_array_equal(got, np.maximum(unfused + z, 0))
    refused = [
        [x, w, bias, np.ones((1, 3, 2, 1), np.float32)],  # a residual that would broadcast
        [x, w, bias, np.ones((1, 3, 2, 2), np.float64)],  # a residual of another dtype
        [x, w, bias, np.ones((3, 2, 2), np.float32)],  # a residual of another rank
    ]
    for inputs in refused:
        with pytest.raises(OpError):
            infer_shapes("FusedConv", inputs, relu)
    with pytest.raises(OpError):
        infer_shapes("FusedConv", [x, w, bias], {"activation": 9})
