"""The lowering's MatMul -> Add (-> Relu) fusion (rtsoa/lowering/fuse.py, op MatMulBias).

A fused chain must give the unfused ops' results bit for bit (the same float operations in the
same order) and onnxruntime's within the model tests' tolerance; a chain whose result could
differ (a bias that broadcasts, an intermediate read elsewhere or returned, integer or 1-D
operands) is left as the model has it.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.ops.host import OpError, infer_shapes, run_numpy
from rtsoa.testing.models import FLOAT, mlp, model, run_onnxruntime
from tests.model_checks import check_fusion

INT64 = TensorProto.INT64


def _check(proto, inputs, fused_ops):
    """Lower with and without fusion: the fused graph has `fused_ops` MatMulBias ops, both give
    the same bits, and onnxruntime's values."""
    return check_fusion(proto, inputs, "MatMulBias", fused_ops)


def test_the_mlp_runs_one_op_per_layer_at_every_batch_size():
    proto = mlp(seed=3, features=16, hidden=16, classes=4, layers=5)
    rng = np.random.default_rng(0)
    for batch in (1, 4, 300):  # 300 x 16 x 16 goes to BLAS, the others to the loop
        x = rng.standard_normal((batch, 16)).astype(np.float32)
        counts = _check(proto, {"x": x}, fused_ops=5)
        assert set(counts) == {"MatMulBias", "Gemm"}


