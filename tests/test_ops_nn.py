"""Convolutions, pools, normalizations, softmax and parameterised activations against
onnxruntime (single thread) on one-node ONNX models, through the compiled op entry
(`run_numpy`); one test per refusal path checks the OpError message.

Float64 cases are judged by onnx.reference (onnxruntime's CPU provider has no float64 Conv,
pools, LRN or InstanceNormalization). Tolerances: float32 rtol 1e-4 / atol 1e-5 (sums of
products: conv, pools, normalizations, softmax; onnxruntime accumulates in float32, rtsoa's
normalizations and averages in float64); float64 rtol 1e-9 / atol 1e-12. Softmax follows
opset 13 (the models are opset 13+).
"""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa.ops.abi import (
    COL_NBYTES,
    MODE_COMPUTE,
    MODE_INFER,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_MISSING_INPUT,
    dtype_code,
)
from rtsoa.ops.host import OpError, TensorInfo, _prepare, infer_shapes, run_numpy, run_op
from rtsoa.ops.registry import op_code

F32 = np.float32
F64 = np.float64
TOLERANCE = {F32: {"rtol": 1e-4, "atol": 1e-5}, F64: {"rtol": 1e-9, "atol": 1e-12}}
ELEMENT = {F32: TensorProto.FLOAT, F64: TensorProto.DOUBLE, np.int64: TensorProto.INT64}
rng = np.random.default_rng(118)


def random(shape, kind=F32):
    return rng.standard_normal(shape).astype(kind)


