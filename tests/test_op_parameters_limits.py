"""The window geometry's limits (`window_geometry`, `element_count`), each on both sides of its
bound, with the status each case gets: dims and outputs below 2**31, tensors below 2**58
elements, the im2col / col2im scratch at most 2**32 elements, and the attribute rules
onnxruntime enforces. Called directly from Python, so the geometry compiles alone: with
`test_op_parameters_window.py`, the command of `mutation/ops-window.toml`.
"""

import numpy as np
import pytest
from op_parameters import KINDS, slots

from rtsoa.abi.operands import COL_DIMS
from rtsoa.abi.status import STATUS_OP_BAD_ATTRIBUTE, STATUS_OP_BAD_SHAPE, STATUS_OP_TOO_LARGE
from rtsoa.ops.window import G_N, G_OUT, G_PB, window_geometry


@pytest.mark.parametrize(
    "dims, want",
    [
        ((2, 3), 6),
        ((), 1),
        ((0, 1 << 40, 1 << 40), 0),  # empty, however large the others
        ((1 << 29, 1 << 28), (1 << 57)),
        ((1 << 29, 1 << 29), -1),  # 2**58: too large
        ((1 << 40, 1 << 40), -1),  # 2**80: too large, without overflowing
        ((3, -1), -1),
        ((0, -1), -1),  # a negative dim is refused even beside an empty one
        ((-2, 0), -1),
    ],
)
def test_element_count_is_exact_below_2_to_58_and_minus_1_past_it(dims, want):
    from rtsoa.ops.window import element_count

    table, _, _ = slots("MaxPool", [np.zeros((1,) * len(dims), dtype=np.float32)], {})
    table[0, COL_DIMS : COL_DIMS + len(dims)] = dims
    assert element_count(table, 0) == want


def _sized(op, x_dims, w_dims, attributes):
    """(status, geometry) of `op` on operand rows claiming `x_dims` / `w_dims` (no data: the
    geometry reads the rows' dims only)."""
    arrays = [np.zeros((1,) * len(x_dims), dtype=np.float32)]
    if w_dims is not None:
        arrays.append(np.zeros((1,) * len(w_dims), dtype=np.float32))
    table, _, attrs = slots(op, arrays, attributes)
    for row, dims in enumerate((x_dims, w_dims)[: len(arrays)]):
        table[row, COL_DIMS : COL_DIMS + len(dims)] = dims
    return window_geometry(table, attrs, KINDS[op])


