"""The narrow element types (`rtsoa.ops.narrow_types`, `rtsoa.ops.cast`): bfloat16, float8
(E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ), float4 E2M1 and the 4- and 2-bit integers, and float16 in
Cast. Judged bit for bit by onnx.reference (its Cast, with and without `saturate`) and
ml_dtypes (what the reference converts with): every code of each narrow type decoded, values
around every rounding tie, overflow, NaN, infinities and signed zeros encoded; data movement and
packed 4-bit initializers through whole models; QuantizeLinear / DequantizeLinear on the narrow
types against onnx.reference."""

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.ops.op_cast import cast_to

import rtsoa
from rtsoa.abi.dtypes import DTYPES, DType
from rtsoa.ops.host import run_numpy
from rtsoa.ops.narrow_types import DECODE, NAN_CODES, OVERFLOW_CODES, SMALL_FLOATS

rng = np.random.default_rng(117)
NARROW = [
    DType.BFLOAT16,
    DType.FLOAT8E4M3FN,
    DType.FLOAT8E4M3FNUZ,
    DType.FLOAT8E5M2,
    DType.FLOAT8E5M2FNUZ,
    DType.FLOAT4E2M1,
    DType.UINT4,
    DType.INT4,
    DType.UINT2,
    DType.INT2,
]
FLOAT8 = [DType.FLOAT8E4M3FN, DType.FLOAT8E4M3FNUZ, DType.FLOAT8E5M2, DType.FLOAT8E5M2FNUZ]
SPECIAL = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 0.5, 1.5, 2.5, -2.5, 3.5, 6, 7, 9.7]
SPECIAL += [240, 248, 256, 448, 449, 464, 465, 480, 57344, 61440, 61441, 65504, 1e30, -1e30]


