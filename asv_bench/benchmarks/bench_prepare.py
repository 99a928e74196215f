"""Prepare cost and the kernel ABI's per-field cost.

- `Prepare.time_prepare`: `prepare_executor` of the saved 100k-node / 1M-edge random DAG
  (memory-mapped), with the device given so that only rtsoa's own preparation is timed:
  binding, checks, run state, the compiled loop lookup, and for sequential its Kahn order.
  Targets: <= 2 ms topological and priority, <= 6 ms sequential.
- `KernelAbi.track_wide_over_narrow`: the same sequential run with a runtime tuple that
  carries an extra part of eight arrays no kernel reads (a bundle, as the ABI adds parts),
  over the normal runtime, interleaved in one process: adding a field must not slow every
  kernel call (target ~1.0). `track_wide_by_value_over_narrow`: the part as a tuple passed
  by value, for comparison (1.09-1.17 on this VM: why the runtime's parts are bundles).

Reproduce: `cd asv_bench && asv run --python=same --quick -b bench_prepare`, or print the
figures with `cd asv_bench && python -m benchmarks.bench_prepare`.
"""

import statistics
import time
from typing import NamedTuple

import numpy as np

from rtsoa._bundle import bundle_class

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
    extra: object


# A part added the way the ABI adds one: an array bundle (one pointer, `rtsoa._bundle`).
_ExtraPart = bundle_class(
    "ExtraPart", __name__, {f"array_{k}": (np.int64, 1, True) for k in range(8)}
)


def wide_over_narrow(path, repeats=15, by_value=False):
    """Median time of a sequential run with `_WideRuntime` over one with the normal runtime;
    the extra part is a bundle of eight arrays, or with `by_value` a tuple of them (passed
    by value: ~56 more argument words)."""
    graph = load_workload(path)
    executor = prepare_rtsoa(graph, "sequential")
    narrow = executor.runtime
    arrays = {f"array_{k}": np.zeros(1024, dtype=np.int64) for k in range(8)}
    extra = tuple(arrays.values()) if by_value else _ExtraPart(**arrays)
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
    """Cost of a runtime part that kernels do not read, as a ratio in one process: added as
    the ABI adds parts (a bundle, target ~1.0), and for comparison as a tuple by value."""

    timeout = 300

    def setup(self, paths):
        self.ratio = wide_over_narrow(paths[FRESH_PROCESS_WORKLOAD])
        self.by_value = wide_over_narrow(paths[FRESH_PROCESS_WORKLOAD], by_value=True)

    def track_wide_over_narrow(self, paths):
        return self.ratio

    track_wide_over_narrow.unit = "ratio"

    def track_wide_by_value_over_narrow(self, paths):
        return self.by_value

    track_wide_by_value_over_narrow.unit = "ratio"


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
    by_value = wide_over_narrow(paths[FRESH_PROCESS_WORKLOAD], by_value=True)
    print(
        f"sequential run, runtime with an extra unread part / normal runtime: {ratio:.3f} "
        f"(the part as a tuple by value: {by_value:.3f})"
    )


if __name__ == "__main__":
    main()
