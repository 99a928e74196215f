"""Shape, data-movement, reduction and misc ops against onnx.reference on one-node models.

Every case builds a one-node ONNX model, runs it with `onnx.reference.ReferenceEvaluator` and
runs the same op through rtsoa's compiled entry (`run_numpy`). Data movement, Shape, Cast and
logic ops must match exactly; float reductions use rtol 1e-4 / atol 1e-6 (rtsoa accumulates in
float64, the reference in the input dtype).
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from rtsoa.ops.abi import (
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_NEEDS_DATA,
)
from rtsoa.ops.host import OpError, TensorInfo, infer_shapes, run_numpy

RNG = np.random.default_rng(7)
ELEM = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.int16): TensorProto.INT16,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.bool_): TensorProto.BOOL,
}


def reference(op, inputs, attributes=None, n_out=1, opset=18):
    """Outputs of the onnx reference evaluator on a one-node model (None = absent input)."""
    names = [f"x{k}" if x is not None else "" for k, x in enumerate(inputs)]
    outputs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outputs, **(attributes or {}))
    graph_inputs = [
        helper.make_tensor_value_info(name, ELEM[np.asarray(x).dtype], None)
        for name, x in zip(names, inputs, strict=True)
        if x is not None
    ]
    graph_outputs = [helper.make_tensor_value_info(name, 0, None) for name in outputs]
    graph = helper.make_graph([node], "g", graph_inputs, graph_outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: np.asarray(x) for n, x in zip(names, inputs, strict=True) if x is not None}
    return ReferenceEvaluator(model).run(None, feeds)


def python_attributes(attributes):
    """The attributes as the lowering hands them to encode (tensors as numpy arrays)."""
    out = {}
    for key, value in (attributes or {}).items():
        out[key] = numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value
    return out


def check(op, inputs, attributes=None, n_out=1, opset=18, rtol=0.0, atol=0.0):
    expected = reference(op, inputs, attributes, n_out, opset)
    got = run_numpy(op, inputs, python_attributes(attributes), n_out)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        e = np.asarray(e)
        assert g.shape == e.shape, (op, g.shape, e.shape)
        assert g.dtype == e.dtype, (op, g.dtype, e.dtype)
        if rtol or atol:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, e)
    return got


def refuses(status, op, inputs, attributes=None, n_out=1):
    with pytest.raises(OpError) as caught:
        run_numpy(op, inputs, attributes, n_out)
    assert caught.value.status == status
    assert caught.value.op == op and op in str(caught.value)


def i64(*values):
    return np.array(values, dtype=np.int64)


X = RNG.standard_normal((2, 3, 4)).astype(np.float32)
XI = RNG.integers(-50, 50, (2, 3, 4)).astype(np.int64)


# -- reshape family -----------------------------------------------------------------------------


def test_reshape_flatten_squeeze_unsqueeze():
    for shape in ((4, 6), (0, -1), (-1, 2), (2, -1, 3), (24,), (2, 0, 4, 1)):
        check("Reshape", [X, i64(*shape)])
    check("Reshape", [XI, np.array([3, -1], dtype=np.int32)])
    check("Reshape", [np.zeros((0, 3), np.float32), i64(3, 0)], {"allowzero": 1})
    for axis in (0, 1, 2, 3, -1, -3):
        check("Flatten", [X], {"axis": axis})
    ones = np.zeros((1, 3, 1, 2), np.float64)
    check("Squeeze", [ones])
    check("Squeeze", [ones, i64(-2)])
    (got,) = run_numpy("Squeeze", [ones, i64()])  # empty axes: every 1 (as onnxruntime)
    assert got.shape == (3, 2)
    check("Squeeze", [ones], {"axes": [0, 2]}, opset=11)
    check("Unsqueeze", [X, i64(0, -1)])
    check("Unsqueeze", [X], {"axes": [1, 4]}, opset=11)
    refuses(STATUS_OP_BAD_SHAPE, "Reshape", [X, i64(5, -1)])
    refuses(STATUS_OP_BAD_ATTRIBUTE, "Reshape", [X, i64(-1, -1)])
    refuses(STATUS_OP_BAD_SHAPE, "Squeeze", [ones, i64(1)])
    refuses(STATUS_OP_BAD_ATTRIBUTE, "Unsqueeze", [X, i64(0, 0)])
    refuses(STATUS_OP_BAD_ATTRIBUTE, "Flatten", [X], {"axis": 4})


def test_shape_inference_defers_data():
    info = TensorInfo.of(np.zeros(2, np.int64))
    with pytest.raises(OpError) as caught:
        infer_shapes("Reshape", [X, info])
    assert caught.value.status == STATUS_OP_NEEDS_DATA
    outs, _ = infer_shapes("Reshape", [TensorInfo.of(X), i64(4, -1)])
    assert outs[0].dims == (4, 6)


# -- transpose, concat, split, slice, gather -----------------------------------------------------


def test_transpose_concat_split():
    for perm in (None, [0, 2, 1], [2, 0, 1], [1, 0, 2]):
        attributes = {} if perm is None else {"perm": perm}
        check("Transpose", [X], attributes)
        check("Transpose", [X.astype(np.bool_)], attributes)
        check("Transpose", [XI.astype(np.int16)], attributes)
    refuses(STATUS_OP_BAD_ATTRIBUTE, "Transpose", [X], {"perm": [0, 0, 1]})
    y = RNG.standard_normal((2, 5, 4)).astype(np.float32)
    check("Concat", [X, y, X], {"axis": 1})
    check("Concat", [X, X], {"axis": -1})
    check("Concat", [XI], {"axis": 0})
    refuses(STATUS_OP_BAD_SHAPE, "Concat", [X, y], {"axis": 0})
    refuses(STATUS_OP_BAD_DTYPE, "Concat", [X, XI], {"axis": 0})
    check("Split", [X], {"axis": 2}, n_out=2)
    check("Split", [X, i64(1, 3)], {"axis": -1}, n_out=2)
    check("Split", [X], {"axis": 1, "split": [1, 2]}, n_out=2, opset=11)
    check("Split", [RNG.standard_normal((7, 2))], {"axis": 0, "num_outputs": 3}, n_out=3)
    refuses(STATUS_OP_BAD_SHAPE, "Split", [X, i64(1, 2)], {"axis": 2}, n_out=2)


def test_slice():
    x = RNG.standard_normal((5, 6, 7)).astype(np.float32)
    cases = [
        (i64(1), i64(4), None, None),
        (i64(0, 1), i64(-1, 1000), i64(2, 0), None),
        (i64(-1), i64(-1000), i64(1), i64(-1)),
        (i64(4, 5), i64(0, -8), i64(0, 1), i64(-2, -3)),
        (i64(2, 0), i64(100, 7), i64(-1, 0), i64(3, 2)),
        (i64(0), i64(5), i64(1), i64(1)),
        (i64(3), i64(3), None, None),
        (i64(-100), i64(100), i64(0), i64(9223372036854775807)),
    ]
    for starts, ends, axes, steps in cases:
        check("Slice", [x, starts, ends, axes, steps])
    check("Slice", [x.astype(np.int8), np.int32([1]), np.int32([3])])
    check("Slice", [x], {"starts": [1, 2], "ends": [3, 10], "axes": [0, 2]}, opset=9)
    refuses(STATUS_OP_BAD_ATTRIBUTE, "Slice", [x, i64(0), i64(1), i64(0), i64(0)])
    refuses(STATUS_OP_BAD_ATTRIBUTE, "Slice", [x, i64(0), i64(1), i64(3)])
    refuses(STATUS_OP_BAD_ATTRIBUTE, "Slice", [x, i64(0, 0), i64(1, 1), i64(-1, 2)])


@pytest.mark.parametrize(
    "starts, ends, steps",
    [
        # a negative step's start before the axis clamps to 0 (the ONNX rule, onnxruntime's;
        # numpy and onnx.reference clamp it to -1 and take nothing)
        (-10, -12, -1),  # start, end before the axis: element 0
        (-7, -100, -2),  # start just before the axis: element 0
        (-10, -3, -1),  # start before the axis, end inside it: nothing
        (-10, 100, -1),  # start before, end past the axis: nothing
        (-6, -100, -1),  # start on element 0: one element
        (10, -12, -1),  # from past the end to before the start: all, reversed
        (6, -7, -2),  # start just past the end: 5, 3, 1
        (100, 2, -3),  # clamped to 5: 5
        (3, 3, -1),  # start == end: nothing
        (-1, -1000, -(2**62)),  # a huge negative step: the last element
        (-1, -1000, -(2**63)),  # the smallest int64 step
        (-12, -10, 1),  # a positive step over the same region: nothing
        (-12, 2, 2),  # a positive step from before the axis: 0
    ],
)
def test_slice_with_starts_and_ends_outside_the_axis_matches_onnxruntime(starts, ends, steps):
    """The clamping of starts and ends outside the axis, on a 1-D input and on the middle axis
    of a 3-D one; onnxruntime is the judge."""
    x = np.arange(6, dtype=np.float32)
    cube = np.arange(2 * 6 * 3, dtype=np.int64).reshape(2, 6, 3)
    for data, axis in ((x, 0), (cube, 1)):
        inputs = [data, i64(starts), i64(ends), i64(axis), i64(steps)]
        (want,) = _onnxruntime("Slice", inputs)
        (got,) = run_numpy("Slice", inputs)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_gather():
    x = RNG.standard_normal((4, 5, 3))
    check("Gather", [x, i64(0, -1, 2)])
    check("Gather", [x, np.int32([[1, 0], [4, -5]])], {"axis": 1})
    check("Gather", [x, i64(2)], {"axis": -1})
    check("Gather", [x.astype(np.bool_), i64(3, 3)], {"axis": 0})
    refuses(STATUS_OP_BAD_INDEX, "Gather", [x, i64(0, 4)])
    refuses(STATUS_OP_BAD_INDEX, "Gather", [x, i64(-6)], {"axis": 1})
    refuses(STATUS_OP_BAD_DTYPE, "Gather", [x, np.float32([0])])
    refuses(STATUS_OP_BAD_ATTRIBUTE, "Gather", [x, i64(0)], {"axis": 3})


# -- pad, tile, expand, where ----------------------------------------------------------------


def test_pad():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    for mode in ("constant", "reflect", "edge", "wrap"):
        check("Pad", [x, i64(1, 2, 2, 3)], {"mode": mode}, opset=19)
        # negative pads crop (numpy.pad, hence the reference, refuses them)
        (got,) = run_numpy("Pad", [x, i64(-1, 0, 1, -2)], {"mode": mode})
        expected = reference("Pad", [x[1:, :2], i64(0, 0, 1, 0)], {"mode": mode}, opset=19)[0]
        np.testing.assert_array_equal(got, expected)
    check("Pad", [x, i64(1, 1, 1, 1), np.float32(2.5)])
    check("Pad", [XI, i64(1, 2), np.int64(-7), i64(-1)])
    check("Pad", [x], {"pads": [0, 1, 2, 0], "value": 1.5}, opset=2)
    refuses(STATUS_OP_BAD_ATTRIBUTE, "Pad", [x, i64(1, 1)])
    refuses(STATUS_OP_BAD_SHAPE, "Pad", [x, i64(-4, 0, 0, 0)])


def test_tile_expand_where():
    check("Tile", [X, i64(2, 1, 3)])
    check("Tile", [XI, i64(1, 0, 2)])
    refuses(STATUS_OP_BAD_SHAPE, "Tile", [X, i64(2, 2)])
    x = RNG.standard_normal((3, 1)).astype(np.float32)
    check("Expand", [x, i64(2, 3, 4)])
    check("Expand", [x, i64(1, 1)])
    check("Expand", [x, i64(3, 1, 5)])
    refuses(STATUS_OP_BAD_SHAPE, "Expand", [x, i64(2, 4)])
    cond = RNG.random((2, 1, 4)) > 0.5
    check("Where", [cond, X, np.float32(-1)])
    check("Where", [cond, XI, XI[:1]])
    refuses(STATUS_OP_BAD_DTYPE, "Where", [cond, X, XI])
    refuses(STATUS_OP_BAD_SHAPE, "Where", [cond, X, np.zeros((5,), np.float32)])


def test_dropout_identity():
    got = run_numpy("Dropout", [X, np.float32(0.3)], {}, n_out=2)
    np.testing.assert_array_equal(got[0], X)
    assert got[1].dtype == np.bool_ and got[1].all() and got[1].shape == X.shape
    check("Dropout", [X])
    refuses(STATUS_OP_BAD_ATTRIBUTE, "Dropout", [X, np.float32(0.3), np.bool_(True)])


# -- shape, constant of shape, range, cast, logic ---------------------------------------------


def test_shape_constant_of_shape_range():
    for attributes in ({}, {"start": 1}, {"end": -1}, {"start": -2, "end": 10}, {"start": 3}):
        check("Shape", [X], attributes)
    for value in (None, np.float32(3.5), np.int64(-2), np.bool_(True), np.float64(0.25)):
        attributes = {} if value is None else {"value": numpy_helper.from_array(np.array([value]))}
        check("ConstantOfShape", [i64(2, 3)], attributes)
    check("ConstantOfShape", [i64()], {"value": numpy_helper.from_array(np.int32([9]))})
    check("Range", [np.float32(1), np.float32(5), np.float32(0.75)])
    check("Range", [np.int64(10), np.int64(-3), np.int64(-4)])
    check("Range", [np.int32(0), np.int32(0), np.int32(1)])
    check("Range", [np.float64(0), np.float64(1), np.float64(0.1)], rtol=1e-12)
    refuses(STATUS_OP_BAD_ATTRIBUTE, "Range", [np.int64(0), np.int64(5), np.int64(0)])
    refuses(STATUS_OP_BAD_SHAPE, "Range", [np.int64(0), np.int32(5), np.int64(1)])


CAST_TYPES = (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.bool_)


def test_cast():
    sources = {
        np.float32: np.float32([-2.7, -1.0, 0.0, 0.5, 3.9, 100.2]),
        np.float64: np.float64([-2.7, -1.0, 0.0, 0.5, 3.9, 100.2]),
        np.int64: np.int64([-5, 0, 1, 2, 127, 1 << 40]),
        np.int8: np.int8([-128, -1, 0, 1, 7, 127]),
        np.uint8: np.uint8([0, 1, 2, 128, 200, 255]),
        np.bool_: np.array([True, False, True, True, False, False]),
    }
    for source, values in sources.items():
        for target in CAST_TYPES:
            floating = np.dtype(source).kind == "f"
            if floating and np.dtype(target).kind in "iu" and target is not np.int64:
                values = values.clip(0, 100)  # numpy leaves out-of-range float casts undefined
            check("Cast", [values.reshape(2, 3)], {"to": ELEM[np.dtype(target)]})
    refuses(STATUS_OP_BAD_ATTRIBUTE, "Cast", [X], {"to": TensorProto.STRING})


def test_logic():
    a = RNG.random((2, 3)) > 0.5
    b = RNG.random((3,)) > 0.5
    check("Not", [a])
    for op in ("And", "Or", "Xor"):
        check(op, [a, b])
    refuses(STATUS_OP_BAD_DTYPE, "And", [a, b.astype(np.int64)])


# -- reductions --------------------------------------------------------------------------------


def test_reductions():
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"):
        for axes in (None, [1], [0, -1], []):
            for keepdims in (0, 1):
                inputs = [x] if axes is None else [x, i64(*axes)]
                check(op, inputs, {"keepdims": keepdims}, rtol=1e-4, atol=1e-6)
        check(op, [x, i64()], {"noop_with_empty_axes": 1}, rtol=1e-4, atol=1e-6)
        check(op, [x.astype(np.float64), i64(2)], rtol=1e-12)
        if op != "ReduceMean":
            check(op, [XI.astype(np.int32), i64(1)])
        check(op, [x], {"axes": [2], "keepdims": 0}, opset=11, rtol=1e-4, atol=1e-6)
    refuses(STATUS_OP_BAD_ATTRIBUTE, "ReduceSum", [x, i64(3)])
    refuses(STATUS_OP_BAD_ATTRIBUTE, "ReduceSum", [x, i64(1, -2)])
    refuses(STATUS_OP_BAD_DTYPE, "ReduceSum", [x.astype(np.bool_)])


@pytest.mark.parametrize("kind", [np.float32, np.float64])
def test_reduce_max_and_min_propagate_a_nan_anywhere_like_numpy(kind):
    """A NaN after the first element of a reduced run (in the middle, last, after larger and
    smaller values) makes that output NaN, as numpy's max / min give it; runs without a NaN
    keep their extreme."""
    x = RNG.standard_normal((3, 4, 5)).astype(kind)
    x[0, 1, 2] = np.nan  # mid-run on every axis
    x[2, 3, 4] = np.nan  # the last element
    x[1, 2, 1] = np.nan
    x[1, 2, 3] = 10.0  # a larger value after the NaN must not replace it
    x[1, 2, 4] = -10.0  # nor a smaller one
    numpy_of = {"ReduceMax": np.max, "ReduceMin": np.min}
    for op, reduce in numpy_of.items():
        for axes in (None, [0], [1], [2], [0, 2], [1, 2]):
            inputs = [x] if axes is None else [x, i64(*axes)]
            (got,) = run_numpy(op, inputs, {"keepdims": 1})
            want = reduce(x, axis=None if axes is None else tuple(axes), keepdims=True)
            assert got.dtype == want.dtype and np.isnan(want).any()
            np.testing.assert_array_equal(got, want)


def _onnxruntime(op, inputs, attributes=None):
    """Outputs of onnxruntime (opset 18, one thread) on a one-node model of `op`."""
    import onnxruntime

    names = [f"x{k}" for k in range(len(inputs))]
    node = helper.make_node(op, names, ["y0"], **(attributes or {}))
    graph_inputs = [
        helper.make_tensor_value_info(name, ELEM[x.dtype], x.shape)
        for name, x in zip(names, inputs, strict=True)
    ]
    output = helper.make_tensor_value_info("y0", ELEM[inputs[0].dtype], None)
    graph = helper.make_graph([node], "g", graph_inputs, [output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(model.SerializeToString(), options)
    return session.run(None, dict(zip(names, inputs, strict=True)))


def _onnxruntime_reduce_mean(x, axes, keepdims):
    """onnxruntime's ReduceMean (opset 18, axes as an input) of `x` on one thread."""
    inputs = [x] if axes is None else [x, i64(*axes)]
    return _onnxruntime("ReduceMean", inputs, {"keepdims": keepdims})[0]


