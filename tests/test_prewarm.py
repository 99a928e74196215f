"""A cold `rtsoa run` of a graph that calls the device compiles on two processes
(rtsoa/prewarm.py): this one the device functions, a helper the validation, binding and order.
One test pays a real cold compile (fresh Numba and rtsoa caches, ~15 s on two cores)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rtsoa.graph.generators import generate
from rtsoa.graph.io import save_graph
from rtsoa.kernels import expected_checksum
from rtsoa.prewarm import HELPER_TIMEOUT, cold_start, finish, uses_device


def _cli(argv, env, timeout=600):
    done = subprocess.run(
        [sys.executable, "-m", "rtsoa.cli", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    return done


def _cold_env(tmp_path):
    """The environment of a run on empty Numba and rtsoa caches in `tmp_path`, two cores."""
    return dict(
        os.environ,
        NUMBA_CACHE_DIR=str(tmp_path / "numba"),
        RTSOA_CACHE_DIR=str(tmp_path / "rtsoa"),
        RTSOA_COMPILE_JOBS="2",
    )


def test_a_cold_run_compiles_on_two_processes_and_leaves_a_warm_cache(tmp_path):
    graph = generate("lowered", 400, seed=2, streams=2)
    path = tmp_path / "l.rtsoa"
    save_graph(graph, path)
    env = _cold_env(tmp_path)
    runs = []
    for _ in range(2):
        done = _cli(["run", path, "--json", "--repeat", "2"], env)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["compile_helper_status"] == 0  # a helper ran and finished its share
    assert warm["compile_helper_status"] is None  # warm: no helper
    for run in runs:
        assert run["status"] == 0 and run["nodes_executed"] == graph.num_nodes
        assert run["checksum"] == expected_checksum(graph)
        assert run["device"]["hazards"] == 0
    # the helper's share is in the cache: a warm run compiles nothing, so it is fast (a cold
    # device compile alone takes over 10 s here)
    assert warm["load_seconds"] + warm["prepare_seconds"] + warm["first_run_seconds"] < 10


def test_no_helper_for_graphs_without_device_kernels_one_core_or_unreadable_files(
    tmp_path, monkeypatch
):
    lowered, random = generate("lowered", 40, seed=1), generate("random", 40, seed=1)
    assert uses_device(lowered) and not uses_device(random)
    save_graph(random, tmp_path / "r.rtsoa")
    assert cold_start(tmp_path / "r.rtsoa") is None
    (tmp_path / "junk.rtsoa").write_bytes(b"not a graph")
    assert cold_start(tmp_path / "junk.rtsoa") is None  # the real load reports it
    assert cold_start(tmp_path / "missing.rtsoa") is None
    from rtsoa.lowering import lower
    from rtsoa.testing.models import mlp

    save_graph(lower(mlp(seed=1, layers=2)), tmp_path / "model.rtsoa")
    assert cold_start(tmp_path / "model.rtsoa") is None  # a model: the op library's way
    save_graph(lowered, tmp_path / "l.rtsoa")
    monkeypatch.setenv("RTSOA_COMPILE_JOBS", "1")
    assert cold_start(tmp_path / "l.rtsoa") is None


def test_a_cold_model_run_compiles_the_runtime_in_a_helper_while_lowering(tmp_path):
    """`rtsoa run model.onnx` on empty caches: the helper runs the built-in model (device,
    executor loop, checks) while this process lowers and compiles the model's ops; the
    answers are the model's, and the second run starts no helper and compiles nothing."""
    import numpy as np
    import onnxruntime

    root = Path(__file__).resolve().parent.parent
    model, inputs = root / "datasets" / "mlp.onnx", root / "datasets" / "mlp-inputs.npz"
    env = _cold_env(tmp_path)
    runs = []
    for k in range(2):
        out = tmp_path / f"out{k}.npz"
        done = _cli(["run", model, "--inputs", inputs, "--outputs", out, "--json"], env, 900)
        assert done.returncode == 0, done.stderr
        runs.append((json.loads(done.stdout.strip().splitlines()[-1]), dict(np.load(out))))
    (cold, cold_out), (warm, warm_out) = runs
    assert cold["compile_helper_status"] == 0 and warm["compile_helper_status"] is None
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, dict(np.load(inputs)))
    np.testing.assert_allclose(cold_out["y"], want, rtol=1e-5, atol=1e-6)
    assert cold_out["y"].tobytes() == warm_out["y"].tobytes()


def test_a_model_helper_starts_only_on_a_cold_runtime_with_two_cores(monkeypatch):
    from rtsoa import prewarm
    from rtsoa.ops.library import compile_jobs, cores_in_use

    monkeypatch.setenv("RTSOA_COMPILE_JOBS", "2")
    assert compile_jobs() == 2
    with cores_in_use(1):
        assert compile_jobs() == 1
        with cores_in_use(1):
            assert compile_jobs() == 1  # never below one
    assert compile_jobs() == 2
    started = []
    monkeypatch.setattr(prewarm.subprocess, "Popen", lambda command, **_: started.append(command))
    for state in (True, None):  # the device's code cached, or caching off: nothing to do
        monkeypatch.setattr(prewarm, "_device_cache_state", lambda state=state: state)
        assert prewarm.cold_start_model("sequential") is None
    monkeypatch.setattr(prewarm, "_device_cache_state", lambda: False)
    monkeypatch.setenv("RTSOA_COMPILE_JOBS", "1")
    assert prewarm.cold_start_model("sequential") is None  # one core: no helper
    assert started == []
    monkeypatch.setenv("RTSOA_COMPILE_JOBS", "2")
    prewarm.cold_start_model("sequential")
    assert started == [[sys.executable, "-m", "rtsoa.prewarm", "--model", "sequential"]]
    assert [node.op_type for node in prewarm.tiny_model().graph.node] == ["Identity"]


def test_a_helper_on_a_graph_that_does_not_validate_fails_alone(tmp_path):
    """The helper validates before running anything on the graph; its failure is its own
    (the run reports the graph's error itself)."""
    graph = generate("lowered", 40, seed=3)
    path = tmp_path / "bad.rtsoa"
    save_graph(graph, path)
    edges = next(path.glob("edges*.arrow"))
    data = bytearray(edges.read_bytes())
    data[-64:] = b"\xff" * 64  # targets out of range
    edges.write_bytes(bytes(data))
    done = subprocess.run(
        [sys.executable, "-m", "rtsoa.prewarm", str(path), "auto"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode != 0 and "Error" in done.stderr
    assert "Traceback" in done.stderr and "Segmentation" not in done.stderr


def test_finish_reaps_and_kills_a_stuck_helper():
    assert finish(None) is None
    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    assert finish(quick) == 0 and finish(quick) == 0  # twice is fine
    stuck = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    start = time.perf_counter()
    assert finish(stuck, timeout=0.5) != 0  # killed
    stuck = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert finish(stuck, timeout=0) != 0  # what an error or ^C in the run does: no wait
    assert time.perf_counter() - start < 30
    assert HELPER_TIMEOUT >= 60
