"""Hann, Hamming and Blackman windows beyond the ONNX node suite: periodic and symmetric at
several sizes (0 included), float32 and float64 outputs, against onnxruntime; the size known
only at run time; and the refusals."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.errors import LoweringError, OpError
from rtsoa.lowering import lower
from rtsoa.ops.abi import STATUS_OP_BAD_SHAPE
from rtsoa.ops.host import run_numpy
from rtsoa.testing.models import run_onnxruntime
from tests.model_checks import run_and_compare

WINDOWS = ["HannWindow", "HammingWindow", "BlackmanWindow"]


def window_model(op, size_type=TensorProto.INT64, **attributes):
    node = helper.make_node(op, ["size"], ["window"], **attributes)
    graph = helper.make_graph(
        [node],
        "window",
        [helper.make_tensor_value_info("size", size_type, [])],
        [
            helper.make_tensor_value_info(
                "window", attributes.get("output_datatype", TensorProto.FLOAT), None
            )
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("output_datatype", [TensorProto.FLOAT, TensorProto.DOUBLE])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("op", WINDOWS)
def test_sizes_against_onnxruntime(op, periodic, output_datatype):
    model = window_model(op, periodic=periodic, output_datatype=output_datatype)
    for size in (0, 2, 3, 10, 33):
        want = run_onnxruntime(model, {"size": np.array(size, np.int64)})["window"]
        attributes = {"periodic": periodic, "output_datatype": output_datatype}
        (got,) = run_numpy(op, [np.array(size, np.int32)], attributes)
        assert got.dtype == want.dtype and got.shape == (size,)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_size_known_only_at_run_time():
    run_and_compare(
        window_model("HannWindow", size_type=TensorProto.INT32),
        [{"size": np.array(size, np.int32)} for size in (4, 9)],
    )


def test_an_output_type_it_does_not_produce_is_refused_by_name():
    with pytest.raises(LoweringError, match="HammingWindow node .*output_datatype 6"):
        lower(window_model("HammingWindow", output_datatype=TensorProto.INT32))
    with pytest.raises(LoweringError, match="periodic must be 0 or 1"):
        lower(window_model("HannWindow", periodic=2))


def test_a_negative_size_fails():
    with pytest.raises(OpError) as error:
        run_numpy("BlackmanWindow", [np.array(-1, np.int64)])
    assert error.value.status == STATUS_OP_BAD_SHAPE
