"""`rtsoa batch`: result rows checked against independent computations, failures, crashes and
timeouts recorded while the batch goes on, Ctrl-C and --resume, the first-compile lock, Dask,
and every refused input with its one-line message."""

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np
import polars as pl
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rtsoa import GraphBuilder, load_graph, prepare_executor, save_graph
from rtsoa.batch import (
    RESULT_SCHEMA,
    BatchError,
    Settings,
    collect_jobs,
    read_results,
    run_batch,
)
from rtsoa.cli import main
from rtsoa.device import device_for_graph
from rtsoa.kernels.checksum import expected_checksum, mix_numpy
from rtsoa.kernels.dispatch import cache_dir

ROOT = Path(__file__).resolve().parent.parent
DATASETS = ROOT / "datasets"
TESTS = Path(__file__).resolve().parent


def _graph(path, kernel, count=1, attributes=()):
    """A chain of `count` nodes of `kernel` (the last one with `attributes`), saved."""
    builder = GraphBuilder()
    previous = None
    for index in range(count):
        node = builder.add_node(kernel, attributes=attributes if index == count - 1 else ())
        if previous is not None:
            builder.add_edge(previous, node)
        previous = node
    return str(save_graph(builder.finalize(), path))


def _fresh_run(path):
    """What one job of `path` must report: a direct run on a fresh device, in this process."""
    graph = load_graph(path)
    device = device_for_graph(graph)
    result = prepare_executor(graph, kernels="all", device=device).run()
    device.synchronize()
    stats = device.stats()
    peak = sum(stats[name]["allocated_bytes.peak"] for name in ("hbm", "p2p", "host"))
    return result, device.host_time, peak


