"""Per-dtype op entries: a variant computes what the op's generic entry computes, refuses a
table of another dtype, and is the entry a graph or a fold runs where its dtype is the one
used; literal arguments prune the branches the variant does not take."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rtsoa import _jit
from rtsoa.abi.dtypes import DType, dtype_code
from rtsoa.errors import UnknownOpError
from rtsoa.ops import library
from rtsoa.ops.abi import STATUS_OP_BAD_DTYPE
from rtsoa.ops.entry import entry_source
from rtsoa.ops.host import OpError, run_numpy
from rtsoa.ops.registry import OPS, register_op

REPO = Path(__file__).resolve().parent.parent
RNG = np.random.default_rng(7)


def _data(dtype, shape):
    if dtype == np.bool_:
        return RNG.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return RNG.integers(max(info.min, -100), min(info.max, 100), shape).astype(dtype)
    data = RNG.standard_normal(shape).astype(dtype)
    data.flat[0] = np.nan  # NaN handling must not differ either
    return data


# (op, input shapes, dtype, attributes): each family and dtype path of the variant ops once
CASES = [
    ("Add", [(3, 4), (4,)], np.float32, None),  # periodic path
    ("Add", [(3, 1), (1, 4)], np.int64, None),  # index-mapped integer path
    ("Div", [(2, 5), (2, 5)], np.int8, None),  # small-integer division
    ("Max", [(6,), (6,), (1,)], np.float16, None),  # variadic float16 select
    ("Pow", [(5,), (5,)], np.float64, None),
    ("Equal", [(4,), (4,)], np.bool_, None),
    ("Less", [(2, 3), (3,)], np.uint8, None),
    ("Relu", [(7,)], np.int32, None),
    ("LeakyRelu", [(7,)], np.float64, {"alpha": 0.2}),
    ("Tanh", [(7,)], np.float32, None),
    ("MatMul", [(2, 3, 4), (4, 5)], np.int32, None),
    ("MatMul", [(40, 30), (30, 20)], np.float32, None),  # the BLAS path
    ("Gemm", [(3, 4), (5, 4), (5,)], np.float64, {"transB": 1, "alpha": 0.5, "beta": 2.0}),
    ("MatMulBias", [(3, 4), (4, 6), (6,)], np.float32, {"activation": 1}),
    ("Conv", [(1, 2, 5, 5), (3, 2, 3, 3), (3,)], np.float32, {"pads": [1, 1, 1, 1]}),
    ("ConvTranspose", [(1, 2, 3, 3), (2, 3, 2, 2)], np.float64, {"strides": [2, 2]}),
    ("FusedConv", [(1, 2, 4, 4), (2, 2, 1, 1), (2,), (1, 2, 4, 4)], np.float64, {"activation": 1}),
    ("MaxPool", [(1, 2, 5, 5)], np.float64, {"kernel_shape": [2, 2], "ceil_mode": 1}),
    ("AveragePool", [(1, 2, 5, 5)], np.float32, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("GlobalAveragePool", [(1, 3, 4, 4)], np.float32, None),
    ("GlobalMaxPool", [(2, 3, 3)], np.float64, None),
    ("PRelu", [(2, 3), (3,)], np.float64, None),
    ("Clip", [(6,), (), ()], np.float32, None),
    ("Selu", [(5,)], np.float32, None),
    ("Softmax", [(2, 5)], np.float32, None),
    ("LogSoftmax", [(3, 4)], np.float64, {"axis": 0}),
]


def _key(case):
    name, _, dtype, _ = case
    return f"{name}-{np.dtype(dtype).name}"


@pytest.mark.parametrize("case", CASES, ids=_key)
def test_a_variant_computes_what_the_generic_entry_computes(case):
    name, shapes, dtype, attributes = case
    inputs = [_data(dtype, shape) for shape in shapes]
    if name == "Pow":
        inputs[1] = np.abs(inputs[1])
    kind = dtype_code(dtype)
    variant = library.entry_id(name, kind)
    (generic,) = run_numpy(name, inputs, attributes, entry=name)
    (own,) = run_numpy(name, inputs, attributes, entry=variant)
    assert own.dtype == generic.dtype and own.shape == generic.shape
    assert own.tobytes() == generic.tobytes()  # bit for bit, NaN and -0 included
    module = sys.modules[library._files(variant)[0]]
    assert module._KIND == int(kind) and module.OP == name


def test_a_variant_refuses_a_table_of_another_dtype():
    x = np.arange(6, dtype=np.float32)
    with pytest.raises(OpError) as caught:
        run_numpy("Add", [x, x], entry="Add[float64]")
    assert caught.value.status == STATUS_OP_BAD_DTYPE
    with pytest.raises(ValueError, match="not an entry of op 'Sub'"):
        run_numpy("Sub", [x, x], entry="Add[float32]")


@pytest.mark.parametrize(
    "entry, message",
    [
        ("Add[float128]", "not an rtsoa dtype"),
        ("Add[float16]", "takes no float16 input 0"),  # Add has no float16 in its dtypes
        ("Identity[float32]", "has no per-dtype entries"),
        ("NoSuchOp[float32]", "not registered"),
    ],
)
def test_entries_that_do_not_exist_are_refused_by_name(entry, message):
    with pytest.raises(UnknownOpError, match=message):
        library.load_ops([entry])


def test_the_variant_source_passes_its_dtype_as_a_literal():
    add = OPS["Add"]
    source = entry_source(add, "k", DType.INT64)
    assert "_KIND = 7  # int64" in source
    assert "if table[0, COL_DTYPE] != _KIND:" in source
    assert "fattrs, _CONSTANT0, _KIND)" in source
    assert entry_source(add, "k") != source


def test_entry_for_prefers_what_is_compiled(monkeypatch):
    compiled = set()
    monkeypatch.setattr(library, "_addresses", {})
    monkeypatch.setattr(library, "is_compiled", lambda entry: entry in compiled)
    f32, i64 = int(DType.FLOAT32), int(DType.INT64)
    assert library.entry_for("Add", [f32]) == "Add[float32]"  # cold: the smaller compile
    assert library.entry_for("Add", [f32, i64]) == "Add"  # two dtypes: one entry for both
    assert library.entry_for("Add", []) == "Add"  # dtype unknown
    assert library.entry_for("Add", [-1]) == "Add"
    assert library.entry_for("Add", [int(DType.FLOAT16)]) == "Add"  # refused by the op itself
    assert library.entry_for("Identity", [f32]) == "Identity"  # no variants
    compiled.add("Add")
    assert library.entry_for("Add", [f32]) == "Add"  # a warm generic entry is used as it is
    compiled.add("Add[float32]")
    assert library.entry_for("Add", [f32]) == "Add[float32]"


def test_a_graph_runs_one_variant_per_op_unless_the_op_has_two_dtypes(tmp_path):
    """x (float32) and n (int64) both go through Add: that op row gets the generic entry, the
    float32-only Relu its variant; Sub's input 0 is a weight, whose block holds raw bytes:
    its dtype comes from the weight's shape value, and the model computes what numpy does."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from rtsoa.graph.op_table import op_rows
    from rtsoa.lowering import lower
    from rtsoa.runtime import InferenceSession

    weight = np.array([0.5, -2.0, 3.0], dtype=np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "x"], ["a"]),
            helper.make_node("Relu", ["a"], ["r"]),
            helper.make_node("Sub", ["w", "r"], ["y"]),
            helper.make_node("Add", ["n", "n"], ["m"]),
        ],
        "two_dtypes",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("n", TensorProto.INT64, [3]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("m", TensorProto.INT64, [3]),
        ],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    lowered = lower(model)
    nodes, rows = op_rows(lowered)
    kinds = library._launch_kinds(lowered, nodes, rows)
    by_name = {lowered.op_names[row]: sorted(found) for row, found in kinds.items()}
    f32, i64 = int(DType.FLOAT32), int(DType.INT64)
    assert by_name == {"Add": [f32, i64], "Relu": [f32], "Sub": [f32]}
    entries = library.graph_entries(lowered)
    entries = {lowered.op_names[row]: entry for row, entry in entries.items()}
    assert entries["Add"] == "Add"
    assert entries["Sub"] in ("Sub", "Sub[float32]")  # never a variant of the bytes' dtype
    table = library.op_addresses(lowered)
    relu = list(lowered.op_names).index("Relu")
    assert table[relu] == library.op_address(entries["Relu"])
    x = np.array([-1.0, 2.0, 0.25], dtype=np.float32)
    n = np.array([1, -2, 3], dtype=np.int64)
    with InferenceSession(lowered) as session:
        y, m = session.run(["y", "m"], {"x": x, "n": n})
    np.testing.assert_array_equal(y, weight - np.maximum(x + x, 0))
    np.testing.assert_array_equal(m, n + n)