@pytest.mark.parametrize("kind", [np.int32, np.int64])
def test_reduce_mean_of_integers_matches_onnxruntime(kind):
    """ONNX allows integer ReduceMean; onnxruntime divides the sum truncating toward zero
    (-7 / 4 is -1, not floor's -2), which was refused (STATUS_OP_BAD_DTYPE) before."""
    x = XI.astype(kind)
    for axes in (None, [1], [0, -1], [2]):
        for keepdims in (0, 1):
            inputs = [x] if axes is None else [x, i64(*axes)]
            (got,) = run_numpy("ReduceMean", inputs, {"keepdims": keepdims})
            want = _onnxruntime_reduce_mean(x, axes, keepdims)
            assert got.dtype == want.dtype == x.dtype
            np.testing.assert_array_equal(got, want)
    by_hand = np.array([[-3, -4, 0, 0], [7, 2, 1, 1]], dtype=kind)
    (got,) = run_numpy("ReduceMean", [by_hand, i64(1)], {"keepdims": 0})
    np.testing.assert_array_equal(got, np.array([-1, 2], dtype=kind))  # -7/4, 11/4


def test_argmax_argmin():
    x = RNG.integers(0, 3, (4, 5, 6)).astype(np.float32)  # ties
    for op in ("ArgMax", "ArgMin"):
        for axis in (0, 1, -1):
            for keepdims in (0, 1):
                for last in (0, 1):
                    attributes = {"axis": axis, "keepdims": keepdims, "select_last_index": last}
                    check(op, [x], attributes)
        check(op, [XI], {"axis": 2})
        refuses(STATUS_OP_BAD_ATTRIBUTE, op, [x], {"axis": 3})


