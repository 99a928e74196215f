"""rtsoa's executors against C baselines on the Speed workloads of common.py.

- `ExecutorSpeed.track_*`: ns/node of rtsoa and of C, and the ratio rtsoa / C, each measured in
  one process by interleaving C and rtsoa runs (median of `REPEATS`), so the ratio does not mix
  machine states. Targets: sequential <= 1.3, topological <= 1.5, priority <= 1.5.
- `ExecutorTime.time_rtsoa`, `CBaselineTime.time_c`: the same runs as plain asv timings.
- `FreshProcess.timeraw_*`: a new interpreter loads the saved 100k-node random DAG and runs it
  once, with the disk caches warm (target < 2 s) or pointed at an empty directory (the cold
  compile time).

Every setup warms the JIT and asserts that rtsoa executes every node with the C checksum;
the fresh processes assert the checksum too. An ImportError inside rtsoa fails the benchmarks
(it is not turned into a skip); without gcc the benchmarks that need the C baseline skip.
"""

import subprocess
import sys

from .common import (
    EXECUTORS,
    FRESH_PROCESS_WORKLOAD,
    WORKLOAD_NAMES,
    Pair,
    build_workloads,
    checksum_kernel_ids,
    fresh_process_code,
    load_workload,
    prepare_c,
    reference_checksum,
    workload_checksum,
)

REPEATS = 15


def setup_cache():
    """Generate and save the workload graphs once; every benchmark gets {name: path}."""
    return build_workloads()


setup_cache.timeout = 900


class ExecutorSpeed:
    """ns/node of rtsoa and its C baseline, and their ratio, from one process."""

    params = (WORKLOAD_NAMES, EXECUTORS)
    param_names = ("workload", "executor")
    timeout = 600

    def setup(self, paths, workload, executor):
        self.pair = Pair(paths[workload], executor)
        self.figures = None

    def _measure(self):
        if self.figures is None:
            self.figures = self.pair.measure(REPEATS)
        return self.figures

    def track_rtsoa_ns_per_node(self, paths, workload, executor):
        return self._measure().rtsoa_ns_per_node

    track_rtsoa_ns_per_node.unit = "ns/node"

    def track_c_ns_per_node(self, paths, workload, executor):
        return self._measure().c_ns_per_node

    track_c_ns_per_node.unit = "ns/node"

    def track_ratio(self, paths, workload, executor):
        return self._measure().ratio

    track_ratio.unit = "ratio"


class ExecutorTime:
    """One whole run of the graph by rtsoa's executor (checked against C in setup)."""

    params = (WORKLOAD_NAMES, EXECUTORS)
    param_names = ("workload", "executor")
    timeout = 600

    def setup(self, paths, workload, executor):
        self.pair = Pair(paths[workload], executor)

    def time_rtsoa(self, paths, workload, executor):
        self.pair.run_rtsoa()


class CBaselineTime:
    """One whole run of the graph by the C baseline (needs no rtsoa executor)."""

    params = (WORKLOAD_NAMES, EXECUTORS)
    param_names = ("workload", "executor")
    timeout = 600

    def setup(self, paths, workload, executor):
        graph = load_workload(paths[workload])
        self.baseline = prepare_c(graph, executor)
        expected = (graph.num_nodes, reference_checksum(checksum_kernel_ids(graph)))
        assert self.baseline.run() == expected, "C baseline disagrees with the NumPy reference"

    def time_c(self, paths, workload, executor):
        self.baseline.run()


class FreshProcess:
    """A new interpreter: import rtsoa, load the 100k-node graph, prepare, run once."""

    params = (EXECUTORS,)
    param_names = ("executor",)
    number = 1
    repeat = (1, 5, 120.0)
    warmup_time = 0
    timeout = 900

    def setup(self, paths, executor):
        code = _fresh_process_code(paths, executor)
        # Warm the disk caches exactly as the timed process will use them.
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"warm-up process failed:\n{result.stderr}")

    def timeraw_first_run_warm_cache(self, paths, executor):
        return _fresh_process_code(paths, executor)

    def timeraw_first_run_cold_cache(self, paths, executor):
        return _fresh_process_code(paths, executor, cold_cache=True)


def _fresh_process_code(paths, executor, cold_cache=False):
    path = paths[FRESH_PROCESS_WORKLOAD]
    return fresh_process_code(path, executor, workload_checksum(path), cold_cache=cold_cache)


def main():
    """Print the executors' table: `cd asv_bench && python -m benchmarks.bench_executors`."""
    import time

    paths = build_workloads()
    print(f"{'workload':9} {'executor':12} {'C ns/node':>10} {'rtsoa ns/node':>14} {'ratio':>6}")
    for workload in WORKLOAD_NAMES:
        for executor in EXECUTORS:
            try:
                figures = Pair(paths[workload], executor).measure(REPEATS)
            except NotImplementedError as error:
                print(f"{workload:9} {executor:12} skipped: {error}")
                continue
            print(
                f"{workload:9} {executor:12} {figures.c_ns_per_node:10.1f} "
                f"{figures.rtsoa_ns_per_node:14.1f} {figures.ratio:6.2f}"
            )
    for executor in EXECUTORS:
        for cold in (False, True):
            code = _fresh_process_code(paths, executor, cold_cache=cold)
            start = time.perf_counter()
            result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            seconds = time.perf_counter() - start
            state = "cold" if cold else "warm"
            outcome = "ok" if result.returncode == 0 else result.stderr.strip().splitlines()[-1]
            print(f"fresh process, {state} cache, {executor:12} {seconds:6.2f} s wall  {outcome}")


if __name__ == "__main__":
    main()