OK, BAD_SHAPE, TOO_LARGE = 0, STATUS_OP_BAD_SHAPE, STATUS_OP_TOO_LARGE
BAD_ATTRIBUTE = STATUS_OP_BAD_ATTRIBUTE
LIMIT_CASES = [  # (op, x dims, w dims, attributes, the status wanted, why)
    ("MaxPool", (1, 1, 4, 1 << 31), None, {"kernel_shape": [2, 2]}, BAD_SHAPE, "an X dim of 2**31"),
    ("MaxPool", (1, 1, 4, (1 << 31) - 1), None, {"kernel_shape": [2, 2]}, OK, "2**31 - 1"),
    # a wide stride would bring the output of a dim past 2**31 under the limit: refused first
    (
        "MaxPool",
        (1, 1, 1, 1 << 40),
        None,
        {"kernel_shape": [1, 1], "strides": [1, 1 << 30]},
        BAD_SHAPE,
        "an X dim of 2**40",
    ),
    (
        "MaxPool",
        (1 << 30, 1 << 30, 4, 4),
        None,
        {"kernel_shape": [2, 2]},
        TOO_LARGE,
        "2**64 elements",
    ),
    # an X of 2**58 elements whose output (4 elements) and im2col (2**30) are small
    (
        "Conv",
        (1, 1 << 28, 1 << 15, 1 << 15),
        (1, 1 << 28, 1, 1),
        {"strides": [1 << 14] * 2},
        TOO_LARGE,
        "an X of 2**58 elements",
    ),
    # an output of 2**60 elements (2**30 channels x 2**30 positions) from small inputs
    (
        "ConvTranspose",
        (1, 1, 2),
        (1, 1 << 30, 1),
        {"strides": [1 << 30]},
        TOO_LARGE,
        "an output of 2**60 elements",
    ),
    ("MaxPool", (1, 1, 5, 5), None, {"kernel_shape": [-1, 2]}, BAD_ATTRIBUTE, "a kernel of -1"),
    (
        "MaxPool",
        (1, 1, 5, 5),
        None,
        {"kernel_shape": [1, 1], "strides": [1, 1 << 40]},
        BAD_ATTRIBUTE,
        "a stride of 2**40",
    ),
    ("Conv", (1, 4, 5, 5), (2, 4, -1, 3), {}, BAD_SHAPE, "a negative W dim"),
    ("Conv", (1, 4, -1, 5), (2, 4, 1, 3), {}, BAD_SHAPE, "a negative X dim"),
    # each bound at exactly 2**31, where a kernel of 1 or a wide stride keeps the output small
    (
        "MaxPool",
        (1, 1, 5, 5),
        None,
        {"kernel_shape": [1, 1], "dilations": [1, 1 << 31]},
        BAD_ATTRIBUTE,
        "a dilation of 2**31",
    ),
    (
        "MaxPool",
        (1, 1, 5, 5),
        None,
        {"kernel_shape": [1, 1], "dilations": [1, 1 << 40]},
        BAD_ATTRIBUTE,
        "a dilation of 2**40",
    ),
    ("MaxPool", (1, 1, 5, 5), None, {"kernel_shape": [0, 2]}, BAD_SHAPE, "a kernel of 0"),
    ("ConvTranspose", (1, 4, 5), (6, 2, 3), {}, BAD_SHAPE, "W's first dim above the channels"),
    # the im2col bound again, two images (it is per image) and unequal output dims
    (
        "Conv",
        (2, 4, 1 << 14, (1 << 16) + 1),
        (4, 2, 1, 2),
        {"group": 2},
        OK,
        "2**32 im2col, two images, a wide plane",
    ),
    (
        "Conv",
        (2, 4, (1 << 14) + 1, (1 << 16) + 1),
        (4, 2, 1, 2),
        {"group": 2},
        TOO_LARGE,
        "past it, two images, a wide plane",
    ),
    (
        "Conv",
        (1, 4, 5),
        (2, 4, 2),
        {"pads": [1 << 31, 0], "strides": [1 << 30]},
        BAD_ATTRIBUTE,
        "a begin pad of 2**31",
    ),
    (
        "Conv",
        (1, 4, 5),
        (2, 4, 2),
        {"pads": [0, 1 << 31], "strides": [1 << 30]},
        BAD_ATTRIBUTE,
        "an end pad of 2**31",
    ),
    ("Conv", (1, 4), (2, 4), {}, BAD_SHAPE, "a Conv without spatial axes"),
    ("Conv", (1, 1 << 29, 1, 1), (1 << 29, 1 << 29, 1, 1), {}, TOO_LARGE, "a W of 2**58 elements"),
    # 2**20 channels x 2**20 taps x 2**30 positions is 2**70: 0 in int64, so the product
    # must be checked before it is taken
    (
        "Conv",
        (1, 1 << 20, 1 << 15, 1 << 15),
        (1, 1 << 20, 1 << 10, 1 << 10),
        {"pads": [512, 512, 511, 511]},
        TOO_LARGE,
        "an im2col of 2**70",
    ),
    # outputs of 2**28 channels x 2**30 - 1 and x 2**30 positions: 2**58 - 2**28, 2**58
    (
        "ConvTranspose",
        (1, 1, 2),
        (1, 1 << 28, 1),
        {"strides": [(1 << 30) - 2]},
        OK,
        "an output under 2**58 elements",
    ),
    (
        "ConvTranspose",
        (1, 1, 2),
        (1, 1 << 28, 1),
        {"strides": [(1 << 30) - 1]},
        TOO_LARGE,
        "an output of 2**58 elements",
    ),
    # output_shape: one value per spatial dim (onnxruntime refuses N and C in it)
    (
        "ConvTranspose",
        (1, 4, 5),
        (4, 2, 3),
        {"strides": [2], "output_shape": [8]},
        OK,
        "output_shape",
    ),
    (
        "ConvTranspose",
        (1, 4, 5),
        (4, 2, 3),
        {"strides": [2], "output_shape": [1, 2, 8]},
        BAD_ATTRIBUTE,
        "output_shape with N and C",
    ),
    ("Conv", (1, 4, 5, 5), (2, 4, 3, 3, 3), {}, BAD_SHAPE, "W of a higher rank"),
    ("Conv", (1, 4, 5, 5, 5), (2, 4, 3, 3), {}, BAD_SHAPE, "W of a lower rank"),
    ("Conv", (1, 2, 4), (1 << 31, 2, 1), {}, BAD_SHAPE, "2**31 output channels"),
    ("Conv", (1, 2, 4), (2, 2, 1 << 31), {}, BAD_SHAPE, "a kernel of 2**31"),
    ("Conv", (0, 2, 4, 4), (3, 2, 2, 2), {}, OK, "an empty batch"),
    ("Conv", (1, 2, 4, 4), (0, 2, 2, 2), {}, OK, "no output channel"),
    # an empty input plane whose padding gives outputs (onnxruntime: (1, 2, 2, 4), the bias)
    ("Conv", (1, 1, 0, 4), (2, 1, 1, 1), {"pads": [1, 0, 1, 0]}, OK, "an empty plane, padded"),
    # the im2col matrix, (C / group x taps, positions), is at most 2**32 elements:
    # 4 / 2 channels x 2 taps x 2**15 x 2**15 positions is 2**32
    ("Conv", (1, 4, 1 << 15, (1 << 15) + 1), (4, 2, 1, 2), {"group": 2}, OK, "2**32 im2col"),
    (
        "Conv",
        (1, 4, (1 << 15) + 1, (1 << 15) + 1),
        (4, 2, 1, 2),
        {"group": 2},
        TOO_LARGE,
        "past it",
    ),
    # 2**20 channels x 2**21 taps x 2**21 positions: past 2**58, where the product overflows
    (
        "Conv",
        (1, 1 << 20, 256, 256, 256),
        (1, 1 << 20, 128, 128, 128),
        {},
        TOO_LARGE,
        "an im2col of 2**62",
    ),
    # ConvTranspose's col2im matrix, (M / group x taps, input plane): 2 x 2 x 2**30
    ("ConvTranspose", (1, 2, 1 << 15, 1 << 15), (2, 2, 1, 2), {}, OK, "2**32 col2im"),
    ("ConvTranspose", (1, 2, 1 << 15, (1 << 15) + 1), (2, 2, 1, 2), {}, TOO_LARGE, "past it"),
    # an output of 2**31 - 1 and 2**31: 2**30 x (3 - 1) + 1 - pads
    (
        "ConvTranspose",
        (1, 1, 3),
        (1, 1, 1),
        {"strides": [1 << 30], "pads": [0, 2]},
        OK,
        "out 2**31 - 1",
    ),
    (
        "ConvTranspose",
        (1, 1, 3),
        (1, 1, 1),
        {"strides": [1 << 30], "pads": [0, 1]},
        BAD_SHAPE,
        "out 2**31",
    ),
    # output_padding below the stride or the dilation
    (
        "ConvTranspose",
        (1, 4, 5),
        (4, 2, 3),
        {"dilations": [2], "output_padding": [1]},
        OK,
        "output_padding 1, dilation 2",
    ),
    (
        "ConvTranspose",
        (1, 4, 5),
        (4, 2, 3),
        {"output_padding": [1]},
        BAD_ATTRIBUTE,
        "output_padding 1, stride and dilation 1",
    ),
    # pads with auto_pad: refused for Conv and ConvTranspose (even zeros), as onnxruntime does;
    # its pools let auto_pad win, and so do rtsoa's
    (
        "Conv",
        (1, 1, 5, 5),
        (1, 1, 2, 2),
        {"auto_pad": "VALID", "pads": [0, 0, 0, 0]},
        BAD_ATTRIBUTE,
        "Conv with auto_pad and pads",
    ),
    (
        "ConvTranspose",
        (1, 1, 5),
        (1, 1, 2),
        {"auto_pad": "SAME_UPPER", "pads": [1, 1]},
        BAD_ATTRIBUTE,
        "ConvTranspose with auto_pad and pads",
    ),
    (
        "MaxPool",
        (1, 1, 5, 5),
        None,
        {"kernel_shape": [2, 2], "auto_pad": "VALID", "pads": [1] * 4},
        OK,
        "MaxPool with auto_pad and pads",
    ),
]