def _chain(a_dims, w, bias, *, bias_first=False, relu=True, extra_outputs=(), extra_nodes=()):
    """x @ w + bias (-> Relu) as a model with input x of dims `a_dims`."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"])]
    add_inputs = ["b", "m"] if bias_first else ["m", "b"]
    nodes.append(helper.make_node("Add", add_inputs, ["a"]))
    last = "a"
    if relu:
        nodes.append(helper.make_node("Relu", ["a"], ["r"]))
        last = "r"
    nodes += list(extra_nodes)
    elem = TensorProto.DOUBLE if w.dtype == np.float64 else FLOAT
    outputs = [(last, elem, None)] + [(name, elem, None) for name in extra_outputs]
    inits = [("w", w)]
    inputs = [("x", elem, list(a_dims))]
    if isinstance(bias, str):
        inputs.append(("b", elem, [w.shape[1]]))
    else:
        inits.append(("b", bias))
    return model(nodes, inputs, outputs, inits)


RNG = np.random.default_rng(7)
W = RNG.standard_normal((8, 5)).astype(np.float32)
B = RNG.standard_normal(5).astype(np.float32)


def _x(*dims, dtype=np.float32):
    return {"x": RNG.standard_normal(dims).astype(dtype)}


@pytest.mark.parametrize(
    "a_dims, x_dims, bias, bias_first, relu",
    [
        (["batch", 8], (3, 8), B, False, True),
        (["batch", 8], (3, 8), B, True, True),  # Add(bias, product)
        (["batch", 8], (3, 8), B.reshape(1, 5), False, False),  # no Relu, bias [1, n]
        ([2, "seq", 8], (2, 6, 8), B.reshape(1, 1, 5), False, True),  # batched A, rank-3 bias
        (["batch", 8], (2, 8), np.float32(0.5).reshape(()), False, True),  # scalar, one column
    ],
)
def test_fused_chains_equal_the_ops_they_replace(a_dims, x_dims, bias, bias_first, relu):
    w = W
    if bias.size == 1:  # a scalar bias fuses only where the product has one column
        w = W[:, :1].copy()
    proto = _chain(a_dims, w, bias, bias_first=bias_first, relu=relu)
    _check(proto, _x(*x_dims), fused_ops=1)


def test_relu_of_infinities_and_nan_is_relus():
    w = np.eye(4, dtype=np.float32)
    bias = np.zeros(4, dtype=np.float32)
    proto = _chain(["batch", 4], w, bias)
    x = np.array([[np.inf, -np.inf, np.nan, -1.0], [2.0, -0.0, 0.0, -3.0]], dtype=np.float32)
    # inf @ eye: inf * 0 is NaN in the other columns, as numpy and onnxruntime have it
    _check(proto, {"x": x}, fused_ops=1)


def test_float64_chains_fuse():
    proto = _chain(["batch", 8], W.astype(np.float64), B.astype(np.float64))
    _check(proto, _x(3, 8, dtype=np.float64), fused_ops=1)


@pytest.mark.parametrize(
    "case",
    [
        "product is returned",
        "sum is returned",
        "product read twice",
        "bias is an input",
        "bias broadcasts rows",
        "bias of rank above A's",
        "A of rank 1",
    ],
)
def test_chains_whose_result_could_differ_are_not_fused(case):
    a_dims, x_dims, bias, extra_outputs, extra_nodes = ["batch", 8], (3, 8), B, (), ()
    relu_fused = False
    if case == "product is returned":
        extra_outputs = ("m",)
    elif case == "sum is returned":  # MatMul + Add fuse; the Relu stays apart
        extra_outputs = ("a",)
        relu_fused = True
    elif case == "product read twice":
        extra_nodes = (helper.make_node("Neg", ["m"], ["n"]),)
        extra_outputs = ("n",)
    elif case == "bias is an input":
        bias = "input"
    elif case == "bias broadcasts rows":  # [3, 5]: not a bias of the product's columns
        bias = RNG.standard_normal((3, 5)).astype(np.float32)
    elif case == "bias of rank above A's":  # [1, 1, 5] makes the sum rank 3
        bias = B.reshape(1, 1, 5)
    elif case == "A of rank 1":
        a_dims, x_dims = [8], (8,)
    proto = _chain(a_dims, W, bias, extra_outputs=extra_outputs, extra_nodes=extra_nodes)
    inputs = _x(*x_dims)
    if isinstance(bias, str):
        inputs["b"] = RNG.standard_normal(5).astype(np.float32)
    counts = _check(proto, inputs, fused_ops=1 if relu_fused else 0)
    if relu_fused:
        assert counts.get("Relu") == 1 and "MatMul" not in counts and "Add" not in counts
    else:
        assert counts.get("MatMul") == 1 and counts.get("Add") == 1


W_ROW = RNG.standard_normal((1, 5)).astype(np.float32)  # a [1, 5] constant: a 2-D "W"


@pytest.mark.parametrize(
    "case",
    [
        "Mul heads the chain",  # names around "MatMul": the op test must be equality
        "Div heads the chain",
        "product scaled, not added",
        "sum then Sigmoid",
        "A of unknown rank",
        "W an input of unknown shape",
        "W of rank 3",
        "W a vector",
    ],
)
def test_only_a_matmul_add_relu_chain_with_known_operands_fuses(case):
    """Chains that look like MatMul -> Add -> Relu but are not one, or whose operands' ranks
    are unknown or not those MatMulBias computes: left as the model has them (only a true
    MatMul -> Add fuses, and only a Relu joins it)."""
    relu = helper.make_node("Relu", ["a"], ["y"])
    inputs = [("x", FLOAT, ["batch", 8])]
    inits = [("w", W), ("b", B)]
    feed = _x(3, 8)
    fused_ops = 0
    if case in ("Mul heads the chain", "Div heads the chain"):
        head = helper.make_node(case.split()[0], ["x", "w"], ["m"])
        nodes = [head, helper.make_node("Add", ["m", "b"], ["a"]), relu]
        inputs, inits, feed = [("x", FLOAT, ["batch", 5])], [("w", W_ROW), ("b", B)], _x(3, 5)
    elif case == "product scaled, not added":
        nodes = [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Mul", ["m", "b"], ["y"]),
        ]
    elif case == "sum then Sigmoid":
        nodes = [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["a"]),
            helper.make_node("Sigmoid", ["a"], ["y"]),
        ]
        fused_ops = 1
    else:
        nodes = [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["a"]),
            relu,
        ]
        if case == "A of unknown rank":
            inputs = [("x", FLOAT, None)]
        elif case == "W an input of unknown shape":
            inputs.append(("w", FLOAT, None))
            inits = [("b", B)]
            feed["w"] = W
        elif case == "W of rank 3":  # a batched product: [2, s, 5] @ [2, 5, 5]
            inputs = [("x", FLOAT, [2, "seq", 5])]
            inits = [("w", RNG.standard_normal((2, 5, 5)).astype(np.float32)), ("b", B)]
            feed = _x(2, 4, 5)
        else:  # [batch, 8] @ [8]: a product of rank 1, plus a scalar
            inits = [("w", W[:, 0].copy()), ("b", np.float32(0.5).reshape(()))]
    proto = model(nodes, inputs, [("y", FLOAT, None)], inits)
    counts = _check(proto, feed, fused_ops=fused_ops)
    if case == "sum then Sigmoid":
        assert counts.get("Sigmoid") == 1 and "Relu" not in counts


def test_integer_chains_are_not_fused():
    w = np.arange(6, dtype=np.int64).reshape(3, 2)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["y"]),
    ]
    proto = model(
        nodes,
        [("x", INT64, ["batch", 3])],
        [("y", INT64, None)],
        [("w", w), ("b", np.array([1, -2], np.int64))],
    )
    _check(proto, {"x": np.arange(6, dtype=np.int64).reshape(2, 3)}, fused_ops=0)


def test_matmul_bias_refuses_operands_it_cannot_compute():
    a = np.ones((2, 3), np.float32)
    w = np.ones((3, 4), np.float32)
    bias = np.ones(4, np.float32)
    (out,), flops = infer_shapes("MatMulBias", [a, w, bias])
    assert out.dims == (2, 4) and flops == (2 * 3 + 1) * 8
    np.testing.assert_array_equal(run_numpy("MatMulBias", [a, w, bias])[0], a @ w + bias)
    refused = [
        [a, w, np.ones(3, np.float32)],  # bias of the wrong size
        [a, w, np.ones((2, 4), np.float32)],  # a bias over rows
        [np.ones(3, np.float32), w, bias],  # A of rank 1
        [a, np.ones((3, 4, 1), np.float32), bias],  # W not 2-D
        [a, np.ones((2, 4), np.float32), bias],  # inner dims differ
        [a.astype(np.float64), w, bias],  # mixed dtypes
        [a.astype(np.int64), w.astype(np.int64), bias.astype(np.int64)],  # integers
    ]
    for inputs in refused:
        with pytest.raises(OpError):
            infer_shapes("MatMulBias", inputs)
    with pytest.raises(OpError):
        infer_shapes("MatMulBias", [a, w, bias], {"activation": 7})


def test_small_matmul_keeps_infinities_of_its_first_element():
    """The loop product started its sums from a[0] - a[0], NaN where a[0] is infinite."""
    a = np.array([[np.inf, 1.0], [2.0, -np.inf]], np.float32)
    b = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    want = np.array([[np.inf, np.inf], [-np.inf, -np.inf]], np.float32)
    np.testing.assert_array_equal(run_numpy("MatMul", [a, b])[0], want)
    bias = np.zeros(2, np.float32)
    np.testing.assert_array_equal(run_numpy("MatMulBias", [a, b, bias])[0], want)


def test_relu_after_a_nan_or_infinite_first_element():
    """Relu's zero was x[0] - x[0]: every negative element became NaN after a NaN or an
    infinite first one. NaN and -0 stay as onnxruntime's Relu leaves them."""
    for first in (np.nan, np.inf, -np.inf):
        x = np.array([first, -3.0, 2.0, -0.0, 0.0], np.float32)
        got = run_numpy("Relu", [x])[0]
        proto = model(
            [helper.make_node("Relu", ["x"], ["y"])], [("x", FLOAT, [5])], [("y", FLOAT, [5])]
        )
        want = run_onnxruntime(proto, {"x": x})["y"]
        np.testing.assert_array_equal(got, want)
        assert np.signbit(got[3]) == np.signbit(want[3])