_PRUNED = """
import numba
from rtsoa._jit import jit_with_nrt

@jit_with_nrt.keeping_literals("op")
def pick(op, x):
    if op == 0:
        return x + 1
    return x.no_such_attribute  # a typing error, unless this branch is pruned

@numba.njit
def caller(x):
    return pick(0, x)
"""


def test_literal_arguments_prune_the_branches_not_taken(tmp_path):
    """A branch on a literal argument that is not taken is never typed (here it could not be);
    without the pass (Numba's patches off) it is, and the compile fails. And Relu's float32
    entry compiles the unary loop for float32 only, not for every dtype branch of `unary`."""
    (tmp_path / "pruned.py").write_text(_PRUNED)
    code = """
import numpy as np
from rtsoa.ops.elementwise_loops import unary_loop
from rtsoa.ops.host import run_numpy
(y,) = run_numpy("Relu", [np.array([-1.5, 0.0, 2.0], np.float32)], entry="Relu[float32]")
print(y.tolist(), [str(signature[1].dtype) for signature in unary_loop.signatures])
import pruned
print(pruned.caller(41))
"""
    outputs = {}
    for patches in ("on", "off"):
        environment = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([os.fspath(tmp_path), os.fspath(REPO)]),
            RTSOA_NUMBA_PATCHES=patches,
            RTSOA_CACHE_DIR=os.fspath(tmp_path / patches),
            NUMBA_CACHE_DIR=os.fspath(tmp_path / patches / "numba"),
        )
        outputs[patches] = subprocess.run(
            [sys.executable, "-c", code],
            env=environment,
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=600,
        )
    on, off = outputs["on"], outputs["off"]
    assert on.returncode == 0, on.stderr
    assert on.stdout.split("\n")[:2] == ["[0.0, 0.0, 2.0] ['float32']", "42"]
    assert off.returncode != 0 and "no_such_attribute" in off.stderr
    first = off.stdout.split("\n")[0]
    assert first == "[0.0, 0.0, 2.0] ['float32', 'float64', 'int64', 'int32']", off.stderr


def test_keeping_literals_names_real_parameters_of_wrapperless_profiles():
    with pytest.raises(ValueError, match="no parameter"):

        @_jit.jit_with_nrt.keeping_literals("nope")
        def f(x):
            return x

    with pytest.raises(ValueError, match="wrapper-less"):
        _jit.jit_inline_ir.keeping_literals("x")


def test_variants_need_the_dtypes_of_input_0_and_a_compute_that_takes_them():
    relu = OPS["Relu"]
    with pytest.raises(ValueError, match="dtypes of input 0"):
        register_op("NoDtypes", relu.infer, relu.compute, constants=(0,), variants=True)
    # `unary` takes the op and the dtype after the six: without variants it would be called
    # with one argument short
    with pytest.raises(TypeError, match="takes 8 arguments, its entry passes 7"):
        register_op("NoKind", relu.infer, relu.compute, constants=(0,), dtypes=relu.dtypes)
    with pytest.raises(TypeError, match="takes 6 arguments, its entry passes 7"):
        identity = OPS["Identity"]
        register_op("Kinded", identity.infer, identity.compute, dtypes=relu.dtypes, variants=True)
    assert not {"NoDtypes", "NoKind", "Kinded"} & set(OPS)
