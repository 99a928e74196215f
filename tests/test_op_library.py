"""One compiled entry per op (`rtsoa.ops.entry`), compiled when first used (`rtsoa.ops.library`).

Subprocess tests use a fresh directory of op entries (RTSOA_OPS_DIR), so the entries they need
are cold there (the op functions and executor loops stay warm in their caches).
"""

import dataclasses
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from rtsoa.errors import UnknownOpError
from rtsoa.executors import KernelError
from rtsoa.graph.schema import DType
from rtsoa.ops import host, library
from rtsoa.ops.abi import (
    MAX_OP_OPERANDS,
    MODE_COMPUTE,
    MODE_INFER,
    STATUS_OP_ARITY,
    STATUS_OP_UNKNOWN,
    new_table,
)
from rtsoa.ops.entry import arity, entry_key, entry_source
from rtsoa.ops.library import load_ops, op_address, run_op, shares
from rtsoa.ops.registry import OPS, compiled_op_names, register_op

REPO = Path(__file__).resolve().parents[1]
MLP = REPO / "datasets" / "mlp.rtsoa"
INPUTS = REPO / "datasets" / "mlp-inputs.npz"


def _python(code, cache_dir, timeout=900):
    """Run `code` in a fresh Python whose op entries live in `cache_dir`."""
    environment = dict(os.environ, RTSOA_OPS_DIR=os.fspath(cache_dir))
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_graph_compiles_only_its_own_ops_when_prepared(tmp_path):
    """mlp.rtsoa runs Gemm and MatMulBias on float32: preparing it compiles those two ops'
    float32 entries (none was compiled in this cache directory before) and nothing else."""
    code = f"""
import numpy as np
from rtsoa.ops.library import all_entries, is_compiled
from rtsoa.runtime import load_model
assert not any(map(is_compiled, all_entries()))
with load_model({os.fspath(MLP)!r}) as model:
    model.execute_sync(dict(np.load({os.fspath(INPUTS)!r})))
print(sorted(entry for entry in all_entries() if is_compiled(entry)))
"""
    assert _python(code, tmp_path).split("\n")[-2] == "['Gemm[float32]', 'MatMulBias[float32]']"


def test_an_op_without_an_entry_in_the_graphs_table_is_refused(monkeypatch):
    """A table slot left 0 (an op the graph was not prepared with) fails the run with a
    status naming it, never a call to address 0."""
    from rtsoa.graph.io import load_graph
    from rtsoa.runtime import load_model

    graph = load_graph(MLP)
    table = library.op_addresses(graph)
    used = {name for name in graph.op_names if name in ("Gemm", "MatMulBias")}
    assert len(used) == 2
    assert all((table[row] != 0) == (name in used) for row, name in enumerate(graph.op_names))

    original = library.op_addresses

    def without_matmul_bias(graph):
        table = original(graph)
        table[list(graph.op_names).index("MatMulBias")] = 0
        return table

    from rtsoa.kernels import abi as kernel_abi  # graph_arrays' name for it

    monkeypatch.setattr(kernel_abi, "op_addresses", without_matmul_bias)
    with pytest.raises(KernelError, match="op table has no entry"):
        with load_model(MLP) as model:
            model.execute_sync(dict(np.load(INPUTS)))


