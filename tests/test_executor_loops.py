"""The executor loops' own logic, run as plain Python: each loop's source (the function
`specialise` compiles) with a Python dispatch and plain-Python copies of every jitted helper it
calls, against the reference model of the recorded description.

Two reasons: it checks the loops without depending on Numba's compilation, and it needs no
compile at all, so mutation testing (mutation/executors.toml) can run thousands of mutants of
the loops, the sequential order and the heap in minutes instead of a compile per mutant.
"""

import types
import warnings

import numpy as np
import pytest
from abi_kernels import ABI_REGISTRY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pure_python import pure
from reference import RecordingBuilder, simulate
from test_control_flow import build, has_control_flow, programs

from rtsoa.abi.status import (
    STATUS_BAD_NOTIFY,
    STATUS_END_OF_SEQUENCE,
    STATUS_OK,
    STATUS_QUEUE_OVERFLOW,
    STATUS_STEP_LIMIT,
)
from rtsoa.errors import GraphFormatError
from rtsoa.executors import EXECUTORS, sequential
from rtsoa.graph import builder as builder_module
from rtsoa.graph import csr, validate
from rtsoa.graph.schema import GraphKind
from rtsoa.kernels import REGISTRY
from rtsoa.kernels.abi import make_runtime
from rtsoa.kernels.control_flow import add_const_int, add_if, add_while


@pytest.fixture(scope="module", autouse=True)
def python_graph_passes():
    """The builder's and the validator's jitted passes as plain Python (no compile)."""
    with pytest.MonkeyPatch.context() as patch:
        for module, name in (
            (csr, "_counting_sort_csr"),
            (csr, "_dedupe_rows"),
            (builder_module, "in_degrees"),
            (validate, "_check_edges"),
            (validate, "first_node_on_cycle"),
            (sequential, "_kahn_priority_order"),
            (sequential, "_kahn_fifo_order"),
            (sequential, "_priorities_are_the_order"),
        ):
            patch.setattr(module, name, pure(getattr(module, name)))
        with warnings.catch_warnings(), np.errstate(over="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)  # uint64 folds wrap on purpose
            yield


# The loops that run alone in one thread; the multithread loop is a protocol between workers
# (atomics, several threads), checked compiled in tests/test_multithread.py.
SINGLE_THREAD = tuple(name for name, cls in EXECUTORS.items() if not cls.uses_threads)
KERNELS = {info.name: info for info in REGISTRY.entries()}
KERNELS["NotifyAttr"] = ABI_REGISTRY["NotifyAttr"]
CONTROL_FLOW = {info.name: info.control_flow for info in REGISTRY.entries()}
CONTROL_FLOW["NotifyAttr"] = ABI_REGISTRY["NotifyAttr"].control_flow


class Run:
    """One executor loop run as Python on `graph`: (status, node, executed, order, checksum)."""

    # A bounded step count: a loop mutated never to stop ends with a failure, not a hang.
    # `cancel`: the cancellation words (default: never set); `on_step(steps)`: called before
    # each kernel with the number of kernels called so far.
    def __init__(self, graph, name, max_steps=100_000, slots=None, cancel=None, on_step=None):
        kernels = [
            (pure(KERNELS[kernel].function), KERNELS[kernel].constants)
            for kernel in graph.kernel_names
        ]

        steps = [0]

        def dispatch(rt, kernel, node):  # as the generated dispatch calls them
            if on_step is not None:
                on_step(steps[0])
                steps[0] += 1
            function, constants = kernels[kernel]
            return function(rt, node, *constants)

        loop = pure(EXECUTORS[name].loop)
        loop.__globals__["dispatch"] = dispatch
        main = graph.nodes_of(GraphKind.MAIN)
        state = types.SimpleNamespace(
            graph=graph,
            nodes=main,
            starts=main[graph.in_degree[main] == 0],
            max_steps=max_steps,
            cancel_words=np.zeros(2, dtype=np.int64) if cancel is None else cancel,
        )
        arguments = EXECUTORS[name]._prepare(state)
        control_flow = np.array([CONTROL_FLOW[name] for name in graph.kernel_names])
        rt = make_runtime(graph, graph.node_kernel, control_flow, None)
        for value, initial in (slots or {}).items():
            rt.values.slots[value] = initial
        # a row per step the loop may take (np.zeros maps pages on first touch: cheap); a
        # record smaller than the run would cut `order` short and pass for a wrong order
        record = np.zeros((max_steps, 3), dtype=np.int64)
        status, node, executed = loop(rt, *arguments, record)
        self.status, self.node, self.executed = int(status), int(node), int(executed)
        self.order = record[: min(self.executed, record.shape[0]), 0].tolist()
        self.checksum = int(rt.worker.checksum[0])


def check_against_reference(builder, names=SINGLE_THREAD):
    """Each loop runs the reference's order for its policy, with its checksum."""
    graph = builder.finalize()
    for name in names:
        reference = simulate(builder.description, name)
        run = Run(graph, name)
        assert (run.status, run.node) == (STATUS_OK, -1), name
        assert run.order == reference.order, name
        assert run.checksum == reference.checksum, name
        assert run.executed == len(reference.order), name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), nodes=st.integers(1, 40))
