"""ImageDecoder on the host (rtsoa/host/images.py).

Lossless formats are judged against the pixels the test encoded (an oracle independent of the
decoder); JPEG against onnx.reference (which decodes with Pillow too); grayscale against the
ITU-R 601 luma of the source pixels within one level (Pillow's rounding). Hostile streams (not
an image, cut short, a header claiming 10^10 pixels, 16-bit samples) are ModelInputErrors
naming the node, and a decoded image feeds device ops like any host result.
"""

import io
import struct
import zlib

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from PIL import Image

from rtsoa import InferenceSession
from rtsoa.errors import LoweringError, ModelInputError

RNG = np.random.default_rng(20)
PIXELS = RNG.integers(0, 256, size=(13, 17, 3), dtype=np.uint8)  # odd sizes, not square


def decoder(pixel_format="RGB", stream_type=TensorProto.UINT8, opset=20):
    node = helper.make_node(
        "ImageDecoder", ["stream"], ["image"], name="decode", pixel_format=pixel_format
    )
    graph = helper.make_graph(
        [node],
        "decode",
        [helper.make_tensor_value_info("stream", stream_type, [None])],
        [helper.make_tensor_value_info("image", TensorProto.UINT8, [None, None, None])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def encode(pixels, fmt, mode=None, **options):
    buffer = io.BytesIO()
    Image.fromarray(pixels, mode=mode).save(buffer, format=fmt, **options)
    return np.frombuffer(buffer.getvalue(), dtype=np.uint8)


def decode(stream, pixel_format="RGB"):
    with InferenceSession(decoder(pixel_format)) as session:
        (image,) = session.run(None, {"stream": stream})
    return image


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "TIFF", "PPM"])
@pytest.mark.parametrize("pixel_format", ["RGB", "BGR"])
def test_lossless_formats_give_the_encoded_pixels(fmt, pixel_format):
    image = decode(encode(PIXELS, fmt), pixel_format)
    want = PIXELS if pixel_format == "RGB" else PIXELS[:, :, ::-1]
    assert image.dtype == np.uint8 and image.flags.c_contiguous
    np.testing.assert_array_equal(image, want)


def test_lossless_webp_gives_the_encoded_pixels():
    np.testing.assert_array_equal(decode(encode(PIXELS, "WEBP", lossless=True)), PIXELS)


@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
def test_jpeg_matches_onnx_reference(pixel_format):
    stream = encode(PIXELS, "JPEG", quality=90)
    (want,) = ReferenceEvaluator(decoder(pixel_format)).run(None, {"stream": stream})
    got = decode(stream, pixel_format)
    assert got.shape == want.shape == (13, 17, 1 if pixel_format == "Grayscale" else 3)
    np.testing.assert_array_equal(got, want)


def test_grayscale_is_the_luma_of_the_pixels():
    luma = PIXELS.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    got = decode(encode(PIXELS, "PNG"), "Grayscale")
    assert got.shape == (13, 17, 1)
    assert np.abs(got[:, :, 0].astype(np.float64) - luma).max() <= 1.0


def test_palette_rgba_and_gray_images_are_converted():
    palette = Image.fromarray(PIXELS).quantize(colors=16)
    buffer = io.BytesIO()
    palette.save(buffer, format="PNG")
    want = np.asarray(palette.convert("RGB"))
    np.testing.assert_array_equal(decode(np.frombuffer(buffer.getvalue(), np.uint8)), want)
    alpha = RNG.integers(0, 256, size=(13, 17, 1), dtype=np.uint8)
    rgba = np.concatenate([PIXELS, alpha], axis=2)
    np.testing.assert_array_equal(decode(encode(rgba, "PNG")), PIXELS)  # alpha dropped
    gray = PIXELS[:, :, 0].copy()
    np.testing.assert_array_equal(decode(encode(gray, "PNG")), np.repeat(gray[:, :, None], 3, 2))
    np.testing.assert_array_equal(decode(encode(gray, "PNG"), "Grayscale")[:, :, 0], gray)


def _png_header(width, height, bit_depth=8, color=2):
    """A PNG of one IHDR chunk and an empty IDAT: its header claims width x height."""

    def chunk(kind, data):
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color, 0, 0, 0)
    body = chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    return np.frombuffer(b"\x89PNG\r\n\x1a\n" + body, dtype=np.uint8)


@pytest.mark.parametrize(
    "stream, message",
    [
        (np.frombuffer(b"not an image at all", np.uint8), "cannot be decoded"),
        (encode(PIXELS, "PNG")[:60], "cannot be decoded"),
        (_png_header(9_000, 9_000), "above rtsoa's limit"),
        (_png_header(100_000, 100_000), "decompression bomb"),  # Pillow's own guard
        (_png_header(20, 20, bit_depth=16, color=0), "more than 8 bits"),
        (np.zeros(0, np.uint8), "cannot be decoded"),
    ],
    ids=["garbage", "truncated", "large-header", "huge-header", "16-bit", "empty"],
)
def test_hostile_streams_are_refused_naming_the_node(stream, message):
    with InferenceSession(decoder()) as session:
        with pytest.raises(ModelInputError, match=message) as caught:
            session.run(None, {"stream": stream})
    assert "ImageDecoder" in str(caught.value) and "decode" in str(caught.value)


def test_a_stream_of_another_rank_or_dtype_is_refused():
    with InferenceSession(decoder()) as session:
        with pytest.raises(ModelInputError):
            session.run(None, {"stream": encode(PIXELS, "PNG").reshape(1, -1)})
        with pytest.raises(ModelInputError):
            session.run(None, {"stream": encode(PIXELS, "PNG").astype(np.int16)})


@pytest.mark.parametrize(
    "model, message",
    [
        (decoder("CMYK"), "pixel_format 'CMYK'"),
        (decoder(stream_type=TensorProto.FLOAT), "expected uint8"),
    ],
)
def test_bad_attributes_and_types_are_refused_at_lowering(model, message):
    with pytest.raises(LoweringError, match=message):
        InferenceSession(model)


def test_a_decoded_image_feeds_device_ops():
    """ImageDecoder -> Cast -> ReduceMean over the pixels: a host step before the device
    graph, whose input dims are the image's (unknown at lowering)."""
    nodes = [
        helper.make_node("ImageDecoder", ["stream"], ["image"], pixel_format="RGB"),
        helper.make_node("Cast", ["image"], ["float"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["float"], ["mean"], axes=[0, 1], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "decode_mean",
        [helper.make_tensor_value_info("stream", TensorProto.UINT8, [None])],
        [helper.make_tensor_value_info("mean", TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.opset_import[0].version = 20
    with InferenceSession(model) as session:
        for size in ((13, 17), (4, 9)):
            pixels = PIXELS[: size[0], : size[1]].copy()
            (mean,) = session.run(None, {"stream": encode(pixels, "PNG")})
            np.testing.assert_allclose(mean, pixels.reshape(-1, 3).mean(axis=0), rtol=1e-5)
