"""ImageDecoder (opset 20) on the host: a 1-D uint8 tensor holding an encoded image (JPEG,
PNG, BMP, TIFF, WebP, JPEG 2000, PNM: whatever the installed Pillow reads) decoded to a
uint8 (height, width, channels) array, channels 3 for "RGB" and "BGR", 1 for "Grayscale".

The decoder is Pillow's, as in ONNX's reference implementation; an image of another mode
(palette, RGBA, CMYK, two-level) is converted to the requested format by Pillow, and images
with more than 8 bits per channel (16-bit or float modes) are refused rather than clipped.
The size is read from the header before anything is decoded, and an image of more than
MAX_PIXELS pixels is refused, so a small stream cannot make the host allocate gigabytes.
A stream Pillow cannot read, or one that ends early, is a ModelInputError naming the node.
"""

import io

import numpy as np

from rtsoa.host.kinds import HostOp, kind_name

MAX_PIXELS = 1 << 26  # 67 M pixels: 192 MiB decoded as RGB
_CHANNELS = {"RGB": 3, "BGR": 3, "Grayscale": 1}
_WIDE_MODES = ("I", "F")  # 32-bit integer and float; "I;16..." modes start with "I" too


def _prepare(attributes, kinds, opset):
    pixel_format = attributes.get("pixel_format", "RGB")
    if isinstance(pixel_format, bytes):
        pixel_format = pixel_format.decode("utf-8", "replace")
    if pixel_format not in _CHANNELS:
        raise ValueError(f"pixel_format {pixel_format!r} is not one of {sorted(_CHANNELS)}")
    if kinds and kinds[0] is not None and np.dtype(kinds[0]) != np.uint8:
        raise ValueError(f"input encoded_stream is {kind_name(kinds[0])}, expected uint8")
    import PIL.Image  # noqa: F401  (Pillow is a dependency; fail at lowering if it is broken)

    return {"pixel_format": pixel_format}, [np.dtype(np.uint8)]


def _run(parameters, inputs):
    import PIL.Image

    (stream,) = inputs
    if stream.dtype != np.uint8 or stream.ndim != 1:
        raise ValueError(
            f"encoded_stream must be a 1-D uint8 tensor, got {stream.dtype} of shape {stream.shape}"
        )
    try:
        image = PIL.Image.open(io.BytesIO(stream.tobytes()))
        width, height = image.size
        if width * height > MAX_PIXELS:
            raise ValueError(
                f"the image is {width} x {height} pixels, above rtsoa's limit of "
                f"{MAX_PIXELS} pixels"
            )
        if image.mode.startswith(_WIDE_MODES):
            raise ValueError(
                f"the image has mode {image.mode!r} (more than 8 bits per channel); "
                "ImageDecoder gives uint8"
            )
        pixel_format = parameters["pixel_format"]
        image = image.convert("L" if pixel_format == "Grayscale" else "RGB")
        decoded = np.asarray(image, dtype=np.uint8)
    except (OSError, SyntaxError, PIL.Image.DecompressionBombError) as error:
        # Pillow: UnidentifiedImageError and truncated streams are OSErrors; some plugins
        # raise SyntaxError on a malformed header
        raise ValueError(f"the encoded stream cannot be decoded ({error})") from None
    if pixel_format == "Grayscale":
        decoded = decoded[:, :, None]
    elif pixel_format == "BGR":
        decoded = decoded[:, :, ::-1]
    return [np.ascontiguousarray(decoded)]


image_decoder = HostOp(_prepare, _run)
