"""The kernel ABI: what a kernel receives (shared graph columns, per-run values, per-worker
state, the device), switch choices carried in the status, typed tensor views, and executor
loops specialised on the generated dispatch without text surgery."""

import re
import sys

import numba
import numpy as np
import pytest
from abi_kernels import ABI_REGISTRY, SCALED
from numba import types

from rtsoa import GraphBuilder
from rtsoa.abi.status import STATUS_BAD_NOTIFY, STATUS_NOTIFY_BASE, STATUS_VIEW_TOO_LARGE
from rtsoa.errors import UnknownKernelError
from rtsoa.executors import EXECUTORS, KernelError, Profiler, prepare_executor
from rtsoa.graph.generators import generate
from rtsoa.graph.schema import Placement, ValueKind
from rtsoa.kernels import REGISTRY, KernelRegistry, builtin, control_flow, lowered
from rtsoa.kernels.checksum import expected_checksum, mix_numpy
from rtsoa.kernels.control_flow import add_const_int, add_if
from rtsoa.kernels.dispatch import (
    dispatch,
    generate_source,
    load_dispatch,
    registry_hash,
    specialise,
)

QUEUE_EXECUTORS = ("topological", "priority")


def _notify_graph(choice, successors):
    """NotifyAttr(choice) -> `successors` Checksum0 nodes."""
    builder = GraphBuilder()
    switch = builder.add_node("NotifyAttr", attributes=[choice])
    for _ in range(successors):
        builder.add_edge(switch, builder.add_node("Checksum0"))
    return builder.finalize()


@pytest.mark.parametrize("executor", QUEUE_EXECUTORS)
def test_switch_choice_travels_in_the_status(executor):
    graph = _notify_graph(2, 4)
    result = prepare_executor(graph, executor, registry=ABI_REGISTRY).run()
    assert result.nodes_executed == 2
    assert result.checksum == expected_checksum(graph, nodes=[3])


@pytest.mark.parametrize("executor", QUEUE_EXECUTORS)
@pytest.mark.parametrize("choice, successors", [(4, 4), (0, 0), (-1, 3), (2**31 - 1, 2)])
def test_a_choice_past_the_successors_fails_cleanly(executor, choice, successors):
    """Before: the choice was read from shared state and trusted, so a reserved status from a
    node without successors made the loop read past the edge array (a crash)."""
    ex = prepare_executor(_notify_graph(choice, successors), executor, registry=ABI_REGISTRY)
    with pytest.raises(KernelError) as caught:
        ex.run()
    assert caught.value.status == STATUS_BAD_NOTIFY
    assert caught.value.node == 0
    with pytest.raises(KernelError, match="chose a successor"):  # still usable, same answer
        ex.run()


def test_no_kernel_state_is_shared_between_runtimes():
    """The switch choice is gone from shared state; the checksum lives in the worker part."""
    graph = generate("random", 300, seed=2)
    first = prepare_executor(graph, "topological")
    second = prepare_executor(graph, "topological")
    assert not hasattr(first.runtime, "state")
    assert first.runtime.worker.checksum is not second.runtime.worker.checksum
    for array in first.runtime.graph:
        assert not array.flags.writeable  # shared columns cannot be written by kernels
    assert first.runtime.values.slots.flags.writeable
    assert first.run().checksum == second.run().checksum == expected_checksum(graph)


def test_typed_views_write_and_read_device_memory():
    builder = GraphBuilder()
    fill = builder.add_node("FillRamp", attributes=[3, 4])
    block = builder.add_value(kind=ValueKind.MEMORY_BLOCK, producer=fill)
    reader = builder.add_node("SumAndFree", attributes=[12], inputs=[block])
    builder.add_edge(fill, reader)
    graph = builder.finalize()
    for name in EXECUTORS:
        ex = prepare_executor(graph, name, registry=ABI_REGISTRY)
        ramp = sum(i * 100 + j for i in range(3) for j in range(4))
        expected = int(mix_numpy([fill], 777)[0]) + ramp
        assert ex.run().checksum == expected % 2**64
        host = ex.device.stats()["host"]
        assert host["allocated_bytes.current"] == 0 and host["requested_bytes.peak"] == 48


def _stale_view_graph(elements, free_first):
    builder = GraphBuilder()
    fill = builder.add_node("FillRamp", attributes=[2, 2])
    block = builder.add_value(kind=ValueKind.MEMORY_BLOCK, producer=fill)
    last = fill
    if free_first:
        last = builder.add_node("SumAndFree", attributes=[4], inputs=[block])
        builder.add_edge(fill, last)
    view = builder.add_node("ViewStale", attributes=[elements], inputs=[block])
    builder.add_edge(last, view)
    return builder.finalize()