def onnxruntime_outputs(op, inputs, attributes, n_out=1, opset=18, out_kinds=None):
    """Outputs of a one-node model of `op` run by onnxruntime on one thread."""
    names = [f"x{k}" if x is not None else "" for k, x in enumerate(inputs)]
    outputs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outputs, **attributes)
    graph_inputs = [
        helper.make_tensor_value_info(name, ELEMENT[x.dtype.type], x.shape)
        for name, x in zip(names, inputs, strict=True)
        if x is not None
    ]
    kinds = out_kinds or [inputs[0].dtype.type] * n_out
    graph_outputs = [
        helper.make_tensor_value_info(name, ELEMENT[kind], None)
        for name, kind in zip(outputs, kinds, strict=True)
    ]
    graph = helper.make_graph([node], "one", graph_inputs, graph_outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feeds = {name: x for name, x in zip(names, inputs, strict=True) if x is not None}
    return session.run(None, feeds)


def reference_outputs(op, inputs, attributes, n_out=1, opset=18):
    """Outputs of onnx.reference's implementation of `op` (for what onnxruntime's CPU provider
    lacks: most float64 kernels, LRN of even size)."""
    names = [f"x{k}" if x is not None else "" for k, x in enumerate(inputs)]
    outputs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outputs, **attributes)
    graph = helper.make_graph([node], "one", [], [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    evaluator = ReferenceEvaluator(model)
    feeds = {name: x for name, x in zip(names, inputs, strict=True) if x is not None}
    return evaluator.run(outputs, feeds)


def check(op, inputs, attributes=None, n_out=1, opset=18, out_kinds=None, judge=None):
    """run_numpy's outputs equal the judge's: onnxruntime (the default for float32), or
    onnx.reference (the default for float64, which onnxruntime's CPU kernels mostly lack)."""
    attributes = attributes or {}
    if judge is None:
        judge = "onnxruntime" if inputs[0].dtype == F32 else "reference"
    if judge == "onnxruntime":
        expected = onnxruntime_outputs(op, inputs, attributes, n_out, opset, out_kinds)
    else:
        expected = reference_outputs(op, inputs, attributes, n_out, opset)
    got = run_numpy(op, inputs, attributes, n_out)
    tolerance = TOLERANCE[inputs[0].dtype.type]
    for mine, theirs in zip(got, expected, strict=True):
        assert mine.shape == theirs.shape
        assert mine.dtype == theirs.dtype
        np.testing.assert_allclose(mine, theirs, **tolerance)
    return got


def refused(status, op, inputs, attributes=None, n_out=1):
    with pytest.raises(OpError) as caught:
        run_numpy(op, inputs, attributes or {}, n_out)
    assert caught.value.status == status
    assert str(caught.value).startswith(f"{op}: ")
    return str(caught.value)


# -- Conv ------------------------------------------------------------------------------------------

CONV_CASES = [
    ((1, 4, 9, 9), (6, 4, 3, 3), True, {"pads": [1, 1, 1, 1]}),
    ((2, 4, 10, 9), (6, 4, 3, 2), False, {"strides": [2, 1], "dilations": [2, 1]}),
    ((1, 4, 8, 8), (6, 2, 3, 3), True, {"group": 2, "pads": [0, 1, 2, 1]}),
    ((1, 4, 7, 7), (4, 1, 3, 3), True, {"group": 4, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 8, 7), (5, 3, 4, 4), False, {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ((1, 3, 8, 7), (5, 3, 3, 3), False, {"auto_pad": "VALID", "strides": [2, 2]}),
    ((2, 8, 6, 6), (16, 8, 1, 1), True, {}),
    ((2, 3, 20), (4, 3, 5), True, {"strides": [3], "pads": [2, 1], "dilations": [2]}),
    ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), True, {"pads": [1, 0, 1, 0, 1, 1]}),
]


@pytest.mark.parametrize("x_shape, w_shape, bias, attributes", CONV_CASES)
def test_conv_matches_onnxruntime(x_shape, w_shape, bias, attributes):
    inputs = [random(x_shape), random(w_shape)] + ([random(w_shape[0])] if bias else [])
    check("Conv", inputs, attributes)


def test_conv_float64_and_explicit_kernel_shape():
    inputs = [random((1, 3, 7, 7), F64), random((2, 3, 3, 3), F64), random(2, F64)]
    check("Conv", inputs, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})


CONV_TRANSPOSE_CASES = [
    ((1, 4, 5, 5), (4, 3, 3, 3), True, {}),
    ((2, 4, 5, 4), (4, 3, 3, 3), False, {"strides": [2, 2], "pads": [1, 0, 1, 1]}),
    ((1, 4, 5, 5), (4, 2, 3, 3), True, {"strides": [2, 3], "output_padding": [1, 2]}),
    ((1, 4, 4, 4), (4, 3, 2, 3), True, {"group": 2, "dilations": [2, 1]}),
    ((1, 2, 4, 5), (2, 3, 3, 3), False, {"strides": [2, 2], "output_shape": [9, 11]}),
    ((1, 2, 4, 5), (2, 3, 3, 3), False, {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 4, 5), (2, 3, 4, 3), False, {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((2, 3, 7), (3, 2, 3), True, {"strides": [2], "pads": [1, 2]}),
]


@pytest.mark.parametrize("x_shape, w_shape, bias, attributes", CONV_TRANSPOSE_CASES)
def test_conv_transpose_matches_onnxruntime(x_shape, w_shape, bias, attributes):
    group = attributes.get("group", 1)
    inputs = [random(x_shape), random(w_shape)] + ([random(w_shape[1] * group)] if bias else [])
    check("ConvTranspose", inputs, attributes)


def test_conv_transpose_float64():
    inputs = [random((1, 2, 3, 3), F64), random((2, 2, 3, 3), F64), random(2, F64)]
    check("ConvTranspose", inputs, {"strides": [2, 2], "pads": [1, 1, 1, 1]})


def test_conv_refusals():
    x = random((1, 4, 5, 5))
    w = random((6, 4, 3, 3))
    refused(STATUS_OP_BAD_DTYPE, "Conv", [x.astype(np.int32), w.astype(np.int32)])
    refused(STATUS_OP_BAD_DTYPE, "Conv", [x, w.astype(F64)])
    refused(STATUS_OP_BAD_SHAPE, "Conv", [x, random((6, 3, 3, 3))])  # channels
    refused(STATUS_OP_BAD_SHAPE, "Conv", [x, w], {"kernel_shape": [2, 2]})
    refused(STATUS_OP_BAD_SHAPE, "Conv", [x, w, random(5)])  # bias length
    refused(STATUS_OP_BAD_SHAPE, "Conv", [x, w], {"group": 2})  # 4 / 2 != W's 4
    refused(STATUS_OP_BAD_SHAPE, "Conv", [x, random((6, 4, 7, 7))])  # kernel past the input
    refused(STATUS_OP_BAD_SHAPE, "Conv", [random((1, 4)), random((6, 4))])  # no spatial dims
    refused(STATUS_OP_BAD_ATTRIBUTE, "Conv", [x, w], {"strides": [0, 1]})
    refused(STATUS_OP_BAD_ATTRIBUTE, "Conv", [x, w], {"pads": [1, 1, 1]})
    refused(STATUS_OP_BAD_ATTRIBUTE, "Conv", [x, w], {"pads": [-1, 0, 0, 0]})
    refused(STATUS_OP_BAD_ATTRIBUTE, "Conv", [x, w], {"dilations": [1, 1, 1]})
    refused(STATUS_OP_BAD_ATTRIBUTE, "Conv", [x, w], {"auto_pad": "SAME"})
    refused(STATUS_OP_BAD_ATTRIBUTE, "Conv", [x, w], {"group": 0})
    w_t = random((4, 6, 3, 3))
    message = refused(
        STATUS_OP_BAD_ATTRIBUTE, "ConvTranspose", [x, w_t], {"output_padding": [1, 1]}
    )
    assert "bad attribute value" in message
    refused(STATUS_OP_MISSING_INPUT, "Conv", [x, None])
    w_huge = TensorInfo(dtype_code(F32), (6, 4, 1 << 20, 1 << 20))  # a 2^40-element kernel
    x_huge = TensorInfo(dtype_code(F32), (1, 4, 1 << 20, 1 << 20))
    with pytest.raises(OpError, match="result too large"):
        infer_shapes("Conv", [x_huge, w_huge], {"pads": [1 << 19] * 4})


def test_conv_compute_refuses_a_short_output_row():
    """compute re-checks sizes rather than trusting the table infer filled."""
    x = random((1, 2, 4, 4))
    w = random((3, 2, 3, 3))
    _, attrs, table, arena = _prepare("Conv", [x, w], {}, 1)
    assert run_op(MODE_INFER, op_code("Conv"), arena, table, attrs, 2, 1) == 0
    grown = np.zeros(len(arena) + 4096, dtype=np.uint8)
    grown[: len(arena)] = arena
    table[2, 0] = len(arena)
    table[2, COL_NBYTES] = 3 * 2 * 2 * 4 - 4  # one element short
    status = run_op(MODE_COMPUTE, op_code("Conv"), grown, table, attrs, 2, 1)
    assert status == STATUS_OP_BAD_SHAPE


# -- pools ----------------------------------------------------------------------------------------

POOL_CASES = [
    ((1, 3, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((2, 2, 8, 7), {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 9, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 9, 8), {"kernel_shape": [2, 4], "strides": [2, 3], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 9, 8), {"kernel_shape": [2, 2], "auto_pad": "VALID"}),
    ((1, 3, 17), {"kernel_shape": [4], "strides": [3], "pads": [2, 1]}),
    (
        (1, 2, 5, 6, 7),
        {"kernel_shape": [2, 3, 2], "strides": [1, 2, 2], "pads": [0, 1, 1, 1, 1, 0]},
    ),
]


@pytest.mark.parametrize("shape, attributes", POOL_CASES)
def test_max_pool_matches_onnxruntime(shape, attributes):
    check("MaxPool", [random(shape)], attributes)


@pytest.mark.parametrize("shape, attributes", POOL_CASES)
@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool_matches_onnxruntime(shape, attributes, include_pad):
    check("AveragePool", [random(shape)], {**attributes, "count_include_pad": include_pad})


# ceil_mode windows at the end of an axis: the output drops a last window that would start in
# the end padding, keeps one that starts on the input or in the begin padding (out spatial
# dims worked out by hand from ceil((size + pads - kernel) / stride) + 1).
CEIL_MODE_EDGES = [
    # 4 + 1 - 2 = 3: ceil gives 3 windows, the third would start at 4, in the end padding
    ((1, 1, 4, 4), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1]}, (2, 2)),
    # the same with a begin pad: the third window starts at padded 4, input element 3: kept
    ((1, 1, 4, 4), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (3, 3)),
    # axis 0: 4 windows by ceil, the fourth would start at padded 6 = input 5: dropped;
    # axis 1: the third window starts at 6, the input's last element: kept
    ((1, 2, 5, 7), {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 2, 1]}, (3, 3)),
    ((1, 1, 6), {"kernel_shape": [2], "strides": [3], "pads": [0, 1]}, (2,)),
    # the last window starts on the input's last element (4 of 0..4): kept
    ((1, 2, 5, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1]}, (3, 3)),
    # both axes drop a window that would start in their end padding
    ((1, 1, 7, 4), {"kernel_shape": [3, 3], "strides": [3, 3], "pads": [1, 2, 2, 2]}, (3, 2)),
]


@pytest.mark.parametrize("shape, attributes, spatial", CEIL_MODE_EDGES)
@pytest.mark.parametrize(
    "op, extra",
    [
        ("MaxPool", {}),
        ("AveragePool", {"count_include_pad": 0}),
        ("AveragePool", {"count_include_pad": 1}),
    ],
)
def test_ceil_mode_never_starts_a_window_in_the_end_padding(shape, attributes, spatial, op, extra):
    x = random(shape)
    (got,) = check(op, [x], {**attributes, **extra, "ceil_mode": 1})
    assert got.shape[2:] == spatial


def test_pools_with_dilations_and_float64():
    x = random((1, 2, 11, 10), F64)
    attributes = {"kernel_shape": [3, 2], "dilations": [2, 3], "pads": [1, 1, 2, 1]}
    check("MaxPool", [x], attributes)
    check("AveragePool", [x], {**attributes, "count_include_pad": 1}, opset=19)
    check("AveragePool", [x], attributes, opset=19)


@pytest.mark.parametrize("order", [0, 1])
def test_max_pool_indices(order):
    x = random((2, 3, 7, 6))
    attributes = {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}
    check("MaxPool", [x], {**attributes, "storage_order": order}, 2, out_kinds=[F32, np.int64])


@pytest.mark.parametrize("op", ["GlobalMaxPool", "GlobalAveragePool"])
def test_global_pools(op):
    check(op, [random((2, 3, 5, 4))])
    x = random((2, 3, 7, 2, 3), F64)  # onnx.reference's GlobalMaxPool drops dims: numpy judges
    expected = x.max(axis=(2, 3, 4), keepdims=True) if op == "GlobalMaxPool" else None
    expected = x.mean(axis=(2, 3, 4), keepdims=True) if expected is None else expected
    np.testing.assert_allclose(run_numpy(op, [x])[0], expected, **TOLERANCE[F64])


def lrn_reference(x, size, alpha=0.0001, beta=0.75, bias=1.0):
    """LRN as the ONNX spec writes it (onnx.reference's loops over the batch axis instead of
    the channels), in float64."""
    channels = x.shape[1]
    y = np.empty(x.shape)
    for c in range(channels):
        low = max(0, c - (size - 1) // 2)
        high = min(channels, c + int(np.ceil((size - 1) / 2)) + 1)
        square_sum = np.sum(x[:, low:high].astype(F64) ** 2, axis=1)
        y[:, c] = x[:, c] / (bias + alpha / size * square_sum) ** beta
    return y.astype(x.dtype)


@pytest.mark.parametrize("size", [1, 3, 4])
def test_lrn(size):
    attributes = {"size": size, "alpha": 0.01, "beta": 0.6, "bias": 2.0}
    x = random((2, 7, 4, 3))
    if size % 2:  # onnxruntime refuses even sizes
        check("LRN", [x], attributes)
    got = run_numpy("LRN", [x], attributes)[0]
    np.testing.assert_allclose(got, lrn_reference(x, **attributes), **TOLERANCE[F32])
    x = random((1, 5, 3, 3), F64)
    got = run_numpy("LRN", [x], {"size": size})[0]
    np.testing.assert_allclose(got, lrn_reference(x, size), **TOLERANCE[F64])


def _clamped_pool(op, x, attrs):
    """A 2-D pool computed window by window over the taps inside the input (no dilation,
    count_include_pad 0): max (-inf for a window with none) or mean (0 for none)."""
    (k_h, k_w), (s_h, s_w) = attrs["kernel_shape"], attrs["strides"]
    p_h, p_w, e_h, e_w = attrs["pads"]
    height, width = x.shape[2:]
    out_h, out_w = (height + p_h + e_h - k_h) // s_h + 1, (width + p_w + e_w - k_w) // s_w + 1
    y = np.empty(x.shape[:2] + (out_h, out_w), dtype=x.dtype)
    for i in range(out_h):
        for j in range(out_w):
            top, left = i * s_h - p_h, j * s_w - p_w
            window = x[:, :, max(top, 0) : max(top + k_h, 0), max(left, 0) : max(left + k_w, 0)]
            if window.size == 0:
                y[:, :, i, j] = -np.inf if op == "MaxPool" else 0
            elif op == "MaxPool":
                y[:, :, i, j] = window.max(axis=(2, 3))
            else:
                y[:, :, i, j] = window.astype(np.float64).mean(axis=(2, 3))
    return y


def test_pool_refusals():
    x = random((1, 2, 5, 5))
    message = refused(STATUS_OP_BAD_ATTRIBUTE, "MaxPool", [x])  # kernel_shape is required
    assert "bad attribute value" in message
    refused(STATUS_OP_BAD_SHAPE, "MaxPool", [x], {"kernel_shape": [6, 6]})
    # a kernel of 2^30 x 2^30 over padding: only the taps inside the input are visited
    huge = {"kernel_shape": [1 << 30] * 2, "pads": [1 << 30] * 4, "strides": [1 << 30] * 2}
    assert run_numpy("MaxPool", [x], huge)[0].shape == (1, 2, 2, 2)
    # windows far larger than the input, overlapping or not: each output is its window's
    # taps inside the input (a row kernel over every tap, or a phase layout of the padded
    # plane, would loop or allocate for minutes: these take the per-window path)
    for op, strides in [("MaxPool", 1 << 30), ("AveragePool", 1 << 30), ("MaxPool", 1 << 29)]:
        attrs = {"kernel_shape": [1 << 30] * 2, "pads": [1 << 30] * 4, "strides": [strides] * 2}
        np.testing.assert_array_equal(run_numpy(op, [x], attrs)[0], _clamped_pool(op, x, attrs))
    refused(STATUS_OP_BAD_ATTRIBUTE, "AveragePool", [x], {"kernel_shape": [2]})
    refused(STATUS_OP_BAD_ATTRIBUTE, "AveragePool", [x], {"kernel_shape": [2, 2], "ceil_mode": 2})
    refused(STATUS_OP_BAD_DTYPE, "MaxPool", [x.astype(np.int64)], {"kernel_shape": [2, 2]})
    refused(STATUS_OP_BAD_SHAPE, "GlobalAveragePool", [random((2, 3))])
    refused(STATUS_OP_BAD_ATTRIBUTE, "LRN", [x])  # size is required
    refused(
        STATUS_OP_BAD_ATTRIBUTE,
        "MaxPool",
        [random((1, 1, 3, 3, 3))],
        {"kernel_shape": [2, 2, 2], "storage_order": 1},
        n_out=2,
    )


# -- normalizations -------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, kind", [((2, 3, 4, 5), F32), ((4, 3), F32), ((2, 3, 6), F64)])
def test_batch_normalization(shape, kind):
    channels = shape[1]
    variance = np.abs(random(channels, kind)) + 0.1
    inputs = [random(shape, kind), random(channels, kind), random(channels, kind)]
    check("BatchNormalization", inputs + [random(channels, kind), variance], {"epsilon": 1e-3})


@pytest.mark.parametrize("shape, kind", [((2, 3, 4, 5), F32), ((2, 3, 6), F64)])
def test_instance_normalization(shape, kind):
    inputs = [random(shape, kind) * 3 + 1, random(shape[1], kind), random(shape[1], kind)]
    check("InstanceNormalization", inputs, {"epsilon": 1e-4})


LAYER_CASES = [
    ((2, 3, 8), -1, (8,), True),
    ((2, 3, 4, 5), 1, (3, 4, 5), False),
    ((2, 3, 4, 5), -2, (1, 5), True),
    ((6, 7), 0, (6, 7), True),
]


@pytest.mark.parametrize("shape, axis, scale_shape, bias", LAYER_CASES)
def test_layer_normalization(shape, axis, scale_shape, bias):
    inputs = [random(shape) * 2 + 0.5, random(scale_shape)] + (
        [random(scale_shape)] if bias else []
    )
    check("LayerNormalization", inputs, {"axis": axis, "epsilon": 1e-3}, opset=17)


def test_layer_normalization_mean_and_inverse_deviation():
    for kind in (F32, F64):
        inputs = [random((3, 4, 6), kind), random(6, kind), random(6, kind)]
        kinds = [kind, F32, F32]  # stash_type 1: float32 statistics, as onnxruntime gives
        check("LayerNormalization", inputs, {}, 3, opset=17, out_kinds=kinds, judge="onnxruntime")


def test_normalization_refusals():
    x = random((2, 3, 4))
    c = random(3)
    message = refused(STATUS_OP_BAD_SHAPE, "BatchNormalization", [x, c, c, c, random(4)])
    assert "incompatible input shapes" in message
    refused(STATUS_OP_BAD_ATTRIBUTE, "BatchNormalization", [x, c, c, c, c], {"training_mode": 1})
    refused(STATUS_OP_BAD_DTYPE, "BatchNormalization", [x, c, c, c, c.astype(F64)])
    refused(STATUS_OP_BAD_SHAPE, "InstanceNormalization", [random((2, 3)), c, c])
    refused(STATUS_OP_BAD_SHAPE, "LayerNormalization", [x, random(3)])  # not X.shape[-1:]
    refused(STATUS_OP_BAD_ATTRIBUTE, "LayerNormalization", [x, random(4)], {"axis": 3})
    refused(STATUS_OP_BAD_ATTRIBUTE, "LayerNormalization", [x, random(4)], {"stash_type": 0})
    refused(STATUS_OP_MISSING_INPUT, "LayerNormalization", [x, None])


# -- softmax --------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [None, 0, 1, -2])
def test_softmax(op, axis):
    attributes = {} if axis is None else {"axis": axis}
    check(op, [random((3, 4, 5)) * 4], attributes, opset=13)
    check(op, [random((2, 6), F64) * 4], attributes, opset=13)


def test_softmax_refusals():
    message = refused(STATUS_OP_BAD_ATTRIBUTE, "Softmax", [random((2, 3))], {"axis": 2})
    assert "bad attribute value" in message
    refused(STATUS_OP_BAD_DTYPE, "LogSoftmax", [np.ones((2, 3), dtype=np.int32)])


# -- activations ----------------------------------------------------------------------------------


@pytest.mark.parametrize("slope_shape", [(3, 1, 1), (1,), (2, 3, 4, 5), (5,)])
def test_prelu(slope_shape):
    check("PRelu", [random((2, 3, 4, 5)), random(slope_shape)])
    check("PRelu", [random((2, 3, 4, 5), F64), random(slope_shape, F64)])


ACTIVATION_CASES = [
    ("Elu", {}),
    ("Elu", {"alpha": 0.5}),
    ("Selu", {}),
    ("Selu", {"alpha": 1.5, "gamma": 2.0}),
    ("HardSigmoid", {}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("Softplus", {}),
]


@pytest.mark.parametrize("op, attributes", ACTIVATION_CASES)
def test_activations(op, attributes):
    x = random((4, 50)) * 5
    x[0, :4] = [0.0, -0.0, 60.0, -60.0]
    check(op, [x], attributes)
    check(op, [x.astype(F64)], attributes)


CLIP_BOUNDS = [(-0.5, 0.7), (-0.5, None), (None, 0.7), (None, None), (0.8, -0.2)]


@pytest.mark.parametrize("low, high", CLIP_BOUNDS)
def test_clip_inputs(low, high):
    for kind in (F32, F64):
        x = random((3, 7), kind)
        x[0, 0] = np.nan
        bounds = [None if b is None else np.array(b, dtype=kind) for b in (low, high)]
        while bounds and bounds[-1] is None:
            bounds.pop()
        check("Clip", [x] + bounds)


def test_clip_attributes_of_opset_6():
    x = random((3, 7))
    check("Clip", [x], {"min": -0.3, "max": 0.4}, opset=6)
    check("Clip", [x], {"max": 0.4}, opset=6)


def test_activation_refusals():
    x = random((2, 3, 4))
    message = refused(STATUS_OP_BAD_SHAPE, "PRelu", [x, random(3)])
    assert "incompatible input shapes" in message
    refused(STATUS_OP_BAD_SHAPE, "PRelu", [x, random((1, 2, 3, 4))])
    refused(STATUS_OP_BAD_DTYPE, "PRelu", [x, random(4, F64)])
    refused(STATUS_OP_BAD_SHAPE, "Clip", [x, random(2)])
    refused(STATUS_OP_BAD_DTYPE, "Clip", [x, np.array(0.0)])
    refused(STATUS_OP_BAD_DTYPE, "Elu", [np.ones(3, dtype=np.int64)])
