"""Workloads shared by the executor benchmarks, and helpers to run rtsoa and C side by side.

Each workload is generated once (seeded) with `rtsoa.graph.generators.generate` and saved
with `rtsoa.graph.io.save_graph` under `cache_root()/graphs`, named by a hash of its definition
and of the generator's source, so an edit to the generator regenerates it. Benchmarks
memory-map it with `load_graph`. An ImportError inside rtsoa propagates: asv then reports the
benchmark as failed, not skipped (a skip, from NotImplementedError, would make the benchmarks
of a broken import quietly vanish). Only a missing C compiler skips, and only the benchmarks
that need the C baseline.
"""

import hashlib
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .cbaseline import CompilerNotFound, prepare_baseline, reference_checksum

REPO_ROOT = Path(__file__).resolve().parents[2]
SEED = 102
KERNELS = 8
EXECUTORS = ("sequential", "topological", "priority")

# The "Speed" workloads: name -> arguments of rtsoa.graph.generators.generate.
WORKLOADS = {
    "chain": {"kind": "chain", "nodes": 1_000_000},
    "random": {"kind": "random", "nodes": 100_000, "edges_per_node": 10, "window": 1000},
    "layered": {"kind": "layered", "nodes": 100_000, "layers": 1000, "width": 100, "fan_in": 4},
}
WORKLOAD_NAMES = tuple(WORKLOADS)
FRESH_PROCESS_WORKLOAD = "random"  # the 100k-node graph of the fresh-process benchmarks


def cache_root():
    """$RTSOA_BENCH_CACHE, or <tmp>/rtsoa-bench (also where the C baselines are compiled)."""
    configured = os.environ.get("RTSOA_BENCH_CACHE")
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "rtsoa-bench"


def ensure_rtsoa_importable():
    """Put the repository root on sys.path when rtsoa is not installed (asv 'existing' env)."""
    try:
        import rtsoa  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(REPO_ROOT))


def _import(module):
    """Import an rtsoa module; an ImportError propagates, so asv reports a failure."""
    ensure_rtsoa_importable()
    return importlib.import_module(module)


def _workload_key(name):
    generators = _import("rtsoa.graph.generators")
    schema = _import("rtsoa.graph.schema")
    digest = hashlib.sha256()
    definition = {"workload": WORKLOADS[name], "seed": SEED, "kernels": KERNELS}
    digest.update(json.dumps(definition, sort_keys=True).encode())
    digest.update(str(schema.FORMAT_VERSION).encode())
    digest.update(Path(generators.__file__).read_bytes())
    return digest.hexdigest()[:16]


def workload_path(name):
    """Path of the saved workload graph, generating and saving it on first use."""
    path = cache_root() / "graphs" / f"{name}-{_workload_key(name)}.rtsoa"
    if not path.is_dir():
        generators = _import("rtsoa.graph.generators")
        io = _import("rtsoa.graph.io")
        options = dict(WORKLOADS[name])
        kind = options.pop("kind")
        nodes = options.pop("nodes")
        graph = generators.generate(kind, nodes, seed=SEED, kernels=KERNELS, **options)
        io.save_graph(graph, path)  # atomic: concurrent builders both end with a whole graph
    return path


def build_workloads():
    """Generate every workload that is not cached yet; {name: path as str} (asv setup_cache)."""
    return {name: str(workload_path(name)) for name in WORKLOAD_NAMES}


def load_workload(path):
    """The saved graph at `path`, memory-mapped."""
    io = _import("rtsoa.graph.io")
    return io.load_graph(path)


def workload_checksum(path):
    """The checksum of one run of the saved workload at `path` (NumPy reference, no rtsoa
    executor), for `fresh_process_code`."""
    return reference_checksum(checksum_kernel_ids(load_workload(path)))


def checksum_kernel_ids(graph):
    """For each node, k of its kernel "Checksum<k>" (the C kernel table's index)."""
    table = np.full(len(graph.kernel_names), -1, dtype=np.int32)
    for index, name in enumerate(graph.kernel_names):
        if name.startswith("Checksum") and name[len("Checksum") :].isdigit():
            table[index] = int(name[len("Checksum") :])
    kernel_ids = table[graph.node_kernel]
    if kernel_ids.size and (kernel_ids.min() < 0 or kernel_ids.max() >= KERNELS):
        raise ValueError(f"the C baseline runs only Checksum0..Checksum{KERNELS - 1} nodes")
    return kernel_ids


def prepare_c(graph, executor):
    """The C baseline of `executor` bound to `graph` (NotImplementedError without gcc)."""
    try:
        return prepare_baseline(
            executor,
            graph.succ_offsets,
            graph.succ_targets,
            graph.in_degree,
            checksum_kernel_ids(graph),
            graph.node_priority,
        )
    except CompilerNotFound as error:
        raise NotImplementedError(str(error)) from error


def prepare_rtsoa(graph, executor):
    """rtsoa's prepared executor."""
    return _import("rtsoa.executors").prepare_executor(graph, executor=executor)


