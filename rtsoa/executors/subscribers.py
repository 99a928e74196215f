"""Subscribers: observe runs through the profiled loop variant; the plain loop pays nothing.

`executor.run(subscriber=...)` runs `run_<executor>_profiled`, a separately compiled copy of the
loop that writes (node, start ns, end ns) for every step into a preallocated record array inside
the jitted loop. Events reach subscribers as:
  - on_model_start(executor, time_ns): before the loop starts;
  - on_node_start(node, time_ns) / on_node_end(node, time_ns): replayed from the record after
    the loop returns (jitted code cannot call Python per node without paying for it), only for
    subscribers with `node_events = True`;
  - on_model_end(executor, result, steps, time_ns): `steps` is the (k, 3) int64 record
    [node, start, end], a view valid until the executor's next subscribed run.
Times are CLOCK_MONOTONIC nanoseconds, the clock of `time.monotonic_ns()`.
"""

import json
from pathlib import Path

import numpy as np


class Subscriber:
    """Base class: override the events you need (all are no-ops here)."""

    node_events = False  # True: on_node_start / on_node_end are called for every step

    def on_model_start(self, executor, time_ns):
        pass

    def on_node_start(self, node, time_ns):
        pass

    def on_node_end(self, node, time_ns):
        pass

    def on_model_end(self, executor, result, steps, time_ns):
        pass

    def replay_nodes(self, executor, steps):
        """Deliver the per-node events of a finished run (only when node_events is set)."""
        if not self.node_events:
            return
        for node, start, end in steps.tolist():
            self.on_node_start(node, start)
            self.on_node_end(node, end)


class Profiler(Subscriber):
    """Per-step start / end nanoseconds of the last run, recorded inside the jitted loop.

    After a run: `nodes`, `start_ns`, `end_ns` (views of the executor's record; copy them to
    keep them past the next run), `model_start_ns`, `model_end_ns`, `result`.
    """

    def __init__(self):
        self.nodes = np.zeros(0, dtype=np.int64)
        self.start_ns = np.zeros(0, dtype=np.int64)
        self.end_ns = np.zeros(0, dtype=np.int64)
        self.model_start_ns = 0
        self.model_end_ns = 0
        self.result = None
        self.executor = None

    def on_model_start(self, executor, time_ns):
        self.executor = executor
        self.model_start_ns = time_ns

    def on_model_end(self, executor, result, steps, time_ns):
        self.nodes = steps[:, 0]
        self.start_ns = steps[:, 1]
        self.end_ns = steps[:, 2]
        self.model_end_ns = time_ns
        self.result = result

    def durations_ns(self):
        return self.end_ns - self.start_ns

    def by_kernel(self):
        """{kernel name: (count, total ns)} over the last run."""
        graph = self.executor.graph
        kernels = graph.node_kernel[self.nodes]
        durations = self.durations_ns()
        summary = {}
        for index, name in enumerate(graph.kernel_names):
            mask = kernels == index
            if mask.any():
                summary[name] = (int(mask.sum()), int(durations[mask].sum()))
        return summary


class Tracer(Subscriber):
    """Chrome trace JSON (opens in Perfetto / chrome://tracing): one slice per executed node.

    Each run appends a model slice and its node slices (thread = the node's stream);
    `save(path)` writes `{"traceEvents": [...]}`. Node slices carry the kernel's trace printer
    output in `args` when `details=True` (Python per node: fine for inspection, slow for 1M).
    """

    def __init__(self, details=True, pid=1):
        self.details = details
        self.pid = pid
        self.events = []
        self._origin = None
        self._run = 0
        self._model_start = 0

    def on_model_start(self, executor, time_ns):
        if self._origin is None:
            self._origin = time_ns
        self._model_start = time_ns

    def _us(self, time_ns):
        return (time_ns - self._origin) / 1000.0

    def on_model_end(self, executor, result, steps, time_ns):
        graph = executor.graph
        registry = executor.registry
        self.events.append(
            {
                "name": f"run {self._run} ({executor.name})",
                "cat": "model",
                "ph": "X",
                "ts": self._us(self._model_start),
                "dur": (time_ns - self._model_start) / 1000.0,
                "pid": self.pid,
                "tid": 0,
                "args": {"status": result.status, "nodes_executed": result.nodes_executed},
            }
        )
        for node, start, end in steps.tolist():
            name = graph.kernel_names[int(graph.node_kernel[node])]
            event = {
                "name": name,
                "cat": "kernel",
                "ph": "X",
                "ts": self._us(start),
                "dur": (end - start) / 1000.0,
                "pid": self.pid,
                "tid": int(graph.node_stream[node]) + 1,
                "args": {"node": node, "compute_node": int(graph.node_compute[node])},
            }
            if self.details and name in registry:
                event["args"]["trace"] = registry[name].trace(graph, node)
            self.events.append(event)
        self._run += 1

    def trace(self):
        """The Chrome trace object."""
        return {"traceEvents": self.events, "displayTimeUnit": "ns"}

    def save(self, path):
        """Write the trace as JSON; returns the path."""
        path = Path(path)
        path.write_text(json.dumps(self.trace()))
        return path
