"""Bad CLI and API inputs get a one-line message naming them, never a traceback; sizes take
units; counts that would not fit in memory are refused with an estimate before allocating."""

import json
from pathlib import Path

import numpy as np
import pytest

from rtsoa import GraphBuilder, load_graph, save_graph
from rtsoa.cli import main
from rtsoa.device import AllocatorConfig, Device, device_for_graph
from rtsoa.errors import TooLargeError
from rtsoa.graph.generators import MAX_STREAMS, OptionError, generate
from rtsoa.graph.schema import DType, ValueKind
from rtsoa.limits import addressable_memory, check_fits, format_size, parse_size

DATASETS = Path(__file__).resolve().parent.parent / "datasets"
CHAIN = str(DATASETS / "chain-1k.rtsoa")
HUGE = str(10**12)


def refused(argv, capsys):
    """Run the CLI on `argv`, which must fail: (exit status, the one line on stderr)."""
    try:
        status = main(argv)
    except SystemExit as exit:  # argparse's own errors
        status = exit.code
    captured = capsys.readouterr()
    assert status in (1, 2), captured
    assert "Traceback" not in captured.err and captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return status, lines[0]


@pytest.mark.parametrize(
    "argv, names",
    [
        (["chain", "--nodes", HUGE], "--nodes"),
        (["chain", "--nodes", str(2**31)], "--nodes"),
        (["chain", "--nodes", "0"], "--nodes"),
        (["chain", "--nodes", "10**12"], "--nodes"),
        (["chain", "--nodes", str(2**30)], "needs about"),  # fits int32, not memory
        (["layered", "--nodes", "10", "--layers", str(10**10)], "--layers"),
        (["layered", "--nodes", "10", "--width", "0"], "--width"),
        (["random", "--nodes", "10", "--window", "0"], "--window"),
        (["random", "--nodes", "10", "--edges-per-node", "-1"], "--edges-per-node"),
        (["lowered", "--nodes", "100", "--streams", "0"], "--streams"),
        (["lowered", "--nodes", "100", "--streams", str(MAX_STREAMS + 1)], "--streams"),
        (["lowered", "--nodes", "100", "--min-bytes", "0"], "--min-bytes"),
        (["lowered", "--nodes", "100", "--max-bytes", str(2**60)], "--max-bytes"),
        (["lowered", "--nodes", "100", "--fan-in", str(10**30)], "--fan-in"),
        (["chain", "--nodes", "10", "--seed", "-1"], "--seed"),
        (["chain", "--nodes", "10", "--seed", str(2**64)], "--seed"),
        (["chain", "--nodes", "10", "--kernels", "17"], "--kernels"),
        (["chain", "--nodes", "10", "--window", "5"], "--window"),  # not a chain option
    ],
)
def test_gen_refuses_bad_arguments_in_one_line(argv, names, tmp_path, capsys):
    out = tmp_path / "g.rtsoa"
    _, line = refused(["gen", *argv, "-o", str(out)], capsys)
    assert line.startswith("rtsoa gen: error:") and names in line, line
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, names",
    [
        (["--repeat", str(10**10)], "--repeat"),
        (["--repeat", "0"], "--repeat"),
        (["--device-hbm", "inf"], "--device-hbm"),
        (["--device-hbm", "1e30"], "--device-hbm"),
        (["--device-hbm", "-5MiB"], "--device-hbm"),
        (["--device-hbm", "0.5"], "--device-hbm"),
        (["--device-hbm", "16 furlongs"], "--device-hbm"),
        (["--device-hbm", str(addressable_memory() + 1)], "more than this machine's memory"),
        (["--quick-depth", str(10**30)], "quick_depth"),
        (["--quick-depth", "-1"], "quick_depth"),
    ],
)
def test_run_refuses_bad_arguments_in_one_line(argv, names, capsys):
    _, line = refused(["run", CHAIN, *argv], capsys)
    assert line.startswith("rtsoa run: error:") and names in line, line


def test_sizes_take_units():
    assert parse_size("4096") == parse_size("4096B") == parse_size("4KiB") == parse_size("4KB")
    assert parse_size("16GiB") == parse_size("16 GB") == parse_size("16g") == 16 << 30
    assert parse_size("1.5MiB") == 3 << 19
    assert parse_size("1e9") == 10**9
    assert parse_size("2TiB") == 2 << 40
    for bad in ("inf", "nan", "-1", "1e30", "0.3KiB", "1e400", "12 parsecs", ""):
        with pytest.raises(ValueError, match="byte size"):
            parse_size(bad)
    assert format_size(16 << 30) == "16.0 GiB" and format_size(512) == "512 B"


