"""The ops' parameter functions called on their own, judged by onnxruntime and numpy.

`window_geometry` (every Conv, ConvTranspose and pool), `slice_params` (Slice), `reduced_axes`,
`reduce_loop`, `_integer_bound` and `truncate_divide` (the Reduce* family) decide what an op
reads and writes. The op tests reach them through whole compiled ops; here each is called
directly from Python, so it compiles alone (seconds, where an op entry takes tens of seconds):
these tests are the mutation configs' commands for the ops (`mutation/ops-window.toml`,
`ops-slice.toml`, `ops-reduce.toml`), where every mutant compiles again.

The cases are drawn from a seeded generator (a mutant's verdict is reproducible), and each
test states how many of its cases reached each branch it is there for, so a change that makes
the draws miss a branch fails rather than passing on fewer cases.
"""

from collections import Counter

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rtsoa.abi.dtypes import DType
from rtsoa.abi.operands import COL_DIMS
from rtsoa.abi.status import (
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_MISSING_INPUT,
    STATUS_OP_TOO_LARGE,
)
from rtsoa.ops.host import _prepare
from rtsoa.ops.indexing import slice_params
from rtsoa.ops.reduce import (
    MAX,
    MEAN,
    MIN,
    PROD,
    SUM,
    _integer_bound,
    reduce_loop,
    reduced_axes,
    truncate_divide,
)
from rtsoa.ops.window import (
    CONV,
    CONV_TRANSPOSE,
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

OPSET = 19  # AveragePool's dilations, Slice / Reduce* axes as inputs
KINDS = {"MaxPool": POOL, "AveragePool": POOL, "Conv": CONV, "ConvTranspose": CONV_TRANSPOSE}


def _session(op, inputs, attributes, n_out=1, opset=OPSET):
    """An onnxruntime session of one `op` node on float32 / int64 `inputs` (name -> array), or
    None where onnxruntime refuses the node (at load or at its first run)."""
    values = [
        helper.make_tensor_value_info(
            name,
            TensorProto.INT64 if array.dtype == np.int64 else TensorProto.FLOAT,
            array.shape,
        )
        for name, array in inputs.items()
    ]
    outputs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, list(inputs), outputs, **attributes)
    graph = helper.make_graph(
        [node],
        "one",
        values,
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(model.SerializeToString(), options)
        return session.run(None, inputs)
    except Exception:  # noqa: BLE001 - onnxruntime's refusals come as several exception types
        return None


def _slots(op, arrays, attributes):
    """The operand table, arena and attribute slots rtsoa's op `op` gets for `arrays`."""
    _, attrs, table, arena = _prepare(op, arrays, attributes, 1)
    return table, arena, np.asarray(attrs, dtype=np.int64)


# -- window geometry ------------------------------------------------------------------------------


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
        if auto_pad in (
            "SAME_UPPER",
            "SAME_LOWER",
        ):  # see test_window_geometry_of_same_pools_follows_the_definition
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
    return op == "ConvTranspose" and attributes.get("auto_pad") in ("SAME_UPPER", "SAME_LOWER")


def _run_window(op, x, w, attributes, reference=False):
    inputs = {"x": x} if w is None else {"x": x, "w": w}
    if not reference:
        return _session(op, inputs, attributes)
    node = helper.make_node(op, list(inputs), ["y0"], **attributes)
    values = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in inputs.items()
    ]
    output = helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "one", values, [output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    try:
        return ReferenceEvaluator(model).run(None, inputs)
    except Exception:  # noqa: BLE001 - a refusal, as _session's
        return None


def _no_window_fits(op, x, w, attributes):
    """Whether the dilated kernel reaches past the padded input on some axis (Conv, pools)."""
    if op == "ConvTranspose" or attributes.get("auto_pad", "NOTSET") in (
        "SAME_UPPER",
        "SAME_LOWER",
    ):
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
        table, _, attrs = _slots(op, arrays, attributes)
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
        if attributes.get("auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER"):
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
    table, _, attrs = _slots("MaxPool", [x], attributes)
    status, geo = window_geometry(table, attrs, POOL)
    assert status == 0 and want.shape == (1, 1, 2, 2)
    assert list(geo[G_OUT + 1 : G_OUT + 3]) == [2, 2]


def test_window_geometry_reads_its_slots_whatever_follows_them():
    """FusedConv's slots are the window's and then its activation's: its geometry is Conv's.
    Slots one short of the window's are refused."""
    x = np.zeros((1, 4, 6, 6), dtype=np.float32)
    w = np.zeros((2, 4, 3, 3), dtype=np.float32)
    attributes = {"strides": [2, 1], "pads": [1, 0, 1, 0]}
    table, _, attrs = _slots("Conv", [x, w], attributes)
    want = window_geometry(table, attrs, CONV)
    fused_table, _, fused = _slots("FusedConv", [x, w], {**attributes, "activation": 1})
    assert fused.shape[0] > attrs.shape[0]
    got = window_geometry(fused_table, fused, CONV)
    assert got[0] == want[0] == 0 and (got[1] == want[1]).all()
    assert window_geometry(table, attrs[:-1], CONV)[0] == STATUS_OP_BAD_ATTRIBUTE


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

    table, _, _ = _slots("MaxPool", [np.zeros((1,) * len(dims), dtype=np.float32)], {})
    table[0, COL_DIMS : COL_DIMS + len(dims)] = dims
    assert element_count(table, 0) == want


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
                    for auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                        x = np.zeros((1, 1, size), dtype=np.float32)
                        attributes = {
                            "kernel_shape": [kernel],
                            "strides": [stride],
                            "dilations": [dilation],
                            "auto_pad": auto_pad,
                        }
                        table, _, attrs = _slots("MaxPool", [x], attributes)
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
    refuses it with a status (never an index past the input), and onnxruntime refuses it too
    where it checks that rule."""
    x = np.zeros(x_shape, dtype=np.float32)
    arrays = [x] if w_shape is None else [x, np.zeros(w_shape, dtype=np.float32)]
    table, _, attrs = _slots(op, arrays, attributes)
    status, _ = window_geometry(table, attrs, KINDS[op])
    assert status != 0, why


def _sized(op, x_dims, w_dims, attributes):
    """(status, geometry) of `op` on operand rows claiming `x_dims` / `w_dims` (no data: the
    geometry reads the rows' dims only)."""
    arrays = [np.zeros((1,) * len(x_dims), dtype=np.float32)]
    if w_dims is not None:
        arrays.append(np.zeros((1,) * len(w_dims), dtype=np.float32))
    table, _, attrs = _slots(op, arrays, attributes)
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
        assert geo[G_N] == 0 and list(geo[G_OUT + 1 : G_OUT + 3]) == [3, 3]
    if why == "an empty plane, padded":
        assert list(geo[G_OUT + 1 : G_OUT + 3]) == [2, 4]
    if why == "MaxPool with auto_pad and pads":  # VALID's 4 x 4, the pads ignored
        assert list(geo[G_OUT + 1 : G_OUT + 3]) == [4, 4] and not geo[G_PB : G_PB + 3].any()


# -- Slice --------------------------------------------------------------------------------------

BIG = np.iinfo(np.int64).max
SLICE_BOUNDS = [-BIG - 1, -BIG, -12, -7, -3, -2, -1, 0, 1, 2, 3, 5, 6, 7, 12, BIG]
SLICE_STEPS = [-BIG - 1, -5, -2, -1, 1, 2, 3, 7, BIG]


def _slice_case(rng):
    rank = int(rng.integers(1, 4))
    shape = tuple(int(v) for v in rng.integers(0, 7, rank))
    n = int(rng.integers(1, rank + 1))
    axes = rng.permutation(rank)[:n]
    axes = np.where(rng.random(n) < 0.3, axes - rank, axes)  # some negative axes
    starts = rng.choice(SLICE_BOUNDS, n)
    ends = rng.choice(SLICE_BOUNDS, n)
    steps = rng.choice(SLICE_STEPS, n)
    given_axes = rng.random() < 0.7  # omitted: the first n axes, n below the rank too
    given_steps = rng.random() < 0.8
    if not given_axes:
        axes = np.arange(n)
    inputs = [np.int64(starts), np.int64(ends)]
    if given_axes or given_steps:
        inputs.append(np.int64(axes) if given_axes else None)
    if given_steps:
        inputs.append(np.int64(steps))
    return shape, inputs


def test_slice_parameters_select_what_onnxruntime_slices():
    """rtsoa's (first, step, count) per axis, applied to x = arange(...).reshape(shape), pick
    exactly onnxruntime's Slice of x: starts and ends past either end, clamped per the step's
    sign, int64's extremes as bounds and steps, negative axes, omitted axes and steps."""
    rng = np.random.default_rng(20261209)
    reached = Counter()
    for _ in range(300):
        shape, inputs = _slice_case(rng)
        x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        names = ["x", "starts", "ends", "axes", "steps"]
        feed = {"x": x}
        node_inputs = ["x"]
        for name, value in zip(names[1:], inputs, strict=False):
            if value is not None:
                feed[name] = np.asarray(value, dtype=np.int64)
            node_inputs.append(name if value is not None else "")
        want, reference = _slice_session(node_inputs, feed)
        reached["judged by onnx.reference"] += reference
        table, arena, attrs = _slots("Slice", [x, *inputs], {})
        status, first, steps, counts = slice_params(arena, table, 1 + len(inputs), attrs)
        case = f"shape {shape}, starts/ends/axes/steps {inputs}"
        assert status == 0, case
        index = np.ix_(
            *[f + s * np.arange(c) for f, s, c in zip(first, steps, counts, strict=True)]
        )
        got = x[index] if x.size else np.zeros(tuple(counts), dtype=x.dtype)
        assert got.shape == want.shape, case
        np.testing.assert_array_equal(got, want, err_msg=case)
        reached["negative step"] += bool((steps < 0).any())
        reached["empty"] += got.size == 0
        reached["non-empty negative step"] += bool((steps < 0).any() and got.size > 0)
        omitted = len(inputs) < 3 or inputs[2] is None
        reached["axes omitted"] += omitted
        reached["axes omitted, fewer than the rank"] += omitted and len(inputs[0]) < len(shape)
        reached["steps omitted"] += len(inputs) < 4
    print(dict(reached))
    for branch in (
        "negative step",
        "empty",
        "non-empty negative step",
        "axes omitted",
        "steps omitted",
    ):
        assert reached[branch] >= 20, reached


def _slice_session(node_inputs, feed):
    """Slice by onnxruntime, or by onnx.reference where an end is int64's largest value with a
    negative step: onnxruntime reads that end as "past the beginning" (x = arange(4), start 3,
    end 2**63 - 1, step -1: [3, 2, 1, 0]), where the definition clamps it to the last element
    (start 3, end 3: nothing), as onnx.reference and rtsoa do."""
    while node_inputs[-1] == "":
        node_inputs.pop()
    values = [
        helper.make_tensor_value_info(
            name, TensorProto.INT64 if name != "x" else TensorProto.FLOAT, array.shape
        )
        for name, array in feed.items()
    ]
    node = helper.make_node("Slice", node_inputs, ["y"])
    graph = helper.make_graph(
        [node], "slice", values, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    steps = feed.get("steps", np.ones_like(feed["ends"]))
    if ((feed["ends"] == BIG) & (steps < 0)).any():
        return ReferenceEvaluator(model).run(None, feed)[0], True
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0], False


def test_a_negative_slice_step_from_before_the_axis_takes_element_0():
    """x = arange(6), starts -10, ends -12, step -1: the ONNX rule clamps a negative step's start
    to [0, 5] and its end to [-1, 5], so element 0 is taken (onnxruntime: [0]); numpy's rule
    (onnx.reference's) clamps the start to -1 and takes nothing."""
    x = np.arange(6, dtype=np.float32)
    inputs = [np.array([-10]), np.array([-12]), np.array([0]), np.array([-1])]
    table, arena, attrs = _slots("Slice", [x, *inputs], {})
    status, first, steps, counts = slice_params(arena, table, 5, attrs)
    assert status == 0 and (list(first), list(steps), list(counts)) == ([0], [-1], [1])


@pytest.mark.parametrize("step", [-100, -(2**62), -(2**63)], ids=["-100", "-2**62", "-2**63"])
def test_a_large_negative_slice_step_on_a_long_axis(step):
    """On 200 elements from the last, a step of -100 takes [199, 99]; the steps that would
    overflow -step are clamped to -2**62 (one element, as any step past the axis)."""
    x = np.arange(200, dtype=np.float32)
    inputs = [np.int64([-1]), np.int64([-(2**63)]), np.int64([0]), np.int64([step])]
    feed = dict(zip(["x", "starts", "ends", "axes", "steps"], [x, *inputs], strict=True))
    want, _ = _slice_session(list(feed), feed)
    table, arena, attrs = _slots("Slice", [x, *inputs], {})
    status, first, steps, counts = slice_params(arena, table, 5, attrs)
    assert status == 0
    np.testing.assert_array_equal(x[first[0] + steps[0] * np.arange(counts[0])], want)
    assert list(want) == ([199.0, 99.0] if step == -100 else [199.0])


def test_a_negative_slice_step_past_2_to_62_on_an_empty_tensor_of_a_huge_axis():
    """A (0, 2**62) tensor is empty, so any axis length is possible: from its last index by
    -2**63 (clamped to -2**62, so that -step does not overflow) is one index; a clamp at
    -2**61 would take two."""
    x = np.zeros((0, 1), dtype=np.float32)
    inputs = [np.int64([-1]), np.int64([-(2**63)]), np.int64([1]), np.int64([-(2**63)])]
    table, arena, attrs = _slots("Slice", [x, *inputs], {})
    table[0, COL_DIMS + 1] = 2**62
    status, first, steps, counts = slice_params(arena, table, 5, attrs)
    assert status == 0
    assert (first[1], steps[1], counts[1]) == (2**62 - 1, -(2**62), 1)
    assert counts[0] == 0


BAD_SLICES = [  # (x shape, starts, ends, axes, steps, why)
    ((4, 4), [0], [2], [0], [0], "a zero step"),
    ((4, 4), [0, 0], [2], None, None, "ends shorter than starts"),
    ((4, 4), [0, 0], [2, 2], [0], None, "axes shorter than starts"),
    ((4, 4), [0], [2], [0], [1, 1], "steps longer than starts"),
    ((4, 4), [0, 0], [2, 2], [0, 1], [1], "steps shorter than starts"),
    ((4, 4), [0], [2], [0, 1], None, "axes longer than starts"),
    ((4, 4), [0], [2], [3], None, "axis 3 of a rank-2 input"),
    ((4, 4), [0], [2, 2], None, None, "ends longer than starts"),
    ((4, 4), [0, 0], [2, 2], [1, 1], None, "a repeated axis"),
    ((4, 4), [0, 0], [2, 2], [1, -1], None, "an axis repeated as a negative one"),
    ((4, 4), [0], [2], [2], None, "axis 2 of a rank-2 input"),
    ((4, 4), [0], [2], [-3], None, "axis -3 of a rank-2 input"),
    ((4,), [0, 0], [2, 2], None, None, "two starts for one axis"),
]


@pytest.mark.parametrize(
    "shape, starts, ends, axes, steps, why", BAD_SLICES, ids=[c[-1] for c in BAD_SLICES]
)
def test_slice_parameters_refuse_what_onnx_forbids(shape, starts, ends, axes, steps, why):
    x = np.zeros(shape, dtype=np.float32)
    inputs = [np.int64(starts), np.int64(ends), None if axes is None else np.int64(axes)]
    if steps is not None:
        inputs.append(np.int64(steps))
    while inputs[-1] is None:
        inputs.pop()
    table, arena, attrs = _slots("Slice", [x, *inputs], {})
    status, *_ = slice_params(arena, table, 1 + len(inputs), attrs)
    assert status != 0, why


@pytest.mark.parametrize("bad", ["float32", "rank 2"])
@pytest.mark.parametrize("position", [0, 1, 2, 3], ids=["starts", "ends", "axes", "steps"])
def test_slice_list_inputs_of_another_dtype_or_rank_are_refused(position, bad):
    """Starts, ends, axes and steps are int32 / int64 lists of rank 0 or 1: another dtype is
    STATUS_OP_BAD_DTYPE and rank 2 STATUS_OP_BAD_SHAPE, for each of the four (an axes or
    steps input whose refusal went unread would slice by the defaults instead)."""
    x = np.zeros((4, 4), dtype=np.float32)
    inputs = [np.int64([0, 1]), np.int64([2, 3]), np.int64([0, 1]), np.int64([1, 1])]
    inputs[position] = (
        inputs[position].astype(np.float32) if bad == "float32" else inputs[position].reshape(1, 2)
    )
    table, arena, attrs = _slots("Slice", [x, *inputs], {})
    status, *_ = slice_params(arena, table, 5, attrs)
    assert status == (STATUS_OP_BAD_DTYPE if bad == "float32" else STATUS_OP_BAD_SHAPE)


def test_slice_without_starts_or_ends_is_a_missing_input():
    """Slice's starts and ends are required: either absent is STATUS_OP_MISSING_INPUT (not a
    length mismatch with the one given)."""
    x = np.zeros((4,), dtype=np.float32)
    for inputs in ([np.int64([0]), None], [None, np.int64([2])]):
        table, arena, attrs = _slots("Slice", [x, *inputs], {})
        status, *_ = slice_params(arena, table, 3, attrs)
        assert status == STATUS_OP_MISSING_INPUT, inputs


# -- Reduce* --------------------------------------------------------------------------------------


def test_reduced_axes_give_onnxruntimes_output_shapes():
    """The axes input (absent, empty, negative, every axis), keepdims and
    noop_with_empty_axes: the reduced flags and keepdims give onnxruntime's ReduceSum output
    shape, and the no-op flag is set exactly where onnxruntime returns the input unchanged."""
    rng = np.random.default_rng(20261210)
    reached = Counter()
    for _ in range(160):
        rank = int(rng.integers(0, 5))
        shape = tuple(int(v) for v in rng.integers(1, 4, rank))
        x = rng.standard_normal(shape).astype(np.float32)
        attributes = {}
        if rng.random() < 0.5:
            attributes["keepdims"] = int(rng.integers(0, 2))
        if rng.random() < 0.5:
            attributes["noop_with_empty_axes"] = int(rng.integers(0, 2))
        draw = rng.random()
        if draw < 0.2 or rank == 0:
            axes = None
        elif draw < 0.35:
            axes = np.zeros(0, dtype=np.int64)
        else:
            n = int(rng.integers(1, rank + 1))
            axes = rng.permutation(rank)[:n]
            axes = np.where(rng.random(n) < 0.4, axes - rank, axes).astype(np.int64)
        feed = {"x": x} if axes is None else {"x": x, "axes": axes}
        (want,) = _session("ReduceSum", feed, attributes)
        arrays = [x] if axes is None else [x, axes]
        table, arena, attrs = _slots("ReduceSum", arrays, attributes)
        status, flags, noop = reduced_axes(arena, table, len(arrays), attrs)
        case = f"shape {shape}, axes {axes}, {attributes}"
        assert status == 0, case
        keep = attributes.get("keepdims", 1) != 0
        if noop:
            reached["no-op"] += 1
            np.testing.assert_array_equal(want, x, err_msg=case)
            continue
        dims = [1 if f else d for f, d in zip(flags, shape, strict=True) if keep or not f]
        assert tuple(dims) == want.shape, case
        np.testing.assert_allclose(
            want, x.sum(axis=tuple(np.flatnonzero(flags)), keepdims=keep), rtol=1e-5, atol=1e-5
        )
        reached["keepdims 0" if not keep else "keepdims 1"] += 1
        reached["empty axes, all reduced"] += axes is not None and axes.size == 0
        reached["some axes"] += bool(0 < flags.sum() < rank)
    print(dict(reached))
    for branch in ("no-op", "keepdims 0", "keepdims 1", "empty axes, all reduced", "some axes"):
        assert reached[branch] >= 8, reached


@pytest.mark.parametrize("axes", [[1], [-1, 0], [0, 1, 2]], ids=["1", "-1,0", "all"])
def test_reduced_axes_from_the_axes_attribute(axes):
    """Before opset 18 the axes are an attribute (slots after keepdims and
    noop_with_empty_axes): onnxruntime's ReduceMax at opset 13 gives the same shape."""
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for keepdims in (0, 1):
        attributes = {"axes": axes, "keepdims": keepdims}
        (want,) = _session("ReduceMax", {"x": x}, attributes, opset=13)
        table, arena, attrs = _slots("ReduceMax", [x], attributes)
        status, flags, noop = reduced_axes(arena, table, 1, attrs)
        assert status == 0 and not noop and attrs.shape[0] > 3
        dims = [1 if f else d for f, d in zip(flags, x.shape, strict=True) if keepdims or not f]
        assert tuple(dims) == want.shape


@pytest.mark.parametrize(
    "axes, why",
    [([0, 0], "a repeated axis"), ([2], "axis 2 of rank 2"), ([3], "axis 3"), ([-3], "axis -3")],
)
def test_reduced_axes_refuse_bad_axes(axes, why):
    x = np.zeros((2, 3), dtype=np.float32)
    table, arena, attrs = _slots("ReduceSum", [x, np.int64(axes)], {})
    status, _, _ = reduced_axes(arena, table, 2, attrs)
    assert status != 0, why


@pytest.mark.parametrize(
    "op", [SUM, MEAN, MAX, MIN, PROD], ids=["sum", "mean", "max", "min", "prod"]
)
def test_reduce_loop_folds_like_numpy_with_nans_anywhere(op):
    """reduce_loop over random targets (a NaN first, in the middle or last of an output's
    elements, or none): numpy's max / min / sum / prod of each output's elements, NaN
    propagating wherever it sits (acc starts as the reduction's identity, as `reduce` sets it)."""
    rng = np.random.default_rng(op)
    fold = {SUM: np.sum, MEAN: np.sum, MAX: np.max, MIN: np.min, PROD: np.prod}[op]
    start = {SUM: 0.0, MEAN: 0.0, PROD: 1.0, MAX: -np.inf, MIN: np.inf}[op]
    for trial in range(40):
        outputs = int(rng.integers(1, 5))
        x = rng.standard_normal(int(rng.integers(outputs, 24)))
        targets = np.concatenate([np.arange(outputs), rng.integers(0, outputs, x.size - outputs)])
        rng.shuffle(targets)
        for t in range(outputs):
            mine = np.flatnonzero(targets == t)
            where = trial % 4  # first, last, anywhere, none
            if where < 3 and rng.random() < 0.7:
                pick = mine[0] if where == 0 else mine[-1] if where == 1 else rng.choice(mine)
                x[pick] = np.nan
        acc = np.full(outputs, start)
        counts = np.zeros(outputs if op in (MAX, MIN) else 0, dtype=np.int64)
        reduce_loop(op, x, targets.astype(np.int64), acc, counts)
        want = np.array([fold(x[targets == t]) for t in range(outputs)])
        np.testing.assert_allclose(acc, want, rtol=1e-12, equal_nan=True)
        if op in (MAX, MIN):
            assert list(counts) == [int((targets == t).sum()) for t in range(outputs)]


@pytest.mark.parametrize("op", [MAX, MIN], ids=["max", "min"])
def test_reduce_loop_keeps_the_first_of_equal_elements_as_onnxruntime(op):
    """Max / Min over -0.0 and +0.0 (equal): onnxruntime keeps the first one's sign (numpy the
    last's), and so does rtsoa."""
    name = "ReduceMax" if op == MAX else "ReduceMin"
    for pair in ([-0.0, 0.0], [0.0, -0.0]):
        x = np.array(pair, dtype=np.float32)
        (want,) = _session(name, {"x": x}, {"keepdims": 0})
        acc = np.full(1, -np.inf if op == MAX else np.inf)
        reduce_loop(
            op, x.astype(np.float64), np.zeros(2, dtype=np.int64), acc, np.zeros(1, np.int64)
        )
        assert acc[0] == 0 and np.signbit(acc[0]) == np.signbit(want) == np.signbit(pair[0])


INTEGER_TYPES = [
    (DType.INT64, np.int64),
    (DType.INT32, np.int32),
    (DType.INT16, np.int16),
    (DType.INT8, np.int8),
    (DType.UINT8, np.uint8),
]


@pytest.mark.parametrize("op", [MAX, MIN], ids=["max", "min"])
def test_integer_reduce_loop_starts_from_the_dtypes_bound(op):
    """An integer Max / Min starts from `_integer_bound` and takes each output's extreme, the
    dtype's own extreme included."""
    for kind, numpy_type in INTEGER_TYPES:
        info = np.iinfo(numpy_type)
        x = np.array(
            [info.min, 3, info.max, 0, -1 if info.min < 0 else 1, info.max], dtype=np.int64
        )
        targets = np.array([0, 0, 1, 1, 2, 2], dtype=np.int64)
        acc = np.full(3, _integer_bound(int(kind), op == MIN), dtype=np.int64)
        counts = np.zeros(3, dtype=np.int64)
        reduce_loop(op, x, targets, acc, counts)
        fold = np.max if op == MAX else np.min
        assert list(acc) == [fold(x[targets == t]) for t in range(3)], numpy_type


def test_integer_bounds_are_the_dtypes_extremes():
    for kind, numpy_type in INTEGER_TYPES:
        info = np.iinfo(numpy_type)
        assert _integer_bound(int(kind), True) == info.max, numpy_type
        assert _integer_bound(int(kind), False) == info.min, numpy_type
    assert (_integer_bound(int(DType.BOOL), True), _integer_bound(int(DType.BOOL), False)) == (1, 0)


@pytest.mark.parametrize("bad", ["float32", "rank 2", "two slots"])
def test_reduced_axes_refuse_an_axes_list_of_another_dtype_or_rank(bad):
    """The axes input is an int32 / int64 list of rank 0 or 1 (else STATUS_OP_BAD_DTYPE /
    STATUS_OP_BAD_SHAPE, not a reduction over the default axes); the slots are at least
    keepdims, noop_with_empty_axes and the axes."""
    x = np.zeros((2, 3), dtype=np.float32)
    axes = {"float32": np.float32([1]), "rank 2": np.int64([[1]])}.get(bad, np.int64([1]))
    table, arena, attrs = _slots("ReduceSum", [x, axes], {})
    if bad == "two slots":
        attrs = attrs[:2]
    status, _, _ = reduced_axes(arena, table, 2, attrs)
    want = {"float32": STATUS_OP_BAD_DTYPE, "rank 2": STATUS_OP_BAD_SHAPE}
    assert status == want.get(bad, STATUS_OP_BAD_ATTRIBUTE)


def test_truncate_divide_rounds_toward_zero():
    """Integer ReduceMean divides as C does (onnxruntime's rule): -7 / 2 is -3, not numpy's -4."""
    values = np.array([-7, 7, -6, 6, 0, -1, 1, -(2**63 - 1)], dtype=np.int64)
    truncate_divide(values, 2)
    assert list(values) == [-3, 3, -3, 3, 0, 0, 0, -(2**62 - 1)]
    values = np.array([-1, -3, 0, 5], dtype=np.int64)  # the mean over an axis of one
    truncate_divide(values, 1)
    assert list(values) == [-1, -3, 0, 5]
