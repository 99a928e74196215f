"""ScatterElements (and Scatter), ScatterND, GatherND and TensorScatter through the compiled op
entry (`run_numpy`), judged by onnx.reference on every element type and by onnxruntime (single
thread) on the common ones; one lowered model end to end; one test per failure status, and the
refusals at lowering naming the op, the node and what is wrong.
"""

import numpy as np
import pytest
from one_node import check, failure, one_node_model, refused
from onnx import helper
from test_ops_dtypes import ELEMENT

from rtsoa.ops.abi import (
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
)
from rtsoa.ops.host import run_numpy
from tests.model_checks import run_and_compare

rng = np.random.default_rng(126)
REDUCTIONS = ["none", "add", "mul", "max", "min"]
NUMERIC = [np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint64]


def data(shape, kind):
    """Values small enough that products of a few stay exact in every type."""
    values = rng.integers(1, 4, size=shape)
    return values.astype(kind)


# -- ScatterElements ------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("kind", NUMERIC)
def test_scatter_elements_every_reduction_and_numeric_type(reduction, kind):
    x = data((4, 5, 3), kind)
    indices = rng.integers(-5, 5, size=(3, 6, 2)).astype(np.int64)  # duplicates, negatives
    updates = data(indices.shape, kind)
    attributes = {"axis": 1, "reduction": reduction}
    check("ScatterElements", [x, indices, updates], attributes, 18)


@pytest.mark.parametrize("axis", [0, 2, -1])
@pytest.mark.parametrize("reduction", ["add", "max"])
def test_scatter_elements_against_onnxruntime_with_int32_indices(axis, reduction):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    shape = [2, 3, 4]
    size = x.shape[axis]
    indices = rng.integers(-size, size, size=shape).astype(np.int32)
    updates = rng.standard_normal(shape).astype(np.float32)
    attributes = {"axis": axis, "reduction": reduction}
    check("ScatterElements", [x, indices, updates], attributes, 18, judge="onnxruntime")


@pytest.mark.parametrize("kind", [np.bool_, np.float16, np.uint16, np.uint32])
def test_scatter_elements_copies_any_element_type(kind):
    x = data((3, 4), kind)
    indices = np.array([[2, 0, 1, 2]], dtype=np.int64)
    check("ScatterElements", [x, indices, data((1, 4), kind)], {"axis": 0}, 18)


def test_scatter_elements_max_and_min_keep_and_take_a_nan():
    """NaN wins either way, as numpy's maximum / minimum and rtsoa's Max / Min have it (ONNX
    leaves it open: onnx.reference and onnxruntime differ from each other)."""
    x = np.array([1.0, np.nan, 3.0, 4.0], dtype=np.float32)
    indices = np.array([0, 1, 2, 2], dtype=np.int64)
    updates = np.array([np.nan, 5.0, 2.0, 7.0], dtype=np.float32)
    for reduction, ufunc in (("max", np.maximum), ("min", np.minimum)):
        want = x.copy()
        ufunc.at(want, indices, updates)
        (got,) = run_numpy("ScatterElements", [x, indices, updates], {"reduction": reduction}, 1)
        np.testing.assert_array_equal(got, want)


def test_scatter_elements_with_no_updates_is_a_copy():
    x = data((3, 4), np.float32)
    indices = np.zeros((0, 4), dtype=np.int64)
    check("ScatterElements", [x, indices, np.zeros((0, 4), np.float32)], {"axis": 0}, 18)


def test_old_scatter_is_scatter_elements():
    x = rng.standard_normal((3, 3)).astype(np.float32)
    indices = np.array([[1, 0, 2], [0, 2, 1]], dtype=np.int64)
    updates = rng.standard_normal((2, 3)).astype(np.float32)
    model, feeds = one_node_model("Scatter", [x, indices, updates], {"axis": 1}, 10)
    run_and_compare(model, [feeds])


def test_scatter_elements_index_out_of_range_fails():
    x = np.zeros((2, 3), np.float32)
    for bad in (3, -4):
        indices = np.array([[0, bad]], dtype=np.int64)
        updates = np.ones((1, 2), np.float32)
        failure(STATUS_OP_BAD_INDEX, "ScatterElements", [x, indices, updates], {"axis": 1})


def test_scatter_elements_shapes_that_do_not_match_fail():
    x = np.zeros((2, 3), np.float32)
    indices = np.zeros((3, 1), dtype=np.int64)  # larger than the data off the axis
    inputs = [x, indices, np.ones((3, 1), np.float32)]
    failure(STATUS_OP_BAD_SHAPE, "ScatterElements", inputs, {"axis": 1})
    indices = np.zeros((1, 2), dtype=np.int64)  # updates of another shape
    failure(STATUS_OP_BAD_SHAPE, "ScatterElements", [x, indices, np.ones((2, 1), np.float32)], {})