# -- hostile tables: compute re-checks what it indexes with ------------------------------------


def test_compute_refuses_short_output_rows():
    """An output row whose byte range is too small for what infer wrote (a corrupt graph) is
    refused with STATUS_OP_BAD_SHAPE, and nothing is written past it."""
    from rtsoa.ops.abi import COL_NBYTES, COL_OFFSET, MODE_COMPUTE, MODE_INFER
    from rtsoa.ops.host import _prepare, run_op
    from rtsoa.ops.registry import op_code

    x = RNG.standard_normal((3, 4)).astype(np.float32)
    cases = [
        ("Transpose", [x], {}),
        ("Slice", [x, i64(0), i64(2)], {}),
        ("Tile", [x, i64(2, 1)], {}),
        ("Pad", [x, i64(1, 1, 1, 1)], {"mode": "edge"}),
        ("Pad", [x, i64(1, 1, 1, 1)], {}),
        ("Concat", [x, x], {"axis": 1}),
        ("Gather", [x, i64(0, 2)], {"axis": 1}),
        ("Expand", [x, i64(2, 3, 4)], {}),
        ("Where", [x > 0, x, x], {}),
        ("Cast", [x], {"to": TensorProto.DOUBLE}),
        ("ReduceSum", [x, i64(1)], {}),
        ("ArgMax", [x], {}),
        ("Reshape", [x, i64(-1)], {}),
    ]
    for name, inputs, attributes in cases:
        _, attrs, table, arena = _prepare(name, inputs, attributes, 1)
        n_in = len(inputs)
        assert run_op(MODE_INFER, op_code(name), arena, table, attrs, n_in, 1) == 0
        grown = np.full(len(arena) + 4096, 0xAB, dtype=np.uint8)
        grown[: len(arena)] = arena
        table[n_in, COL_OFFSET] = len(arena)
        table[n_in, COL_NBYTES] = 4  # one element at most
        status = run_op(MODE_COMPUTE, op_code(name), grown, table, attrs, n_in, 1)
        assert status == STATUS_OP_BAD_SHAPE, name
        assert (grown[len(arena) + 4 :] == 0xAB).all(), name


def test_truncated_attribute_slots():
    from rtsoa.ops.abi import MODE_INFER
    from rtsoa.ops.host import _prepare, run_op
    from rtsoa.ops.registry import op_code

    for name, inputs in (("Split", [X]), ("Pad", [X, i64(0, 0, 0, 0, 0, 0)]), ("ArgMax", [X])):
        _, attrs, table, arena = _prepare(name, inputs, {}, 1)
        status = run_op(MODE_INFER, op_code(name), arena, table, attrs[:1], len(inputs), 1)
        assert status == STATUS_OP_BAD_ATTRIBUTE, name
