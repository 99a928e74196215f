"""DFT, STFT and MelWeightMatrix beyond the ONNX node suite: every axis, lengths cut and padded,
powers of two and primes, real and complex input, inverse and one-sided transforms against
numpy.fft in complex128; float16 / bfloat16; zero-size batches; lowered models at opsets 17
and 20 with the axis and length known only at run time; STFT and MelWeightMatrix against
onnx.reference; and the refusals, at lowering naming the node, or as the op's status."""

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa.errors import LoweringError, OpError
from rtsoa.lowering import lower
from rtsoa.ops.abi import STATUS_OP_BAD_DTYPE, STATUS_OP_BAD_INDEX, STATUS_OP_BAD_SHAPE
from rtsoa.ops.host import run_numpy
from tests.model_checks import run_clean

rng = np.random.default_rng(147)
TOLERANCE = {np.float32: (2e-5, 2e-4), np.float64: (1e-10, 1e-9)}


def as_complex(x):
    """A [..., 1 or 2] signal as complex128 [...]."""
    wide = x.astype(np.float64)
    return wide[..., 0] + (1j * wide[..., 1] if x.shape[-1] == 2 else 0.0)


def as_parts(z, real=False):
    """complex [...] as [..., 2] (or its real part as [..., 1])."""
    if real:
        return np.real(z)[..., np.newaxis]
    return np.stack([np.real(z), np.imag(z)], axis=-1)


