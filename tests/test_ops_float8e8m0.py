"""float8 E8M0 (the scale type: 2**(code - 127), 0xFF NaN): stored, and Cast to and from it byte
for byte: decoding against ml_dtypes' float8_e8m0fnu, encoding (every round_mode, saturate or
not) against onnx.numpy_helper.to_float8e8m0, ONNX's own definition."""

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtsoa import InferenceSession
from rtsoa.errors import LoweringError
from rtsoa.lowering import lower

E8M0 = TensorProto.FLOAT8E8M0
CODES = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu)


def _cast_model(source, target, n, **attributes):
    node = helper.make_node("Cast", ["x"], ["y"], to=target, **attributes)
    graph = helper.make_graph(
        [node],
        "cast",
        [helper.make_tensor_value_info("x", source, [n])],
        [helper.make_tensor_value_info("y", target, [n])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])


def _run(proto, x):
    with InferenceSession(lower(proto)) as session:
        return session.execute_sync({"x": x})["y"]


def _float32_samples():
    """Every exponent field with fractions that exercise the guard, round and sticky bits,
    signs, zeros, subnormals, infinities and NaN, as float32."""
    exponents = np.arange(256, dtype=np.uint32) << np.uint32(23)
    fractions = np.array([0, 1, 0x1FFFFF, 0x200000, 0x400000, 0x400001, 0x600000, 0x7FFFFF])
    bits = (exponents[:, None] | fractions.astype(np.uint32)[None, :]).reshape(-1)
    bits = np.concatenate([bits, bits | np.uint32(0x80000000)])
    return bits.view(np.float32)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # 2**127 overflows float16 in numpy too
@pytest.mark.parametrize(
    ("target", "numpy_type"),
    [(TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64)]
    + [(TensorProto.FLOAT16, np.float16)],
)
def test_every_code_decodes_as_ml_dtypes_does(target, numpy_type):
    got = _run(_cast_model(E8M0, target, 256), CODES)
    want = CODES.astype(numpy_type)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(f"u{want.itemsize}"), want.view(f"u{want.itemsize}"))


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_float32_encodes_as_onnx_defines_it(round_mode, saturate):
    x = _float32_samples()
    proto = _cast_model(TensorProto.FLOAT, E8M0, x.size, round_mode=round_mode, saturate=saturate)
    got = _run(proto, x)
    want = numpy_helper.to_float8e8m0(x, bool(saturate), round_mode)
    assert got.dtype == want.dtype == ml_dtypes.float8_e8m0fnu
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # values past float16 / float32, on purpose
@pytest.mark.parametrize(
    ("source", "numpy_type"), [(TensorProto.DOUBLE, np.float64), (TensorProto.FLOAT16, np.float16)]
)
def test_other_floats_encode_through_their_float32(source, numpy_type):
    x = _float32_samples().astype(np.float64)
    x = np.concatenate([x, [1.0 + 2.0**-40, 3.0 * 2.0**-140, 1e300]]).astype(numpy_type)
    got = _run(_cast_model(source, E8M0, x.size), x)
    want = numpy_helper.to_float8e8m0(x, True, "up")  # the default round_mode
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_e8m0_tensors_are_stored_and_moved_as_they_are():
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    shape = numpy_helper.from_array(np.array([16, 16], np.int64), "shape")
    graph = helper.make_graph(
        [node],
        "reshape",
        [helper.make_tensor_value_info("x", E8M0, [256])],
        [helper.make_tensor_value_info("y", E8M0, [16, 16])],
        [shape],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    got = _run(proto, CODES)
    assert got.dtype == ml_dtypes.float8_e8m0fnu and got.shape == (16, 16)
    np.testing.assert_array_equal(got.reshape(-1).view(np.uint8), CODES.view(np.uint8))


def test_a_zero_size_cast_gives_an_empty_e8m0_tensor():
    got = _run(_cast_model(TensorProto.FLOAT, E8M0, 0), np.zeros(0, np.float32))
    assert got.dtype == ml_dtypes.float8_e8m0fnu and got.shape == (0,)


def test_an_unknown_round_mode_is_refused_at_lowering_naming_the_node():
    proto = _cast_model(TensorProto.FLOAT, E8M0, 4, round_mode="toward_zero")
    with pytest.raises(LoweringError, match=r"Cast node.*round_mode 'toward_zero'"):
        lower(proto)
