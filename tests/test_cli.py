"""`rtsoa run` end to end on the committed datasets."""

import json
from pathlib import Path

import pytest

from rtsoa import GraphBuilder, load_graph, save_graph
from rtsoa.cli import main
from rtsoa.kernels.checksum import expected_checksum

DATASETS = Path(__file__).resolve().parent.parent / "datasets"


@pytest.mark.parametrize("executor", ["auto", "sequential", "topological", "priority"])
def test_run_json_reports_status_count_checksum_and_times(executor, capsys):
    path = DATASETS / "random-10k.rtsoa"
    argv = ["run", str(path), "--executor", executor, "--repeat", "3", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    graph = load_graph(path)
    assert out["status"] == 0 and out["nodes_executed"] == graph.num_nodes == 10_000
    assert out["checksum"] == expected_checksum(graph)
    assert out["executor"] == ("sequential" if executor == "auto" else executor)
    times = out["run_seconds"]
    assert 0 < times["min"] <= times["median"] <= times["max"]
    per_node = out["ns_per_node"]
    assert per_node["median"] == pytest.approx(times["median"] * 1e9 / 10_000)
    assert out["calibration_runs"] == 0  # only a multithread executor times its plans


def test_run_multithread_calibrates_its_plans_before_the_timed_runs(capsys):
    """sharing="auto" times its plans over its first plain runs: `rtsoa run` makes those runs
    after the first run and before the --repeat ones, and reports them apart."""
    from rtsoa.executors.multithread import CALIBRATION_RUNS

    path = DATASETS / "random-10k.rtsoa"
    argv = ["run", str(path), "--executor", "multithread", "--threads", "2", "--repeat", "2"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["checksum"] == expected_checksum(load_graph(path))
    # "classes" and "host" (a random DAG has host work and no launch that locks the device);
    # the first run is timed too
    assert out["calibration_runs"] == 2 * CALIBRATION_RUNS - 1
    assert main(argv) == 0
    assert f"{2 * CALIBRATION_RUNS - 1} calibration run(s)" in capsys.readouterr().out


def test_run_text_and_trace(tmp_path, capsys):
    trace = tmp_path / "trace.json"
    assert main(["run", str(DATASETS / "lowered-4k.rtsoa"), "--trace", str(trace)]) == 0
    text = capsys.readouterr().out
    assert "nodes executed  4,000 (graph has 4,000 nodes)" in text and "ns per node" in text
    events = json.loads(trace.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert len(kernels) == 4000
    assert {e["name"] for e in kernels} == {
        "InferShape",
        "AllocMemory",
        "LaunchKernel",
        "FreeMemory",
    }
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in kernels)


def test_run_errors_are_reported_not_raised(tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.rtsoa")]) == 1
    assert "does not exist" in capsys.readouterr().err
    builder = GraphBuilder()
    builder.add_node("NoSuchKernel")
    path = save_graph(builder.finalize(), tmp_path / "unknown.rtsoa")
    assert main(["run", str(path)]) == 1
    assert "NoSuchKernel" in capsys.readouterr().err
    assert main(["run", str(DATASETS / "chain-1k.rtsoa"), "--repeat", "0"]) == 1


def test_run_reports_a_failing_kernel(tmp_path, capsys):
    builder = GraphBuilder()
    ok = builder.add_node("Checksum0")
    bad = builder.add_node("Fail", attributes=[7], compute_node=42)
    builder.add_edge(ok, bad)
    path = save_graph(builder.finalize(), tmp_path / "fail.rtsoa")
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert "Fail" in err and "7" in err


def test_run_allocator_profiles_and_quick_depth(capsys):
    path = str(DATASETS / "lowered-4k.rtsoa")
    results = {}
    for flags in ([], ["--allocator", "pytorch"], ["--allocator", "page"], ["--quick-depth", "0"]):
        assert main(["run", path, "--json", *flags]) == 0
        results[" ".join(flags)] = json.loads(capsys.readouterr().out)
    assert len({r["checksum"] for r in results.values()}) == 1  # same results, other memory
    allocators = {key: r["device"]["allocator"] for key, r in results.items()}
    assert allocators == {
        "": {"profile": "default", "quick_depth": 32},
        "--allocator pytorch": {"profile": "pytorch", "quick_depth": 0},
        "--allocator page": {"profile": "page", "quick_depth": 0},  # 64 KiB unit: no lists
        "--quick-depth 0": {"profile": "default", "quick_depth": 0},
    }
    for r in results.values():
        assert r["device"]["hazards"] == 0
        assert r["device"]["peak_reserved_bytes"] >= r["device"]["peak_allocated_bytes"] > 0
    # page mode rounds every block to 64 KiB pages: more bytes allocated than the default
    page = results["--allocator page"]["device"]["peak_allocated_bytes"]
    assert page > results[""]["device"]["peak_allocated_bytes"]
    assert main(["run", path, "--quick-depth", "-1"]) == 1
    assert "quick_depth" in capsys.readouterr().err


def test_run_writes_a_device_trace_that_replays(tmp_path, capsys):
    from rtsoa.device import AllocatorConfig, Device, load_trace, replay_trace

    path = tmp_path / "device.npz"
    argv = ["run", str(DATASETS / "lowered-4k.rtsoa"), "--device-trace", str(path), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["device_trace"] == str(path)
    rows = load_trace(path)["rows"]
    replayed = replay_trace(Device.from_trace(path), rows)
    assert replayed.stats()["hbm"]["allocated_bytes.peak"] == out["device"]["peak_allocated_bytes"]
    # the same events on another allocator: a memory-policy comparison from one run
    pytorch = replay_trace(Device(allocator=AllocatorConfig.pytorch_like()), rows)
    assert (
        pytorch.stats()["hbm"]["allocation.allocated"]
        == replayed.stats()["hbm"]["allocation.allocated"]
    )