def bits(array):
    """The bytes of `array`, to compare NaNs and signed zeros exactly."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def ties(kind):
    """Every value of `kind` (a narrow float) and the midpoints between neighbours."""
    every = np.arange(256, dtype=np.uint8)[: 16 if kind == DType.FLOAT4E2M1 else 256]
    values = np.unique(every.view(DTYPES[kind].numpy).astype(np.float64))
    values = values[np.isfinite(values)]
    return np.concatenate([values, (values[1:] + values[:-1]) / 2])


def sources(kind=np.float32):
    spread = rng.standard_normal(3000) * np.exp(rng.uniform(-20, 20, 3000))
    return np.concatenate([SPECIAL, spread]).astype(kind)


@pytest.mark.parametrize("kind", NARROW, ids=lambda k: k.name)
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_from_float32_equals_the_reference(kind, saturate):
    x = sources()
    if kind not in (DType.BFLOAT16, DType.UINT4, DType.INT4, DType.UINT2, DType.INT2):
        x = np.concatenate([x, ties(kind).astype(np.float32)])
    to = DTYPES[kind].onnx
    with np.errstate(all="ignore"):
        want = cast_to(x, to, bool(saturate))
    (got,) = run_numpy("Cast", [x], {"to": to, "saturate": saturate}, 1)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("kind", FLOAT8, ids=lambda k: k.name)
@pytest.mark.parametrize("source", [np.float16, np.float64])
def test_cast_to_float8_from_float16_and_float64(kind, source):
    x = np.concatenate([sources(source), ties(kind).astype(source)])
    to = DTYPES[kind].onnx
    with np.errstate(all="ignore"):
        want = cast_to(x, to, True)
    (got,) = run_numpy("Cast", [x], {"to": to}, 1)
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("kind", NARROW, ids=lambda k: k.name)
@pytest.mark.parametrize("target", [np.float32, np.float16, np.float64, np.int8, np.uint8])
def test_cast_decodes_every_code(kind, target):
    count = 1 << 16 if kind == DType.BFLOAT16 else 256
    codes = np.arange(count, dtype=np.uint16 if kind == DType.BFLOAT16 else np.uint8)
    if kind in (DType.FLOAT4E2M1, DType.UINT4, DType.INT4):
        codes = codes[:16]
    elif kind in (DType.UINT2, DType.INT2):
        codes = codes[:4]
    x = codes.view(DTYPES[kind].numpy)
    if np.dtype(target).kind in "iu":  # out of the integer's range the result is not defined
        wide = x.astype(np.float64)
        limits = np.iinfo(target)
        x = x[np.isfinite(wide) & (wide > limits.min - 1) & (wide < limits.max + 1)]
    with np.errstate(all="ignore"):
        want = x.astype(target)
    (got,) = run_numpy("Cast", [x], {"to": helper.np_dtype_to_tensor_dtype(np.dtype(target))}, 1)
    assert got.dtype == want.dtype
    nan = np.isnan(want) if want.dtype.kind == "f" else np.zeros(want.shape, bool)
    assert np.isnan(got[nan]).all()  # signalling NaNs come out quiet (bfloat16's payloads)
    np.testing.assert_array_equal(bits(got[~nan]), bits(want[~nan]))


@pytest.mark.parametrize("kind", [DType.UINT4, DType.INT4, DType.UINT2, DType.INT2])
def test_integers_wrap_into_4_and_2_bits(kind):
    x = np.arange(-40, 40, dtype=np.int32)
    with np.errstate(all="ignore"):
        want = x.astype(DTYPES[kind].numpy)
    (got,) = run_numpy("Cast", [x], {"to": DTYPES[kind].onnx}, 1)
    np.testing.assert_array_equal(bits(got), bits(want))


def test_float16_casts_both_ways():
    x = sources(np.float32)
    (half,) = run_numpy("Cast", [x], {"to": TensorProto.FLOAT16}, 1)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(bits(half), bits(x.astype(np.float16)))
    (back,) = run_numpy("Cast", [half], {"to": TensorProto.DOUBLE}, 1)
    np.testing.assert_array_equal(bits(back), bits(half.astype(np.float64)))


# -- whole models ---------------------------------------------------------------------------------


def one_node_model(nodes, inputs, outputs, initializers=(), opset=25):
    graph = helper.make_graph(
        nodes,
        "narrow",
        [helper.make_tensor_value_info(name, kind, dims) for name, kind, dims in inputs],
        [helper.make_tensor_value_info(name, kind, None) for name, kind in outputs],
        list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 11
    return model


def run(model, feeds):
    with rtsoa.InferenceSession(model) as session:
        return session.run(None, feeds)


@pytest.mark.parametrize("kind", NARROW, ids=lambda k: k.name)
def test_data_movement_keeps_every_bit(kind):
    """Identity, Reshape and Transpose copy narrow elements as they are, in and out of a
    model."""
    info = DTYPES[kind]
    x = rng.integers(0, 1 << (16 if kind == DType.BFLOAT16 else 8), size=(3, 4))
    x = x.astype(np.uint16 if kind == DType.BFLOAT16 else np.uint8)
    if kind in (DType.UINT4, DType.INT4, DType.FLOAT4E2M1):
        x &= 0xF
    elif kind in (DType.UINT2, DType.INT2):
        x &= 0x3
    x = x.view(info.numpy)
    shape = numpy_helper.from_array(np.array([2, 6], np.int64), "shape")
    model = one_node_model(
        [
            helper.make_node("Identity", ["x"], ["same"]),
            helper.make_node("Reshape", ["x", "shape"], ["flat"]),
            helper.make_node("Transpose", ["x"], ["turned"], perm=[1, 0]),
        ],
        [("x", info.onnx, [3, 4])],
        [("same", info.onnx), ("flat", info.onnx), ("turned", info.onnx)],
        [shape],
    )
    same, flat, turned = run(model, {"x": x})
    assert same.dtype == x.dtype
    np.testing.assert_array_equal(bits(same), bits(x))
    np.testing.assert_array_equal(bits(flat), bits(x.reshape(2, 6)))
    np.testing.assert_array_equal(bits(turned), bits(x.T))


def test_packed_4_bit_initializers_are_read_as_onnx_packs_them():
    """ONNX stores int4 two to a byte; the model boundary unpacks them (onnx.numpy_helper)."""
    weights = np.arange(-8, 7, dtype=np.int8).astype(ml_dtypes.int4)  # odd count: a half byte
    packed = numpy_helper.from_array(weights, "w")
    assert len(packed.raw_data) == (weights.size + 1) // 2
    model = one_node_model(
        [helper.make_node("Cast", ["w"], ["y"], to=TensorProto.FLOAT)],
        [],
        [("y", TensorProto.FLOAT)],
        [packed],
    )
    model.graph.node.insert(0, helper.make_node("Identity", ["w"], ["w2"]))
    model.graph.node[1].input[0] = "w2"
    (got,) = run(onnx.load_from_string(model.SerializeToString()), {})
    np.testing.assert_array_equal(got, weights.astype(np.float32))


@pytest.mark.parametrize(
    "kind, zero",
    [
        (DType.INT4, -3),
        (DType.UINT4, 9),
        (DType.INT2, -1),
        (DType.UINT2, 1),
        (DType.FLOAT8E4M3FN, 0),
        (DType.FLOAT8E5M2, 0),
        (DType.FLOAT4E2M1, 1.5),
    ],
    ids=lambda value: getattr(value, "name", str(value)),
)
@pytest.mark.parametrize("saturate", [1, 0])
def test_quantize_and_dequantize_narrow_types_equal_the_reference(kind, zero, saturate):
    info = DTYPES[kind]
    x = np.concatenate([SPECIAL[6:14], rng.standard_normal(60) * 20]).astype(np.float32)
    zero_point = numpy_helper.from_array(np.array([zero]).astype(info.numpy), "zero")  # [1]
    scale = numpy_helper.from_array(np.array(0.75, np.float32), "scale")
    attributes = {"saturate": saturate} if kind in FLOAT8 else {}
    model = one_node_model(
        [
            helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"], **attributes),
            helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"]),
        ],
        [("x", TensorProto.FLOAT, [x.size])],
        [("q", info.onnx), ("y", TensorProto.FLOAT)],
        [zero_point, scale],
    )
    with np.errstate(all="ignore"):
        want = ReferenceEvaluator(model).run(None, {"x": x})
    got = run(model, {"x": x})
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(bits(g), bits(w))


def test_a_float8_zero_point_other_than_zero_fails_the_run():
    info = DTYPES[DType.FLOAT8E4M3FN]
    zero_point = numpy_helper.from_array(np.array(1.0).astype(info.numpy), "zero")
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "scale")
    model = one_node_model(
        [helper.make_node("DequantizeLinear", ["x", "scale", "zero"], ["y"])],
        [("x", info.onnx, [4])],
        [("y", TensorProto.FLOAT)],
        [zero_point, scale],
    )
    with pytest.raises(rtsoa.errors.RtsoaError, match="DequantizeLinear"):
        run(model, {"x": np.ones(4, info.numpy)})


@pytest.mark.parametrize("kind", sorted(SMALL_FLOATS))
def test_the_small_float_tables_are_ml_dtypes_codes(kind):
    """The tables built from the formats' definitions hold, bit for bit, what ml_dtypes
    decodes every code to and what it converts NaN and the infinities to."""
    spec = SMALL_FLOATS[kind]
    every = np.arange(1 << spec.bits, dtype=np.uint8)
    decoded = every.view(DTYPES[kind].numpy).astype(np.float64)
    assert bits(DECODE[spec.row, : every.size]).tolist() == bits(decoded).tolist()
    with np.errstate(all="ignore"):
        special = np.array([np.nan, -np.nan, np.inf, -np.inf]).astype(DTYPES[kind].numpy)
    codes = special.view(np.uint8).tolist()
    assert NAN_CODES[spec.row].tolist() == codes[:2]
    assert OVERFLOW_CODES[spec.row].tolist() == codes[2:]
