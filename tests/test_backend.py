"""rtsoa as an ONNX backend: `onnx.backend.test.BackendTest`, the runner other runtimes use,
runs a selection of node cases through `rtsoa.backend` (its own judging: shapes, dtypes,
rtol / atol of each case), and the interface's other entry points behave as documented.
The selection is of ops rtsoa runs; the whole node suite is tests/test_conformance.py's."""

import re
import unittest

import numpy as np
import onnx.backend.test
import pytest
from onnx import TensorProto, helper

import rtsoa.backend
from rtsoa.errors import LoweringError, ModelInputError

SELECTED = (
    "abs",
    "add",
    "add_bcast",
    "add_int8",
    "argmax_default_axis_example",
    "concat_2d_axis_0",
    "conv_with_strides_padding",
    "div_uint8",
    "dropout_default_mask",
    "equal_int16",
    "gemm_all_attributes",
    "matmul_2d",
    "max_float16",
    "min_uint8",
    "reduce_max_bool_inputs",
    "reduce_max_empty_set",
    "reduce_min_empty_set",
    "relu",
    "reshape_negative_dim",
    "softmax_axis_1",
    "transpose_default",
    "where_example",
)

PATTERN = rf"^test_({'|'.join(SELECTED)})_cpu$"
backend_test = onnx.backend.test.BackendTest(rtsoa.backend, __name__)
backend_test.include(PATTERN)


def _selection():
    """One TestCase class holding the selected tests of the runner's classes: the runner
    marks every other case skipped, and a skip fails the run on CI."""
    tests = {}
    for case in backend_test.test_cases.values():
        for name in dir(case):
            if re.match(PATTERN, name):
                tests[name] = getattr(case, name)
    return type("OnnxBackendNodeSelectionTest", (unittest.TestCase,), tests)


OnnxBackendNodeSelectionTest = _selection()


def relu_model(opset=14):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_the_selection_is_all_there():
    for case in SELECTED:
        assert hasattr(OnnxBackendNodeSelectionTest, f"test_{case}_cpu")


def test_prepare_run_and_close():
    x = np.array([-1.0, 0.0, 2.5], np.float32)
    with rtsoa.backend.prepare(relu_model()) as rep:
        by_list = rep.run([x])
        by_dict = rep.run({"x": x})
        by_array = rep.run(x)
    for outputs in (by_list, by_dict, by_array):
        np.testing.assert_array_equal(outputs.y, np.maximum(x, 0))
        np.testing.assert_array_equal(outputs[0], np.maximum(x, 0))
    assert rep.executor.state == "unloaded"
    np.testing.assert_array_equal(rtsoa.backend.run_model(relu_model(), [x])[0], [0, 0, 2.5])


def test_run_node_builds_a_one_node_model():
    a = np.arange(6, dtype=np.int8).reshape(2, 3)
    b = np.array([120, -3, 7], np.int8)
    node = helper.make_node("Add", ["a", "b"], ["c"])
    (c,) = rtsoa.backend.run_node(node, [a, b])
    np.testing.assert_array_equal(c, (a + b).astype(np.int8))  # wraps, as numpy does
    (c,) = rtsoa.backend.run_node(node, [a, b], outputs_info=[(np.int8, (2, 3))])
    assert c.dtype == np.int8


def test_what_rtsoa_cannot_run_is_refused_when_prepared():
    # an op of a domain no converter knows: unsupported whatever ops rtsoa adds
    node = helper.make_node("Determinant", ["x"], ["y"], name="determinant", domain="com.example")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    graph = helper.make_graph([node], "det", [x], [y])
    opsets = [helper.make_opsetid("", 14), helper.make_opsetid("com.example", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    with pytest.raises(LoweringError, match="determinant.*'Determinant' is not supported"):
        rtsoa.backend.prepare(model)


def test_devices_and_input_counts():
    assert rtsoa.backend.supports_device("CPU")
    assert not rtsoa.backend.supports_device("CUDA")
    with pytest.raises(ModelInputError, match="CPU"):
        rtsoa.backend.prepare(relu_model(), device="CUDA")
    x = np.zeros(3, np.float32)
    with rtsoa.backend.prepare(relu_model()) as rep:
        with pytest.raises(ModelInputError, match="2 inputs given; the model takes 1"):
            rep.run([x, x])
