"""Ops never report success for work they did not do, and follow IEEE where ONNX does.

Numba's cfunc wrapper prints an exception raised inside the compiled op entry as "Exception
ignored" and returns 0 (success), so a run would hand back an output block it never wrote (the
previous request's values). rtsoa compiles with Numba's numpy error model (x / 0.0 is inf or
nan, as in onnxruntime) and the entry turns any exception that still escapes an op into
STATUS_OP_EXCEPTION.
"""

import numpy as np
import pytest
from model_checks import run_and_compare
from onnx import TensorProto, helper, numpy_helper

from rtsoa.abi.status import describe
from rtsoa.ops import abi
from rtsoa.ops.abi import MODE_COMPUTE, STATUS_OP_EXCEPTION
from rtsoa.ops.host import run_numpy
from rtsoa.ops.library import run_op
from rtsoa.ops.registry import compiled_op_code

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(*entry) for entry in inputs],
        [helper.make_tensor_value_info(*entry) for entry in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_an_exception_inside_an_op_is_a_failure_status_not_success(capfd):
    """An Add whose operand rows claim a 2**30 x 2**30 broadcast: the op's host-side index map
    (np.empty of 2**60 int64) raises before any data is touched. Before the entry caught it,
    the call printed 'Exception ignored' and returned 0."""
    table = abi.new_table()
    big = 1 << 30
    for row, dims in ((0, (big, 1)), (1, (1, big)), (2, (big, big))):
        table[row, abi.COL_OFFSET] = 0
        table[row, abi.COL_NBYTES] = 4 * dims[0] * dims[1]
        table[row, abi.COL_DTYPE] = abi.F32
        table[row, abi.COL_RANK] = 2
        table[row, abi.COL_DIMS : abi.COL_DIMS + 2] = dims
    arena = np.zeros(64, dtype=np.uint8)
    attrs = np.zeros(1, dtype=np.int64)
    status = run_op(MODE_COMPUTE, compiled_op_code("Add"), arena, table, attrs, 2, 1)
    assert status == STATUS_OP_EXCEPTION
    assert "Exception ignored" not in capfd.readouterr().err
    assert "exception was raised inside the op" in describe(STATUS_OP_EXCEPTION)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_division_by_zero_is_ieee(dtype):
    x = np.array([1.0, -1.0, 0.0, np.inf, -0.0], dtype=dtype)
    zero = np.array([0.0, 0.0, 0.0, 0.0, -0.0], dtype=dtype)
    (got,) = run_numpy("Div", [x, zero])
    with np.errstate(divide="ignore", invalid="ignore"):
        want = x / zero
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got[:2]).tolist() == [False, True]


def test_division_by_zero_in_a_model_after_a_good_request():
    """The second request divides by zero: its result is onnxruntime's inf / nan, not the first
    request's values left in the output block."""
    proto = _model(
        [helper.make_node("Div", ["x", "y"], ["z"])],
        [("x", F, [4]), ("y", F, [4])],
        [("z", F, [4])],
    )
    x = np.array([1.0, -2.0, 0.0, 3.0], dtype=np.float32)
    run_and_compare(
        proto,
        [
            {"x": x, "y": np.full(4, 2.0, dtype=np.float32)},
            {"x": x, "y": np.zeros(4, dtype=np.float32)},
        ],
    )


def test_constant_folding_of_a_division_by_zero_gives_inf():
    proto = _model(
        [helper.make_node("Div", ["a", "b"], ["c"]), helper.make_node("Add", ["c", "x"], ["z"])],
        [("x", F, [3])],
        [("z", F, [3])],
        initializers=[
            ("a", np.array([1.0, -1.0, 0.0], dtype=np.float32)),
            ("b", np.zeros(3, dtype=np.float32)),
        ],
    )
    run_and_compare(proto, [{"x": np.ones(3, dtype=np.float32)}])


def test_batch_normalization_with_zero_variance_and_epsilon():
    c = 3
    proto = _model(
        [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=0.0)],
        [("x", F, [2, c, 2])],
        [("y", F, [2, c, 2])],
        initializers=[
            ("s", np.ones(c, dtype=np.float32)),
            ("b", np.zeros(c, dtype=np.float32)),
            ("m", np.array([0.0, 1.0, 2.0], dtype=np.float32)),
            ("v", np.zeros(c, dtype=np.float32)),
        ],
    )
    x = np.arange(12, dtype=np.float32).reshape(2, c, 2) % 3
    run_and_compare(proto, [{"x": x}])


def test_layer_and_instance_normalization_of_a_constant_row_with_epsilon_zero():
    proto = _model(
        [
            helper.make_node("LayerNormalization", ["x", "g"], ["y"], axis=-1, epsilon=0.0),
            helper.make_node("InstanceNormalization", ["x", "s", "b"], ["z"], epsilon=0.0),
        ],
        [("x", F, [1, 2, 4])],
        [("y", F, [1, 2, 4]), ("z", F, [1, 2, 4])],
        initializers=[
            ("g", np.ones(4, dtype=np.float32)),
            ("s", np.ones(2, dtype=np.float32)),
            ("b", np.zeros(2, dtype=np.float32)),
        ],
    )
    x = np.array([[[5.0, 5.0, 5.0, 5.0], [1.0, 2.0, 3.0, 4.0]]], dtype=np.float32)
    run_and_compare(proto, [{"x": x}])


def test_lrn_with_bias_zero_on_zeros():
    proto = _model(
        [helper.make_node("LRN", ["x"], ["y"], size=3, bias=0.0, alpha=1e-4, beta=0.75)],
        [("x", F, [1, 4, 2, 2])],
        [("y", F, [1, 4, 2, 2])],
    )
    x = np.zeros((1, 4, 2, 2), dtype=np.float32)
    x[0, 0, 0, 0] = 1.0
    run_and_compare(proto, [{"x": x}])
