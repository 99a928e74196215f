"""MaxPool on int8 / uint8 (rtsoa.lowering.integer_pools), judged by onnxruntime: padding,
strides, dilation and ceil mode, the indices output, the extremes of both types."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import rtsoa

CASES = [
    {"kernel_shape": [2, 2]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]},
    {"kernel_shape": [2, 2], "dilations": [2, 2], "ceil_mode": 1},
]


@pytest.mark.parametrize("elem, kind", [(TensorProto.INT8, np.int8), (TensorProto.UINT8, np.uint8)])
def test_max_pool_on_small_integers_matches_onnxruntime(elem, kind):
    info = np.iinfo(kind)
    x = np.random.default_rng(0).integers(info.min, info.max, (2, 3, 7, 6), endpoint=True)
    x = x.astype(kind)
    x[0, 0, 0, 0], x[1, 2, 6, 5] = info.min, info.max
    for attributes in CASES:
        outputs = ["y", "i"] if elem == TensorProto.UINT8 else ["y"]
        node = helper.make_node("MaxPool", ["x"], outputs, **attributes)
        out_infos = [helper.make_tensor_value_info("y", elem, None)]
        if len(outputs) == 2:
            out_infos.append(helper.make_tensor_value_info("i", TensorProto.INT64, None))
        graph = helper.make_graph(
            [node], "pool", [helper.make_tensor_value_info("x", elem, list(x.shape))], out_infos
        )
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
        want = onnxruntime.InferenceSession(proto.SerializeToString()).run(None, {"x": x})
        with rtsoa.InferenceSession(proto) as session:
            have = session.run(None, {"x": x})
        for got, expected in zip(have, want, strict=True):
            assert got.dtype == expected.dtype and got.shape == expected.shape
            np.testing.assert_array_equal(got, expected)
