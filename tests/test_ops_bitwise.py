"""BitwiseAnd / Or / Xor / Not and BitShift on the eight integer types against onnxruntime
(single thread) and, for BitShift's opset-28 rules on signed values and out-of-range shifts,
against onnx.reference; lowered models with broadcasting, exact results, and the refusals.
"""

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from rtsoa.errors import LoweringError, OpError
from rtsoa.lowering import lower
from rtsoa.ops.abi import STATUS_OP_BAD_ATTRIBUTE, STATUS_OP_BAD_DTYPE
from rtsoa.ops.host import run_numpy
from rtsoa.testing.models import run_onnxruntime
from tests.model_checks import run_clean

KINDS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
rng = np.random.default_rng(107)


def integers(kind, shape):
    """Values over the whole range of `kind`, its extremes first."""
    info = np.iinfo(kind)
    drawn = rng.integers(info.min, int(info.max) + 1, size=int(np.prod(shape)), dtype=kind)
    drawn[:4] = np.array([info.min, info.max, 0, 1], dtype=kind)
    return drawn.reshape(shape)


def info(name, kind, shape):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(kind), shape)


def model_of(op, feeds, opset=18, **attributes):
    node = helper.make_node(op, list(feeds), ["y"], **attributes)
    kind = next(iter(feeds.values())).dtype
    graph = helper.make_graph(
        [node],
        "bits",
        [info(name, array.dtype, array.shape) for name, array in feeds.items()],
        [info("y", kind, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def exactly(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: np.dtype(k).name)
@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_binary_bitwise_ops_lowered_with_broadcasting(op, kind):
    feeds = {"a": integers(kind, (3, 4, 5)), "b": integers(kind, (4, 1))}
    model = model_of(op, feeds)
    exactly(run_clean(lower(model), feeds)["y"], run_onnxruntime(model, feeds)["y"])


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: np.dtype(k).name)
def test_bitwise_not(kind):
    x = integers(kind, (2, 3, 4))
    want = run_onnxruntime(model_of("BitwiseNot", {"x": x}), {"x": x})["y"]
    exactly(run_numpy("BitwiseNot", [x])[0], want)


@pytest.mark.parametrize("kind", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_unsigned_shifts_within_the_width(direction, kind):
    """Shifts 0 .. width - 1 of unsigned values: every opset agrees (onnxruntime)."""
    bits = np.dtype(kind).itemsize * 8
    x = integers(kind, (4, bits))
    shifts = np.arange(bits, dtype=kind)  # broadcast along the rows
    feeds = {"x": x, "s": shifts}
    model = model_of("BitShift", feeds, opset=11, direction=direction)
    exactly(
        run_numpy("BitShift", [x, shifts], {"direction": direction})[0],
        run_onnxruntime(model, feeds)["y"],
    )


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: np.dtype(k).name)
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_opset_28_shift_rules(direction, kind):
    """Signed values (arithmetic right shifts, left shifts past the sign bit) and shifts by a
    negative amount or the width or more, as onnx.reference defines them for opset 28."""
    bits = np.dtype(kind).itemsize * 8
    x = integers(kind, (3, bits + 6))
    amounts = list(range(bits)) + [bits, bits + 1, 2 * bits, -1, -bits, -100]
    shifts = np.array(amounts, dtype=np.int64).astype(kind)  # unsigned: -1 wraps to the top
    feeds = {"x": x, "s": shifts}
    model = model_of("BitShift", feeds, opset=18, direction=direction)
    model.opset_import[0].version = 28
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    exactly(run_numpy("BitShift", [x, shifts], {"direction": direction})[0], want)


def test_unknown_direction_and_non_integers_are_refused():
    x = np.ones(3, np.uint8)
    with pytest.raises(OpError) as error:
        run_numpy("BitShift", [x, x], {"direction": "UP"})
    assert error.value.status == STATUS_OP_BAD_ATTRIBUTE
    with pytest.raises(OpError) as error:
        run_numpy("BitwiseAnd", [x.astype(np.float32), x.astype(np.float32)])
    assert error.value.status == STATUS_OP_BAD_DTYPE
    feeds = {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)}
    with pytest.raises(LoweringError, match="BitwiseOr.*float32"):
        lower(model_of("BitwiseOr", feeds))
