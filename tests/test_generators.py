"""Generators: structure, determinism, and the committed datasets' byte-for-byte rebuild."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from rtsoa.cli import main
from rtsoa.graph.generators import GENERATORS, generate
from rtsoa.graph.io import load_graph
from rtsoa.graph.schema import WorkerClass

DATASETS = Path(__file__).resolve().parent.parent / "datasets"


def predecessors(graph):
    sources = np.repeat(np.arange(graph.num_nodes), np.diff(graph.succ_offsets))
    preds = [[] for _ in range(graph.num_nodes)]
    for s, t in zip(sources, graph.succ_targets, strict=True):
        preds[t].append(int(s))
    return preds


def test_chain():
    g = generate("chain", 50, seed=1, kernels=3)
    assert g.num_edges == 49
    assert all(list(g.successors(i)) == [i + 1] for i in range(49))
    assert set(g.kernel_names) <= {"Checksum0", "Checksum1", "Checksum2"}


@pytest.mark.parametrize("seed", [0, 7])
def test_random_dag_draws_distinct_predecessors_from_window(seed):
    g = generate("random", 400, seed=seed, edges_per_node=5, window=20)
    for node, preds in enumerate(predecessors(g)):
        assert len(preds) == min(5, node) == len(set(preds))
        assert all(node - 20 <= p < node for p in preds)


def test_layered():
    g = generate("layered", 1, layers=6, width=10, fan_in=3, seed=2)
    assert g.num_nodes == 60
    for node, preds in enumerate(predecessors(g)):
        layer = node // 10
        assert len(preds) == (3 if layer else 0)
        assert all(p // 10 == layer - 1 for p in preds)


def test_lowered_follows_the_lowering_pattern():
    g = generate("lowered", 400, seed=3, fan_in=2, window=8)
    names = [g.kernel_name(i) for i in range(g.num_nodes)]
    assert names[:4] == ["InferShape", "AllocMemory", "LaunchKernel", "FreeMemory"]
    preds = predecessors(g)
    for op in range(g.num_nodes // 4):
        infer, alloc, launch, free = 4 * op, 4 * op + 1, 4 * op + 2, 4 * op + 3
        assert alloc in g.successors(infer) and launch in g.successors(alloc)
        assert free in g.successors(launch)
        assert g.node_worker[launch] == WorkerClass.LAUNCH
        assert g.node_worker[alloc] == WorkerClass.MEMORY == g.node_worker[free]
        # Every launch that reads this op's block runs before the block's Free (guarder).
        block = g.outputs(alloc)[0]
        readers = [
            n for n in range(g.num_nodes) if block in g.inputs(n) and names[n] == "LaunchKernel"
        ]
        assert set(readers) <= set(preds[free])
        assert set(g.relations(free)) == set(readers) - {launch}
        assert g.node_priority[free] >= max(g.node_priority[r] for r in readers)
        assert g.inputs(launch)[0] == block


@pytest.mark.parametrize("kind", ["chain", "random", "layered", "lowered"])
def test_deterministic_for_a_seed(kind):
    a, b = generate(kind, 300, seed=4), generate(kind, 300, seed=4)
    c = generate(kind, 300, seed=5)
    for name in ("succ_targets", "node_kernel", "attr_pool"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    changed = [
        a.node_kernel.tobytes() != c.node_kernel.tobytes(),
        a.succ_targets.tobytes() != c.succ_targets.tobytes(),
        a.attr_pool.tobytes() != c.attr_pool.tobytes(),
    ]
    assert any(changed), "another seed must give another graph"


def test_committed_datasets_rebuild_byte_for_byte(tmp_path):
    spec = importlib.util.spec_from_file_location("make_datasets", DATASETS / "make_datasets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(tmp_path)
    for name in module.DATASETS:
        committed = DATASETS / f"{name}.rtsoa"
        for file in sorted(committed.iterdir()):
            assert (tmp_path / f"{name}.rtsoa" / file.name).read_bytes() == file.read_bytes(), file


def test_cli_gen_and_inspect(tmp_path, capsys):
    out = tmp_path / "g.rtsoa"
    assert main(["gen", "random", "--nodes", "500", "--seed", "1", "-o", str(out), "--json"]) == 0
    gen = json.loads(capsys.readouterr().out)
    assert gen["nodes"] == 500 and load_graph(out).num_edges == gen["edges"]
    assert main(["inspect", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["nodes"] == 500 and summary["edges"] == gen["edges"]
    assert sum(summary["nodes_per_kernel"].values()) == 500
    assert summary["critical_path"] >= 1 and summary["max_width"] >= 1
    assert main(["inspect", str(out)]) == 0
    assert "critical path" in capsys.readouterr().out


def test_cli_chain_critical_path_and_errors(tmp_path, capsys):
    out = tmp_path / "c.rtsoa"
    assert main(["gen", "chain", "--nodes", "20", "-o", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["critical_path"] == 20 and summary["max_width"] == 1
    assert main(["inspect", str(tmp_path / "missing.rtsoa")]) == 1
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("kind", list(GENERATORS))
def test_cli_gen_offers_each_registered_generator_with_its_options(kind, tmp_path, capsys):
    """`rtsoa gen` takes its kinds and options from the registry. Catches: the subparser's
    choices or the per-kind option list written by hand again (a registered kind or option the
    CLI does not offer, or an option it lets through to a kind that does not take it)."""
    out = str(tmp_path / "g.rtsoa")
    base = ["gen", kind, "--nodes", "40", "-o", out, "--no-progress"]
    for option, default in GENERATORS[kind].options.items():
        value = 2 if default is None else default
        assert main([*base, f"--{option.replace('_', '-')}", str(value)]) == 0, option
    taken_elsewhere = {name for g in GENERATORS.values() for name in g.options}
    for option in sorted(taken_elsewhere - set(GENERATORS[kind].options)):
        capsys.readouterr()
        assert main([*base, f"--{option.replace('_', '-')}", "3"]) == 1
        assert "does not apply" in capsys.readouterr().err


def test_unknown_generator_kind_or_option_is_rejected(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["gen", "star", "--nodes", "10", "-o", str(tmp_path / "g.rtsoa")])
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(ValueError, match="takes no option 'width'"):
        generate("chain", 10, width=3)
    with pytest.raises(ValueError, match="unknown generator"):
        generate("star", 10)