@pytest.mark.parametrize(
    "elements, free_first, status",
    [
        (1, True, 102),  # freed block: device STATUS_INVALID_BLOCK
        (2, False, STATUS_VIEW_TOO_LARGE),  # 2 x 2 int64 = 32 bytes > the 16-byte block
        (-1, False, STATUS_VIEW_TOO_LARGE),  # negative dimension
        (2**62, False, STATUS_VIEW_TOO_LARGE),  # the element count would overflow int64
    ],
)
def test_a_view_never_reaches_past_its_block(elements, free_first, status):
    graph = _stale_view_graph(elements, free_first)
    ex = prepare_executor(graph, "sequential", registry=ABI_REGISTRY)
    with pytest.raises(KernelError) as caught:
        ex.run()
    assert caught.value.status == status
    assert ex.runtime.worker.scratch[1] == 0  # the view the kernel got has no element


def test_a_view_that_fits_exposes_exactly_its_shape():
    ex = prepare_executor(_stale_view_graph(1, False), "sequential", registry=ABI_REGISTRY)
    ex.run()
    assert ex.runtime.worker.scratch[1] == 2


def test_loops_are_the_executor_sources_bound_to_the_generated_dispatch():
    """No text surgery: the compiled loop runs the executor file's own code object, and its
    `dispatch` is the generated switch, which holds exactly the graph's kernel modules."""
    graph = generate("random", 100, seed=1)
    for name, cls in EXECUTORS.items():
        ex = prepare_executor(graph, name)
        assert ex._loop.py_func.__code__ is cls.loop.__code__
        bound = ex._loop.py_func.__globals__["dispatch"]
        assert bound is ex._dispatch and bound is not dispatch
        module = load_dispatch(REGISTRY, used=[REGISTRY.names().index("Checksum0")])
        assert module.dispatch is ex._dispatch
    with pytest.raises(RuntimeError, match="specialise"):
        dispatch(None, 0, 0)  # the placeholder never runs


def test_plain_runs_carry_no_profiling_code():
    """The subscribed variant is the same loop with a record array; in the plain variant Numba
    prunes every `record is not None` branch, so no clock is read per node. (The plain loop
    reads the clock in its cancellation poll alone: a timeout's deadline, once every
    POLL_STEPS steps, rtsoa.executors.cancel.)"""
    graph = generate("random", 100, seed=1)
    for name, cls in EXECUTORS.items():
        ex = prepare_executor(graph, name)
        ex.run()
        ex.run(subscriber=Profiler())
        plain = [sig for sig in ex._loop.signatures if sig[-1] == types.none]
        profiled = [sig for sig in ex._loop.signatures if sig[-1] != types.none]
        assert len(plain) == 1 and len(profiled) == 1
        # the same loop compiled in memory (cached machine code cannot be inspected)
        module = sys.modules[ex._dispatch.__module__]
        loop = specialise(cls.loop, module, cache=False)
        loop(ex.runtime, *ex._arguments, None)
        loop(ex.runtime, *ex._arguments, ex.record())
        plain_ir, profiled_ir = loop.inspect_llvm(plain[0]), loop.inspect_llvm(profiled[0])
        assert "record_step" not in plain_ir and "record_step" in profiled_ir
        clock_calls = [
            len(re.findall(r"call .*@clock_gettime", ir)) for ir in (plain_ir, profiled_ir)
        ]
        assert clock_calls[1] == clock_calls[0] + 2  # a node's start and end


def test_dispatch_ids_do_not_depend_on_registration_order():
    forward, backward = KernelRegistry(), KernelRegistry()
    kernels = [
        ("Noop", builtin.noop),
        ("Checksum3", builtin.checksum),
        ("AllocMemory", lowered.alloc_memory),
        ("ConstInt", control_flow.const_int),
    ]
    for name, function in kernels:
        forward.register(name, function, constants=REGISTRY[name].constants)
    for name, function in reversed(kernels):
        backward.register(name, function, constants=REGISTRY[name].constants)
    assert forward.names() == backward.names() == tuple(sorted(name for name, _ in kernels))
    names = ("ConstInt", "Noop", "AllocMemory")
    assert forward.bind(names).tolist() == backward.bind(names).tolist()


def test_registry_tables_feed_prepare():
    tables = REGISTRY.tables()
    names = REGISTRY.names()
    alloc = names.index("AllocMemory")
    assert tables.critical_section[alloc] == 1 and tables.worker[alloc] == 1
    assert tables.requires[alloc].tolist() == [0, 1, 1, 0]
    assert tables.control_flow[names.index("SwitchNotify")]
    assert REGISTRY.tables() is tables  # memoized until the registry changes


def test_outputs_creators_make_the_values_a_kernel_writes():
    builder = GraphBuilder()
    shape_node, (shape,) = REGISTRY.add_node(builder, "InferShape", attributes=[64])
    alloc, (block,) = REGISTRY.add_node(
        builder, "AllocMemory", attributes=[64], output_options={"placement": Placement.HOST}
    )
    noop, none = REGISTRY.add_node(builder, "Noop")
    builder.add_edge(shape_node, alloc)
    graph = builder.finalize()
    assert none == [] and graph.outputs(alloc).tolist() == [block]
    assert graph.value_kind[shape] == ValueKind.SHAPE
    assert graph.value_kind[block] == ValueKind.MEMORY_BLOCK
    assert graph.value_placement[block] == Placement.HOST
    with pytest.raises(UnknownKernelError):
        REGISTRY.add_node(builder, "NoSuchKernel")