def test_random_priorities(data, nodes):
    builder = RecordingBuilder()
    for priority in data.draw(st.lists(st.integers(-3, 3), min_size=nodes, max_size=nodes)):
        builder.add_node("Checksum3", priority=priority)
    pairs = data.draw(st.lists(st.tuples(st.integers(0, nodes - 1), st.integers(0, nodes - 1))))
    for a, b in pairs:
        if a != b:
            builder.add_edge(min(a, b), max(a, b))
    check_against_reference(builder)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs().filter(has_control_flow))
def test_random_control_flow(program):
    builder = RecordingBuilder()
    build(builder, program, GraphKind.MAIN, [], None, [])
    check_against_reference(builder, ("topological", "priority"))


@pytest.mark.parametrize("name", ["topological", "priority"])
@pytest.mark.parametrize("taken", [0, 1, 2, 5])
def test_case_and_loops(name, taken):
    builder = RecordingBuilder()
    const, condition = add_const_int(builder, taken)
    branches = [None, None, lambda b, g, p: [add_while(b, 3, None, g, [p]).exit]]
    cf = add_if(builder, condition, branches, after=[const])
    last = builder.add_node("Checksum1")
    builder.add_edge(cf.join, last)
    check_against_reference(builder, (name,))


def _chain(kernels, options=None):
    builder = RecordingBuilder()
    for index, kernel in enumerate(kernels):
        builder.add_node(kernel, **(options or {}).get(index, {}))
        if index:
            builder.add_edge(index - 1, index)
    return builder


@pytest.mark.parametrize("name", SINGLE_THREAD)
def test_an_empty_main_runs_nothing(name):
    """Nodes only in Init and DeInit. Catches: priority_order taking the priority path for an
    empty root (priority.min() of nothing raises)."""
    builder = RecordingBuilder()
    builder.add_node("Checksum0", graph=GraphKind.INIT, priority=1)
    builder.add_node("Checksum1", graph=GraphKind.DEINIT, priority=2)
    run = Run(builder.finalize(), name)
    assert (run.status, run.executed, run.checksum) == (STATUS_OK, 0, 0)


def test_sequential_refuses_a_cycle():
    """A graph that declares loops may have a cycle without control flow; the sequential order
    cannot hold it. Caught mutant (mutation testing): priority_order's `!=` -> `>`, which
    returned the partial order."""
    builder = RecordingBuilder()
    for _ in range(3):
        builder.add_node("Checksum0")
    for source, target in ((0, 1), (1, 2), (2, 1)):
        builder.add_edge(source, target)
    builder.has_loops = True
    with pytest.raises(GraphFormatError, match="cycle"):
        Run(builder.finalize(), "sequential")


@pytest.mark.parametrize("name", SINGLE_THREAD)
def test_failure_and_end_of_sequence_stop_the_run(name):
    # a negative status fails too (caught mutant: `status != STATUS_OK` -> `> STATUS_OK`)
    for status in (9, -3):
        graph = _chain(
            ["Checksum0", "Checksum1", "Fail", "Checksum2"], {2: {"attributes": [status]}}
        )
        run = Run(graph.finalize(), name)
        assert (run.status, run.node, run.executed, run.order) == (status, 2, 3, [0, 1, 2])
    graph = _chain(["Checksum0", "EndOfSequence", "Checksum2"]).finalize()
    run = Run(graph, name)
    assert (run.status, run.node, run.executed) == (STATUS_END_OF_SEQUENCE, 1, 2)


