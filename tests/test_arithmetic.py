"""Integer arithmetic kernels (the kernel added by following CONTRIBUTING.md's recipe)."""

import pytest

from rtsoa import GraphBuilder, GraphFormatError
from rtsoa.executors import EXECUTORS, prepare_executor
from rtsoa.kernels import REGISTRY
from rtsoa.kernels.control_flow import add_const_int

INT64_MAX = 2**63 - 1


def _sum_graph(a, b):
    builder = GraphBuilder()
    left, a_value = add_const_int(builder, a)
    right, b_value = add_const_int(builder, b)
    node, (total,) = REGISTRY.add_node(builder, "AddInt", inputs=[a_value, b_value])
    builder.add_edge(left, node)
    builder.add_edge(right, node)
    return builder.finalize(), total


@pytest.mark.parametrize("executor", list(EXECUTORS))
@pytest.mark.parametrize(
    "a, b, expected",
    [(3, 4, 7), (-10, 4, -6), (INT64_MAX, 1, -(2**63))],  # int64 wraps, as numpy does
)
def test_add_int_writes_the_sum(executor, a, b, expected):
    graph, total = _sum_graph(a, b)
    ex = prepare_executor(graph, executor)
    ex.run()
    assert ex.runtime.values.slots[total] == expected


def test_add_int_needs_two_inputs():
    builder = GraphBuilder()
    const, value = add_const_int(builder, 1)
    node, _ = REGISTRY.add_node(builder, "AddInt", inputs=[value])
    builder.add_edge(const, node)  # ordered after its producer: a racy graph is refused at load
    with pytest.raises(GraphFormatError, match="'AddInt', which needs at least 2 inputs"):
        prepare_executor(builder.finalize(), "sequential")
