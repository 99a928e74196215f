"""Every run terminates and an executor refuses concurrent use."""

import threading
import time

import pytest

from rtsoa import GraphBuilder, GraphFormatError
from rtsoa.abi.status import STATUS_STEP_LIMIT
from rtsoa.executors import DEFAULT_MAX_STEPS, ExecutorBusyError, KernelError, prepare_executor
from rtsoa.graph.generators import generate
from rtsoa.kernels.checksum import expected_checksum
from rtsoa.kernels.control_flow import add_const_int, add_if, add_while

QUEUE_EXECUTORS = ("topological", "priority")


def _clamped_diamonds(count, validate=True):
    """A chain of `count` diamonds whose joins have in-degree template 1 (a wait-anyone clamp
    without any control flow): each join is re-armed and runs once per predecessor, so a
    queue executor would run 2**count steps."""
    builder = GraphBuilder()
    top = builder.add_node("Checksum0")
    for _ in range(count):
        left = builder.add_node("Checksum1")
        right = builder.add_node("Checksum2")
        join = builder.add_node("Checksum3", wait_anyone=True)
        for a, b in ((top, left), (top, right), (left, join), (right, join)):
            builder.add_edge(a, b)
        top = join
    return builder.finalize(validate=validate)


def test_joins_that_would_run_twice_are_refused_at_load():
    """Before: this graph validated, sequential ran 10 nodes and the queue executors 29 (three
    diamonds), with different checksums. A wait-anyone clamp is only sound on exclusive
    predecessors (If / Case branches of one switch, a While head)."""
    with pytest.raises(GraphFormatError, match="nothing makes them exclusive") as caught:
        _clamped_diamonds(3)
    assert (caught.value.table, caught.value.column, caught.value.row) == ("nodes", "in_degree", 3)


@pytest.mark.parametrize("executor", QUEUE_EXECUTORS)
def test_a_graph_without_loops_runs_each_node_at_most_once(executor):
    """Defence in depth, with validation skipped: before, no step limit applied without
    control-flow kernels, and 40 diamonds meant 2**40 steps (a hang). Now the limit of a graph
    without loops is its node count."""
    graph = _clamped_diamonds(40, validate=False)
    ex = prepare_executor(graph, executor)
    assert ex.max_steps == graph.num_nodes
    with pytest.raises(KernelError) as caught:
        ex.run()
    assert caught.value.status == STATUS_STEP_LIMIT
    assert caught.value.nodes_executed == graph.num_nodes  # stopped at n steps, not 2**40


@pytest.mark.parametrize("executor", QUEUE_EXECUTORS)
def test_a_cycle_of_plain_kernels_is_bounded(executor):
    """Before: `has_loops` with a cycle of plain kernels (no control-flow kernel) validated and
    ran with no step limit at all, forever. Now it is refused at load, and bounded anyway."""
    builder = GraphBuilder()
    enter = builder.add_node("Checksum0")
    head = builder.add_node("Checksum1", wait_anyone=True)
    body = builder.add_node("Checksum2")
    builder.add_edge(enter, head)
    builder.add_edge(head, body)
    builder.add_edge(body, head)
    builder.has_loops = True
    with pytest.raises(GraphFormatError, match="nothing makes them exclusive"):
        builder.finalize()  # a loop head needs a loop body subgraph feeding it
    graph = builder.finalize(validate=False)
    assert prepare_executor(graph, executor).max_steps == DEFAULT_MAX_STEPS
    ex = prepare_executor(graph, executor, max_steps=10_000)
    with pytest.raises(KernelError) as caught:
        ex.run()
    assert caught.value.status == STATUS_STEP_LIMIT


def _busy_chain():
    """A chain of Busy nodes that takes a few hundred ms to run (the loop releases the GIL)."""
    builder = GraphBuilder()
    previous = None
    for _ in range(2000):
        node = builder.add_node("Busy", attributes=[100_000])
        if previous is not None:
            builder.add_edge(previous, node)
        previous = node
    return builder.finalize()


@pytest.mark.parametrize("executor", ["sequential", "topological", "priority"])
def test_an_executor_used_from_two_threads_refuses_the_second_run(executor):
    """Before: two threads calling run() on one executor shared its in-degrees, queue and
    checksum: wrong checksums, early success, or (lowered graphs) a spin in the allocator."""
    graph = _busy_chain()
    ex = prepare_executor(graph, executor)
    expected = ex.run()
    started = threading.Event()
    results = []

    def first():
        started.set()
        results.append(ex.run())

    thread = threading.Thread(target=first)
    thread.start()
    started.wait()
    deadline = time.monotonic() + 10
    while not ex._busy.locked() and time.monotonic() < deadline:
        time.sleep(0.0005)  # wait until the first run holds the executor
    with pytest.raises(ExecutorBusyError, match="already running"):
        ex.run()
    thread.join()
    assert results == [expected]
    assert ex.run() == expected  # usable again afterwards


def test_default_limit_of_a_graph_without_loops_lets_it_finish():
    graph = generate("random", 500, seed=4)
    for executor in QUEUE_EXECUTORS:
        result = prepare_executor(graph, executor).run()
        assert result.nodes_executed == 500
        assert result.checksum == expected_checksum(graph)


def _two_switch_if():
    """Two switches, each with one branch, whose branches join in one wait-anyone node."""
    builder = GraphBuilder()
    joins = []
    for _ in range(2):
        switch_node, condition = add_const_int(builder, 0)
        nodes = add_if(builder, condition, [None], after=[switch_node])
        joins.append(nodes)
    return builder, joins


def test_branches_of_different_switches_cannot_share_a_join():
    builder, (first, second) = _two_switch_if()
    join = builder.add_node("Noop", wait_anyone=True)
    builder.add_edge(first.dones[0], join)
    builder.add_edge(second.dones[0], join)
    with pytest.raises(GraphFormatError, match="not all entered from one switch"):
        builder.finalize()


def test_a_loop_head_needs_exactly_one_entry():
    builder = GraphBuilder()
    loop = add_while(builder, iterations=3)
    extra = builder.add_node("Noop")
    builder.add_edge(extra, loop.join)
    with pytest.raises(GraphFormatError, match="exactly one entry") as caught:
        builder.finalize()
    assert caught.value.row == loop.join


def test_the_builders_joins_validate():
    builder = GraphBuilder()
    _, condition = add_const_int(builder, 1)
    add_if(builder, condition, [None, None, None])
    add_while(builder, iterations=2)
    builder.finalize()  # no error


def test_two_executors_sharing_a_device_refuse_concurrent_runs():
    """The device's allocator and clocks are not thread-safe: a second executor's run on a
    device that a run in another thread holds is refused (before: silent corruption)."""
    graph = _busy_chain()
    first = prepare_executor(graph, "sequential")
    second = prepare_executor(graph, "sequential", device=first.device)
    expected = second.run()
    thread = threading.Thread(target=first.run)
    thread.start()
    deadline = time.monotonic() + 10
    while not first.device.run_lock.locked() and time.monotonic() < deadline:
        time.sleep(0.0005)
    with pytest.raises(ExecutorBusyError, match="device .* in use"):
        second.run()
    thread.join()
    assert second.run() == expected