@pytest.mark.parametrize("name", ["topological", "priority"])
def test_step_limit_and_bad_notify(name):
    builder = RecordingBuilder()
    add_while(builder, iterations=10**9)
    graph = builder.finalize()
    run = Run(graph, name, max_steps=50)
    assert (run.status, run.executed) == (STATUS_STEP_LIMIT, 50)
    assert run.order == simulate(builder.description, name, max_steps=50).order
    for choice, successors in ((1, 1), (0, 0), (3, 2)):
        builder = RecordingBuilder()
        switch = builder.add_node("NotifyAttr", attributes=[choice])
        for _ in range(successors):
            builder.add_edge(switch, builder.add_node("Checksum0"))
        run = Run(builder.finalize(), name)
        assert (run.status, run.node, run.executed) == (STATUS_BAD_NOTIFY, 0, 1)
    # 300 successors, choice 1 and 256: the choice is status - base (caught mutant: `^ base`,
    # the same as `-` for choices below 256, where the base's low bits are zero)
    for choice in (1, 256):
        builder = RecordingBuilder()
        switch = builder.add_node("NotifyAttr", attributes=[choice])
        for _ in range(300):
            builder.add_edge(switch, builder.add_node("Checksum0"))
        run = Run(builder.finalize(), name)
        assert (run.status, run.order) == (STATUS_OK, [0, choice + 1])


# Where the malformed loop below overflows, traced by hand (nodes: 0 start, w=1, x=2, y=3;
# every template 1). Topological: the ring buffer has n + 1 = 5 slots and holds 4 nodes;
# queues after each step: [w] [x y] [y w] [w w] [w x y] [x y x y] [y x y w] [x y w w]
# [y w w w] [w w w w], then the 11th step (w) queues x (4 queued) and y, which would fill the
# ring: overflow at y after 11 steps. Priority: the heap holds n + 1 = 5 keys and pops the
# smallest id, so y (3) never runs while w and x keep coming back; heaps after each step:
# {w} {x y} {w y} {x y y} {w y y} {x y y y} {w y y y} {x y y y y} {w y y y y}, then the 10th
# step (w) pushes x (5 keys) and cannot push y: overflow at y after 10 steps.
OVERFLOW = {"topological": (3, 11), "priority": (3, 10)}


@pytest.mark.parametrize("name", ["topological", "priority"])
def test_a_node_made_ready_twice_overflows_the_queue_cleanly(name):
    """A malformed loop: a wait-anyone node w feeds two wait-anyone nodes that both lead back
    to w, so every round queues w twice as often. The loop stops with a queue overflow, at
    the node it could not queue, instead of writing past its queue; exactly where follows from
    the queue's capacity (n + 1, see OVERFLOW). Caught mutants (mutation testing): the
    priority loop's `capacity = heap.shape[0] - 1` -> `- 2` and `>> 1` (a smaller heap that
    overflowed earlier, still "somewhere in the loop")."""
    builder = RecordingBuilder()
    start = builder.add_node("Checksum0")
    w, x, y = (builder.add_node("WaitAnyone", wait_anyone=True) for _ in range(3))
    for source, target in ((start, w), (w, x), (w, y), (x, w), (y, w)):
        builder.add_edge(source, target)
    builder.has_loops = True
    # validation refuses these joins (tests/test_executor_guarantees.py); the loop must still
    # stop cleanly on a graph that skipped it
    run = Run(builder.finalize(validate=False), name, max_steps=10**6)
    assert run.status == STATUS_QUEUE_OVERFLOW
    assert (run.node, run.executed) == OVERFLOW[name]


def _random_dag(seed, nodes, priorities):
    """A random DAG (edges from smaller to larger ids) with the given priority per node."""
    rng = np.random.default_rng(seed)
    builder = RecordingBuilder()
    for priority in priorities:
        builder.add_node("Checksum3", priority=int(priority))
    for _ in range(2 * nodes):
        a, b = sorted(int(v) for v in rng.integers(0, nodes, size=2))
        if a != b:
            builder.add_edge(a, b)
    return builder


@pytest.mark.parametrize("seed", range(3))
def test_equal_priorities_follow_fifo_order(seed):
    """All priorities equal: the sequential order is the plain FIFO Kahn order
    (`_kahn_fifo_order`, no heap), on graphs with fan-in and fan-out rather than chains."""
    check_against_reference(_random_dag(seed, 30, [5] * 30))


@pytest.mark.parametrize("seed", range(3))
def test_extreme_priorities_keep_their_order(seed):
    """Priorities span the whole int32 range: (priority << 32) | tie must neither overflow nor
    lose the tie. Caught mutants (mutation testing): `_kahn_priority_order`'s `<< 32` ->
    `<< 33` (wraps around for |priority| >= 2**30)."""
    rng = np.random.default_rng(100 + seed)
    extremes = np.array([-(2**31), 2**31 - 1, -(2**30), 2**30, -1, 0, 1], dtype=np.int64)
    check_against_reference(_random_dag(seed, 30, rng.choice(extremes, size=30)))