def test_two_processes_compiling_the_same_ops_at_once_leave_one_good_entry(tmp_path):
    command = [sys.executable, "-m", "rtsoa.ops", "--jobs", "1", "--ops", "Relu", "Neg"]
    environment = dict(os.environ, RTSOA_OPS_DIR=os.fspath(tmp_path))
    processes = [
        subprocess.Popen(command, env=environment, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for process in processes:
        assert process.wait(timeout=900) == 0, process.stderr.read()
    for name in ("Relu", "Neg"):
        assert len(list(tmp_path.glob(f"rtsoa_op_{name}_*.py"))) == 1
    code = """
import sys
import numpy as np
from rtsoa.ops.host import run_numpy
from rtsoa.ops.library import op_address
(relu,) = run_numpy("Relu", [np.array([-1.5, 0.0, 2.0], np.float32)])
(neg,) = run_numpy("Neg", [np.array([-1.5, 0.0, 2.0])])
entries = [m.entry for n, m in sys.modules.items() if n.startswith("rtsoa_op_")]
print(relu.tolist(), neg.tolist(), sorted(e.cache_hits for e in entries))
"""
    assert _python(code, tmp_path).strip() == "[0.0, 0.0, 2.0] [1.5, -0.0, -2.0] [1, 1]"


def test_the_key_follows_an_ops_registration_and_not_another_ops(monkeypatch):
    relu = OPS["Relu"]
    before = entry_key(relu)
    assert before == entry_key(relu)  # deterministic
    monkeypatch.setitem(OPS, "Sigmoid", dataclasses.replace(OPS["Sigmoid"], inputs=(1, 2)))
    assert entry_key(relu) == before
    assert entry_key(dataclasses.replace(relu, compute=OPS["Identity"].compute)) != before
    assert entry_key(dataclasses.replace(relu, inputs=(1, 2))) != before
    assert entry_key(dataclasses.replace(relu, constants=OPS["Neg"].constants)) != before


def test_an_op_of_a_family_calls_the_familys_compute_with_its_constant():
    """Relu and Neg share one compute (`unary`), told apart by their constant."""
    relu, neg = OPS["Relu"], OPS["Neg"]
    assert relu.compute is neg.compute and relu.constants != neg.constants
    source = entry_source(neg, "k")
    assert "import unary as _compute" in source
    assert f"_CONSTANT0 = {int(neg.constants[0])}\n" in source  # a literal
    assert "fattrs, _CONSTANT0, table[0, COL_DTYPE])" in source  # and input 0's dtype
    with pytest.raises(TypeError, match="constants must be integers"):
        register_op("NotAFamily", relu.infer, relu.compute, constants=(0.5,))
    assert "NotAFamily" not in OPS


def test_each_entry_refuses_counts_outside_its_ops_arity():
    arena = np.zeros(8, dtype=np.uint8)
    attrs = np.zeros(1, dtype=np.int64)
    for code, name in enumerate(compiled_op_names()):
        definition = OPS[name]
        low, high, out_low, _ = arity(definition)
        assert (low, out_low) == (definition.inputs[0], definition.outputs[0])
        counts = [high + 1] + ([low - 1] if low > 0 else [])
        for n_in in counts:
            if n_in + out_low <= MAX_OP_OPERANDS:
                status = run_op(MODE_INFER, code, arena, new_table(), attrs, n_in, out_low)
                assert status == STATUS_OP_ARITY, (name, n_in)
        status = run_op(MODE_INFER, code, arena, new_table(), attrs, low, MAX_OP_OPERANDS)
        assert status == STATUS_OP_ARITY, name  # together above MAX_OP_OPERANDS
    for code in (-1, len(compiled_op_names()), 10**6):
        with pytest.raises(ValueError, match="outside"):
            run_op(MODE_INFER, code, arena, new_table(), attrs, 1, 1)


def test_threads_loading_the_same_op_get_one_address():
    results = []
    threads = [threading.Thread(target=lambda: results.append(op_address("Abs"))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and len(set(results)) == 1 and results[0] > 0
    assert library.is_compiled("Abs")


def test_unknown_ops_are_refused_by_name():
    with pytest.raises(UnknownOpError, match="'NoSuchOp' is not registered"):
        load_ops(["Relu", "NoSuchOp"])


def test_shares_keep_an_ops_module_together():
    names = ["Add", "Sub", "Mul", "Gemm", "MatMul", "Conv"]
    split = shares(names, 2)
    assert sorted(sum(split, [])) == sorted(names)
    modules = [{OPS[n].compute.py_func.__module__ for n in share} for share in split]
    assert not modules[0] & modules[1]


def test_the_compile_command_compiles_a_models_ops(tmp_path):
    environment = dict(os.environ, RTSOA_OPS_DIR=os.fspath(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "rtsoa.cli", "compile", os.fspath(MLP), "--jobs", "2"],
        capture_output=True,
        text=True,
        timeout=900,
        env=environment,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("2 ops ready (2 compiled)")
    assert "compiling ops" not in done.stderr  # no progress bar when stderr is not a terminal
    assert len(list(tmp_path.glob("*.compiled"))) == 2


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--jobs", "0"], "--jobs must be at least 1"),
        (["--all", os.fspath(MLP)], "give --all or models, not both"),
        (["no-such-model.onnx"], "no such file"),
    ],
)
def test_the_command_refuses_bad_arguments(arguments, message):
    done = subprocess.run(
        [sys.executable, "-m", "rtsoa.cli", "compile", *arguments], capture_output=True, text=True
    )
    assert done.returncode == 1 and message in done.stderr


def test_cache_info_counts_the_op_entries_and_their_machine_code(tmp_path):
    """`rtsoa cache info` lists the op entries with the Numba files of their machine code,
    wherever Numba's locators put those (here under NUMBA_CACHE_DIR when it is set)."""
    code = """
import json
from rtsoa import caches
from rtsoa.ops.library import entries_numba_dir, op_address
op_address("Relu")
row = next(row for row in caches.info() if row["name"] == "ops")
names = [path.name for path in caches.entries("ops")]
machine = list(entries_numba_dir().glob("rtsoa_op_Relu_*.nb[ic]"))
print(json.dumps([row["entries"], row["bytes"], len(machine), names]))
"""
    entries, size, machine, names = json.loads(_python(code, tmp_path).splitlines()[-1])
    assert machine >= 2 and entries >= 3 + machine and size > 0
    suffixes = {name.rsplit(".", 1)[1] for name in names if name.startswith("rtsoa_op_Relu_")}
    assert {"py", "compiled", "lock"} <= suffixes


def test_loads_and_compiles_run_inside_the_compile_hooks(monkeypatch):
    """`on_entry_loads(pause, resume)` brackets loading entries new to the process, compiling the
    cold ones (a batch worker's --timeout clock stops there); entries this process holds
    already are returned without it."""
    events = []
    compiled = set()

    def fake_load(name):
        events.append(("load", name, name not in compiled))
        compiled.add(name)
        return 1

    monkeypatch.setattr(library, "_addresses", {})
    monkeypatch.setattr(library, "_load", fake_load)
    monkeypatch.setattr(library, "is_compiled", lambda name: name in compiled)
    library.on_entry_loads(lambda: events.append("pause"), lambda: events.append("resume"))
    try:
        load_ops(["Relu", "Sigmoid"], jobs=1)
        assert events == ["pause", ("load", "Relu", True), ("load", "Sigmoid", True), "resume"]
        events.clear()
        monkeypatch.setattr(library, "_addresses", {})
        load_ops(["Relu"], jobs=1)  # compiled before, new to the process: loaded in the hooks
        assert events == ["pause", ("load", "Relu", False), "resume"]
        events.clear()
        load_ops(["Relu"], jobs=1)  # held already: nothing to load, no hooks
        assert events == []
    finally:
        library.on_entry_loads(None, None)


def test_lowering_compiles_shape_inference_alone_where_fusion_replaces_the_op(tmp_path):
    """datasets/mlp.onnx (MatMul -> Add -> Relu twice, then a Gemm) lowers to MatMulBias and
    Gemm. On a cold cache lowering compiles the infer-only entries of the model's ops, and no
    compute (nothing folds); loading the lowered graph compiles the two ops it runs, and the
    run matches onnxruntime."""
    model = REPO / "datasets" / "mlp.onnx"
    code = f"""
import numpy as np
from rtsoa.lowering import lower
from rtsoa.ops.library import all_entries, infer_entry, is_compiled
from rtsoa.ops.registry import OPS
from rtsoa.runtime import InferenceSession
from rtsoa.testing.models import run_onnxruntime
graph = lower({os.fspath(model)!r})
print(sorted(entry for entry in all_entries() if is_compiled(entry)))
print(sorted(name for name in OPS if is_compiled(infer_entry(name))))
feeds = dict(np.load({os.fspath(INPUTS)!r}))
with InferenceSession(graph) as session:
    got = session.execute_sync(feeds)
print(sorted(entry for entry in all_entries() if is_compiled(entry)))
import onnx
want = run_onnxruntime(onnx.load({os.fspath(model)!r}), feeds)
np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-6)
"""
    lines = _python(code, tmp_path).splitlines()[-3:]
    assert lines[0] == "[]"
    assert lines[1] == "['Add', 'Gemm', 'MatMul', 'Relu']"
    assert lines[2] == "['Gemm[float32]', 'MatMulBias[float32]']"


def test_an_infer_only_entry_infers_and_refuses_to_compute():
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    op, attrs, table, arena = host._prepare("Relu", [x], {}, 1)
    code = compiled_op_names().index("Relu")
    entry = library.infer_entry("Relu")
    assert library._parse(entry)[0].name == "Relu" and entry == "Relu:infer"
    assert run_op(MODE_INFER, code, arena, table, attrs, 1, 1, entry) == 0
    assert tuple(table[1, 4:6]) == (2, 3)
    assert run_op(MODE_COMPUTE, code, arena, table, attrs, 1, 1, entry) == STATUS_OP_UNKNOWN
    # where the op's full entry is loaded, shape inference runs it: no compile of its own
    (got,) = host.run_numpy("Relu", [x])
    np.testing.assert_array_equal(got, np.maximum(x, 0))
    chosen = library.entry_for("Relu", {int(DType.FLOAT32)})
    assert library.entry_for_infer("Relu", {int(DType.FLOAT32)}) == chosen
    with pytest.raises(UnknownOpError):
        load_ops(["NoSuchOp:infer"])