def test_scatter_elements_updates_of_another_type_and_float_indices_fail():
    x = np.zeros((2, 3), np.float32)
    indices = np.zeros((1, 2), dtype=np.int64)
    failure(STATUS_OP_BAD_DTYPE, "ScatterElements", [x, indices, np.ones((1, 2), np.float64)], {})
    failure(STATUS_OP_BAD_DTYPE, "ScatterElements", [x, x[:1, :2], np.ones((1, 2), np.float32)], {})


def test_scatter_elements_axis_out_of_range_fails():
    x = np.zeros((2, 3), np.float32)
    inputs = [x, np.zeros((1, 2), np.int64), np.ones((1, 2), np.float32)]
    failure(STATUS_OP_BAD_ATTRIBUTE, "ScatterElements", inputs, {"axis": 2})


def test_scatter_reductions_unknown_or_on_bool_are_refused_at_lowering():
    x = np.zeros((2, 3), np.float32)
    inputs = [x, np.zeros((1, 2), np.int64), np.ones((1, 2), np.float32)]
    refused("ScatterElements", inputs, {"reduction": "mean"}, 18, "reduction 'mean'")
    flags = [np.zeros((2, 3), np.bool_), np.zeros((1, 2), np.int64), np.ones((1, 2), np.bool_)]
    refused("ScatterElements", flags, {"reduction": "add"}, 18, "element type bool")
    refused(
        "ScatterND",
        [x, np.zeros((1, 2), np.int64), np.ones(1, np.float32)],
        {"reduction": "sub"},
        18,
        "reduction 'sub'",
    )


def test_a_bad_scatter_shape_is_refused_at_lowering_naming_the_node():
    x = np.zeros((2, 3), np.float32)
    inputs = [x, np.zeros((3, 1), np.int64), np.ones((3, 1), np.float32)]
    refused("ScatterElements", inputs, {"axis": 1}, 18, "incompatible input shapes")


# -- ScatterND ------------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("kind", [np.float32, np.int64, np.uint8])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_scatter_nd_element_and_slice_indices(reduction, kind, k):
    x = data((4, 3, 2), kind)
    indices = np.stack([rng.integers(-d, d, size=(2, 3)) for d in x.shape[:k]], axis=-1)
    updates = data(indices.shape[:-1] + x.shape[k:], kind)
    if reduction == "none":  # duplicates would make the result depend on the order
        flat = np.ravel_multi_index(tuple(np.moveaxis(indices % x.shape[:k], -1, 0)), x.shape[:k])
        indices = indices.reshape(-1, k)[np.unique(flat, return_index=True)[1]]
        updates = updates.reshape((-1,) + x.shape[k:])[: indices.shape[0]]
    check("ScatterND", [x, indices.astype(np.int64), updates], {"reduction": reduction}, 18)


def test_scatter_nd_against_onnxruntime():
    x = rng.standard_normal((5, 4, 3)).astype(np.float32)
    indices = np.array([[[0, 1], [4, 3]], [[-1, 0], [2, 2]]], dtype=np.int64)
    updates = rng.standard_normal((2, 2, 3)).astype(np.float32)
    check("ScatterND", [x, indices, updates], {"reduction": "add"}, 18, judge="onnxruntime")
    check("ScatterND", [x, indices, updates], {}, 13, judge="onnxruntime")


def test_scatter_nd_index_out_of_range_and_bad_shapes_fail():
    x = np.zeros((2, 3), np.float32)
    failure(STATUS_OP_BAD_INDEX, "ScatterND", [x, np.array([[0, 3]]), np.ones(1, np.float32)], {})
    failure(STATUS_OP_BAD_SHAPE, "ScatterND", [x, np.array([[0]]), np.ones(2, np.float32)], {})
    failure(
        STATUS_OP_BAD_SHAPE,
        "ScatterND",
        [x, np.zeros((1, 3), np.int64), np.ones(1, np.float32)],
        {},
    )
    failure(
        STATUS_OP_BAD_DTYPE,
        "ScatterND",
        [x, np.array([[0]], np.int32), np.ones((1, 3), np.float32)],
        {},
    )


