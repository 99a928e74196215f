"""Kernel registration and conformance checks: bad names are refused at registration; a
non-int32 return type or an undeclared allocation at prepare, with the kernel's name, instead
of a silent wrong status or a raw Numba error at the first run."""

import weakref

import kernel_definitions as defs
import numba
import pytest

from rtsoa import GraphBuilder
from rtsoa.errors import KernelDefinitionError
from rtsoa.executors import EXECUTORS, prepare_executor
from rtsoa.kernels import KernelRegistry, builtin, conformance


def one_node_graph(kernel):
    builder = GraphBuilder()
    builder.add_node(kernel)
    return builder.finalize()


@pytest.mark.parametrize(
    "name", ["", "a\nb", "Add\n", "it's", 'say"hi"', "1st", "has space", "a..b", "x" * 129, 7]
)
def test_bad_names_are_refused_at_registration(name):
    registry = KernelRegistry()
    with pytest.raises(KernelDefinitionError, match="bad kernel name"):
        registry.register(name, builtin.noop)
    assert len(registry) == 0


def test_identifier_like_names_are_accepted():
    registry = KernelRegistry()
    for name in ("Add", "_private", "custom.Add", "onnx.ai.MatMul2"):
        registry.register(name, builtin.noop)
    assert registry.names() == ("Add", "_private", "custom.Add", "onnx.ai.MatMul2")


@pytest.mark.parametrize(
    "registry, kernel, message",
    [
        (defs.FLOAT, "Half", "'Half' .*returns float64, not int32"),
        (defs.INT64, "Wide", "'Wide' .*returns int64, not int32"),
        (defs.ALLOCATING, "Scratch", "'Scratch' .*creates arrays but is registered without "),
        # a good kernel of the same module: the message names the kernel at fault
        (defs.ALLOCATING, "Fine", "'Scratch' \\(kernel_definitions.scratch\\) creates arrays"),
        (defs.UNTYPABLE, "Broken", "'Broken' .*does not compile as run\\(rt, node\\): .*"),
    ],
)
def test_a_nonconforming_kernel_is_refused_at_prepare(registry, kernel, message):
    graph = one_node_graph(kernel)
    for executor in EXECUTORS:
        with pytest.raises(KernelDefinitionError, match=message) as caught:
            prepare_executor(graph, executor=executor, registry=registry)
        assert "\n" not in str(caught.value) and "\x1b" not in str(caught.value)


def test_other_kernel_modules_are_not_affected():
    # Checksum0 is from rtsoa.kernels.builtin: its dispatch module does not hold Scratch.
    ex = prepare_executor(one_node_graph("Checksum0"), registry=defs.ALLOCATING)
    assert ex.run().nodes_executed == 1


def test_a_declared_allocation_passes_and_runs():
    ex = prepare_executor(one_node_graph("ScratchDeclared"), registry=defs.DECLARED)
    assert ex.run().status == 0


def test_a_passed_check_is_remembered_by_a_marker(monkeypatch):
    from rtsoa.kernels.dispatch import cache_dir, included_kernels, registry_hash

    graph = one_node_graph("ScratchDeclared")
    prepare_executor(graph, registry=defs.DECLARED)
    used = defs.DECLARED.bind(["ScratchDeclared"])
    key = registry_hash(defs.DECLARED, included_kernels(defs.DECLARED, used))
    assert (cache_dir() / f"rtsoa_checked_{key}").exists()
    checked = []
    monkeypatch.setattr(conformance, "_passed", set())  # as in a fresh process
    monkeypatch.setattr(conformance, "_passed_here", weakref.WeakKeyDictionary())
    monkeypatch.setattr(conformance, "check_kernel", lambda *args: checked.append(args))
    prepare_executor(graph, registry=defs.DECLARED)
    assert checked == []  # the marker file said it passed


def test_return_type_of_the_builtins_is_int32():
    from rtsoa.kernels import REGISTRY

    ex = prepare_executor(one_node_graph("Checksum0"))
    types = (numba.typeof(ex.runtime), numba.types.int64)
    for name in ("Checksum0", "Noop", "Fail"):
        info = REGISTRY[name]
        constants = tuple(numba.typeof(value) for value in info.constants)
        assert conformance.return_type(info.function, types + constants) == numba.types.int32
