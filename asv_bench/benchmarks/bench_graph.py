"""ExecuteGraph format: load (+ validation), finalize from a builder, structure size, generation.

Workloads: a 100,000-node / ~1,000,000-edge random DAG (10 predecessors from the
previous 1,000 nodes), and a 1,000,000-node / 10,000,000-edge one for generation.
"""

import os
import shutil
import tempfile
import time

import numpy as np

from rtsoa.graph.builder import GraphBuilder
from rtsoa.graph.generators import _sample_predecessors, generate
from rtsoa.graph.io import load_graph, save_graph
from rtsoa.graph.validate import validate_graph

NODES = 100_000
EDGES_PER_NODE = 10
WINDOW = 1_000


def _permuted(graph, seed=1):
    """The same DAG with node ids shuffled, so edges point backwards too and Kahn must run."""
    n = graph.num_nodes
    perm = np.random.default_rng(seed).permutation(n).astype(np.int32)
    sources = np.repeat(np.arange(n, dtype=np.int32), np.diff(graph.succ_offsets))
    b = GraphBuilder(name="random-permuted")
    b.add_nodes(["Checksum0"] * n)
    b.add_edges(perm[sources], perm[graph.succ_targets])
    return b.finalize()


class GraphLoad:
    """load_graph of a saved 100k-node / 1M-edge random DAG, full validation included."""

    params = [["forward-ids", "shuffled-ids"]]
    param_names = ["ids"]
    timeout = 300

    def setup_cache(self):
        root = tempfile.mkdtemp(prefix="rtsoa-bench-")
        graph = generate("random", NODES, seed=1, edges_per_node=EDGES_PER_NODE, window=WINDOW)
        save_graph(graph, os.path.join(root, "forward-ids.rtsoa"))
        save_graph(_permuted(graph), os.path.join(root, "shuffled-ids.rtsoa"))
        return root

    def setup(self, root, ids):
        self.path = os.path.join(root, f"{ids}.rtsoa")
        graph = load_graph(self.path)  # warms the jitted validation passes
        assert graph.num_nodes == NODES and graph.num_edges > 0.99 * NODES * EDGES_PER_NODE

    def time_load_validated(self, root, ids):
        load_graph(self.path)

    def time_load_unvalidated(self, root, ids):
        load_graph(self.path, validate=False)

    def track_structure_bytes(self, root, ids):
        return load_graph(self.path).nbytes()

    track_structure_bytes.unit = "bytes"


class RaceCheck:
    """The race check of validation (rtsoa/graph/races.py) on a 100k-op lowered graph
    (141,164 nodes, 174,994 input links, 2 streams), against the whole of `validate_graph`."""

    timeout = 300

    def setup(self):
        from rtsoa.graph.graph import root_graphs
        from rtsoa.graph.races import first_race

        self.graph = generate("lowered", NODES, seed=1, streams=2)
        self.node_root = root_graphs(self.graph.graph_parent)[self.graph.node_graph]
        self.first_race = first_race
        assert first_race(self.graph, self.node_root) is None  # warm, and race-free

    def time_race_check(self):
        self.first_race(self.graph, self.node_root)

    def time_validate_graph(self):
        validate_graph(self.graph)


class GraphFinalize:
    """GraphBuilder.finalize with 1M edges added in random order (CSR, dedupe, validation)."""

    timeout = 300

    def setup(self):
        high = np.arange(NODES, dtype=np.int64)
        sources, targets = _sample_predecessors(
            np.maximum(high - WINDOW, 0), high, EDGES_PER_NODE, 1
        )
        order = np.random.default_rng(0).permutation(sources.shape[0])
        self.sources = sources[order]
        self.targets = targets[order]
        self._builder().finalize()  # warm the JIT
        self.builder = self._builder()

    def _builder(self):
        b = GraphBuilder()
        b.add_nodes(["Checksum0"] * NODES)
        b.add_edges(self.sources, self.targets)
        return b

    def time_finalize(self):
        # A builder holding the unsorted edge list; filling it is not what is timed.
        self.builder.finalize()


class GenerateLarge:
    """`rtsoa gen random` at 1,000,000 nodes / 10,000,000 edges, saved to disk."""

    timeout = 600
    number = 1
    repeat = 1

    def setup(self):
        generate("random", 1000, seed=0)  # warm the JIT
        self.root = tempfile.mkdtemp(prefix="rtsoa-gen-")

    def teardown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def track_generate_and_save_seconds(self):
        start = time.perf_counter()
        graph = generate("random", 1_000_000, seed=3, edges_per_node=10, window=1000)
        save_graph(graph, os.path.join(self.root, "big.rtsoa"))
        elapsed = time.perf_counter() - start
        assert graph.num_edges > 9_990_000
        return elapsed

    track_generate_and_save_seconds.unit = "seconds"