def test_run_takes_a_device_size_with_units(capsys):
    assert main(["run", str(DATASETS / "lowered-4k.rtsoa"), "--device-hbm", "64MiB", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == 0 and out["nodes_executed"] == 4000


def test_gen_lowered_makes_only_graphs_run_can_run(tmp_path, capsys):
    out = tmp_path / "streams.rtsoa"
    argv = ["gen", "lowered", "--nodes", "200", "--streams", str(MAX_STREAMS), "-o", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    assert load_graph(out).meta.stream_count == MAX_STREAMS
    assert main(["run", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == 0


def test_gen_refuses_a_foreign_output_unless_forced(tmp_path, capsys):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    _, line = refused(["gen", "chain", "--nodes", "10", "-o", str(out)], capsys)
    assert "not an rtsoa graph" in line and "--force" in line
    assert (out / "thesis.tex").read_text() == "years of work"
    file = tmp_path / "file.rtsoa"
    file.write_text("data")
    refused(["gen", "chain", "--nodes", "10", "-o", str(file)], capsys)
    assert file.read_text() == "data"
    assert main(["gen", "chain", "--nodes", "10", "-o", str(out), "--force"]) == 0
    assert load_graph(out).num_nodes == 10 and not (out / "thesis.tex").exists()
    assert main(["gen", "chain", "--nodes", "12", "-o", str(out)]) == 0  # a graph: replaced
    assert load_graph(out).num_nodes == 12


def event_graph(events, memory):
    builder = GraphBuilder(event_count=events)
    node = builder.add_node("Checksum0")
    if memory:
        builder.add_values(np.array([node]), ValueKind.MEMORY_BLOCK, DType.UINT8)
    return builder.finalize()


@pytest.mark.parametrize("memory", [False, True])
def test_a_graph_declaring_too_many_events_is_refused_before_allocating(memory, tmp_path, capsys):
    graph = event_graph(2**31 - 1, memory)
    with pytest.raises(TooLargeError, match="event_count 2,147,483,647.*needs about .* GiB"):
        device_for_graph(graph)
    path = save_graph(graph, tmp_path / "events.rtsoa")
    _, line = refused(["run", str(path)], capsys)
    assert "event_count" in line and "needs about" in line


def test_device_sizes_are_checked_before_allocating():
    with pytest.raises(TooLargeError, match="more than this machine's memory"):
        Device(hbm_bytes=1e30)
    with pytest.raises(TooLargeError, match="more than this machine's memory"):
        Device(hbm_bytes=addressable_memory())  # with the other arenas: too much
    for bad in (float("inf"), float("nan"), 1.5, "1GiB", -1):
        with pytest.raises(ValueError, match="hbm_bytes"):
            Device(hbm_bytes=bad)
    with pytest.raises(TooLargeError, match="events 4,000,000,000"):
        Device(num_events=4_000_000_000)
    assert Device(hbm_bytes=1e6, trace=False).state.arena_hbm.shape == (1_000_000,)


def test_allocator_config_fields_must_fit_the_config_rows():
    for field, value in (("quick_depth", 10**30), ("small_size", 2**63), ("max_split", 1.5)):
        with pytest.raises(ValueError, match=field):
            AllocatorConfig(**{field: value})
    with pytest.raises(ValueError, match="page_mode"):
        AllocatorConfig(page_mode="yes")
    AllocatorConfig(segment_slack_shift=None, page_mode=1)


def test_generate_names_the_option_and_estimates_memory():
    with pytest.raises(OptionError, match="nodes") as caught:
        generate("chain", 2**31)
    assert caught.value.option == "nodes"
    with pytest.raises(OptionError, match="layers"):
        generate("layered", 1, layers=10**10)
    with pytest.raises(OptionError, match="nodes"):
        generate("chain", 10.5)
    with pytest.raises(TooLargeError, match=r"needs about .* TiB, more than"):
        generate("random", 2**31 - 1, edges_per_node=1000)
    with pytest.raises(TooLargeError, match="needs about 1.0 KiB, more than the 512 B"):
        check_fits("a test", 1024, available=512)