# the output dims of accepted cases where they are the point
OUTPUT_DIMS = {
    "an empty batch": [3, 3],
    "an empty plane, padded": [2, 4],  # onnxruntime: (1, 2, 2, 4), the bias
    "MaxPool with auto_pad and pads": [4, 4],  # VALID's
}


@pytest.mark.parametrize(
    "op, x_dims, w_dims, attributes, want, why", LIMIT_CASES, ids=[c[-1] for c in LIMIT_CASES]
)
def test_window_geometry_limits(op, x_dims, w_dims, attributes, want, why):
    """The limits on each side of their bound: dims and outputs below 2**31, tensors below
    2**58 elements, the im2col / col2im scratch at most 2**32 elements (MAX_SCRATCH); an empty
    batch, channel or plane is a valid empty op, not an oversized one; and the attribute rules
    onnxruntime enforces (output_padding, pads beside auto_pad), with the status each gets."""
    status, geo = _sized(op, x_dims, w_dims, attributes)
    assert status == want, (why, status)
    if want == OK and x_dims[0] == 0:
        assert geo[G_N] == 0
    if why in OUTPUT_DIMS:
        assert list(geo[G_OUT + 1 : G_OUT + 3]) == OUTPUT_DIMS[why]
    if why == "MaxPool with auto_pad and pads":  # the pads ignored
        assert not geo[G_PB : G_PB + 3].any()
