"""Det beyond the ONNX node suite: batches of float32 matrices against onnxruntime, float64
against numpy, singular and permuted matrices, 0 x 0 and 1 x 1, and the refusals."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.errors import OpError
from rtsoa.ops.abi import STATUS_OP_BAD_DTYPE, STATUS_OP_BAD_SHAPE
from rtsoa.ops.host import run_numpy
from rtsoa.testing.models import run_onnxruntime

rng = np.random.default_rng(110)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 5, 5), (1, 1), (6, 2, 2)])
def test_float32_against_onnxruntime(shape):
    x = rng.standard_normal(shape).astype(np.float32)
    node = helper.make_node("Det", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "det",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 10
    want = run_onnxruntime(model, {"x": x})["y"]
    (got,) = run_numpy("Det", [x])
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_float64_singular_permuted_and_empty_against_numpy():
    matrices = rng.standard_normal((5, 4, 4))
    matrices[1, 2] = matrices[1, 0] * 3.0  # singular
    matrices[2] = np.eye(4)[[2, 0, 3, 1]]  # a permutation: a zero leading pivot
    matrices[3, :, 0] = 0.0  # a zero column
    (got,) = run_numpy("Det", [matrices])
    np.testing.assert_allclose(got, np.linalg.det(matrices), rtol=1e-12, atol=1e-12)
    (got,) = run_numpy("Det", [np.zeros((3, 0, 0))])
    np.testing.assert_array_equal(got, np.ones(3))
    (got,) = run_numpy("Det", [np.zeros((0, 2, 2), np.float32)])
    assert got.shape == (0,)


@pytest.mark.parametrize(
    "x, status",
    [
        (np.zeros((2, 3), np.float32), STATUS_OP_BAD_SHAPE),
        (np.zeros(3, np.float32), STATUS_OP_BAD_SHAPE),
        (np.zeros((2, 2), np.int32), STATUS_OP_BAD_DTYPE),
    ],
)
def test_bad_operands_get_a_status(x, status):
    with pytest.raises(OpError) as error:
        run_numpy("Det", [x])
    assert error.value.status == status