# -- GatherND -------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_dims", [0, 1, 2])
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("kind", [np.float32, np.int64, np.bool_, np.uint16])
def test_gather_nd_with_batch_dims(batch_dims, k, kind):
    x = data((2, 3, 4, 2), kind)
    batch = x.shape[:batch_dims]
    axes = x.shape[batch_dims : batch_dims + k]
    columns = [rng.integers(-d, d, size=batch + (3,)) for d in axes]
    indices = np.stack(columns, axis=-1).astype(np.int64)
    check("GatherND", [x, indices], {"batch_dims": batch_dims}, 13)


def test_gather_nd_against_onnxruntime_and_with_no_indices():
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    indices = np.array([[[2, 1]], [[-1, 0]]], dtype=np.int64)
    check("GatherND", [x, indices], {}, 13, judge="onnxruntime")
    check("GatherND", [x, np.zeros((0, 2), np.int64)], {}, 13)


def test_gather_nd_index_out_of_range_fails():
    x = np.zeros((2, 3), np.float32)
    failure(STATUS_OP_BAD_INDEX, "GatherND", [x, np.array([[1, -4]], np.int64)], {})


def test_gather_nd_bad_batch_dims_fail_and_are_refused_at_lowering():
    x = np.zeros((2, 3), np.float32)
    indices = np.zeros((2, 1), np.int64)
    failure(STATUS_OP_BAD_ATTRIBUTE, "GatherND", [x, indices], {"batch_dims": 2})
    refused("GatherND", [x, indices], {"batch_dims": 2}, 13, "bad attribute")
    failure(STATUS_OP_BAD_SHAPE, "GatherND", [x, np.zeros((3, 1), np.int64)], {"batch_dims": 1})


# -- TensorScatter --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis", [-2, 1, 3])
@pytest.mark.parametrize("with_indices", [False, True])
def test_tensor_scatter_modes_axes_and_write_indices(mode, axis, with_indices):
    cache = data((2, 3, 5, 4), np.float32)
    shape = list(cache.shape)
    shape[axis] = 2
    update = data(shape, np.float32) + 10
    length = cache.shape[axis]
    if with_indices:
        top = length if mode == "circular" else length - 2
        indices = np.array([top, 1], dtype=np.int64)
    else:
        indices = None
    check("TensorScatter", [cache, update, indices], {"axis": axis, "mode": mode}, 24)


def test_tensor_scatter_past_the_end_in_linear_mode_fails():
    cache = np.zeros((2, 4, 3), np.int8)
    update = np.ones((2, 2, 3), np.int8)
    for start in (3, -1):
        indices = np.array([0, start], dtype=np.int64)
        failure(STATUS_OP_BAD_INDEX, "TensorScatter", [cache, update, indices], {"axis": 1})


def test_tensor_scatter_bad_axis_shape_and_mode():
    cache = np.zeros((2, 4, 3), np.float32)
    update = np.ones((2, 2, 3), np.float32)
    failure(STATUS_OP_BAD_ATTRIBUTE, "TensorScatter", [cache, update], {"axis": 0})
    failure(
        STATUS_OP_BAD_SHAPE, "TensorScatter", [cache, np.ones((2, 5, 3), np.float32)], {"axis": 1}
    )
    refused("TensorScatter", [cache, update], {"axis": 1, "mode": "ring"}, 24, "mode 'ring'")


# -- a lowered model ----------------------------------------------------------------------------


def test_a_model_scattering_and_gathering_run_time_indices():
    """Indices computed at run time (graph inputs) through lowering and every pass."""
    x = helper.make_tensor_value_info("x", ELEMENT[np.dtype(np.float32)], [4, 3])
    i = helper.make_tensor_value_info("i", ELEMENT[np.dtype(np.int64)], [2, 3])
    u = helper.make_tensor_value_info("u", ELEMENT[np.dtype(np.float32)], [2, 3])
    j = helper.make_tensor_value_info("j", ELEMENT[np.dtype(np.int64)], [2, 1])
    y = helper.make_tensor_value_info("y", ELEMENT[np.dtype(np.float32)], None)
    nodes = [
        helper.make_node("ScatterElements", ["x", "i", "u"], ["s"], axis=0, reduction="add"),
        helper.make_node("ScatterND", ["s", "j", "u"], ["t"], reduction="max"),
        helper.make_node("GatherND", ["t", "j"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "scatter", [x, i, u, j], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    feeds = {
        "x": rng.standard_normal((4, 3)).astype(np.float32),
        "i": np.array([[0, 3, 1], [-1, 0, 0]], dtype=np.int64),
        "u": rng.standard_normal((2, 3)).astype(np.float32),
        "j": np.array([[2], [0]], dtype=np.int64),
    }
    run_and_compare(model, [feeds])
