"""Suite-wide hooks.

* On CI (`CI` set to true / 1, as `.ci/run` is run) or with RTSOA_STRICT_SKIPS=1, a skipped
  test fails the run: every test must run there (gcc, which the C-baseline tests need, is
  installed by `.ci/run`). A test that may legitimately skip on CI says so with
  `@pytest.mark.may_skip_on_ci`. Locally skips are allowed and listed (`-rs` in addopts).
* The figures the fuzzers and property tests record (`figures.py`) are printed at the end.
* RTSOA_HYPOTHESIS_PROFILE=mutation: no shrinking (a mutation run needs a failure, not the
  smallest one; shrinking once took 5 minutes of a mutant's run).
* With RTSOA_PURE_PYTHON_DEVICE=1 the simulated device runs its plain-Python copies
  (`pure_python.py`; the allocator's mutation runs use it to skip compiling each mutant).
* With RTSOA_MUTATION_STAMP_FILE=PATH, rtsoa's cache stamp is read from PATH instead of hashed
  from the sources. mutation/run.sh writes the unmutated tree's stamp there; the configs whose
  mutants never reach compiled code set it (mutation/validate.toml: validate.py's plain-Python
  functions; executors.toml: its tests run the executors as plain Python), so their tests load
  the cached machine code of the jitted functions they use, which no mutant changed, instead of
  recompiling it for a stamp that changed with the mutated file (`set_package_source_stamp`
  re-stamps the functions that importing rtsoa, to reach it, defined already). No background
  op library compile then (below), nor compile helpers (RTSOA_COMPILE_JOBS=1): their
  processes would stamp the mutated sources and compile for that stamp.
* Every core: the README's command runs the suite on pytest-xdist workers (`-n auto`), one
  per core, each taking whole test files (`--dist loadfile`: a file's module fixtures are built
  once). The modules that run compute ops (`OP_LIBRARY_MODULES`) run last.
  An op's entry compiles under a lock of its own (`rtsoa.ops.library`), so two workers that
  need one op compile it once. On a cold cache, when a session runs many op modules
  (`WARMUP_MIN_MODULES`), a background process (started by the first xdist worker only)
  compiles the op library from the start (about five minutes of one core) while the other
  tests run; an op test waits on its op's lock for it, then loads the machine code from the
  disk cache. (On 2 cores under xdist it saves more than it costs: cold runs of the whole
  suite on an AVX-512 host took 665 s with it and 726 s without it, the workers' own compiles
  463 s against 553 s; in one process it is what uses the second core.)
* The fuzzers' figures (`figures.py`) recorded in xdist workers are sent to the controlling
  process with the worker's end-of-run output and printed there.
* Lowered models (`rtsoa.lowering.cache`) go to a directory of this session
  (RTSOA_LOWERED_DIR, inherited by the suite's subprocesses), not the user's cache.
"""

import os
import signal
import subprocess
import sys

import pytest
from figures import REPORTS
from hypothesis import Phase, settings

pytest_plugins = ["pytester"]  # tests/test_ci_skips.py runs pytest on small files


if os.environ.get("RTSOA_MUTATION_STAMP_FILE"):
    from rtsoa._numba.caching import set_package_source_stamp

    with open(os.environ["RTSOA_MUTATION_STAMP_FILE"]) as stamp_file:
        set_package_source_stamp(stamp_file.read().strip())
    # no compile helper processes either (rtsoa.ops.library): they would stamp the mutated
    # sources; a cold op compiles in this process, under the kept stamp, once for all mutants
    os.environ["RTSOA_COMPILE_JOBS"] = "1"

if "RTSOA_LOWERED_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["RTSOA_LOWERED_DIR"] = tempfile.mkdtemp(prefix="rtsoa-lowered-tests-")
    atexit.register(shutil.rmtree, os.environ["RTSOA_LOWERED_DIR"], True)

settings.register_profile("mutation", phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.load_profile(os.environ.get("RTSOA_HYPOTHESIS_PROFILE", "default"))


@pytest.fixture
def lowered_dir(tmp_path, monkeypatch):
    """A lowering cache of the test's own (`rtsoa.lowering.cache`), switched on."""
    directory = tmp_path / "lowered"
    monkeypatch.setenv("RTSOA_LOWERED_DIR", str(directory))
    monkeypatch.delenv("RTSOA_LOWERING_CACHE", raising=False)
    return directory


def strict_skips():
    """True where a skipped test must fail the run (CI, or RTSOA_STRICT_SKIPS=1)."""
    ci = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
    return ci or os.environ.get("RTSOA_STRICT_SKIPS") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and strict_skips()) or hasattr(report, "wasxfail"):
        return
    if item.get_closest_marker("may_skip_on_ci") is not None:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (
        f"{item.nodeid} was skipped ({reason}), but every test must run on CI; install what "
        "it needs in .ci/run or mark it may_skip_on_ci"
    )