def test_rows_match_direct_runs_and_failures_are_recorded(tmp_path, capsys):
    fail = _graph(tmp_path / "fail.rtsoa", "Fail", attributes=[7])
    junk = tmp_path / "junk.rtsoa"
    junk.mkdir()
    (junk / "notes.txt").write_text("not a graph")
    model = tmp_path / "model.onnx"
    model.write_bytes(b"\x08\x07")
    graphs = [DATASETS / f"{name}.rtsoa" for name in ("chain-1k", "random-10k", "lowered-4k")]
    out = tmp_path / "results.parquet"
    out.write_text("someone's notes")  # not a results file: replaced only with --force
    argv = ["batch", *map(str, graphs), fail, str(junk), str(model), "-o", str(out)]
    assert main([*argv, "--workers", "2", "--no-progress"]) == 1
    assert "refusing to replace it" in capsys.readouterr().err
    assert main([*argv, "--workers", "2", "--no-progress", "--force", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["recorded"] == 6 and summary["workers"] == 2
    assert summary["statuses"] == {
        "ok": 3,
        "KernelError": 1,
        "GraphFormatError": 1,
        "LoweringError": 1,
    }

    table = pq.read_table(out)
    assert table.schema.equals(RESULT_SCHEMA, check_metadata=False)
    assert read_results(out).num_rows == 6  # recognised as a results file (resume, -o)
    rows = {row["job"]: row for row in pl.read_parquet(out).to_dicts()}
    assert len(rows) == 6
    for path in graphs:
        row = rows[str(path)]
        graph = load_graph(path)
        result, device_ns, peak = _fresh_run(path)
        assert row["status"] == "ok" and row["message"] == "" and row["executor"] == "sequential"
        assert row["nodes_executed"] == graph.num_nodes
        assert row["checksum"] == expected_checksum(graph) == result.checksum
        assert row["device_time_ns"] == device_ns and row["peak_device_bytes"] == peak
        assert row["hazards"] == 0
        assert 0 < row["run_seconds"] <= row["wall_seconds"]
    assert rows[str(DATASETS / "lowered-4k.rtsoa")]["peak_device_bytes"] > 0
    failed = rows[fail]
    assert failed["status"] == "KernelError" and "status 7" in failed["message"]
    assert failed["nodes_executed"] == 1 and failed["checksum"] is None
    assert rows[str(junk)]["status"] == "GraphFormatError"
    assert "metadata" in rows[str(junk)]["message"]
    assert rows[str(model)]["status"] == "LoweringError"
    assert "imports no opset" in rows[str(model)]["message"]


def test_crashes_and_timeouts_are_recorded_and_workers_replaced(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))  # batch_kernels for this process's checks
    ok = [_graph(tmp_path / f"ok{i}.rtsoa", "BatchTest.Fold", count=5 + i) for i in range(3)]
    segfault = _graph(tmp_path / "segfault.rtsoa", "BatchTest.Segfault", attributes=[8])
    killed = _graph(tmp_path / "killed.rtsoa", "BatchTest.Signal", attributes=[9])
    spin = _graph(tmp_path / "spin.rtsoa", "BatchTest.Spin")
    jobs = collect_jobs([ok[0], segfault, ok[1], killed, spin, ok[2]])
    settings = Settings(kernels="used", imports=("batch_kernels",), timeout=2.0)
    out = tmp_path / "results.arrow"
    summary = run_batch(jobs, out, settings=settings, workers=2, progress=False)
    assert summary.statuses == {"ok": 3, "crashed": 2, "timeout": 1}
    rows = {row["job"]: row for row in read_results(out).to_pylist()}
    assert len(rows) == 6
    for count, path in enumerate(ok, start=5):
        expected = int(np.sum(mix_numpy(np.arange(count), np.full(count, 4242)), dtype=np.uint64))
        assert rows[path]["status"] == "ok" and rows[path]["checksum"] == expected
    assert rows[segfault]["status"] == "crashed" and "SIGSEGV" in rows[segfault]["message"]
    assert rows[killed]["status"] == "crashed" and "SIGKILL" in rows[killed]["message"]
    assert "out-of-memory" in rows[killed]["message"]
    assert rows[spin]["status"] == "timeout" and "after 2 s" in rows[spin]["message"]
    pids = {rows[path]["worker"] for path in (segfault, killed, spin)}
    assert len(pids) == 3  # three different processes died


def test_a_crash_or_timeout_inside_a_chunk_is_recorded_for_its_job_alone(tmp_path, capsys):
    """Jobs go to a worker in chunks and their rows come back per chunk: when the worker dies
    in the middle of one, the job it was running is the one recorded (crashed, or timeout),
    the jobs of the chunk it had finished (rows lost with it) run again on its replacement,
    every job gets exactly one row, and the progress bar counts them all."""
    from rtsoa.batch.local import LocalPool

    sys.path.insert(0, str(TESTS))  # batch_kernels for this process's checks
    ok = _graph(tmp_path / "ok.rtsoa", "BatchTest.Fold", count=5)
    segfault = _graph(tmp_path / "segfault.rtsoa", "BatchTest.Segfault", attributes=[8])
    spin = _graph(tmp_path / "spin.rtsoa", "BatchTest.Spin")
    names = {20: ("crash", segfault), 45: ("spin", spin)}
    manifest = tmp_path / "jobs.txt"
    lines = []
    for number in range(64):
        name, path = names.get(number, (f"ok-{number:02d}", ok))
        lines.append(json.dumps({"job": name, "path": path}))
    manifest.write_text("\n".join(lines) + "\n")
    jobs = collect_jobs(manifests=[str(manifest)])
    settings = Settings(kernels="used", imports=("batch_kernels",), timeout=2.0)
    out = tmp_path / "results.arrow"
    # chunks of several jobs (chunk_seconds: their rows come back only when a chunk ends)
    with LocalPool(1, settings, chunk_seconds=10.0) as pool:
        try:
            summary = run_batch(jobs, out, pool=pool, progress=True)
        finally:
            sys.path.remove(str(TESTS))
        assert pool.retried >= 2  # the crash and the timeout each lost finished rows
    assert summary.statuses == {"ok": 62, "crashed": 1, "timeout": 1}
    rows = read_results(out).to_pylist()
    assert sorted(row["job"] for row in rows) == sorted(job.name for job in jobs)  # once each
    expected = int(np.sum(mix_numpy(np.arange(5), np.full(5, 4242)), dtype=np.uint64))
    by_name = {row["job"]: row for row in rows}
    for name, row in by_name.items():
        if name.startswith("ok-"):
            assert row["status"] == "ok" and row["checksum"] == expected, row
    assert by_name["crash"]["status"] == "crashed" and "SIGSEGV" in by_name["crash"]["message"]
    assert by_name["spin"]["status"] == "timeout" and "after 2 s" in by_name["spin"]["message"]
    assert len({row["worker"] for row in rows}) == 3  # the first worker and two replacements
    bar = capsys.readouterr().err.rsplit("\r", 1)[-1]
    assert "batch: 100%" in bar and "64/64" in bar and "crashed=1, failed=2" in bar, bar


def test_manifest_jobs_from_python(tmp_path):
    graph = str(DATASETS / "chain-1k.rtsoa")
    manifest = tmp_path / "jobs.txt"
    lines = ["# name, executor", json.dumps({"job": "a", "path": graph, "executor": "priority"})]
    manifest.write_text("\n".join([*lines, "", json.dumps({"path": graph})]) + "\n")
    jobs = collect_jobs(manifests=[str(manifest)])
    assert [(job.name, job.executor, job.source) for job in jobs] == [
        ("a", "priority", f"manifest {manifest} line 2"),
        (graph, None, f"manifest {manifest} line 4"),
    ]
    manifest.write_text(json.dumps({"path": graph, "executor": "fastest"}) + "\n")
    with pytest.raises(BatchError, match="line 1: unknown executor 'fastest'; choose one of auto"):
        collect_jobs(manifests=[str(manifest)])


def _busy_manifest(tmp_path, count):
    _graph(tmp_path / "busy.rtsoa", "Busy", attributes=[20_000_000])  # ~20-40 ms
    manifest = tmp_path / "jobs.txt"
    lines = ["# one graph, run under many names", ""]
    lines += [json.dumps({"job": f"busy-{i:03d}", "path": "busy.rtsoa"}) for i in range(count)]
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def _default_sigint():
    """In a child before it runs Python: SIGINT's default action, however pytest started."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler (KeyboardInterrupt) for the test, whatever this process
    inherited (an ignored SIGINT stays ignored in Python); the previous one restored after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_leaves_a_valid_partial_file_and_resume_finishes(tmp_path, capsys):
    JOBS = 300  # noqa: N806
    # enough jobs that the batch outlasts the first rewrite of the file (~1 s after it starts)
    # by seconds: a warm worker starts in ~0.5 s and a Busy job takes ~10-40 ms
    manifest = _busy_manifest(tmp_path, JOBS)
    out = tmp_path / "results.arrow"
    argv = ["batch", "--manifest", str(manifest), "-o", str(out), "--workers", "1"]
    # a terminal's Ctrl-C: SIGINT to the whole process group, workers included. The batch
    # starts with SIGINT's default action, as from a terminal, even when pytest runs with it
    # ignored (nohup, a background job): Python keeps an inherited SIG_IGN
    process = subprocess.Popen(
        [sys.executable, "-m", "rtsoa.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_default_sigint,
    )
    deadline = time.monotonic() + 60
    while not out.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "interrupted" in err and "--resume" in err and err.count("\n") == 1
    partial = read_results(out)
    assert 0 < partial.num_rows < JOBS
    assert set(partial.column("status").to_pylist()) == {"ok"}

    assert main([*argv, "--resume", "--no-progress", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["skipped"] == partial.num_rows
    assert summary["recorded"] == JOBS - partial.num_rows
    table = pl.read_ipc(out)
    assert table.height == JOBS and table["job"].n_unique() == JOBS
    assert table["checksum"].n_unique() == 1 and (table["status"] == "ok").all()


def test_ctrl_c_while_the_pool_closes_ends_as_an_interrupt(tmp_path, monkeypatch, python_sigint):
    """A Ctrl-C that lands while the workers are being stopped (here: as the last job's
    batch came in) is held until they are stopped, then reported like any Ctrl-C: no
    traceback, every worker gone, the rows so far in a valid file."""
    from rtsoa.batch import runner
    from rtsoa.batch.local import LocalPool

    class InterruptedWhileClosing(LocalPool):
        def close(self):
            signal.raise_signal(signal.SIGINT)  # to this thread, handled during the close below
            self.processes = [worker.process for worker in self._workers]
            super().close()

    pools = []
    monkeypatch.setattr(
        runner,
        "_pool",
        lambda cluster, workers, settings: (
            pools.append(InterruptedWhileClosing(workers, settings)) or pools[-1]
        ),
    )
    jobs = collect_jobs([str(DATASETS / "chain-1k.rtsoa")])
    out = tmp_path / "results.arrow"
    with pytest.raises(runner.BatchInterrupted) as raised:
        run_batch(jobs, out, workers=1, progress=False)
    assert raised.value.summary.recorded == 1
    assert read_results(out).column("status").to_pylist() == ["ok"]
    assert not any(process.is_alive() for process in pools[0].processes)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_workers_wait_for_the_first_compile_lock(tmp_path):
    jobs = collect_jobs([str(DATASETS / "chain-1k.rtsoa")])
    out = tmp_path / "results.arrow"
    for marker in cache_dir().glob("batch-warm-*"):
        marker.unlink()  # as if the cache were cold: a worker must take the lock
    finished = threading.Event()
    with open(cache_dir() / "batch-compile.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker is compiling

        def batch():
            run_batch(jobs, out, workers=1, progress=False)
            finished.set()

        thread = threading.Thread(target=batch)
        thread.start()
        waiting = None  # a worker process with the lock file open: blocked in flock
        deadline = time.monotonic() + 60
        while waiting is None and time.monotonic() < deadline:
            for child in psutil.Process().children(recursive=True):
                try:
                    files = [Path(f.path).name for f in child.open_files()]
                except psutil.Error:
                    continue
                if "batch-compile.lock" in files:
                    waiting = child
            time.sleep(0.05)
        assert waiting is not None
        assert not finished.wait(1.0)  # held back by the lock
        fcntl.flock(lock, fcntl.LOCK_UN)
    thread.join(60)
    assert finished.is_set() and read_results(out).column("status").to_pylist() == ["ok"]
    assert list(cache_dir().glob("batch-warm-*"))  # marked warm: the next ones skip the lock
    with open(cache_dir() / "batch-compile.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        summary = run_batch(jobs, out, workers=1, progress=False)
    assert summary.statuses == {"ok": 1}


def test_dask_local_cluster_gives_the_rows_of_a_local_run_and_records_crashes(tmp_path):
    pytest.importorskip("distributed", reason="dask is not installed (pip install rtsoa[dask])")
    from rtsoa.batch.cluster import DaskPool

    paths = sorted(str(DATASETS / f"{name}.rtsoa") for name in ("chain-1k", "lowered-4k"))
    out = tmp_path / "dask.arrow"
    with DaskPool("local", 2, Settings()) as pool:
        summary = run_batch(collect_jobs(paths), out, pool=pool, progress=False)
        assert summary.statuses == {"ok": 2} and summary.workers == 2
        rows = read_results(out).sort_by("job").to_pylist()
        for row, path in zip(rows, paths, strict=True):
            result, device_ns, peak = _fresh_run(path)  # what a local worker reports
            assert row["job"] == row["graph"] == path and row["executor"] == "sequential"
            assert (row["nodes_executed"], row["checksum"]) == (
                result.nodes_executed,
                result.checksum,
            )
            assert (row["device_time_ns"], row["peak_device_bytes"]) == (device_ns, peak)
            assert row["checksum"] == expected_checksum(load_graph(path))
            assert row["worker"].startswith("tcp://")
        # the same cluster through its address, as --cluster tcp://HOST:PORT; a user kernel's
        # segfault kills a Dask worker: recorded as crashed, the other job still runs
        ok = _graph(tmp_path / "ok.rtsoa", "BatchTest.Fold", count=4)
        segfault = _graph(tmp_path / "segfault.rtsoa", "BatchTest.Segfault", attributes=[8])
        settings = Settings(kernels="used", imports=("batch_kernels",))
        with DaskPool(pool.address, None, settings) as remote:
            crashes = tmp_path / "crashes.arrow"
            summary = run_batch(collect_jobs([ok, segfault]), crashes, pool=remote, progress=False)
    assert summary.statuses == {"ok": 1, "crashed": 1}
    rows = {row["job"]: row for row in read_results(crashes).to_pylist()}
    expected = int(np.sum(mix_numpy(np.arange(4), np.full(4, 4242)), dtype=np.uint64))
    assert rows[ok]["checksum"] == expected
    assert "Dask worker running it died" in rows[segfault]["message"]


def test_cluster_without_dask_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed fails
    path = str(DATASETS / "chain-1k.rtsoa")
    out = str(tmp_path / "r.arrow")
    assert main(["batch", path, "-o", out, "--cluster", "local", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "pip install rtsoa[dask]" in err and err.count("\n") == 1


def _write(path, text):
    path.write_text(text)
    return str(path)


def test_refused_inputs_get_one_line_each(tmp_path, capsys):
    graph = str(DATASETS / "chain-1k.rtsoa")
    out = str(tmp_path / "r.arrow")
    notes = _write(tmp_path / "notes.txt", "hello")
    not_results = _write(tmp_path / "other.arrow", "plain text")
    directory = tmp_path / "dir.arrow"
    directory.mkdir()

    written = []

    def manifest(text):
        written.append(text)
        return ["--manifest", _write(tmp_path / f"jobs{len(written)}.txt", text)]

    cases = [
        ([str(tmp_path / "missing.rtsoa")], "argument 1: ", "missing.rtsoa does not exist"),
        ([notes], "argument 1: ", "is not a job: expected a saved graph directory (.rtsoa)"),
        ([graph, graph], "listed twice", "argument 1 and argument 2"),
        ([], "no jobs", "--manifest"),
        (["--manifest", str(tmp_path / "none.txt")], "manifest", "does not exist"),
        (manifest(f"{graph}\n{{bad json\n"), "jobs1.txt line 2", "not a path or a JSON object"),
        (manifest('{"path": "x.rtsoa", "repeat": 2}'), "line 1", "unknown key 'repeat'"),
        (manifest('{"job": "a"}'), "line 1", "has no 'path'"),
        (manifest("[1, 2]"), "line 1", "[1, 2]' is not a job"),
        (manifest(json.dumps({"path": graph, "executor": "fast"})), "line 1", "unknown executor"),
        (manifest(json.dumps({"path": graph, "inputs": notes})), "line 1", "inputs apply to"),
        (manifest(json.dumps({"path": graph, "job": ""})), "line 1", "job name must be"),
        (manifest(f"{graph}\n{graph}\n"), "listed twice", "jobs8.txt line 1 and"),
        (manifest("#\n" + "x" * 70_000), "jobs9.txt line 2", "longer than 65,536 bytes"),
        ([graph, "--workers", "0"], "--workers", "must be in 1 .. 1,024, got 0"),
        ([graph, "--workers", str(10**9)], "--workers", "got 1,000,000,000"),
        ([graph, "--workers", "1000"], "--workers 1000", "more than the"),
        ([graph, "--import", "no_such_module_x"], "--import no_such_module_x", "PYTHONPATH"),
        ([graph, "--cluster", "example.org"], "--cluster", "expected tcp://HOST:PORT"),
        ([graph, "--cluster", "local", "--timeout", "5"], "--timeout", "local workers"),
        ([graph, "--cluster", "tcp://h:1", "--workers", "2"], "--workers", "own workers"),
        ([graph, "--retry-failed"], "--retry-failed", "goes with --resume"),
    ]
    for extra, first, second in cases:
        code = main(["batch", *extra, "-o", out, "--no-progress"])
        err = capsys.readouterr().err
        assert code == 1 and err.count("\n") == 1, (extra, err)
        assert err.startswith("rtsoa batch: error: ") and first in err and second in err, err
    bad_text = tmp_path / "latin1.txt"
    bad_text.write_bytes(b"caf\xe9.rtsoa\n")
    assert main(["batch", "--manifest", str(bad_text), "-o", out]) == 1
    assert "latin1.txt line 1: not UTF-8 text" in capsys.readouterr().err
    for target, flags, text in [
        (not_results, [], "is not an rtsoa batch results file; refusing to replace it"),
        (not_results, ["--resume"], "is not an rtsoa batch results file"),
        (str(directory), [], "is a directory"),
        (str(directory), ["--force"], "is a directory"),
        (str(tmp_path / "nodir" / "r.arrow"), [], "does not exist"),
        (str(DATASETS / "chain-1k.rtsoa" / "r.arrow"), [], "inside the graph directory"),
    ]:
        assert main(["batch", graph, "-o", target, "--no-progress", *flags]) == 1
        err = capsys.readouterr().err
        assert text in err and err.count("\n") == 1, err
    assert Path(not_results).read_text() == "plain text"  # left untouched
    assert not (DATASETS / "chain-1k.rtsoa" / "r.arrow").exists()
    from rtsoa.batch import ResultsFile

    writing = ResultsFile(out)  # another batch is writing `out`
    assert main(["batch", graph, "-o", out, "--no-progress"]) == 1
    assert "another rtsoa batch is writing it" in capsys.readouterr().err
    writing.close()
    with pytest.raises(SystemExit) as exit_status:  # argparse refuses it
        main(["batch", graph, "-o", out, "--timeout", "-1"])
    assert exit_status.value.code == 2 and "positive number" in capsys.readouterr().err
    assert not os.path.exists(out)


def test_results_file_is_rewritten_atomically(tmp_path):
    """Every flush leaves a complete file; a reader never sees a torn one."""
    from rtsoa.batch import ResultsFile

    out = tmp_path / "r.arrow"
    results = ResultsFile(out)
    for number in range(50):
        results.add({"job": f"j{number}", "graph": "g", "status": "ok", "message": ""})
        results.flush()
        table = pa.ipc.open_file(pa.memory_map(str(out))).read_all()
        assert table.num_rows == number + 1
    assert sorted(os.listdir(tmp_path)) == [".r.arrow.lock", "r.arrow"]  # no staging file
    results.add({"job": "bad", "graph": "g", "status": "KernelError", "message": "status 7"})
    results.flush()
    results.close()
    resumed = ResultsFile(out, resume=True)
    assert resumed.done == {f"j{number}" for number in range(50)} | {"bad"}
    resumed.close()
    retried = ResultsFile(out, resume=True, retry_failed=True)
    assert retried.done == {f"j{number}" for number in range(50)}
    retried.add({"job": "bad", "graph": "g", "status": "ok", "message": ""})
    retried.flush()
    assert read_results(out).num_rows == 51 and pl.read_ipc(out)["status"].unique().to_list() == [
        "ok"
    ]


def test_a_worker_reloads_a_graph_saved_again_under_the_same_path(tmp_path):
    """The per-worker graph cache never serves a graph whose files changed."""
    from rtsoa.batch import run_job

    path = _graph(tmp_path / "g.rtsoa", "Checksum0", count=3)
    job = collect_jobs([path])[0]
    first = run_job(job, Settings())
    expected = expected_checksum(load_graph(path))
    again = run_job(job, Settings(hazards=False))  # cached: same graph (own device here)
    assert first["checksum"] == again["checksum"] == expected
    assert first["status"] == again["status"] == "ok" and again["hazards"] == 0
    _graph(tmp_path / "g.rtsoa", "Checksum1", count=5)  # a new save replaces the directory
    third = run_job(job, Settings())
    assert (first["nodes_executed"], third["nodes_executed"]) == (3, 5)
    assert third["checksum"] == expected_checksum(load_graph(path)) != first["checksum"]


def test_a_user_module_that_fails_to_import_stops_the_batch(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_kernels.py").write_text("raise RuntimeError('no licence for this')\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # importable here and in spawned workers
    out = tmp_path / "r.arrow"
    argv = ["batch", str(DATASETS / "chain-1k.rtsoa"), "--import", "broken_kernels", "-o", str(out)]
    assert main([*argv, "--workers", "1", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "--import: RuntimeError: no licence for this" in err and err.count("\n") == 1
    assert not out.exists()  # nothing recorded, nothing written


def test_workers_dying_before_any_job_stop_the_batch_without_blaming_jobs(tmp_path, monkeypatch):
    (tmp_path / "fatal_kernels.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)  # in each worker, at import\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "r.arrow"
    jobs = collect_jobs([str(DATASETS / "chain-1k.rtsoa")])
    settings = Settings(imports=("fatal_kernels",))
    with pytest.raises(BatchError, match=r"keep dying outside jobs \(at startup\): .* SIGKILL"):
        run_batch(jobs, out, settings=settings, workers=1, progress=False)
    assert not out.exists()  # no job was blamed: no row to write


def test_a_worker_dying_once_at_startup_is_replaced_and_the_batch_runs(tmp_path, monkeypatch):
    """A death outside any job is forgiven up to _STARTUP_DEATHS_ALLOWED times in a row (a
    worker killed while it starts, by the out-of-memory killer say): the replacement runs
    every job."""
    (tmp_path / "die_once.py").write_text(
        "import os, pathlib, signal\n"
        "marker = pathlib.Path(__file__).with_suffix('.died')\n"
        "if not marker.exists():  # the first worker only\n"
        "    marker.write_text('')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "r.arrow"
    jobs = collect_jobs([str(DATASETS / "chain-1k.rtsoa")])
    run_batch(jobs, out, settings=Settings(imports=("die_once",)), workers=1, progress=False)
    assert (tmp_path / "die_once.died").exists()
    assert [row["status"] for row in read_results(out).to_pylist()] == ["ok"]


def _worker_two_jobs_in(pool, run_start):
    """A pool worker over a real (sleeping) process that began two jobs, finished the first
    (its row not sent yet) and is running the second, whose run started at `run_start`."""
    import multiprocessing

    from rtsoa.batch.jobs import Job
    from rtsoa.batch.local import (
        _BEGUN,
        _CLOCK_START,
        _FINISHED,
        _JOB_START,
        _PROGRESS_SLOTS,
        _Worker,
    )

    context = multiprocessing.get_context("spawn")
    worker = _Worker.__new__(_Worker)
    worker.connection, child = context.Pipe()
    child.close()  # the worker sent nothing more
    worker.progress = context.RawArray("d", _PROGRESS_SLOTS)
    worker.progress[_BEGUN], worker.progress[_FINISHED] = 2, 1
    worker.progress[_JOB_START] = worker.progress[_CLOCK_START] = run_start
    worker.process = context.Process(target=time.sleep, args=(60,), daemon=True)
    worker.process.start()
    worker.ready = True
    first, second = (Job(name, f"{name}.rtsoa", ".rtsoa", "test") for name in ("first", "second"))
    worker.jobs = deque([first, second])
    worker.chunk_ends = deque([2])
    worker.sent, worker.reported = 2, 0
    pool._workers.append(worker)
    return worker, first, second


@pytest.mark.parametrize("stale", [True, False])
def test_a_stale_overdue_report_does_not_blame_the_job_now_running(monkeypatch, stale):
    """`_overdue` noted the worker's count of begun jobs; by the time the pool kills the
    worker, that job may have ended and the next one begun (a higher count): then nothing is
    blamed and both jobs go back to the queue. When the count is still the same, the running
    job is the timeout and only the finished one (its row lost with the worker) runs again."""
    from rtsoa.batch.local import LocalPool

    pool = LocalPool(1, Settings(timeout=2.0))
    started = []
    monkeypatch.setattr(pool, "_start", lambda: started.append(1))
    now = time.monotonic()
    worker, first, second = _worker_two_jobs_in(pool, run_start=now)
    noted = 1 if stale else 2  # the count `_overdue` saw: the first job's, or the running one's
    pending = deque()
    batches = list(pool._time_out(worker, noted, pending))
    assert not worker.process.is_alive() and pool._workers == [] and started == [1]
    if stale:
        assert batches == [] and list(pending) == [first, second]
        assert pool.retried == 0
        return
    (row,) = pa.Table.from_batches(batches).to_pylist()
    assert row["job"] == "second" and row["status"] == "timeout", row
    assert "no result after 2 s" in row["message"]
    assert list(pending) == [first] and pool.retried == 1


@pytest.mark.parametrize(
    "exitcode, words",
    [
        (-1, "died of SIGHUP; a new"),
        (-9, "died of SIGKILL (killed: the out-of-memory killer, or kill -9)"),
        (-11, "died of SIGSEGV (a segmentation fault"),
        (-6, "died of SIGABRT (aborted)"),
        (-7, "died of SIGBUS (a bus error"),
        (-200, "died of signal 200; a new"),
        (1, "exited with status 1"),
        (0, "exited with status 0"),
        (None, "exited with status None"),
    ],
)
def test_a_worker_death_is_told_by_its_signal_or_status(exitcode, words):
    from rtsoa.batch.local import death_message

    message = death_message(exitcode, 4321)
    assert words in message and "(pid 4321)" in message, message


def test_the_pool_waits_until_the_first_job_deadline():
    """`_next_deadline`: how long `wait` may sleep is the time left to the earliest running
    job's timeout; a worker with jobs but no clock yet polls; no timeout or no jobs: no limit."""
    from types import SimpleNamespace

    from rtsoa.batch.local import _CLOCK_START, _POLL_SECONDS, LocalPool

    pool = LocalPool(2, Settings(timeout=1.0))
    now = time.monotonic()

    def worker(jobs, start):
        return SimpleNamespace(jobs=jobs, progress={_CLOCK_START: start})

    pool._workers = [worker([], 0.0)]
    assert pool._next_deadline() is None
    pool._workers = [worker(["a"], now - 0.3), worker(["b"], now - 0.1)]
    assert 0.6 < pool._next_deadline() <= 0.7
    pool._workers = [worker(["a"], now - 5.0)]  # overdue: no sleep
    assert pool._next_deadline() == 0.0
    pool._workers = [worker(["a"], 0.0)]  # its clock not started: poll
    assert pool._next_deadline() == pytest.approx(min(_POLL_SECONDS, 1.0))
    pool.settings = Settings(timeout=None)
    assert pool._next_deadline() is None


def test_chunks_hold_about_chunk_seconds_of_jobs_by_the_smoothed_job_time():
    """One job per chunk until a job time is measured; then chunk_seconds / job time jobs, the
    job time the running mean of what the workers report (each report halves the weight of the
    ones before), never past _MAX_CHUNK nor a 1 / (_SHARE x workers) share of what is left."""
    from rtsoa.batch.local import _MAX_CHUNK, _SHARE, LocalPool

    pool = LocalPool(2, Settings(), chunk_seconds=1.0)
    pool._workers = [object(), object()]  # only counted
    pending = deque(range(10_000))
    assert pool._chunk(pending) == [0]
    pool._measured(0.1)
    assert len(pool._chunk(pending)) == 10
    pool._measured(0.3)  # the mean of 0.1 and 0.3: 5 jobs a second
    assert pool._job_seconds == pytest.approx(0.2)
    assert len(pool._chunk(pending)) == 5
    pool._measured(0.6)  # (0.2 + 0.6) / 2
    assert len(pool._chunk(pending)) == 2
    pool._measured(0.1)  # (0.4 + 0.1) / 2
    assert len(pool._chunk(pending)) == 4
    pool._job_seconds = 1e-7
    assert len(pool._chunk(pending)) == _MAX_CHUNK
    few = deque(range(12))
    assert len(pool._chunk(few)) == 12 // (_SHARE * 2)
    assert pool._chunk(deque([7])) == [7]


def test_onnx_model_jobs_run_on_their_input_sets(tmp_path, capsys):
    import hashlib

    from rtsoa.runtime.model import ModelExecutor
    from rtsoa.runtime.npz import read_inputs

    model = DATASETS / "mlp.onnx"
    inputs = DATASETS / "mlp-inputs.npz"
    manifest = tmp_path / "jobs.jsonl"
    manifest.write_text(json.dumps({"path": str(model), "inputs": str(inputs)}) + "\n")
    out = tmp_path / "results.arrow"
    assert main(["batch", "--manifest", str(manifest), "-o", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    (row,) = pl.read_ipc(out).to_dicts()
    assert row["status"] == "ok", row["message"]
    executor = ModelExecutor(load_graph(DATASETS / "mlp.rtsoa")).load()  # lowered from it
    outputs = executor.execute_sync(read_inputs(inputs))
    digest = hashlib.sha256(b"y" + np.ascontiguousarray(outputs["y"]).tobytes()).digest()
    assert row["checksum"] == int.from_bytes(digest[:8], "little")
    assert row["hazards"] == 0


def test_a_worker_reuses_its_executor_and_device_and_each_job_runs_as_on_a_new_device(tmp_path):
    """Jobs of one graph in one worker share the prepared executor and the device (reset per
    job); every row is what a direct run on a new device gives, a failing job between them
    changes nothing, and a graph saved again gets a new executor."""
    from rtsoa.batch import run_job
    from rtsoa.batch.worker import prepared_executor

    path = str(DATASETS / "lowered-4k.rtsoa")
    result, device_ns, peak = _fresh_run(path)
    fail = _graph(tmp_path / "fail.rtsoa", "Fail", attributes=[3])
    settings = Settings()
    jobs = collect_jobs([path, fail])
    rows = []
    for _ in range(3):
        rows.append(run_job(jobs[0], settings))
        assert run_job(jobs[1], settings)["status"] == "KernelError"
    for row in rows:
        assert row["status"] == "ok" and row["checksum"] == result.checksum
        assert row["device_time_ns"] == device_ns and row["peak_device_bytes"] == peak
        assert row["nodes_executed"] == result.nodes_executed and row["hazards"] == 0
    graph = load_graph(path)
    executor, first = prepared_executor(graph, "auto", settings)
    again, second = prepared_executor(graph, "auto", settings)
    assert first and not second and again is executor  # cached per graph object
    other, _ = prepared_executor(load_graph(path), "auto", settings)
    assert other is not executor and other.device is executor.device  # one device per size
