"""Local batch workers: --timeout covers a job's lowering and loading (not a worker's warm-up),
workers end with a parent killed by SIGKILL, and a model job checks its inputs as `rtsoa run`
does, a lowered model saved as a graph included."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
from onnx import TensorProto, helper, save

from rtsoa import GraphBuilder, save_graph
from rtsoa.batch import Settings, collect_jobs, read_results, run_batch, run_job

ROOT = Path(__file__).resolve().parent.parent
DATASETS = ROOT / "datasets"
TESTS = Path(__file__).resolve().parent


def _model(path, op, domain=""):
    """A model of one `op` node on a float [2, 3] input x; returns its path."""
    opsets = [helper.make_opsetid("", 18)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    node = helper.make_node(op, ["x"], ["y"], name="only", domain=domain)
    x, y = (helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 3]) for name in "xy")
    save(helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=opsets), path)
    return str(path)


def test_a_job_that_lowers_forever_is_timed_out_and_its_worker_replaced(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))  # batch_converters (the workers inherit sys.path)
    relu = _model(tmp_path / "relu.onnx", "Relu")
    stall = _model(tmp_path / "stall.onnx", "Stall", domain="com.example.batch")
    inputs = tmp_path / "x.npz"
    np.savez(inputs, x=np.ones((2, 3), np.float32))
    manifest = tmp_path / "jobs.txt"
    lines = [
        {"job": "before", "path": relu, "inputs": str(inputs)},
        {"job": "stall", "path": stall},
        {"job": "after", "path": relu, "inputs": str(inputs)},
    ]
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    jobs = collect_jobs(manifests=[str(manifest)])
    # a worker's warm-up and its op compiles are not timed; the stall's lowering is
    settings = Settings(imports=("batch_converters",), timeout=4.0)
    out = tmp_path / "results.arrow"
    summary = run_batch(jobs, out, settings=settings, workers=1, progress=False)
    assert summary.statuses == {"ok": 2, "timeout": 1}, read_results(out).to_pylist()
    rows = {row["job"]: row for row in read_results(out).to_pylist()}
    assert rows["stall"]["status"] == "timeout"
    assert "no result after 4 s; the worker (pid" in rows["stall"]["message"]
    assert 4 <= rows["stall"]["wall_seconds"] < 60
    assert rows["before"]["checksum"] == rows["after"]["checksum"] is not None
    assert rows["before"]["worker"] != rows["after"]["worker"]  # replaced


def test_model_jobs_check_their_inputs_as_run_does():
    """A model job without its inputs is refused naming them, before any device work, as
    `rtsoa run` refuses it: an .onnx model, and a lowered model saved as a graph."""
    for path in (DATASETS / "mlp.onnx", DATASETS / "mlp.rtsoa"):
        row = run_job(collect_jobs([str(path)])[0], Settings())
        assert row["status"] == "ModelInputError", row
        assert row["message"].startswith("missing input(s) ['x']; the model takes ['x']"), row
    job = collect_jobs([str(DATASETS / "mlp.onnx")])[0]
    row = run_job(job._replace(inputs=str(DATASETS / "mlp-inputs.npz")), Settings())
    assert row["status"] == "ok", row


def _spin_graph(path):
    builder = GraphBuilder()
    builder.add_node("BatchTest.Spin")
    return str(save_graph(builder.finalize(), path))


def test_workers_end_with_a_parent_killed_by_sigkill(tmp_path):
    """SIGKILL leaves the batch no chance to stop its workers: they stop themselves, a worker
    in a kernel that never returns (holding the GIL: the parent-death signal) included."""
    spin = _spin_graph(tmp_path / "spin.rtsoa")
    argv = ["batch", spin, "--import", "batch_kernels", "--kernels", "used", "--workers", "1"]
    argv += ["-o", str(tmp_path / "r.arrow"), "--no-progress"]
    _kill_parent_and_wait([sys.executable, "-m", "rtsoa.cli", *argv])


def test_workers_started_by_another_thread_end_with_their_parent(tmp_path):
    """A pool started by a thread other than the main one arms no parent-death signal (it
    follows the starting thread); the workers' watch of their parent ends them."""
    stall = _model(tmp_path / "stall.onnx", "Stall", domain="com.example.batch")
    script = f"""
import threading
from rtsoa.batch import Settings, collect_jobs, run_batch

settings = Settings(imports=("batch_converters",))
jobs = collect_jobs([{stall!r}])
arguments = (jobs, {str(tmp_path / "r.arrow")!r}, settings, 1)
thread = threading.Thread(target=run_batch, args=arguments, kwargs={{"progress": False}})
thread.start()
thread.join()
"""
    _kill_parent_and_wait([sys.executable, "-c", script])


def _command_line(process):
    """A child's command line, or [] for one that has exited meanwhile (a helper the batch
    started and has not reaped yet is a zombie, whose command line cannot be read)."""
    try:
        return process.cmdline()
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return []


def _kill_parent_and_wait(command):
    """Start `command` (a batch with one never-ending job), SIGKILL it once its worker has
    run a few seconds, and check the worker is gone within 5 s."""
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    parent = subprocess.Popen(
        command,
        env={**os.environ, "PYTHONPATH": path},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers = []
    try:
        deadline = time.monotonic() + 120
        while not workers and time.monotonic() < deadline:
            workers = [
                child
                for child in psutil.Process(parent.pid).children()
                if "spawn_main" in " ".join(_command_line(child))
            ]
            time.sleep(0.1)
        assert workers, "no worker started"
        time.sleep(3)  # the worker imports, loads and runs its job
        assert all(worker.is_running() for worker in workers)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        gone, alive = psutil.wait_procs(workers, timeout=5)
        assert not alive, f"workers outlived their parent: {alive}"
    finally:
        parent.kill()
        parent.wait()
        for worker in workers:
            if worker.is_running():
                worker.kill()
