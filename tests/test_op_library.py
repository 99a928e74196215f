"""Loading the op library (`rtsoa.ops.library`): the lock, the parallel cold compile's shares,
its argument types, and the job count's checks."""

import fcntl
import subprocess
import sys
import threading
import time
import types

import pytest

from rtsoa.ops.library import (
    _argument_types,
    _cache_directory,
    compile_jobs,
    op_functions,
    op_functions_cached,
    op_library,
)
from rtsoa.ops.registry import OPS, compiled_op_names


def test_op_functions_are_every_function_the_switch_calls_once():
    functions = op_functions()
    expected = {OPS[name].infer for name in compiled_op_names()}
    expected |= {OPS[name].compute for name in compiled_op_names()}
    assert len(functions) == len(set(functions)) == len(expected)
    assert set(functions) == expected


@pytest.mark.parametrize("jobs", [1, 2, 3, 4])
def test_the_shares_of_a_parallel_compile_cover_every_function_once(jobs):
    functions = op_functions()
    shares = [functions[share::jobs] for share in range(jobs)]
    assert sorted(map(id, sum(shares, []))) == sorted(map(id, functions))


def test_the_shares_are_compiled_for_the_types_the_switch_passes():
    """A parallel compile with other argument types than the switch's would fill the cache
    with overloads the entry never uses (and compile every op twice): once the entry has
    compiled the switch, every op function's cache index holds `_argument_types()` (what
    `op_functions_cached` reads), and the only ones."""
    op_library()
    assert op_functions_cached()
    for name in ("Add", "Conv", "Reshape"):
        for function in (OPS[name].infer, OPS[name].compute):
            index = function._cache._cache_file._load_index()
            assert [key[0] for key in index] == [_argument_types()], (name, list(index))


def test_loading_marks_the_library_warm_and_threads_share_one_module():
    results = []
    threads = [threading.Thread(target=lambda: results.append(op_library())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and all(module is results[0] for module in results)
    assert results[0].__name__ == "rtsoa.ops.entry" and results[0].entry_address() > 0


def test_a_process_waits_for_the_one_holding_the_lock():
    """While another process compiles (holds the lock), a loading process waits for it
    instead of compiling the same functions beside it."""
    op_library()  # the cache is warm: the waiting process only loads
    held = 3.0
    with open(_cache_directory() / "ops-library.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        start = time.monotonic()
        waiter = subprocess.Popen(
            [sys.executable, "-c", "from rtsoa.ops.library import op_library; op_library()"]
        )
        time.sleep(held)
        assert waiter.poll() is None  # still waiting for the lock
    assert waiter.wait(timeout=120) == 0
    assert time.monotonic() - start >= held


@pytest.mark.parametrize(
    ("value", "message"),
    [("two", "is not a whole number"), ("0", "must be at least 1"), ("-3", "must be at least 1")],
)
def test_a_bad_job_count_is_refused_naming_the_variable(monkeypatch, value, message):
    monkeypatch.setenv("RTSOA_COMPILE_JOBS", value)
    with pytest.raises(ValueError, match=f"RTSOA_COMPILE_JOBS='{value}' {message}"):
        compile_jobs()


def test_the_job_count_defaults_to_the_usable_cores_up_to_four(monkeypatch):
    monkeypatch.delenv("RTSOA_COMPILE_JOBS", raising=False)
    assert 1 <= compile_jobs() <= 4
    monkeypatch.setenv("RTSOA_COMPILE_JOBS", "7")
    assert compile_jobs() == 7


def test_no_helper_starts_when_the_op_functions_are_cached(monkeypatch):
    """A warm process loads the library without starting helper processes."""
    import rtsoa.ops.library as library

    op_library()
    monkeypatch.delitem(sys.modules, "rtsoa.ops.entry")  # as in a fresh process
    started = []
    monkeypatch.setattr(library, "parallel_compile", started.append)
    monkeypatch.setattr(library, "importlib", types.SimpleNamespace(import_module=str))
    assert library.op_library(jobs=4) == "rtsoa.ops.entry" and started == []


def test_a_helper_compiles_its_share():
    """The command a cold load starts per helper (on this warm cache it loads its share)."""
    op_library()
    done = subprocess.run(
        [sys.executable, "-m", "rtsoa.ops.library", "--share", "1", "--jobs", "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr


def test_the_command_refuses_zero_jobs():
    done = subprocess.run(
        [sys.executable, "-m", "rtsoa.ops.library", "--jobs", "0"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "--jobs must be at least 1" in done.stderr


def test_the_committed_switch_is_generated_from_the_registry():
    """rtsoa/ops/switch.py is what `python -m rtsoa.ops.generate` writes for this registry, and
    every op is reached through a group function of at most GROUP codes, not one switch whose
    prologue pays for every op's call site on every call."""
    import re

    from rtsoa.ops import generate, switch

    with open(switch.__file__) as handle:
        text = handle.read()
    assert text == generate.source(), "run python -m rtsoa.ops.generate"
    for role in ("infer", "compute"):
        groups = dict(re.findall(rf"def _{role}_(\d+)\((.*?)(?=\n\n\n|\Z)", text, re.S))
        for code, name in enumerate(compiled_op_names()):
            body = groups[str(code // generate.GROUP)]
            branch = body.split(f"code == {code}:  # {name}\n")[1].splitlines()[0]
            assert f".{getattr(OPS[name], role).py_func.__name__}(" in branch, (role, name)
        assert all(body.count("code == ") <= generate.GROUP for body in groups.values())


def test_the_entry_refuses_counts_and_codes_outside_each_ops_arity():
    """ARITY (the generated table the entry checks first) holds each op's registered counts,
    and the entry refuses one input too few or too many, and codes it does not know."""
    import numpy as np

    from rtsoa.ops import switch
    from rtsoa.ops.abi import MAX_OP_OPERANDS, MODE_INFER, STATUS_OP_ARITY, new_table
    from rtsoa.ops.entry import run_op

    arena = np.zeros(8, dtype=np.uint8)
    attrs = np.zeros(1, dtype=np.int64)
    names = compiled_op_names()
    assert switch.ARITY.shape == (len(names), 4)
    for code, name in enumerate(names):
        definition = OPS[name]
        out_high = definition.outputs[1] or MAX_OP_OPERANDS
        want = (definition.inputs[0], definition.max_inputs, definition.outputs[0], out_high)
        assert tuple(switch.ARITY[code]) == want, name
        low, high = definition.inputs[0], definition.max_inputs
        counts = [high + 1] + ([low - 1] if low > 0 else [])
        for n_in in counts:
            if n_in + definition.outputs[0] <= MAX_OP_OPERANDS:
                status = run_op(MODE_INFER, code, arena, new_table(), attrs, n_in, 1)
                assert status == STATUS_OP_ARITY, (name, n_in)
    for code in (-1, len(names), 10**6):
        assert run_op(MODE_INFER, code, arena, new_table(), attrs, 1, 1) == STATUS_OP_ARITY