@pytest.mark.parametrize(
    ("priorities", "edges"),
    [
        ([0, 1, 1], [(0, 1)]),  # a tie: 2 is ready before 1, so 0, 2, 1 (not id order)
        ([0, 1], [(1, 0)]),  # rising by id, but the edge falls: 1 runs first
        ([0, 1, 2], [(2, 1)]),  # the same inside a longer list
        ([1, 0], []),  # falling by id: 1 first
    ],
)
def test_priorities_that_almost_order_the_graph(priorities, edges):
    """The sequential order takes `nodes` as they are only when ids rise strictly with
    priority and every edge rises too (`_priorities_are_the_order`); these graphs miss one
    condition each, so the heap order must come out. Caught mutants (mutation testing): that
    check's `own <= previous` -> `<` (ties let through), `lowest <= own` -> `==` (falling
    edges let through), `k > 0` -> `k > 1`."""
    builder = RecordingBuilder()
    for priority in priorities:
        builder.add_node("Checksum3", priority=priority)
    for source, target in edges:
        builder.add_edge(source, target)
    check_against_reference(builder)


@pytest.mark.parametrize(
    ("priorities", "edges"),
    [
        ([-5, 0, 7], [(0, 1), (1, 2), (0, 2)]),  # every edge rises; templates = edges
        ([0, 1, 2, 3], [(0, 2), (1, 3)]),  # two chains, interleaved ids
        ([-1, 4], []),  # no edges: the sums are 0 = 0
    ],
)
def test_priorities_that_order_the_graph_take_the_list_as_it_is(priorities, edges):
    """The positive side of `_priorities_are_the_order`: rising ids, rising edges, no clamped
    template. Caught mutants (mutation testing): `templates = -1`, `last =
    succ_offsets[node // 1]` and `edges += last >> first` made the check refuse these graphs,
    which the order alone cannot show (the heap then gives the same order, slower)."""
    builder = RecordingBuilder()
    for priority in priorities:
        builder.add_node("Checksum3", priority=priority)
    for source, target in edges:
        builder.add_edge(source, target)
    graph = builder.finalize()
    nodes = np.arange(graph.num_nodes, dtype=np.int32)
    assert sequential._priorities_are_the_order(
        graph.succ_offsets, graph.succ_targets, graph.in_degree, graph.node_priority, nodes
    )
    check_against_reference(builder)


def test_three_nested_whiles_follow_the_reference():
    """Found by test_random_control_flow: 281 steps on 27 nodes. The loops were right; this
    harness's record had 8 * nodes + 64 = 280 rows, so the last step (the outer Exit) was cut
    from the recorded order. The record now has a row per step the loop may take."""
    from test_control_flow import While, Work

    program = [
        While(3, [While(3, [Work("Checksum0"), Work("Checksum0"), While(2, [Work("Checksum0")])])])
    ]
    builder = RecordingBuilder()
    build(builder, program, GraphKind.MAIN, [], None, [])
    check_against_reference(builder, ("topological", "priority"))


def test_a_clamped_template_is_never_taken_as_the_order():
    """`_priorities_are_the_order` answers no when a template is below its edge count (a
    wait-anyone join, ready after its first predecessor): the listed order assumes every node
    waits for all its predecessors. Validation lets such a template through only in control
    flow, which the sequential executor refuses, so the check is called directly. Caught mutant
    (mutation testing, executors): `templates == edges` -> `templates <= edges`."""
    builder = RecordingBuilder()
    for priority in (0, 1, 2):
        builder.add_node("Checksum3", priority=priority)
    builder.add_edge(0, 2)
    builder.add_edge(1, 2)
    graph = builder.finalize()
    nodes = np.arange(3, dtype=np.int32)
    edges = (graph.succ_offsets, graph.succ_targets)
    assert sequential._priorities_are_the_order(*edges, graph.in_degree, graph.node_priority, nodes)
    clamped = graph.in_degree.copy()
    clamped[2] = 1  # 1 of its 2 edges
    assert not sequential._priorities_are_the_order(*edges, clamped, graph.node_priority, nodes)


