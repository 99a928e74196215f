"""rtsoa's executors against C baselines on the issue's Speed workloads.

- `ExecutorSpeed.track_*`: ns/node of rtsoa and of C, and the ratio rtsoa / C, each measured in
  one process by interleaving C and rtsoa runs (median of `REPEATS`), so the ratio does not mix
  machine states. Targets: sequential <= 1.3, topological <= 1.5, priority <= 1.5.
- `ExecutorTime.time_*`: the same runs as plain asv timings.
- `FreshProcess.timeraw_*`: a new interpreter loads the saved 100k-node random DAG and runs it
  once, with the disk caches warm (target < 2 s) or pointed at an empty directory (the cold
  compile time).

Every setup warms the JIT and asserts that rtsoa executes every node with the C checksum.
Until rtsoa.executors exists, setups raise NotImplementedError and asv reports skips.
"""

import subprocess
import sys

from .common import (
    EXECUTORS,
    FRESH_PROCESS_WORKLOAD,
    WORKLOAD_NAMES,
    Pair,
    build_workloads,
    fresh_process_code,
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
    """One whole run of the graph, rtsoa and C, as plain asv timings."""

    params = (WORKLOAD_NAMES, EXECUTORS)
    param_names = ("workload", "executor")
    timeout = 600

    def setup(self, paths, workload, executor):
        self.pair = Pair(paths[workload], executor)

    def time_rtsoa(self, paths, workload, executor):
        self.pair.run_rtsoa()

    def time_c(self, paths, workload, executor):
        self.pair.run_c()


class FreshProcess:
    """A new interpreter: import rtsoa, load the 100k-node graph, prepare, run once."""

    params = (EXECUTORS,)
    param_names = ("executor",)
    number = 1
    repeat = (1, 5, 120.0)
    warmup_time = 0
    timeout = 900

    def setup(self, paths, executor):
        path = paths[FRESH_PROCESS_WORKLOAD]
        code = fresh_process_code(path, executor)
        # Warm the disk caches exactly as the timed process will use them.
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if result.returncode != 0:
            if "No module named 'rtsoa.executors'" in result.stderr or (
                "cannot import name 'prepare_executor'" in result.stderr
            ):
                raise NotImplementedError("rtsoa.executors.prepare_executor is not available yet")
            raise RuntimeError(f"warm-up process failed:\n{result.stderr}")

    def timeraw_first_run_warm_cache(self, paths, executor):
        return fresh_process_code(paths[FRESH_PROCESS_WORKLOAD], executor)

    def timeraw_first_run_cold_cache(self, paths, executor):
        return fresh_process_code(paths[FRESH_PROCESS_WORKLOAD], executor, cold_cache=True)
