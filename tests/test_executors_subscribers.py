"""Subscribers: the profiled loop variant, the profiler and the Chrome-trace tracer."""

import json

import numpy as np
import pytest
from reference import check_dag_order

from rtsoa.executors import EXECUTORS, KernelError, Profiler, Subscriber, Tracer, prepare_executor
from rtsoa.graph.generators import generate


@pytest.fixture(scope="module")
def graph():
    return generate("lowered", 400, seed=2)


class Recorder(Subscriber):
    node_events = True

    def __init__(self):
        self.events = []

    def on_model_start(self, executor, time_ns):
        self.events.append(("model_start", executor.name))

    def on_node_start(self, node, time_ns):
        self.events.append(("node_start", node))

    def on_node_end(self, node, time_ns):
        self.events.append(("node_end", node))

    def on_model_end(self, executor, result, steps, time_ns):
        self.events.append(("model_end", result.nodes_executed))


@pytest.mark.parametrize("name", EXECUTORS)
def test_profiler_records_every_step(graph, name):
    executor = prepare_executor(graph, name)
    profiler = Profiler()
    result = executor.run(subscriber=profiler)
    assert profiler.nodes.shape[0] == result.nodes_executed == graph.num_nodes
    check_dag_order(graph, profiler.nodes)
    assert (profiler.end_ns >= profiler.start_ns).all()
    assert (np.diff(profiler.start_ns) >= 0).all()
    assert profiler.model_start_ns <= profiler.start_ns[0]
    assert profiler.end_ns[-1] <= profiler.model_end_ns
    summary = profiler.by_kernel()
    assert sum(count for count, _ in summary.values()) == graph.num_nodes
    assert set(summary) == {"InferShape", "AllocMemory", "LaunchKernel", "FreeMemory"}


def test_events_in_order_and_several_subscribers(graph):
    executor = prepare_executor(graph, "topological")
    recorder = Recorder()
    profiler = Profiler()
    result = executor.run(subscriber=[recorder, profiler])
    events = recorder.events
    assert events[0] == ("model_start", "topological")
    assert events[-1] == ("model_end", result.nodes_executed)
    starts = [node for kind, node in events if kind == "node_start"]
    assert starts == profiler.nodes.tolist()
    assert events[1:3] == [("node_start", starts[0]), ("node_end", starts[0])]


def test_tracer_writes_chrome_trace(graph, tmp_path):
    executor = prepare_executor(graph, "priority")
    tracer = Tracer()
    executor.run(subscriber=tracer)
    executor.run(subscriber=tracer)
    path = tracer.save(tmp_path / "trace.json")
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    assert len(events) == 2 * (graph.num_nodes + 1)
    assert all(event["ph"] == "X" and event["dur"] >= 0 for event in events)
    kernels = [event for event in events if event["cat"] == "kernel"]
    assert kernels[0]["args"]["trace"].startswith(kernels[0]["name"] + "(node=")
    assert {event["name"] for event in kernels} == {
        "InferShape",
        "AllocMemory",
        "LaunchKernel",
        "FreeMemory",
    }


def test_record_capacity_drops_extra_steps(graph):
    executor = prepare_executor(graph, "sequential", record_capacity=10)
    profiler = Profiler()
    result = executor.run(subscriber=profiler)
    assert result.nodes_executed == graph.num_nodes
    assert profiler.nodes.shape[0] == 10
    assert executor.dropped_steps == graph.num_nodes - 10


def test_subscriber_sees_failed_run_then_error_raised():
    from rtsoa import GraphBuilder

    builder = GraphBuilder()
    builder.add_node("Checksum0")
    builder.add_node("Fail", attributes=[5])
    builder.add_edge(0, 1)
    executor = prepare_executor(builder.finalize(), "sequential")
    recorder = Recorder()
    with pytest.raises(KernelError):
        executor.run(subscriber=recorder)
    assert recorder.events[-1] == ("model_end", 2)
    assert [e for e in recorder.events if e[0] == "node_start"] == [
        ("node_start", 0),
        ("node_start", 1),
    ]


def test_plain_run_does_not_touch_the_record(graph):
    executor = prepare_executor(graph, "sequential")
    executor.run()
    assert executor._record is None  # the plain path never allocates the record