def _region_reading(product, kind):
    """An If (on input c) or a Loop (M iterations) whose subgraph reads `product` from the
    enclosing scope: If gives product * 2 or -product, Loop adds product to its carried value
    (started at the sum `a`) each iteration."""
    if kind == "If":
        then_branch = helper.make_graph(
            [helper.make_node("Add", [product, product], ["doubled"])],
            "then",
            [],
            [helper.make_tensor_value_info("doubled", FLOAT, None)],
        )
        else_branch = helper.make_graph(
            [helper.make_node("Neg", [product], ["negated"])],
            "else",
            [],
            [helper.make_tensor_value_info("negated", FLOAT, None)],
        )
        return helper.make_node(
            "If", ["c"], ["region"], then_branch=then_branch, else_branch=else_branch
        )
    body = helper.make_graph(
        [
            helper.make_node("Add", ["carried_in", product], ["carried_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("carried_in", FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("carried_out", FLOAT, None),
        ],
    )
    return helper.make_node("Loop", ["M", "", "a"], ["region"], body=body)


@pytest.mark.parametrize(
    "kind, region_first",
    [("If", False), ("If", True), ("Loop", False)],  # a Loop starting from `a` follows the Add
)
def test_a_product_an_if_or_loop_also_reads_is_not_fused(kind, region_first):
    """The product of a MatMul -> Add chain is read by an If branch / a Loop body too (an
    outer read of the region): fusing would drop the tensor the region reads, so the chain is
    kept as two ops whichever of the Add and the region comes first."""
    matmul = helper.make_node("MatMul", ["x", "w"], ["m"])
    add = helper.make_node("Add", ["m", "b"], ["a"])
    region = _region_reading("m", kind)
    nodes = [matmul, region, add] if region_first else [matmul, add, region]
    inputs = [("x", FLOAT, ["batch", 8])]
    inputs.append(("c", TensorProto.BOOL, []) if kind == "If" else ("M", INT64, []))
    proto = model(
        nodes, inputs, [("a", FLOAT, None), ("region", FLOAT, None)], [("w", W), ("b", B)]
    )
    for value in (True, False) if kind == "If" else (0, 3):
        feeds = _x(3, 8)
        feeds["c" if kind == "If" else "M"] = np.array(value, bool if kind == "If" else np.int64)
        counts = _check(proto, feeds, fused_ops=0)
        assert counts.get("MatMul") == 1 and counts.get("Add", 0) >= 1


def test_a_chain_that_cannot_fuse_does_not_stop_the_chains_after_it():
    """The fusion walks every call: an op that is no MatMul, a MatMul of an operand of unknown
    shape, one of integers, one of a symbolic column count, one read by no Add and one whose
    Add is no bias come first, each left as it is, and
    the true chain after them still fuses (a loop that stopped at the first miss would leave
    it)."""
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"]),  # no MatMul
        helper.make_node("MatMul", ["s", "w_in"], ["m0"]),  # W of unknown shape
        helper.make_node("Add", ["m0", "b"], ["a0"]),
        helper.make_node("MatMul", ["xi", "wi"], ["m1"]),  # integers
        helper.make_node("MatMul", ["s", "w_cols"], ["m4"]),  # W's columns symbolic
        helper.make_node("Add", ["m4", "b"], ["a4"]),
        helper.make_node("MatMul", ["s", "w"], ["m5"]),  # scaled, not added
        helper.make_node("Mul", ["m5", "b"], ["p5"]),
        helper.make_node("MatMul", ["s", "w"], ["m2"]),  # its Add's other operand is no bias
        helper.make_node("Add", ["m2", "full"], ["a2"]),
        helper.make_node("MatMul", ["s", "w"], ["m3"]),  # the one chain that fuses
        helper.make_node("Add", ["m3", "b"], ["a3"]),
        helper.make_node("Relu", ["a3"], ["y"]),
    ]
    full = RNG.standard_normal((3, 5)).astype(np.float32)
    wi = RNG.integers(-3, 4, (8, 5)).astype(np.int32)
    inits = [("w", W), ("b", B), ("wi", wi), ("full", full)]
    inputs = [("x", FLOAT, [3, 8]), ("w_in", FLOAT, None), ("xi", TensorProto.INT32, [3, 8])]
    inputs.append(("w_cols", FLOAT, [8, "n"]))
    outputs = [(name, FLOAT, None) for name in ("a0", "a2", "a4", "p5", "y")]
    outputs.insert(1, ("m1", TensorProto.INT32, None))
    proto = model(nodes, inputs, outputs, inits)
    xi = RNG.integers(-3, 4, (3, 8)).astype(np.int32)
    feed = {"x": _x(3, 8)["x"], "w_in": W, "xi": xi, "w_cols": W}
    counts = _check(proto, feed, fused_ops=1)
    assert counts.get("MatMul") == 5 and counts.get("Add") == 3
