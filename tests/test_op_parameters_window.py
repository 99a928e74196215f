"""The window geometry every Conv, ConvTranspose and pool shares (`window_geometry`,
`element_count`), called on its own and judged by onnxruntime, onnx.reference and the ONNX
definition.

The command of `mutation/ops-window.toml`; how these tests run: `op_parameters.py`.
"""

from collections import Counter

import numpy as np
import pytest
from op_parameters import KINDS, SAME, judged, slots

from rtsoa.abi.status import STATUS_OP_BAD_ATTRIBUTE
from rtsoa.ops.window import (
    CONV,
    G_C,
    G_D,
    G_GROUP,
    G_IN,
    G_K,
    G_M,
    G_N,
    G_OUT,
    G_PB,
    G_PE,
    G_S,
    POOL,
    window_geometry,
)


def _window_case(rng):
    """(op, x, w or None, attributes) of a random Conv / ConvTranspose / pool on small inputs."""
    op = str(rng.choice(list(KINDS)))
    spatial = int(rng.integers(1, 4))
    high = 8 if spatial < 3 else 5
    sizes = [int(v) for v in rng.integers(1, high, spatial)]
    kernel = [int(v) for v in rng.integers(1, 4, spatial)]
    attributes = {}
    if rng.random() < 0.8:
        attributes["strides"] = [int(v) for v in rng.integers(1, 4, spatial)]
    if rng.random() < 0.4:
        attributes["dilations"] = [int(v) for v in rng.integers(1, 3, spatial)]
    auto_pad = str(
        rng.choice(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"], p=[0.55, 0.2, 0.15, 0.1])
    )
    if auto_pad != "NOTSET":
        attributes["auto_pad"] = auto_pad
    elif rng.random() < 0.8:
        pads = rng.integers(0, 3, 2 * spatial)
        if op in ("MaxPool", "AveragePool"):  # onnxruntime refuses a pool's pad past its kernel
            pads = np.minimum(pads, np.tile(kernel, 2) - 1)
        attributes["pads"] = [int(v) for v in pads]
    group = 1
    if op in ("MaxPool", "AveragePool"):
        if auto_pad in SAME:  # see test_window_geometry_of_same_pools_follows_the_definition
            attributes.pop("dilations", None)
            if "strides" in attributes:
                attributes["strides"] = [
                    min(s, k) for s, k in zip(attributes["strides"], kernel, strict=True)
                ]
        attributes["kernel_shape"] = kernel
        if rng.random() < 0.5:
            attributes["ceil_mode"] = 1
        if op == "AveragePool" and rng.random() < 0.5:
            attributes["count_include_pad"] = 1
        channels, w = 2, None
    else:
        group = int(rng.choice([1, 2]))
        channels, m = 2 * group, 2 * group
        if op == "Conv":
            w = rng.standard_normal((m, channels // group, *kernel)).astype(np.float32)
        else:
            w = rng.standard_normal((channels, m // group, *kernel)).astype(np.float32)
            strides = attributes.get("strides", [1] * spatial)
            if rng.random() < 0.3:
                attributes["output_padding"] = [int(rng.integers(0, s)) for s in strides]
            elif rng.random() < 0.6 and auto_pad == "NOTSET":
                dilations = attributes.get("dilations", [1] * spatial)
                full = [
                    s * (i - 1) + (k - 1) * d + 1
                    for s, i, k, d in zip(strides, sizes, kernel, dilations, strict=True)
                ]
                attributes["output_shape"] = [int(rng.integers(max(f - 2, 1), f + 1)) for f in full]
        if group > 1:
            attributes["group"] = group
        if rng.random() < 0.5:
            attributes["kernel_shape"] = kernel
    x = rng.standard_normal((1 + int(rng.integers(0, 2)), channels, *sizes)).astype(np.float32)
    return op, x, w, attributes


def _reference_judges(op, attributes):
    """ConvTranspose with SAME_UPPER / SAME_LOWER is defined to give in * stride outputs, so a
    stride past the kernel's reach means a negative total padding (outputs past the full
    result, zeros); onnxruntime clamps that padding at 0 and gives fewer outputs (in 4, stride
    3, kernel 2: 11 where the definition and onnx.reference give 12). There onnx.reference
    judges."""
    return op == "ConvTranspose" and attributes.get("auto_pad") in SAME


def _run_window(op, x, w, attributes, reference=False):
    return judged(op, [x] if w is None else [x, w], attributes, reference=reference)


def _no_window_fits(op, x, w, attributes):
    """Whether the dilated kernel reaches past the padded input on some axis (Conv, pools)."""
    if op == "ConvTranspose" or attributes.get("auto_pad") in SAME:
        return False
    spatial = x.ndim - 2
    kernel = attributes.get("kernel_shape", None if w is None else w.shape[2:])
    dilations = attributes.get("dilations", [1] * spatial)
    pads = (
        attributes.get("pads", [0] * 2 * spatial)
        if "auto_pad" not in attributes
        else [0] * 2 * spatial
    )
    return any(
        x.shape[2 + i] + pads[i] + pads[spatial + i] < (kernel[i] - 1) * dilations[i] + 1
        for i in range(spatial)
    )


def _explicit(attributes, pb, pe):
    """The same attributes with rtsoa's pads written out (no auto_pad, no output_shape)."""
    explicit = {
        k: v for k, v in attributes.items() if k not in ("auto_pad", "pads", "output_shape")
    }
    explicit["pads"] = list(pb) + list(pe)
    return explicit


def test_window_geometry_matches_onnxruntime_output_shapes_and_padding():
    """For random Conv / ConvTranspose / MaxPool / AveragePool nodes onnxruntime accepts, rtsoa's
    geometry accepts them with onnxruntime's output spatial dims, and its begin / end pads,
    written back as explicit pads, give onnxruntime's own output values (so auto_pad's split of
    an odd padding, ConvTranspose's output_shape and ceil_mode's dropped last window are all
    judged by onnxruntime; SAME ConvTransposes by onnx.reference, see `_reference_judges`).
    Dilated SAME pools are drawn without their dilations here: see
    `test_window_geometry_of_same_pools_follows_the_definition`."""
    rng = np.random.default_rng(20261208)
    reached = Counter()
    for _ in range(260):
        op, x, w, attributes = _window_case(rng)
        reference = _reference_judges(op, attributes)
        reached["judged by onnx.reference"] += reference
        want = _run_window(op, x, w, attributes, reference)
        if want is None:
            reached["refused by onnxruntime"] += 1
            continue
        arrays = [x] if w is None else [x, w]
        table, _, attrs = slots(op, arrays, attributes)
        status, geo = window_geometry(table, attrs, KINDS[op])
        case = f"{op} x{x.shape} w{None if w is None else w.shape} {attributes}"
        if _no_window_fits(op, x, w, attributes):
            # rtsoa refuses the shape (BAD_WINDOWS: "a kernel wider than the input");
            # onnxruntime gives an empty axis with ceil_mode, or one output where C's division
            # truncates the negative span toward zero (size 1, kernel 2, dilation 2, stride 3)
            assert status != 0, case
            reached["no window fits"] += 1
            continue
        assert status == 0, case
        spatial = x.ndim - 2
        lead = 3 - spatial
        out = [int(v) for v in geo[G_OUT + lead : G_OUT + 3]]
        assert tuple(out) == want[0].shape[2:], case
        assert list(geo[G_OUT : G_OUT + lead]) == [1] * lead, case
        for first in (G_IN, G_K, G_S, G_D):
            assert list(geo[first : first + lead]) == [1] * lead, case
        assert list(geo[G_IN + lead : G_IN + 3]) == list(x.shape[2:]), case
        kernel = attributes.get("kernel_shape", None if w is None else list(w.shape[2:]))
        assert list(geo[G_K + lead : G_K + 3]) == list(kernel), case
        assert list(geo[G_S + lead : G_S + 3]) == attributes.get("strides", [1] * spatial), case
        assert list(geo[G_D + lead : G_D + 3]) == attributes.get("dilations", [1] * spatial), case
        group = attributes.get("group", 1)
        channels = x.shape[1]
        m = channels if w is None else (w.shape[0] if op == "Conv" else w.shape[1] * group)
        assert [geo[G_N], geo[G_C], geo[G_M], geo[G_GROUP]] == [x.shape[0], channels, m, group]
        if op == "ConvTranspose" and "output_shape" in attributes:
            reached["ConvTranspose output_shape"] += 1
        if "ceil_mode" in attributes:
            reached["ceil_mode"] += 1
        if attributes.get("auto_pad") in SAME:
            reached[f"{op} SAME"] += 1
        pb, pe = geo[G_PB + lead : G_PB + 3], geo[G_PE + lead : G_PE + 3]
        if attributes.get("auto_pad") == "VALID":
            assert not pb.any() and not pe.any(), case
        again = _run_window(op, x, w, _explicit(attributes, pb, pe), reference)
        if again is None:  # explicit pads onnxruntime refuses (a pool's pad past its kernel)
            reached["explicit pads refused"] += 1
            continue
        np.testing.assert_allclose(again[0], want[0], rtol=1e-5, atol=1e-5, err_msg=case)
        if (pb != pe).any():
            reached["uneven pads"] += 1
        reached[f"{op} checked"] += 1
    print(dict(reached))
    for op in KINDS:
        assert reached[f"{op} checked"] >= 25, reached
        assert reached[f"{op} SAME"] >= 5, reached
    for branch in ("ConvTranspose output_shape", "ceil_mode", "uneven pads"):
        assert reached[branch] >= 10, reached


def test_a_ceil_mode_window_that_would_start_in_the_end_padding_is_dropped():
    """1x1x4x4, kernel 2, stride 2, pads [0, 0, 1, 1], ceil_mode: (4 + 1 - 2) / 2 rounds up to
    2, plus 1 is 3 windows a side; the third would start at 4, in the end padding: 2 x 2."""
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    attributes = {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1], "ceil_mode": 1}
    (want,) = _run_window("MaxPool", x, None, attributes)
    table, _, attrs = slots("MaxPool", [x], attributes)
    status, geo = window_geometry(table, attrs, POOL)
    assert status == 0 and want.shape == (1, 1, 2, 2)
    assert list(geo[G_OUT + 1 : G_OUT + 3]) == [2, 2]


def test_window_geometry_reads_its_slots_whatever_follows_them():
    """FusedConv's slots are the window's and then its activation's: its geometry is Conv's.
    Slots one short of the window's are refused."""
    x = np.zeros((1, 4, 6, 6), dtype=np.float32)
    w = np.zeros((2, 4, 3, 3), dtype=np.float32)
    attributes = {"strides": [2, 1], "pads": [1, 0, 1, 0]}
    table, _, attrs = slots("Conv", [x, w], attributes)
    want = window_geometry(table, attrs, CONV)
    fused_table, _, fused = slots("FusedConv", [x, w], {**attributes, "activation": 1})
    assert fused.shape[0] > attrs.shape[0]
    got = window_geometry(fused_table, fused, CONV)
    assert got[0] == want[0] == 0 and (got[1] == want[1]).all()
    assert window_geometry(table, attrs[:-1], CONV)[0] == STATUS_OP_BAD_ATTRIBUTE


def test_window_geometry_of_same_pools_follows_the_definition():
    """SAME_UPPER / SAME_LOWER: output ceil(in / stride), the total padding
    max((out - 1) * stride + (kernel - 1) * dilation + 1 - in, 0), its odd unit at the end for
    SAME_UPPER and at the beginning for SAME_LOWER. Neither oracle judges every pool here, so
    the definition's arithmetic is written out:
    - onnxruntime's pools compute that padding from the undilated kernel, without the max: a
      dilated pool's output is shorter than its own shape inference says (MaxPool, kernel 2,
      dilation 2, SAME_UPPER on 7 elements: 6 outputs), and a stride past the kernel gives a
      negative padding (MaxPool refuses the node; AveragePool, kernel 1, stride 3, SAME_UPPER
      on [1, 2, 3] gives [2], the definition [1]);
    - onnx.reference refuses ceil_mode with auto_pad, and gives 0 outputs for kernel 3,
      dilation 2, stride 3 on 2 elements.
    The random test above draws SAME pools undilated with strides up to the kernel."""
    checked = 0
    for size in range(1, 9):
        for kernel in (1, 2, 3):
            for stride in (1, 2, 3):
                for dilation in (1, 2, 3):
                    for auto_pad in SAME:
                        x = np.zeros((1, 1, size), dtype=np.float32)
                        attributes = {
                            "kernel_shape": [kernel],
                            "strides": [stride],
                            "dilations": [dilation],
                            "auto_pad": auto_pad,
                        }
                        table, _, attrs = slots("MaxPool", [x], attributes)
                        status, geo = window_geometry(table, attrs, POOL)
                        out = -(-size // stride)
                        total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
                        small = total // 2
                        pb, pe = (
                            (small, total - small)
                            if auto_pad == "SAME_UPPER"
                            else (total - small, small)
                        )
                        assert status == 0
                        assert (geo[G_OUT + 2], geo[G_PB + 2], geo[G_PE + 2]) == (out, pb, pe), (
                            attributes
                        )
                        checked += total % 2
    assert checked > 50  # cases with an odd total padding, where the two modes differ


BAD_WINDOWS = [  # (op, x shape, w shape or None, attributes, why)
    ("MaxPool", (1, 1, 5, 5), None, {"kernel_shape": [2, 2], "strides": [0, 1]}, "a zero stride"),
    (
        "MaxPool",
        (1, 1, 5, 5),
        None,
        {"kernel_shape": [2, 2], "pads": [0, -1, 0, 0]},
        "a negative pad",
    ),
    (
        "MaxPool",
        (1, 1, 5, 5),
        None,
        {"kernel_shape": [2, 2], "dilations": [1, 0]},
        "a zero dilation",
    ),
    ("MaxPool", (1, 1, 5, 5), None, {"kernel_shape": [2, 2], "ceil_mode": 2}, "ceil_mode 2"),
    ("MaxPool", (1, 1, 5, 5), None, {"kernel_shape": [2, 2], "ceil_mode": -1}, "ceil_mode -1"),
    ("MaxPool", (1, 1, 5, 5), None, {}, "no kernel_shape"),
    ("MaxPool", (1, 1, 5, 5), None, {"kernel_shape": [2]}, "a kernel of rank 1 on a 2-D input"),
    ("MaxPool", (1, 1, 5, 5), None, {"kernel_shape": [2, 2], "strides": [1]}, "one stride"),
    (
        "MaxPool",
        (1, 1, 5, 5),
        None,
        {"kernel_shape": [2, 2], "pads": [1, 1, 1]},
        "an odd pads list",
    ),
    ("MaxPool", (1, 1, 5, 5), None, {"kernel_shape": [6, 2]}, "a kernel wider than the input"),
    ("MaxPool", (1, 1, 5, 5), None, {"kernel_shape": [0, 2]}, "a zero kernel"),
    (
        "MaxPool",
        (1, 1, 5),
        None,
        {"kernel_shape": [2], "auto_pad": "SIDEWAYS"},
        "an unknown auto_pad",
    ),
    ("MaxPool", (1, 5), None, {"kernel_shape": []}, "no spatial axis"),
    ("MaxPool", (1, 1, 2, 2, 2, 2), None, {"kernel_shape": [1, 1, 1, 1]}, "four spatial axes"),
    ("Conv", (1, 4, 5, 5), (2, 3, 3, 3), {}, "W's channels not X's"),
    ("Conv", (1, 4, 5, 5), (3, 2, 3, 3), {"group": 2}, "M not a multiple of group"),
    ("Conv", (1, 4, 5, 5), (2, 4, 3, 3), {"group": 0}, "group 0"),
    ("Conv", (1, 4, 5, 5), (2, 4, 3), {}, "W of another rank"),
    ("Conv", (1, 4, 5, 5), (2, 4, 3, 3), {"kernel_shape": [3, 2]}, "kernel_shape not W's"),
    ("ConvTranspose", (1, 4, 5), (2, 3, 3), {}, "W's first dim not X's channels"),
    ("ConvTranspose", (1, 3, 5), (3, 2, 3), {"group": 2}, "C not a multiple of group"),
    (
        "ConvTranspose",
        (1, 4, 5),
        (4, 2, 3),
        {"strides": [2], "output_padding": [2]},
        "output_padding 2 with stride 2",
    ),
    ("ConvTranspose", (1, 4, 5), (4, 2, 3), {"output_padding": [-1]}, "a negative output_padding"),
    ("ConvTranspose", (1, 4, 5), (4, 2, 3), {"output_shape": [0]}, "output_shape 0"),
    (
        "ConvTranspose",
        (1, 4, 5),
        (4, 2, 3),
        {"output_shape": [2, 3]},
        "output_shape of 2 spatial axes",
    ),
    ("ConvTranspose", (1, 4, 5), (4, 2, 3), {"pads": [4, 4]}, "pads that leave no output"),
    ("Conv", (1, 4, 5), (2, 4, 2), {"strides": [1 << 31]}, "a stride of 2**31"),
    ("Conv", (1, 4, 5), (2, 4, 2), {"pads": [1 << 31, 0]}, "a pad of 2**31"),
]


@pytest.mark.parametrize(
    "op, x_shape, w_shape, attributes, why", BAD_WINDOWS, ids=[case[-1] for case in BAD_WINDOWS]
)
def test_window_geometry_refuses_attributes_onnx_forbids(op, x_shape, w_shape, attributes, why):
    """Each attribute set breaks one rule of the op's ONNX definition: rtsoa's geometry
    refuses it with a status (never an index past the input). Which of them onnxruntime
    refuses too is not asked here; the exact statuses of the bounds are in
    `test_op_parameters_limits.py`."""
    x = np.zeros(x_shape, dtype=np.float32)
    arrays = [x] if w_shape is None else [x, np.zeros(w_shape, dtype=np.float32)]
    table, _, attrs = slots(op, arrays, attributes)
    status, _ = window_geometry(table, attrs, KINDS[op])
    assert status != 0, why