def as_uint64(value):
    """A checksum as a Python int in [0, 2**64), whatever integer type rtsoa returns it as."""
    return int(value) & (2**64 - 1)


class Pair:
    """rtsoa and its C baseline prepared on one graph, warmed up and checked against each other."""

    def __init__(self, path, executor):
        self.graph = load_workload(path)
        self.num_nodes = self.graph.num_nodes
        self.executor = executor
        self.c = prepare_c(self.graph, executor)
        self.rtsoa = prepare_rtsoa(self.graph, executor)
        self.expected_checksum = reference_checksum(checksum_kernel_ids(self.graph))
        self.check()

    def run_c(self):
        return self.c.run()

    def run_rtsoa(self):
        return self.rtsoa.run()

    def check(self):
        """Run both twice (the first rtsoa run warms the JIT) and assert identical results."""
        for _ in range(2):
            executed, checksum = self.c.run()
            assert executed == self.num_nodes, f"C executed {executed} of {self.num_nodes}"
            assert checksum == self.expected_checksum, "C checksum differs from NumPy"
            result = self.rtsoa.run()
            assert int(result.nodes_executed) == self.num_nodes, (
                f"rtsoa {self.executor} executed {result.nodes_executed} of {self.num_nodes}"
            )
            assert as_uint64(result.checksum) == self.expected_checksum, (
                f"rtsoa {self.executor} checksum {as_uint64(result.checksum):#x} != "
                f"C {self.expected_checksum:#x}"
            )

    def measure(self, repeats=15):
        """Median seconds per run of C and rtsoa, interleaved so both see the same machine."""
        c_times, rtsoa_times = [], []
        clock = time.perf_counter
        for _ in range(repeats):
            start = clock()
            self.c.run()
            middle = clock()
            self.rtsoa.run()
            end = clock()
            c_times.append(middle - start)
            rtsoa_times.append(end - middle)
        return Figures(statistics.median(c_times), statistics.median(rtsoa_times), self.num_nodes)


class Figures:
    """Median seconds per run of C and rtsoa on one graph, and what asv tracks from them."""

    def __init__(self, c_seconds, rtsoa_seconds, num_nodes):
        self.c_seconds = c_seconds
        self.rtsoa_seconds = rtsoa_seconds
        self.num_nodes = num_nodes

    @property
    def c_ns_per_node(self):
        return self.c_seconds * 1e9 / self.num_nodes

    @property
    def rtsoa_ns_per_node(self):
        return self.rtsoa_seconds * 1e9 / self.num_nodes

    @property
    def ratio(self):
        return self.rtsoa_seconds / self.c_seconds


def process_preamble(cold_cache):
    """First lines of a fresh-process benchmark's source: with `cold_cache`, Numba's and rtsoa's
    disk caches are pointed at a new empty directory (removed at exit) before any import."""
    lines = ["import os, sys"]
    if cold_cache:
        lines += [
            "import atexit, shutil, tempfile",
            "cache_dir = tempfile.mkdtemp(prefix='rtsoa-cold-')",
            "atexit.register(shutil.rmtree, cache_dir, True)",
            "os.environ['NUMBA_CACHE_DIR'] = os.path.join(cache_dir, 'numba')",
            "os.environ['RTSOA_CACHE_DIR'] = os.path.join(cache_dir, 'rtsoa')",
        ]
    return lines


def fresh_process_code(path, executor, expected_checksum, cold_cache=False):
    """Python source that loads the saved graph at `path`, runs `executor` once and asserts
    every node ran with `expected_checksum` (from `workload_checksum`, computed by the caller so
    the timed process does not pay for it).

    With `cold_cache`, Numba's and rtsoa's disk caches are pointed at a new empty directory
    (removed at exit) before anything is imported, so the run includes every compile.
    """
    lines = process_preamble(cold_cache)
    lines += [
        "try:",
        "    import rtsoa",
        "except ImportError:  # not installed: use this checkout, as ensure_rtsoa_importable",
        f"    sys.path.insert(0, {str(REPO_ROOT)!r})",
        "from rtsoa.graph.io import load_graph",
        "from rtsoa.executors import prepare_executor",
        f"graph = load_graph({str(path)!r})",
        f"result = prepare_executor(graph, executor={executor!r}).run()",
        "assert int(result.nodes_executed) == graph.num_nodes, result",
        f"assert int(result.checksum) & (2**64 - 1) == {int(expected_checksum)}, result",
    ]
    return "\n".join(lines) + "\n"


def alone_medians(first, second, rounds=5, runs=4, pause=0.3):
    """Median latencies of `first` and `second`, each timed in blocks of `runs` calls after
    one untimed call, the order alternating over `rounds`, with `pause` seconds between blocks
    so that the threads the other left spinning have gone to sleep."""
    times = ([], [])
    for round_ in range(rounds):
        for side in (0, 1) if round_ % 2 == 0 else (1, 0):
            call = (first, second)[side]
            call()
            for _ in range(runs):
                start = time.perf_counter()
                call()
                times[side].append(time.perf_counter() - start)
            time.sleep(pause)
    return float(np.median(times[0])), float(np.median(times[1]))