# Test modules that load the op library (lowered models, op tests); they run last (see above).
# Ctrl-C: a suite started with SIGINT ignored (a background job, nohup, some CI runners)
# inherits SIG_IGN, which Python keeps; the tests of run interruption assume Python's default
# handler, as an interactive start has, so the process gets it whatever started it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

OP_LIBRARY_MODULES = frozenset(
    {
        "test_backend",
        "test_batch",
        "test_conformance",
        "test_constant_memory",
        "test_docs",
        "test_lowering_cache",
        "test_lowering_composed",
        "test_lowering_opsets",
        "test_lowering_reductions",
        "test_model_api",
        "test_model_cli",
        "test_model_format",
        "test_model_kept_shapes",
        "test_models",
        "test_models_control_flow",
        "test_models_quantized",
        "test_models_sequences",
        "test_op_library",
        "test_ops_activations",
        "test_ops_attention",
        "test_ops_bitcast",
        "test_ops_bitwise",
        "test_ops_copying",
        "test_ops_cumulative",
        "test_ops_detection",
        "test_ops_determinant",
        "test_ops_dtypes",
        "test_ops_einsum",
        "test_ops_flex_attention",
        "test_ops_gated",
        "test_ops_elementwise",
        "test_ops_fast_paths",
        "test_ops_grid_sample",
        "test_ops_half_precision",
        "test_ops_image",
        "test_ops_loss",
        "test_ops_math_functions",
        "test_ops_mixed_types",
        "test_ops_narrow_types",
        "test_ops_nn",
        "test_ops_normalizing",
        "test_ops_positional",
        "test_ops_quantize",
        "test_ops_recurrent",
        "test_ops_resize",
        "test_ops_rotary",
        "test_ops_scan",
        "test_ops_scatter",
        "test_ops_selection",
        "test_ops_shape",
        "test_ops_signal",
        "test_ops_spatial",
        "test_ops_spectral",
        "test_ops_table",
        "test_ops_topk",
        "test_ops_unique",
        "test_ops_winograd",
    }
)
_op_library_warmup = []  # the background process compiling the op library, if started
# The library compiles in the background only for a session running this many of the op test
# modules (the whole suite, a large part of it): a targeted run compiles just the ops it uses.
WARMUP_MIN_MODULES = 10


def _uses_op_library(item):
    return item.path.stem in OP_LIBRARY_MODULES


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=_uses_op_library)  # stable: the op tests last, each group in its order
    if config.getoption("collectonly") or not any(map(_uses_op_library, items)):
        return
    if len({item.path.stem for item in items if _uses_op_library(item)}) < WARMUP_MIN_MODULES:
        return  # a few op test files: their own ops compile faster than the whole library
    if os.environ.get("RTSOA_MUTATION_STAMP_FILE"):
        return  # its process would hash the mutated sources: a whole op library compile a mutant
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":
        return  # under xdist one worker starts it (see the module docstring)
    from rtsoa.ops import compiled_op_names
    from rtsoa.ops.library import is_compiled

    if not all(map(is_compiled, compiled_op_names())):
        _op_library_warmup.append(
            subprocess.Popen(
                [sys.executable, "-m", "rtsoa.ops", "--jobs", "1"],
                stdout=subprocess.DEVNULL,
            )
        )


def pytest_sessionfinish(session):
    for process in _op_library_warmup:
        if process.poll() is None:
            process.kill()
        process.wait()
    output = getattr(session.config, "workeroutput", None)  # set in an xdist worker only
    if output is not None:
        output["figures"] = dict(REPORTS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist, in the controlling process: a worker's fuzzer figures join the summary."""
    REPORTS.update(getattr(node, "workeroutput", {}).get("figures", {}))


def pytest_configure(config):
    if os.environ.get("RTSOA_PURE_PYTHON_DEVICE") == "1":
        from pure_python import install_device

        install_device()


def pytest_terminal_summary(terminalreporter):
    if not REPORTS:
        return
    terminalreporter.section("what the fuzzers and property tests exercised")
    for test, lines in REPORTS.items():
        terminalreporter.write_line(test)
        for line in lines:
            terminalreporter.write_line(line)
