"""Loop scan outputs (rtsoa.lowering.loop_scans), judged by onnxruntime: two scan outputs of
different ranks and element types next to a loop-carried value, with a trip count and with a
condition ending the loop early; the refusal of an undeclared element type. (onnx.reference
1.20 concatenates the iterations' values along their own first axis instead of stacking them
on a new one, as the node suite's expected outputs and onnxruntime do.)"""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import rtsoa
from rtsoa.errors import LoweringError
from rtsoa.lowering import import_onnx, lower

FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _loop_model(scan_type=FLOAT):
    """v doubles each iteration; scans: v's new value and [i, i * i]; the condition turns
    false once i reaches `stop`."""
    two = helper.make_tensor("two", FLOAT, [], [2.0])
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["v_in", "two"], ["v_out"]),
            helper.make_node("Identity", ["v_out"], ["scan_v"]),
            helper.make_node("Mul", ["i", "i"], ["square"]),
            helper.make_node("Unsqueeze", ["i", "zero"], ["i_1"]),
            helper.make_node("Unsqueeze", ["square", "zero"], ["square_1"]),
            helper.make_node("Concat", ["i_1", "square_1"], ["scan_i"], axis=0),
            helper.make_node("Less", ["i", "stop"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", INT64, []),
            helper.make_tensor_value_info("cond_in", BOOL, []),
            helper.make_tensor_value_info("v_in", FLOAT, [2, 3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", BOOL, []),
            helper.make_tensor_value_info("v_out", FLOAT, [2, 3]),
            helper.make_tensor_value_info("scan_v", scan_type, None),
            helper.make_tensor_value_info("scan_i", INT64, None),
        ],
        [two, helper.make_tensor("zero", INT64, [1], [0])],
    )
    node = helper.make_node("Loop", ["M", "go", "x"], ["v", "vs", "is"], name="scanner", body=body)
    graph = helper.make_graph(
        [node],
        "loop",
        [
            helper.make_tensor_value_info("M", INT64, []),
            helper.make_tensor_value_info("go", BOOL, []),
            helper.make_tensor_value_info("x", FLOAT, [2, 3]),
            helper.make_tensor_value_info("stop", INT64, []),
        ],
        [
            helper.make_tensor_value_info("v", FLOAT, [2, 3]),
            helper.make_tensor_value_info("vs", FLOAT, None),
            helper.make_tensor_value_info("is", INT64, None),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_scan_outputs_match_the_reference():
    proto = _loop_model()
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    reference = onnxruntime.InferenceSession(proto.SerializeToString(), options)
    with rtsoa.InferenceSession(proto) as session:
        for trips, stop in [(4, 100), (1, 100), (6, 2)]:  # the last ends on its condition
            feeds = {"M": np.array(trips), "go": np.array(True), "x": x, "stop": np.array(stop)}
            have = session.run(None, feeds)
            want = reference.run(None, feeds)
            for got, expected in zip(have, want, strict=True):
                assert got.dtype == expected.dtype and got.shape == expected.shape
                np.testing.assert_array_equal(got, expected)
        assert have[1].shape == (3, 2, 3) and have[2].tolist() == [[0, 0], [1, 1], [2, 4]]


def test_a_scan_output_of_undeclared_element_type_is_refused():
    graph = import_onnx(_loop_model(scan_type=TensorProto.UNDEFINED), infer_shapes=False)
    with pytest.raises(LoweringError, match=r"Loop node 'scanner' .* scan output 'scan_v'"):
        lower(graph)