def numpy_dft(x, n, axis, inverse, onesided):
    """The DFT as numpy.fft computes it in complex128 (`axis` counted on x, parts included)."""
    z = as_complex(x)
    axis = axis % x.ndim
    if inverse and onesided:
        return as_parts(np.fft.irfft(z, n=n, axis=axis), real=True)
    result = np.fft.ifft(z, n=n, axis=axis) if inverse else np.fft.fft(z, n=n, axis=axis)
    if onesided:
        result = np.take(result, np.arange(n // 2 + 1), axis=axis)
    return as_parts(result)


def dft(x, n=None, axis=None, **attributes):
    inputs = [x, None if n is None else np.array(n, np.int64)]
    if axis is not None:
        inputs.append(np.array(axis, np.int64))
    return run_numpy("DFT", inputs, attributes)[0]


def close(got, want, kind):
    rtol, atol = TOLERANCE[kind]
    assert got.dtype == np.dtype(kind) and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("kind", [np.float32, np.float64])
@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("inverse,onesided", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_every_axis_and_length_against_numpy(kind, parts, inverse, onesided):
    x = rng.standard_normal((3, 6, 5, parts)).astype(kind)
    for axis in (0, 1, 2, -2, -3, -4):
        length = x.shape[axis % x.ndim]
        default = 2 * (length - 1) if inverse and onesided else length
        for n in (None, 1, 2, 3, 4, 7, 8, 13, 16):
            got = dft(x, n, axis, inverse=inverse, onesided=onesided)
            want = numpy_dft(x, default if n is None else n, axis, inverse, onesided)
            close(got, want, kind)


@pytest.mark.parametrize("n", [512, 1024, 31, 33, 97, 360, 1000])
def test_long_powers_of_two_and_other_lengths(n):
    """Radix 2 for powers of two, direct sums up to 32, Bluestein above: all against numpy."""
    x = rng.standard_normal((2, n, 2))
    close(dft(x, axis=1), numpy_dft(x, n, 1, False, False), np.float64)
    close(dft(x, axis=1, inverse=1), numpy_dft(x, n, 1, True, False), np.float64)


def test_irfft_drops_the_imaginary_parts_numpy_drops():
    """The zero and (even n) middle frequency of a one-sided spectrum are real in a Hermitian
    spectrum: their imaginary parts are ignored, as numpy.fft.irfft does."""
    spectrum = rng.standard_normal((1, 5, 2))
    for n in (8, 9):
        close(
            dft(spectrum, n, 1, inverse=1, onesided=1),
            numpy_dft(spectrum, n, 1, True, True),
            np.float64,
        )


@pytest.mark.parametrize("kind", [np.float16, ml_dtypes.bfloat16])
def test_half_precision_signals(kind):
    x = rng.standard_normal((2, 8, 2)).astype(kind)
    got = dft(x, axis=1)
    want = numpy_dft(x.astype(np.float64), 8, 1, False, False).astype(kind)
    assert got.dtype == np.dtype(kind) and got.shape == want.shape
    np.testing.assert_allclose(
        got.astype(np.float64), want.astype(np.float64), rtol=2e-2, atol=2e-2
    )


def test_zero_size_batches_and_a_dft_of_no_points():
    x = np.zeros((0, 4, 1), np.float32)
    assert dft(x, axis=1).shape == (0, 4, 2)
    assert dft(x, 6, axis=1, onesided=1).shape == (0, 4, 2)
    for empty, attributes in ((np.zeros((2, 0, 1), np.float32), {}), (x[:, :1], {"inverse": 1})):
        with pytest.raises(OpError) as error:
            dft(empty, axis=1, onesided=attributes.get("inverse", 0), **attributes)
        assert error.value.status == STATUS_OP_BAD_SHAPE


def dft_model(opset, dims=(2, 8, 1), axis_input=False, length_input=False, **attributes):
    inputs = ["x", "length" if length_input else ""]
    feeds = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))]
    if length_input:
        feeds.append(helper.make_tensor_value_info("length", TensorProto.INT64, []))
    if axis_input:
        inputs.append("axis")
        feeds.append(helper.make_tensor_value_info("axis", TensorProto.INT64, []))
    node = helper.make_node("DFT", inputs, ["y"], **attributes)
    graph = helper.make_graph(
        [node], "dft", feeds, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def test_lowered_at_opset_20_with_the_axis_and_length_given_at_run_time():
    model = dft_model(20, dims=(3, 4, 2), axis_input=True, length_input=True, onesided=0)
    graph = lower(model)
    x = rng.standard_normal((3, 4, 2)).astype(np.float32)
    for axis, n in ((0, 5), (1, 4), (-3, 2), (-2, 8)):
        feeds = {"x": x, "axis": np.array(axis, np.int64), "length": np.array(n, np.int64)}
        want = ReferenceEvaluator(model).run(None, feeds)[0]
        close(run_clean(graph, feeds)["y"], want, np.float32)


def test_lowered_at_opset_17_with_the_axis_attribute_and_its_default():
    x = rng.standard_normal((2, 8, 1)).astype(np.float32)
    for attributes in ({}, {"axis": 0}, {"axis": -2, "inverse": 1}, {"onesided": 1}):
        model = dft_model(17, **attributes)
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
        close(run_clean(lower(model), {"x": x})["y"], want, np.float32)


def test_dft_refusals_name_the_node():
    with pytest.raises(LoweringError, match=r"DFT node .*onesided must be 0 or 1"):
        lower(dft_model(20, onesided=2))
    with pytest.raises(LoweringError, match=r"DFT node .*axis 2 is out of range for rank 3"):
        lower(dft_model(17, axis=2))
    with pytest.raises(LoweringError, match=r"DFT node .*last dimension must be 1 .* \[2, 8, 3\]"):
        lower(dft_model(17, dims=(2, 8, 3)))
    model = dft_model(20)
    model.graph.initializer.append(helper.make_tensor("length", TensorProto.INT64, [], [0]))
    model.graph.node[0].input[1] = "length"
    with pytest.raises(LoweringError, match=r"DFT node .*dft_length must be at least 1, got 0"):
        lower(model)
    with pytest.raises(OpError) as error:
        run_numpy("DFT", [np.ones((2, 3, 1), np.int32)], {})
    assert error.value.status == STATUS_OP_BAD_DTYPE
    with pytest.raises(OpError) as error:
        dft(np.ones((4, 3), np.float32), axis=0)
    assert error.value.status == STATUS_OP_BAD_SHAPE


# -- STFT -------------------------------------------------------------------------------------


def stft_model(kind, signal, window, frame_length, onesided):
    element = helper.np_dtype_to_tensor_dtype(np.dtype(kind))
    names = ["signal", "step", "window" if window is not None else "", ""]
    feeds = [
        helper.make_tensor_value_info("signal", element, list(signal)),
        helper.make_tensor_value_info("step", TensorProto.INT64, []),
    ]
    if window is not None:
        feeds.append(helper.make_tensor_value_info("window", element, [window]))
    if frame_length:
        names[3] = "frame"
        feeds.append(helper.make_tensor_value_info("frame", TensorProto.INT64, []))
    node = helper.make_node("STFT", names, ["y"], onesided=onesided)
    graph = helper.make_graph(
        [node], "stft", feeds, [helper.make_tensor_value_info("y", element, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("kind", [np.float32, np.float64])
@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_against_onnx_reference(kind, onesided):
    cases = [  # signal dims, step, window length (None: no window), frame_length given
        ((2, 64, 1), 8, 16, False),
        ((2, 64, 1), 8, 16, True),
        ((1, 50, 1), 7, None, True),
        ((3, 33, 1), 5, 10, False),
        ((1, 20, 1), 3, None, False),
    ]
    for dims, step, window_length, frame_given in cases:
        frame = window_length or (12 if frame_given else dims[1])
        model = stft_model(kind, dims, window_length, frame_given, onesided)
        feeds = {"signal": rng.standard_normal(dims).astype(kind), "step": np.array(step)}
        if window_length is not None:
            feeds["window"] = np.hanning(window_length).astype(kind)
        if frame_given:
            feeds["frame"] = np.array(frame, np.int64)
        want = ReferenceEvaluator(model).run(None, feeds)[0]
        close(run_clean(lower(model), feeds)["y"], want, kind)


def test_stft_of_a_complex_signal_against_numpy():
    signal = rng.standard_normal((2, 40, 2))
    window = np.hamming(8)
    (got,) = run_numpy("STFT", [signal, np.array(4), window, None], {"onesided": 0})
    z = as_complex(signal)
    frames = np.stack([z[:, t * 4 : t * 4 + 8] * window for t in range(9)], axis=1)
    close(got, as_parts(np.fft.fft(frames, axis=-1)), np.float64)


def test_stft_refusals():
    signal = np.ones((1, 16, 1), np.float32)
    model = stft_model(np.float32, (1, 16, 1), 8, True, 1)
    model.graph.initializer.append(helper.make_tensor("frame", TensorProto.INT64, [], [6]))
    with pytest.raises(LoweringError, match=r"STFT node .*8 values and frame_length is 6"):
        lower(model)
    model = stft_model(np.float32, (1, 16, 1), 8, False, 1)
    model.graph.initializer.append(helper.make_tensor("step", TensorProto.INT64, [], [0]))
    with pytest.raises(LoweringError, match=r"STFT node .*frame_step must be at least 1"):
        lower(model)
    window = np.ones(8, np.float32)
    for inputs in (
        [signal, np.array(2), window, np.array(6)],  # the window is not frame_length long
        [signal, np.array(2), None, np.array(17)],  # a frame longer than the signal
        [signal, np.array(2), np.ones(8, np.float64), None],  # a window of another type
    ):
        with pytest.raises(OpError) as error:
            run_numpy("STFT", inputs, {})
        assert error.value.status in (STATUS_OP_BAD_SHAPE, STATUS_OP_BAD_DTYPE)


# -- MelWeightMatrix --------------------------------------------------------------------------


def mel_inputs(bins, length, rate, lower_hertz, upper_hertz, kind=np.float32):
    return [
        np.array(bins, np.int64),
        np.array(length, np.int64),
        np.array(rate, np.int64),
        np.array(lower_hertz, kind),
        np.array(upper_hertz, kind),
    ]


def reference_mel(inputs, **attributes):
    node = helper.make_node("MelWeightMatrix", list("abcde"), ["y"], **attributes)
    return ReferenceEvaluator(node).run(None, dict(zip("abcde", inputs, strict=True)))[0]


@pytest.mark.parametrize(
    "output_datatype",
    [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT32],
)
def test_mel_weight_matrix_against_onnx_reference(output_datatype):
    for arguments in (
        (8, 16, 8192, 0.0, 4096.0),
        (20, 512, 16000, 20.0, 7600.0),
        (13, 255, 22050, 125.0, 3800.0),
        (0, 64, 8000, 0.0, 3000.0),
        (40, 1024, 44100, 300.0, 300.0),
    ):
        for kind in (np.float32, np.float64):
            inputs = mel_inputs(*arguments, kind=kind)
            want = reference_mel(inputs, output_datatype=output_datatype)
            (got,) = run_numpy("MelWeightMatrix", inputs, {"output_datatype": output_datatype})
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)


def test_mel_weight_matrix_refusals():
    with pytest.raises(OpError) as error:  # bands above the spectrum's top frequency
        run_numpy("MelWeightMatrix", mel_inputs(8, 16, 8000, 0.0, 8000.0))
    assert error.value.status == STATUS_OP_BAD_INDEX
    with pytest.raises(OpError) as error:
        run_numpy("MelWeightMatrix", mel_inputs(8, 16, 0, 0.0, 100.0))
    assert error.value.status == STATUS_OP_BAD_SHAPE
    node = helper.make_node(
        "MelWeightMatrix", list("abcde"), ["y"], output_datatype=TensorProto.UINT64
    )
    graph = helper.make_graph(
        [node],
        "mel",
        [helper.make_tensor_value_info(n, TensorProto.INT64, []) for n in "abc"]
        + [helper.make_tensor_value_info(n, TensorProto.FLOAT, []) for n in "de"],
        [helper.make_tensor_value_info("y", TensorProto.UINT64, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(LoweringError, match=r"MelWeightMatrix node .*output_datatype 13"):
        lower(model)
