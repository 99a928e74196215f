"""Pow with a uint64 exponent (opset 15): the exponent made float64 from its 32-bit halves,
against onnx.reference (numpy's promotion: float64, then cast back to the base's type)."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa import InferenceSession
from rtsoa.abi.dtypes import DTYPE_OF_NUMPY, DTYPES
from rtsoa.errors import LoweringError
from rtsoa.lowering import lower

U64 = TensorProto.UINT64
# 2**53 + 1 and 2**64 - 1 round to even in float64: -1 to their power is then 1, not -1
EXPONENTS = np.array([0, 1, 3, 2**32 + 1, 2**53 + 1, 2**63 + 2**11 + 1, 2**64 - 1], np.uint64)


def _model(base_type, exponent_type, n):
    node = helper.make_node("Pow", ["x", "y"], ["z"])
    graph = helper.make_graph(
        [node],
        "pow",
        [
            helper.make_tensor_value_info("x", base_type, [n]),
            helper.make_tensor_value_info("y", exponent_type, [n]),
        ],
        [helper.make_tensor_value_info("z", base_type, [n])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


def _onnx_type(numpy_type):
    return DTYPES[DTYPE_OF_NUMPY[np.dtype(numpy_type)]].onnx


@pytest.mark.parametrize("base_type", [np.float32, np.float64, np.int32, np.int64])
def test_a_uint64_exponent_matches_onnx_reference(base_type):
    bases = np.array([1, -1, 2, -1, -1, 1, -1], base_type)
    if np.dtype(base_type).kind == "f":
        bases = np.array([1.5, -1.0, 0.5, -1.0, -1.0, 1.0, -1.0], base_type)
    proto = _model(_onnx_type(base_type), U64, len(bases))
    feeds = {"x": bases, "y": EXPONENTS}
    (want,) = ReferenceEvaluator(proto).run(None, feeds)
    with InferenceSession(lower(proto)) as session:
        got = session.execute_sync(feeds)["z"]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert got[4] == 1 and got[6] == 1  # the exponents rounded once, to even


def test_the_node_suite_case_float32_to_uint64_powers():
    proto = _model(TensorProto.FLOAT, U64, 3)
    feeds = {"x": np.array([1, 2, 3], np.float32), "y": np.array([4, 5, 6], np.uint64)}
    with InferenceSession(lower(proto)) as session:
        got = session.execute_sync(feeds)["z"]
    np.testing.assert_array_equal(got, np.array([1, 32, 729], np.float32))


@pytest.mark.parametrize(
    ("base_type", "exponent_type"),
    [(U64, TensorProto.FLOAT), (TensorProto.UINT8, U64), (TensorProto.UINT32, U64)],
)
def test_powers_numpy_computes_in_uint64_are_refused_naming_the_node(base_type, exponent_type):
    with pytest.raises(LoweringError, match=r"Pow node.*computes it in uint64"):
        lower(_model(base_type, exponent_type, 3))
