"""Prepare cost and the kernel ABI's per-field cost.

- `Prepare.time_prepare`: `prepare_executor` of the saved 100k-node / 1M-edge random DAG
  (memory-mapped), with the device given so that only rtsoa's own preparation is timed:
  binding, checks, run state, the compiled loop lookup, and for sequential its Kahn order.
  Targets: <= 2 ms topological and priority, <= 6 ms sequential.
- `KernelAbi.track_wide_over_narrow`: the same sequential run with a runtime tuple that
  carries an extra part of eight arrays no kernel reads, over the normal runtime, interleaved
  in one process: adding a field must not slow every kernel call (target ~1.0).

Reproduce: `cd asv_bench && asv run --python=same --quick -b bench_prepare`, or print the
figures with `cd asv_bench && python -m benchmarks.bench_prepare`.
"""

import statistics
import time
from typing import NamedTuple

import numpy as np

from .common import (
    EXECUTORS,
    FRESH_PROCESS_WORKLOAD,
    build_workloads,
    checksum_kernel_ids,
    load_workload,
    prepare_rtsoa,
    reference_checksum,
)


def setup_cache():
    """Generate and save the workload graphs once; every benchmark gets {name: path}."""
    return build_workloads()


setup_cache.timeout = 900


class Prepare:
    """prepare_executor on the memory-mapped 100k-node / 1M-edge random DAG."""

    params = (EXECUTORS,)
    param_names = ("executor",)
    timeout = 300

    def setup(self, paths, executor):
        from rtsoa.executors import prepare_executor

        self.prepare = prepare_executor
        self.graph = load_workload(paths[FRESH_PROCESS_WORKLOAD])
        self.device = prepare_executor(self.graph, executor).device
        executor_object = self.prepare(self.graph, executor, device=self.device)
        result = executor_object.run()  # warms the loop; prepare then only looks it up
        assert result.nodes_executed == self.graph.num_nodes
        assert result.checksum == reference_checksum(checksum_kernel_ids(self.graph))

    def time_prepare(self, paths, executor):
        self.prepare(self.graph, executor, device=self.device)


class _WideRuntime(NamedTuple):
    """`rtsoa.kernels.Runtime` plus one part no kernel reads."""

    graph: object
    values: object
    worker: object
    device: object
    extra: tuple


def wide_over_narrow(path, repeats=15):
    """Median time of a sequential run with `_WideRuntime` over one with the normal runtime."""
    graph = load_workload(path)
    executor = prepare_rtsoa(graph, "sequential")
    narrow = executor.runtime
    extra = tuple(np.zeros(1024, dtype=np.int64) for _ in range(8))
    wide = _WideRuntime(narrow.graph, narrow.values, narrow.worker, narrow.device, extra)
    expected = reference_checksum(checksum_kernel_ids(graph))
    timings = {"narrow": [], "wide": []}
    for _ in range(repeats + 1):
        for name, runtime in (("narrow", narrow), ("wide", wide)):
            narrow.worker.checksum[0] = 0
            start = time.perf_counter()
            status, _, executed = executor._loop(runtime, *executor._arguments, None)
            timings[name].append(time.perf_counter() - start)
            assert status == 0 and executed == graph.num_nodes
            assert int(narrow.worker.checksum[0]) == expected
    # the first round compiles the wide signature
    return statistics.median(timings["wide"][1:]) / statistics.median(timings["narrow"][1:])


class KernelAbi:
    """Cost of a runtime field that kernels do not read, as a ratio in one process."""

    timeout = 300

    def setup(self, paths):
        self.ratio = wide_over_narrow(paths[FRESH_PROCESS_WORKLOAD])

    def track_wide_over_narrow(self, paths):
        return self.ratio

    track_wide_over_narrow.unit = "ratio"


def main():
    """Print the figures: `cd asv_bench && python -m benchmarks.bench_prepare`."""
    from rtsoa.executors import prepare_executor

    paths = build_workloads()
    graph = load_workload(paths[FRESH_PROCESS_WORKLOAD])
    for executor in EXECUTORS:
        device = prepare_executor(graph, executor).device
        prepare_executor(graph, executor, device=device).run()
        times = []
        for _ in range(25):
            start = time.perf_counter()
            prepare_executor(graph, executor, device=device)
            times.append(time.perf_counter() - start)
        print(
            f"prepare {executor:12} median {statistics.median(times) * 1e3:6.2f} ms, "
            f"best {min(times) * 1e3:6.2f} ms"
        )
    ratio = wide_over_narrow(paths[FRESH_PROCESS_WORKLOAD])
    print(f"sequential run, runtime with an extra unread part / normal runtime: {ratio:.3f}")


if __name__ == "__main__":
    main()
