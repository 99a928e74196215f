"""Einsum beyond the ONNX node suite: products, diagonals, sums, transposes, outer products,
ellipses that broadcast, upper-case letters (opset 28) and implicit outputs, against
onnxruntime (float32 / int64) and numpy (float64, int32); zero-size labels; an ellipsis over a
symbolic dim in a lowered model; and the refusals."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.errors import LoweringError, OpError
from rtsoa.lowering import lower
from rtsoa.ops.abi import STATUS_OP_BAD_DTYPE, STATUS_OP_BAD_SHAPE
from rtsoa.ops.host import run_numpy
from rtsoa.testing.models import run_onnxruntime
from tests.model_checks import run_and_compare

ELEMENT = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64}
rng = np.random.default_rng(112)

CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bii->bi", [(3, 4, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->ji", [(3, 4)]),
    ("i,i", [(5,), (5,)]),
    ("i,j,k->kji", [(2,), (3,), (4,)]),
    ("...j,j->...", [(2, 3, 4), (4,)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (1, 5, 4, 2)]),  # the ellipsis broadcasts
    ("bij,bjk", [(2, 3, 4), (2, 4, 5)]),  # implicit: ik
    ("...ii", [(2, 3, 3)]),  # implicit with an ellipsis: ...
    ("Ab,bC->CA", [(2, 3), (3, 4)]),
    ("ijk,ikj->i", [(2, 3, 4), (2, 4, 3)]),
]


def einsum_model(equation, arrays, opset=28, dims=None):
    names = [f"x{k}" for k in range(len(arrays))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    element = ELEMENT[arrays[0].dtype]
    graph = helper.make_graph(
        [node],
        "einsum",
        [
            helper.make_tensor_value_info(name, element, dims or array.shape)
            for name, array in zip(names, arrays, strict=True)
        ],
        [helper.make_tensor_value_info("y", element, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model, dict(zip(names, arrays, strict=True))


@pytest.mark.parametrize("kind", [np.float32, np.int64])
@pytest.mark.parametrize("equation, shapes", CASES)
def test_against_onnxruntime(equation, shapes, kind):
    arrays = [rng.integers(-3, 4, shape).astype(kind) for shape in shapes]
    model, feeds = einsum_model(equation, arrays)
    want = run_onnxruntime(model, feeds)["y"]
    (got,) = run_numpy("Einsum", arrays, {"equation": equation})
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", [np.float64, np.int32])
@pytest.mark.parametrize("equation, shapes", CASES[:8])
def test_against_numpy(equation, shapes, kind):
    arrays = [rng.standard_normal(shape).astype(kind) * 3 for shape in shapes]
    (got,) = run_numpy("Einsum", arrays, {"equation": equation})
    np.testing.assert_allclose(got, np.einsum(equation, *arrays), rtol=1e-12, atol=1e-12)


def test_zero_size_labels():
    a, b = np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32)
    (got,) = run_numpy("Einsum", [a, b], {"equation": "ij,jk->ik"})
    np.testing.assert_array_equal(got, np.zeros((3, 4)))
    (got,) = run_numpy("Einsum", [b], {"equation": "ij->j"})
    assert got.shape == (4,)


def test_ellipsis_over_a_symbolic_dim_lowered():
    arrays = [rng.standard_normal((5, 3, 4)).astype(np.float32), np.ones(4, np.float32)]
    model, _ = einsum_model("...j,j->...", arrays, dims=None)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    inputs = [
        {"x0": rng.standard_normal((n, 3, 4)).astype(np.float32), "x1": arrays[1]} for n in (2, 5)
    ]
    run_and_compare(model, inputs)


@pytest.mark.parametrize(
    "equation, shapes, named",
    [
        ("ij,jk->ik", [(2, 3)], "has 2 operand"),
        ("ijk->i", [(2, 3)], "term 'ijk' for an operand of rank 2"),
        ("ij->ix", [(2, 3)], "letter no input has"),
        ("ij->ii", [(2, 3)], "repeats a letter"),
        ("...i->i", [(2, 3)], "leaves out the ellipsis"),
        ("i1->i", [(2, 3)], "is not letters"),
        ("...i,...i->...", [(2, 3), (2, 2, 3)], "stands for 1 and 2 dims"),
    ],
)
def test_malformed_equations_are_refused_by_name(equation, shapes, named):
    arrays = [np.zeros(shape, np.float32) for shape in shapes]
    model, _ = einsum_model(equation, arrays)
    with pytest.raises(LoweringError, match=named) as error:
        lower(model)
    assert "Einsum node" in str(error.value)


def test_mismatched_sizes_and_types_get_a_status():
    with pytest.raises(OpError) as error:
        run_numpy("Einsum", [np.zeros((2, 3)), np.zeros((4, 5))], {"equation": "ij,jk->ik"})
    assert error.value.status == STATUS_OP_BAD_SHAPE
    with pytest.raises(OpError) as error:
        run_numpy("Einsum", [np.zeros((2, 3)), np.zeros((3, 2), np.float32)], {"equation": "ij,jk"})
    assert error.value.status == STATUS_OP_BAD_DTYPE
