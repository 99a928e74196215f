"""Reserved statuses: none is obeyed from a kernel not registered to return it.

`notify(k)` is obeyed only from `control_flow` kernels, STATUS_END_OF_SEQUENCE only from
`ends_sequence` kernels; any other reserved code a kernel returns stops the run with
STATUS_RESERVED_NOT_REGISTERED, and every executor reports the same status."""

import pytest

from rtsoa import GraphBuilder, KernelError, prepare_executor
from rtsoa.abi.status import (
    RESERVED_STATUS_BASE,
    STATUS_BAD_NOTIFY,
    STATUS_END_OF_SEQUENCE,
    STATUS_NOTIFY_BASE,
    STATUS_QUEUE_OVERFLOW,
    STATUS_RESERVED_NOT_REGISTERED,
    STATUS_STEP_LIMIT,
    STATUS_UNKNOWN_KERNEL,
)
from rtsoa.executors import Profiler
from rtsoa.kernels import REGISTRY
from rtsoa.kernels.control_flow import add_const_int

EXECUTORS = ("sequential", "topological", "priority")


def failing_chain(status, kernel="Fail"):
    """Checksum0 -> Fail(status) -> Checksum1, or with FailWhen the status as a run-time value."""
    b = GraphBuilder()
    first = b.add_node("Checksum0")
    if kernel == "Fail":
        middle = b.add_node("Fail", attributes=[status])
    else:
        const, value = add_const_int(b, status, after=[first])
        middle = b.add_node("FailWhen", inputs=[value])
        b.add_edge(const, middle)
    last = b.add_node("Checksum1")
    b.add_edge(first, middle)
    b.add_edge(middle, last)
    return b.finalize(), middle


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("kernel", ["Fail", "FailWhen"])
def test_end_of_sequence_from_an_unregistered_kernel_is_a_failure(executor, kernel):
    # before: Fail / FailWhen returning STATUS_END_OF_SEQUENCE ended the run "successfully"
    graph, node = failing_chain(STATUS_END_OF_SEQUENCE, kernel)
    ex = prepare_executor(graph, executor)
    with pytest.raises(KernelError) as raised:
        ex.run()
    assert raised.value.status == STATUS_RESERVED_NOT_REGISTERED
    assert raised.value.node == node
    with pytest.raises(KernelError) as raised:  # the subscribed loop too
        ex.run(subscriber=Profiler())
    assert raised.value.status == STATUS_RESERVED_NOT_REGISTERED


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize(
    "status",
    [
        RESERVED_STATUS_BASE,
        STATUS_UNKNOWN_KERNEL,
        STATUS_QUEUE_OVERFLOW,
        STATUS_STEP_LIMIT,
        RESERVED_STATUS_BASE + 12_345,
        STATUS_NOTIFY_BASE - 1,
    ],
)
def test_the_executors_own_codes_from_a_kernel_are_failures_of_their_own(executor, status):
    # before: a kernel returning STATUS_STEP_LIMIT looked like the executor's step limit
    graph, node = failing_chain(status)
    with pytest.raises(KernelError) as raised:
        prepare_executor(graph, executor).run()
    assert (raised.value.status, raised.value.node) == (STATUS_RESERVED_NOT_REGISTERED, node)


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("status", [STATUS_NOTIFY_BASE, STATUS_NOTIFY_BASE + 1, 2**31 - 1])
def test_notify_from_a_kernel_that_is_not_control_flow_is_a_bad_notify_everywhere(executor, status):
    # before: the sequential executor failed with the raw notify code, the others with
    # STATUS_BAD_NOTIFY
    graph, node = failing_chain(status)
    with pytest.raises(KernelError) as raised:
        prepare_executor(graph, executor).run()
    assert (raised.value.status, raised.value.node) == (STATUS_BAD_NOTIFY, node)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_registered_kernels_keep_their_reserved_statuses(executor):
    b = GraphBuilder()
    first = b.add_node("Checksum0")
    end = b.add_node("EndOfSequence")
    b.add_edge(first, end)
    result = prepare_executor(b.finalize(), executor).run()
    assert result.end_of_sequence and result.status == STATUS_END_OF_SEQUENCE
    # ordinary failure codes are untouched
    graph, _ = failing_chain(RESERVED_STATUS_BASE - 1)
    with pytest.raises(KernelError) as raised:
        prepare_executor(graph, executor).run()
    assert raised.value.status == RESERVED_STATUS_BASE - 1


def test_the_registry_says_which_kernels_may_end_a_sequence():
    tables = REGISTRY.tables()
    names = REGISTRY.names()
    allowed = {names[i] for i in range(len(names)) if tables.ends_sequence[i]}
    assert allowed == {"EndOfSequence"}
    assert REGISTRY["EndOfSequence"].ends_sequence and not REGISTRY["Fail"].ends_sequence
