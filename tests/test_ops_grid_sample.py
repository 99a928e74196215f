"""GridSample against onnxruntime (single thread) beyond the ONNX node suite: every mode with
every padding mode and align_corners on grids reaching past [-1, 1], 4-D and 5-D inputs,
opset 16's mode names, float64 against onnx.reference, a lowered model, non-finite
coordinates, and the refusals. Float32 within rtol 1e-5 / atol 1e-5. Cubic mode with border
padding follows onnxruntime (and PyTorch): each tap is clamped, where onnx.reference clamps
the coordinate first.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa.errors import LoweringError, OpError
from rtsoa.lowering import lower
from rtsoa.ops.abi import STATUS_OP_BAD_ATTRIBUTE, STATUS_OP_BAD_DTYPE, STATUS_OP_BAD_SHAPE
from rtsoa.ops.host import run_numpy
from rtsoa.testing.models import run_onnxruntime
from tests.model_checks import run_clean

ELEMENT = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}
rng = np.random.default_rng(114)


def grid_model(x, grid, opset=22, **attributes):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], **attributes)
    graph = helper.make_graph(
        [node],
        "grid_sample",
        [
            helper.make_tensor_value_info("x", ELEMENT[x.dtype.type], x.shape),
            helper.make_tensor_value_info("grid", ELEMENT[grid.dtype.type], grid.shape),
        ],
        [helper.make_tensor_value_info("y", ELEMENT[x.dtype.type], None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def check(x, grid, judge="onnxruntime", **attributes):
    model = grid_model(x, grid, **attributes)
    feeds = {"x": x, "grid": grid}
    if judge == "reference":
        want = ReferenceEvaluator(model).run(None, feeds)[0]
    else:
        want = run_onnxruntime(model, feeds)["y"]
    (got,) = run_numpy("GridSample", [x, grid], attributes)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def uniform(*shape, reach=1.3, kind=np.float32):
    return rng.uniform(-reach, reach, shape).astype(kind)


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_every_mode_padding_and_alignment(mode, padding_mode, align_corners):
    check(
        rng.standard_normal((2, 3, 5, 6)).astype(np.float32),
        uniform(2, 4, 7, 2),
        mode=mode,
        padding_mode=padding_mode,
        align_corners=align_corners,
    )


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_volumetric(mode, padding_mode):
    check(
        rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32),
        uniform(1, 2, 3, 4, 3),
        mode=mode,
        padding_mode=padding_mode,
    )


def test_far_reflections_and_a_one_pixel_axis():
    """Coordinates several widths outside reflect back and forth; an axis of one pixel with
    align_corners has no span to reflect in."""
    x = rng.standard_normal((1, 1, 1, 4)).astype(np.float32)
    for align_corners in (0, 1):
        check(
            x,
            uniform(1, 3, 5, 2, reach=7.0),
            mode="linear",
            padding_mode="reflection",
            align_corners=align_corners,
        )


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "nearest"])
def test_opset_16_mode_names_lowered(mode):
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    grid = uniform(1, 3, 3, 2)
    model = grid_model(x, grid, opset=16, mode=mode, padding_mode="border")
    got = run_clean(lower(model), {"x": x, "grid": grid})["y"]
    want = run_onnxruntime(model, {"x": x, "grid": grid})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_float64_against_onnx_reference(mode):
    """onnx.reference rounds coordinates to float32 whatever the grid's type; coordinates
    that float32 holds exactly make the comparison exact."""
    grid = (rng.integers(-40, 40, size=(1, 3, 4, 2)) / 32.0).astype(np.float64)
    check(rng.standard_normal((1, 2, 4, 5)), grid, judge="reference", mode=mode)


def test_non_finite_coordinates_sample_zero():
    x = np.ones((1, 1, 3, 3), dtype=np.float32)
    grid = np.array([[[[np.nan, 0.0], [0.0, np.inf], [-np.inf, 0.5], [0.2, 0.1]]]], np.float32)
    for padding_mode in ("zeros", "reflection"):
        for mode in ("nearest", "linear", "cubic"):
            (got,) = run_numpy(
                "GridSample", [x, grid], {"mode": mode, "padding_mode": padding_mode}
            )
            assert got.shape == (1, 1, 1, 4)
            np.testing.assert_array_equal(got[0, 0, 0, :3], 0.0)
            assert np.isfinite(got[0, 0, 0, 3])


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attributes, named",
    [({"mode": "area"}, "mode 'area'"), ({"padding_mode": "wrap"}, "padding_mode 'wrap'")],
)
def test_unknown_attribute_values_are_refused_by_name(attributes, named):
    x = np.zeros((1, 1, 2, 2), np.float32)
    with pytest.raises(LoweringError, match=named):
        lower(grid_model(x, np.zeros((1, 1, 1, 2), np.float32), **attributes))


@pytest.mark.parametrize(
    "x_shape, grid_shape",
    [
        ((1, 1, 4), (1, 2, 2)),  # grid entries must hold one coordinate per spatial axis
        ((1, 1, 4, 4), (1, 2, 2, 3)),
        ((1, 1, 4, 4), (2, 2, 2, 2)),  # batch
        ((1, 1, 4, 4), (1, 2, 2)),  # grid rank
        ((1, 4), (1, 2)),  # no spatial axis
    ],
)
def test_mismatched_shapes_are_refused(x_shape, grid_shape):
    with pytest.raises(OpError) as error:
        run_numpy("GridSample", [np.zeros(x_shape, np.float32), np.zeros(grid_shape, np.float32)])
    assert error.value.status == STATUS_OP_BAD_SHAPE


def test_integer_inputs_and_bad_codes_are_refused():
    x = np.zeros((1, 1, 2, 2), np.float32)
    grid = np.zeros((1, 1, 1, 2), np.float32)
    with pytest.raises(OpError) as error:
        run_numpy("GridSample", [x.astype(np.int32), grid])
    assert error.value.status == STATUS_OP_BAD_DTYPE
    with pytest.raises(OpError) as error:
        run_numpy("GridSample", [x, grid], {"mode": "area"})
    assert error.value.status == STATUS_OP_BAD_ATTRIBUTE