def _counting_heap_pushes(function):
    """A plain-Python copy of `function` whose `heap_push` counts its calls: (copy, counts)."""
    original = pure(function)
    counts = []
    heap_push = original.__globals__["heap_push"]

    def counting_push(heap, size, key):
        counts.append(key)
        return heap_push(heap, size, key)

    def counting(copy, **helpers):  # `copy` with heap_push counted
        namespace = dict(copy.__globals__, heap_push=counting_push, **helpers)
        return types.FunctionType(copy.__code__, namespace, copy.__name__, copy.__defaults__)

    helper = original.__globals__.get("_made_ready")  # pushes for the function, if it has it
    helpers = {} if helper is None else {"_made_ready": counting(helper)}
    return counting(original, **helpers), counts


def test_a_node_made_ready_by_the_one_just_taken_skips_the_heap():
    """`_kahn_priority_order` holds the best node the last one made ready and takes it next
    without a heap round trip when it beats the heap's minimum (its docstring: most nodes of
    graphs whose successors come next in priority order never enter the heap). On a chain with
    rising priorities only the start enters the heap; in the fan-out below the start, two of
    node 0's three successors (all but the best) and node 4 (held while a better node waits in
    the heap) do. Caught mutant (mutation testing, executors): `held and
    (size == 0 or best < heap[1])` -> `(size == 0 and best < heap[1])` (every held node pushed
    and popped again: the same order, slower); in that condition `best < heap[1]` -> `==`
    (keys are unique: never true) and `size == 0` -> `size == -1` or `size < 0` (then
    compared with the stale heap[1] of an empty heap); `elif ready < best` -> `>`, `>=`, `==`
    and `!=` (a better node made ready is pushed and a worse one held: the same order, one
    push more here)."""
    order_of, pushes = _counting_heap_pushes(sequential._kahn_priority_order)
    chain = _chain(["Checksum3"] * 5, {i: {"priority": i} for i in range(5)}).finalize()
    fan = RecordingBuilder()
    for priority in (0, 3, 1, 2, 4):  # node 0 feeds 1, 2, 3; node 2 (priority 1) feeds 4
        fan.add_node("Checksum3", priority=priority)
    for source, target in ((0, 1), (0, 2), (0, 3), (2, 4)):
        fan.add_edge(source, target)
    fan = fan.finalize()
    for graph, order, pushed in ((chain, [0, 1, 2, 3, 4], 1), (fan, [0, 2, 3, 1, 4], 4)):
        pushes.clear()
        args = (graph.succ_offsets, graph.succ_targets, graph.in_degree, graph.node_priority)
        result = order_of(*args, np.zeros(1, dtype=np.int32), graph.num_nodes)
        assert result.tolist() == order
        assert len(pushes) == pushed, pushes


def test_priorities_that_order_the_graph_need_no_kahn_pass(monkeypatch):
    """When `_priorities_are_the_order` says yes, `priority_order` returns `nodes` without
    running either Kahn order (its docstring: the fast path of the 100k-node random DAG).
    Caught mutant (mutation testing, executors): `if count and
    _priorities_are_the_order(...)` -> `if not count and ...` (the fast path never taken for a
    non-empty root: the same order from the heap, slower)."""

    def not_called(*args):
        raise AssertionError("a Kahn pass ran although the priorities order the graph")

    builder = RecordingBuilder()
    for priority in (-5, 0, 7):
        builder.add_node("Checksum3", priority=priority)
    for source, target in ((0, 1), (1, 2), (0, 2)):
        builder.add_edge(source, target)
    graph = builder.finalize()
    monkeypatch.setattr(sequential, "_kahn_priority_order", not_called)
    monkeypatch.setattr(sequential, "_kahn_fifo_order", not_called)
    nodes = np.arange(3, dtype=np.int32)
    assert sequential.priority_order(graph, nodes, nodes[:1]).tolist() == [0, 1, 2]


def test_node_keys_are_the_packed_keys_of_every_node():
    """The prepare's one-pass keys equal numpy's pack_keys(priority, arange(n)), for int32
    priorities (negative ones too) and int64 ranks."""
    from rtsoa.executors.heap import TIE_BITS, node_keys, pack_keys

    rng = np.random.default_rng(3)
    for priority in (
        rng.integers(-(2**31), 2**31, 1000).astype(np.int32),
        rng.integers(0, 10**6, 1000).astype(np.int64),
        np.zeros(0, dtype=np.int32),
    ):
        keys = node_keys(priority)
        assert keys.dtype == np.int64
        np.testing.assert_array_equal(keys, pack_keys(priority, np.arange(priority.shape[0])))
        np.testing.assert_array_equal(keys >> TIE_BITS, priority.astype(np.int64))
