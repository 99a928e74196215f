"""BitCast beyond the ONNX node suite: every ordered pair of same-width element types rtsoa
stores (the narrow float8 / float4 / 4- and 2-bit types included) against numpy's view of the
same bits, a lowered model against onnx.reference, bool's bytes; BitShift at opset 28 lowered
and run against onnx.reference; and the refusals, at lowering naming the node."""

import itertools

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa.abi.dtypes import DTYPES, DType
from rtsoa.errors import LoweringError, OpError
from rtsoa.lowering import lower
from rtsoa.ops.abi import STATUS_OP_BAD_DTYPE, STATUS_OP_BAD_INDEX
from rtsoa.ops.bitcast import bit_width
from rtsoa.ops.host import run_numpy
from tests.model_checks import run_clean

rng = np.random.default_rng(141)
WIDTHS = {}
for _code in DTYPES:
    WIDTHS.setdefault(bit_width(_code), []).append(_code)
PAIRS = [
    (source, target)
    for codes in WIDTHS.values()
    for source, target in itertools.product(codes, codes)
    if target != DType.BOOL
]


def random_bits(code, count):
    """`count` elements of type `code` with random bits (a 4- or 2-bit type's in its low
    bits; a bool's 0 or 1)."""
    info = DTYPES[code]
    bits = bit_width(code)
    if code == DType.BOOL:
        raw = rng.integers(0, 2, count, dtype=np.uint8)
    elif bits < 8:
        raw = rng.integers(0, 1 << bits, count, dtype=np.uint8)
    else:
        raw = rng.integers(0, 256, count * info.itemsize, dtype=np.uint8)
    return raw.view(info.numpy)


def name(pair):
    return f"{DTYPES[pair[0]].name}-{DTYPES[pair[1]].name}"


@pytest.mark.parametrize("pair", PAIRS, ids=[name(pair) for pair in PAIRS])
def test_every_pair_of_a_width_keeps_the_bits(pair):
    source, target = pair
    x = random_bits(source, 24).reshape(2, 3, 4)
    onnx_to = DTYPES[target].onnx
    (got,) = run_numpy("BitCast", [x], {"to": onnx_to})
    assert got.dtype == np.dtype(DTYPES[target].numpy) and got.shape == x.shape
    mask = (1 << bit_width(source)) - 1 if bit_width(source) < 8 else 0xFF
    want = x.view(np.uint8) & mask if bit_width(source) < 8 else x.view(np.uint8)
    np.testing.assert_array_equal(got.view(np.uint8), want)


def test_four_bit_values_keep_their_meaning_across_types():
    """int4 -1 is the bits 1111: uint4 15 and float4e2m1 -6, as ml_dtypes reads them."""
    x = np.array([-1, -8, 7, 0], ml_dtypes.int4)
    (unsigned,) = run_numpy("BitCast", [x], {"to": TensorProto.UINT4})
    np.testing.assert_array_equal(unsigned.astype(np.int64), [15, 8, 7, 0])
    (small_float,) = run_numpy("BitCast", [x], {"to": TensorProto.FLOAT4E2M1})
    np.testing.assert_array_equal(small_float.astype(np.float64), [-6.0, -0.0, 6.0, 0.0])


def test_bytes_become_bools_only_when_they_are_0_or_1():
    (got,) = run_numpy("BitCast", [np.array([0, 1, 1], np.uint8)], {"to": TensorProto.BOOL})
    np.testing.assert_array_equal(got, [False, True, True])
    with pytest.raises(OpError) as error:
        run_numpy("BitCast", [np.array([0, 2], np.int8)], {"to": TensorProto.BOOL})
    assert error.value.status == STATUS_OP_BAD_INDEX


def bitcast_model(element, to, dims):
    node = helper.make_node("BitCast", ["x"], ["y"], to=to)
    graph = helper.make_graph(
        [node],
        "bitcast",
        [helper.make_tensor_value_info("x", element, dims)],
        [helper.make_tensor_value_info("y", to, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize(
    "code,to,dims",
    [
        (DType.FLOAT64, TensorProto.UINT64, (4, 5)),
        (DType.FLOAT16, TensorProto.INT16, (4, 5)),
        (DType.UINT32, TensorProto.FLOAT, (3, 0, 2)),
    ],
)
def test_lowered_against_onnx_reference(code, to, dims):
    model = bitcast_model(DTYPES[code].onnx, to, list(dims))
    x = random_bits(code, int(np.prod(dims))).reshape(dims)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = run_clean(lower(model), {"x": x})["y"]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_bitcast_refusals_name_the_node():
    with pytest.raises(LoweringError, match=r"BitCast node .*int32 \(32 bits\) and int16"):
        lower(bitcast_model(TensorProto.INT32, TensorProto.INT16, [3]))
    with pytest.raises(LoweringError, match=r"BitCast node .*int4 \(4 bits\) and uint8"):
        lower(bitcast_model(TensorProto.INT4, TensorProto.UINT8, [3]))
    with pytest.raises(LoweringError, match=r"'y': element type COMPLEX64 is not supported"):
        lower(bitcast_model(TensorProto.INT64, TensorProto.COMPLEX64, [3]))
    with pytest.raises(OpError) as error:
        run_numpy("BitCast", [np.ones(3, np.int32)], {"to": TensorProto.INT64})
    assert error.value.status == STATUS_OP_BAD_DTYPE


# -- BitShift at opset 28 ---------------------------------------------------------------------


def shift_model(kind, direction, opset=28):
    element = helper.np_dtype_to_tensor_dtype(np.dtype(kind))
    node = helper.make_node("BitShift", ["x", "s"], ["y"], direction=direction)
    graph = helper.make_graph(
        [node],
        "shift",
        [
            helper.make_tensor_value_info("x", element, [3, 1]),
            helper.make_tensor_value_info("s", element, [4]),
        ],
        [helper.make_tensor_value_info("y", element, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("kind", [np.int8, np.int32, np.uint16, np.uint64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_28_lowered_with_broadcasting(kind, direction):
    info = np.iinfo(kind)
    bits = info.bits
    x = np.array([[info.min], [info.max], [-3 if info.min < 0 else 5]], kind)
    s = np.array([1, bits - 1, bits, -1], np.int64).astype(kind)
    model = shift_model(kind, direction)
    want = ReferenceEvaluator(model).run(None, {"x": x, "s": s})[0]
    got = run_clean(lower(model), {"x": x, "s": s})["y"]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_bitshift_direction_refused_at_lowering():
    for opset in (11, 28):
        with pytest.raises(LoweringError, match=r"BitShift node .*direction 'UP' is not one"):
            lower(shift_model(np.int32, "UP", opset=opset))
