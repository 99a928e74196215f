"""The reference model itself: independent of what it checks, and right on hand-worked cases."""

import ast
from pathlib import Path

import numpy as np
from reference import SALTS, RecordingBuilder, mix, simulate

from rtsoa.kernels.checksum import FOLD_SALTS, mix_numpy


def test_the_reference_imports_nothing_the_executors_compute_with():
    """Its constants and kernel models are its own: it may use the builder only to record the
    user's calls, and the generators only to record theirs. Catches: the reference importing the
    package's salts, status codes or executors again (then a wrong constant hides in both)."""
    tree = ast.parse((Path(__file__).with_name("reference.py")).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    rtsoa_modules = {name for name in imported if name.split(".")[0] == "rtsoa"}
    assert rtsoa_modules == {"rtsoa.graph", "rtsoa.graph.builder"}, rtsoa_modules


def test_the_package_folds_with_the_reference_salts():
    """The kernels' documented fold, as the package computes it."""
    assert FOLD_SALTS == SALTS
    nodes = np.array([0, 1, 7, 2**31 - 1], dtype=np.int64)
    for name, salt in SALTS.items():
        expected = [mix(int(node), salt) for node in nodes]
        assert mix_numpy(nodes, np.full(4, salt, dtype=np.uint64)).tolist() == expected, name


def test_hand_worked_orders():
    """A diamond whose edges were added as 0->2, 0->1, 1->3, 2->3, and a lone node 4, with
    priorities 0: 5, 1: 1, 2: 3, 3: 0, 4: 2. Worked by hand:
      topological (FIFO, successors as added): 0 4 2 1 3
      priority ((priority, id) among the ready): 4 0 1 2 3
      sequential ((priority, ready ticket)): the same here, 4 0 1 2 3."""
    builder = RecordingBuilder()
    for priority in (5, 1, 3, 0, 2):
        builder.add_node("Checksum0", priority=priority)
    for source, target in ((0, 2), (0, 1), (1, 3), (2, 3), (0, 2)):  # a repeat is dropped
        builder.add_edge(source, target)
    description = builder.description
    assert simulate(description, "topological").order == [0, 4, 2, 1, 3]
    assert simulate(description, "priority").order == [4, 0, 1, 2, 3]
    assert simulate(description, "sequential").order == [4, 0, 1, 2, 3]
    checksum = sum(mix(node, SALTS["Checksum0"]) for node in range(5)) % 2**64
    assert simulate(description, "priority").checksum == checksum


def test_hand_worked_tie_by_ready_time():
    """Sequential breaks priority ties by the time a node became ready, priority by id: with
    equal priorities, edges 0->3, 1->2 and starts 0, 1, node 3 is ready before node 2."""
    builder = RecordingBuilder()
    for _ in range(4):
        builder.add_node("Checksum1", priority=0)
    builder.add_edge(0, 3)
    builder.add_edge(1, 2)
    description = builder.description
    assert simulate(description, "sequential").order == [0, 1, 3, 2]
    assert simulate(description, "priority").order == [0, 1, 2, 3]
    assert simulate(description, "topological").order == [0, 1, 3, 2]
