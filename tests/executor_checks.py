"""What the executor tests share: hypothesis settings, the generated and random-priority
graphs the property tests draw, and profiled runs.

Used by tests/test_executors.py (single-thread executors against the reference's exact
order) and tests/test_multithread.py (the multithread executor's answers and edge order).
"""

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from reference import RecordingBuilder, recorded_generate

from rtsoa.executors import Profiler

KINDS = ("chain", "random", "layered", "lowered")
# Generator options the property tests use: small windows, so small graphs are dense.
PROPERTY_OPTIONS = {"random": {"edges_per_node": 4, "window": 30}, "layered": {"width": 9}}

# The strategies of the generated-graph property tests (pass as `@given(**GENERATED, ...)`).
GENERATED = {
    "kind": st.sampled_from(KINDS),
    "nodes": st.integers(1, 400),
    "seed": st.integers(0, 2**31 - 1),
    "kernels": st.integers(1, 16),
}


def property_settings(max_examples):
    """Settings of the executor property tests: no deadline (first runs compile)."""
    return settings(
        max_examples=max_examples, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )


def generated_case(kind, nodes, seed, kernels):
    """(graph, description) of a generated graph with the property tests' options."""
    return recorded_generate(
        kind, nodes, seed=seed, kernels=kernels, **PROPERTY_OPTIONS.get(kind, {})
    )


def random_priority_graph(data, nodes):
    """(graph, description): `nodes` Checksum3 nodes with drawn priorities in -5 .. 5 and up
    to 150 drawn edges (from the smaller id to the larger, repeats included, in any order)."""
    builder = RecordingBuilder()
    priorities = data.draw(st.lists(st.integers(-5, 5), min_size=nodes, max_size=nodes))
    for priority in priorities:
        builder.add_node("Checksum3", priority=priority)
    pairs = data.draw(
        st.lists(st.tuples(st.integers(0, nodes - 1), st.integers(0, nodes - 1)), max_size=150)
    )
    for a, b in pairs:
        if a != b:
            builder.add_edge(min(a, b), max(a, b))
    return builder.finalize(), builder.description


def run_recorded(executor):
    """(RunResult of the plain loop, executed order from the profiled loop); both runs
    must give the same result."""
    result = executor.run()
    profiler = Profiler()
    recorded = executor.run(subscriber=profiler)
    assert recorded == result
    return result, profiler.nodes.copy()
