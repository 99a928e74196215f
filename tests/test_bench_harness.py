"""The asv harness (asv_bench/benchmarks/common.py) fails loudly instead of skipping, and its
fresh-process benchmark checks the checksum, not only the node count."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from rtsoa import save_graph
from rtsoa.graph.generators import generate

_BENCHMARKS = Path(__file__).resolve().parents[1] / "asv_bench" / "benchmarks"


def _import_benchmarks():
    """The benchmarks package under a private name (it uses relative imports)."""
    name = "rtsoa_asv_benchmarks"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, _BENCHMARKS / "__init__.py", submodule_search_locations=[str(_BENCHMARKS)]
        )
        package = importlib.util.module_from_spec(spec)
        sys.modules[name] = package
        spec.loader.exec_module(package)
    return importlib.import_module(f"{name}.common")


common = _import_benchmarks()


def test_an_import_error_inside_rtsoa_is_not_turned_into_a_skip(monkeypatch):
    """asv reports NotImplementedError as a skip, so a broken import made the benchmarks vanish
    quietly. Catches: the harness catching ImportError (as `_require` did) again."""
    monkeypatch.setitem(sys.modules, "rtsoa.graph.io", None)  # import now raises ImportError
    with pytest.raises(ImportError):
        common.load_workload("unused.rtsoa")
    monkeypatch.setitem(sys.modules, "rtsoa.graph.generators", None)
    with pytest.raises(ImportError):
        common.workload_path("chain")


@pytest.fixture(scope="module")
def saved_workload(tmp_path_factory):
    graph = generate("random", 300, seed=4, kernels=common.KERNELS, edges_per_node=3, window=20)
    return save_graph(graph, tmp_path_factory.mktemp("bench") / "w.rtsoa")


def test_fresh_process_code_checks_the_checksum(saved_workload):
    """The fresh-process benchmark's code asserts the checksum of the run (it checked only the
    node count). Catches: the checksum assertion dropped from `fresh_process_code`, or
    `workload_checksum` computing something else than a run's checksum."""
    expected = common.workload_checksum(saved_workload)
    # The code is what the fresh interpreter runs; exec'ing it here tests the same text
    # without paying for a new process.
    exec(common.fresh_process_code(saved_workload, "sequential", expected), {})
    wrong = common.fresh_process_code(saved_workload, "sequential", expected ^ 1)
    with pytest.raises(AssertionError):
        exec(wrong, {})


def test_the_cnn_layer_table_matches_both_runtimes_layers(capsys):
    """benchmarks/cnn_layers.py on a small MobileNetV2: every rtsoa layer is one node of the
    lowered model's ops, convs keyed by input and weight shapes on both sides, and the table
    names the depthwise and pointwise convs with their counts."""
    layers = importlib.import_module("rtsoa_asv_benchmarks.cnn_layers")
    assert layers._key("FusedConv", (1, 8, 4, 4), (8, 1, 3, 3)) == "Conv 8x4x4 w8x1x3x3"
    assert layers._key("MaxPool", (1, 8, 4, 4), ()) == "MaxPool 8x4x4"
    assert layers._key("Relu", (1, 8), ()) == "Relu"
    layers.main(["mobilenet_v2", "--size", "32", "--runs", "1", "--top", "40"])
    out = capsys.readouterr().out
    assert "| Conv 32x16x16 w32x1x3x3 | 1 |" in out  # the first depthwise conv
    assert "**total**" in out
    rows = [line for line in out.splitlines() if line.startswith("| Conv ")]
    assert sum(float(row.split("|")[3]) > 0 for row in rows) > 10  # rtsoa's ms column


def _before_after():
    spec = importlib.util.spec_from_file_location(
        "rtsoa_before_after", _BENCHMARKS.parent / "before_after.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_before_after_table_gives_medians_spreads_and_per_repeat_ratios(tmp_path, capsys):
    raw = tmp_path / "raw.jsonl"
    records = [  # (repeat, tree, value): after / before per repeat is 0.5, 1.0, 0.75
        (0, "before", 4.0),
        (0, "after", 2.0),
        (1, "after", 3.0),
        (1, "before", 3.0),
        (2, "before", 8.0),
        (2, "after", 6.0),
    ]
    lines = [
        json.dumps({"repeat": repeat, "tree": tree, "group": "g", "rows": {"row": value}})
        for repeat, tree, value in records
    ]
    lines.append(json.dumps({"repeat": 0, "tree": "after", "group": "h", "rows": {"only": 1.5}}))
    raw.write_text("\n".join(lines) + "\n")
    _before_after().main(["table", str(raw)])
    table = capsys.readouterr().out.splitlines()
    # medians 4 (before) and 3 (after): 0.75; per-repeat ratios from 0.5 to 1.0
    assert "| row | 4 (3-8) | 3 (2-6) | 0.750 (0.500-1.000) |" in table
    assert "| only | - | 1.5 (1.5-1.5) | - |" in table


def test_the_before_after_driver_refuses_a_tree_without_rtsoa(tmp_path):
    driver = _before_after()
    arguments = ["run", str(tmp_path), str(tmp_path), "--out", str(tmp_path / "raw.jsonl")]
    with pytest.raises(SystemExit, match="holds no rtsoa/ package"):
        driver.main([*arguments, "--caches", str(tmp_path / "caches")])