@pytest.mark.parametrize("executor", QUEUE_EXECUTORS)
@pytest.mark.parametrize("successors", [0, 1, 3])
def test_notify_is_obeyed_only_from_control_flow_kernels(executor, successors):
    """Before: Fail returning the notify code after a switch elsewhere made the loop follow a
    stale choice past the edge array (a segfault). Fail is not a control-flow kernel, so its
    notify status is an error whatever the node's successors."""
    builder = GraphBuilder()
    const, condition = add_const_int(builder, 0)
    add_if(builder, condition, [None, None], after=[const])  # a real switch runs first
    fail = builder.add_node("Fail", attributes=[STATUS_NOTIFY_BASE])
    for _ in range(successors):
        builder.add_edge(fail, builder.add_node("Checksum0"))
    ex = prepare_executor(builder.finalize(), executor)
    with pytest.raises(KernelError) as caught:
        ex.run()
    assert caught.value.status == STATUS_BAD_NOTIFY
    assert caught.value.node == fail


def _scaled_graph(names):
    builder = GraphBuilder()
    previous = None
    for name in names:
        node = builder.add_node(name)
        if previous is not None:
            builder.add_edge(previous, node)
        previous = node
    return builder.finalize()


def _scaled_checksum(names):
    total = 0
    for node, name in enumerate(names):
        salt, weight = SCALED[name]
        total += int(mix_numpy([node], salt)[0]) * int(weight)
    return total % 2**64


def test_a_kernel_family_shares_one_function_and_one_compile():
    """Kernels registered with constants: each name's dispatch passes its own constants (the
    checksum weighs every node by its kernel's), on a single-thread loop and on the
    multithread one (which passes node ids as int32; all loops call the one generated
    dispatch, and each costs a compile on a cold cache); and the names share one
    signature, so one compile: compiling the function for each name's argument types adds
    one signature, not three. (The multithread loop passes node ids as int32, the others as
    int64: a kernel used by both is compiled once for each.)"""
    function = ABI_REGISTRY["Scaled0"].function
    assert all(ABI_REGISTRY[name].function is function for name in SCALED)
    names = ["Scaled1", "Scaled0", "Scaled2", "Scaled2", "Scaled1"]
    for executor in ("multithread", "sequential"):
        ex = prepare_executor(_scaled_graph(names), executor, registry=ABI_REGISTRY)
        assert ex.run().checksum == _scaled_checksum(names), executor
    before = set(function.overloads)
    for name in SCALED:
        constants = tuple(numba.typeof(value) for value in ABI_REGISTRY[name].constants)
        function.compile((numba.typeof(ex.runtime), types.int64, *constants))
    assert len(set(function.overloads) - before) <= 1
    assert len(function.overloads) >= 1


@pytest.mark.parametrize(
    "constants, message",
    [
        ("ab", "constants must be a tuple"),
        ((True,), "constant 0 \\(True\\)"),
        ((1, 2**63), "constant 1 \\(9223372036854775808\\)"),
        ((np.int32(1),), "constant 0"),
        ((None,), "constant 0 \\(None\\)"),
    ],
)
def test_bad_kernel_constants_are_refused_with_the_kernel_and_position(constants, message):
    registry = KernelRegistry()
    with pytest.raises(ValueError, match=f"kernel 'Bad': {message}"):
        registry.register("Bad", builtin.checksum, constants=constants)
    assert "Bad" not in registry


def test_constants_reach_the_generated_dispatch_exactly_and_change_its_key():
    """The generated module holds each constant with its type and exact value (floats through
    their hex form: 0.1, -0.0, inf and nan survive), and two registries that differ only in a
    constant get different dispatch keys (so never each other's cached machine code)."""
    values = (np.int64(-(2**63)), np.uint64(2**64 - 1), 0.1, -0.0, float("inf"), float("nan"))
    registry, other = KernelRegistry(), KernelRegistry()
    registry.register("Many", builtin.checksum, constants=values)
    other.register("Many", builtin.checksum, constants=values[:-1] + (1.0,))
    module = {"np": np}  # the generated module's constant lines (the rest needs a file)
    for line in generate_source(registry, "key").splitlines():
        if line.startswith("_constant"):
            exec(line, module)
    arguments = [module[f"_constant0_{position}"] for position in range(len(values))]
    assert [type(a) for a in arguments] == [np.int64, np.uint64] + [np.float64] * 4
    assert tuple(arguments[:2]) == values[:2]
    for got, want in zip(arguments[2:], values[2:], strict=True):
        assert float(got).hex() == float(want).hex()
    assert registry_hash(registry) != registry_hash(other)
    assert registry["Many"].constants[2] == np.float64(0.1)
