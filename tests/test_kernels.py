"""Kernel registry, generated dispatch and its disk cache, user kernels."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rtsoa import GraphBuilder
from rtsoa.errors import UnknownKernelError
from rtsoa.executors import prepare_executor
from rtsoa.graph.schema import WorkerClass
from rtsoa.kernels import REGISTRY, KernelRegistry, builtin, kernel, workload
from rtsoa.kernels.checksum import FOLD_SALTS, expected_checksum, fold, mix, mix_numpy
from rtsoa.kernels.dispatch import generate_source, load_dispatch, registry_hash

# A user registry with a user kernel defined here, in an importable module, as users would.
USER_REGISTRY = KernelRegistry()
USER_REGISTRY.register("Checksum0", builtin.checksum, constants=REGISTRY["Checksum0"].constants)
_TRIPLE_SALT = np.uint64(12345)


@kernel("Triple", worker="launch", registry=USER_REGISTRY)
def triple(rt, node):
    """Folds the node three times."""
    fold(rt, node, _TRIPLE_SALT)
    fold(rt, node, _TRIPLE_SALT)
    return fold(rt, node, _TRIPLE_SALT)


@kernel("SumScratch", registry=USER_REGISTRY, allocates=True)
def sum_scratch(rt, node):
    """Allocates a scratch array (needs Numba's reference counting: allocates=True)."""
    scratch = np.zeros(4, dtype=np.uint64)
    scratch[:] = np.uint64(node)
    rt.worker.checksum[0] += scratch.sum()
    return np.int32(0)


def test_an_allocating_kernel_runs_when_declared():
    """SumScratch folds 4 * node: at nodes 1 and 2, not at node 0 (whose fold is 0, so the
    kernel's work could be deleted unnoticed). Catches: the allocating kernel not run, or its
    work (the scratch sum) lost."""
    builder = GraphBuilder()
    first = builder.add_node("Triple")
    second = builder.add_node("SumScratch")
    third = builder.add_node("SumScratch")
    builder.add_edge(first, second)
    builder.add_edge(second, third)
    graph = builder.finalize()
    result = prepare_executor(graph, "sequential", registry=USER_REGISTRY).run()
    triple_part = 3 * int(mix_numpy(np.array([first]), np.array([12345], np.uint64))[0])
    assert result.checksum == (4 * second + 4 * third + triple_part) % (1 << 64)
    assert result.nodes_executed == 3


def test_builtins_registered_in_a_stable_order():
    names = REGISTRY.names()
    assert names == tuple(sorted(names))  # dispatch ids: sorted names, not import order
    for k in range(16):
        assert f"Checksum{k}" in REGISTRY
    for name in ("InferShape", "AllocMemory", "LaunchKernel", "FreeMemory", "SwitchNotify"):
        assert name in REGISTRY
    assert REGISTRY["LaunchKernel"].worker == WorkerClass.LAUNCH
    assert REGISTRY["AllocMemory"].critical_section == "memory"
    assert REGISTRY["SwitchNotify"].control_flow
    # the launches lock the device around their device calls only; allocations whole
    locks = {info.name for info in REGISTRY.entries() if info.locks_device}
    assert {"LaunchKernel", "OpLaunch"} <= locks and "AllocMemory" not in locks
    tables = REGISTRY.tables()
    assert tables.locks_device.tolist() == [info.locks_device for info in REGISTRY.entries()]


def test_bind_maps_names_and_rejects_unknown():
    ids = REGISTRY.bind(("Checksum1", "Noop"))
    assert ids.tolist() == [REGISTRY.names().index("Checksum1"), REGISTRY.names().index("Noop")]
    with pytest.raises(UnknownKernelError, match="'Nope'"):
        REGISTRY.bind(("Noop", "Nope"))


def test_register_rejects_bad_metadata_and_duplicates():
    registry = KernelRegistry()
    with pytest.raises(ValueError, match="worker"):
        registry.register("X", builtin.noop, worker="gpu")
    with pytest.raises(ValueError, match="critical_section"):
        registry.register("X", builtin.noop, critical_section="io")
    with pytest.raises(ValueError, match="requirement"):
        registry.register("X", builtin.noop, requires={"colour": 1})
    with pytest.raises(ValueError, match="locks_device needs a critical_section"):
        registry.register("X", builtin.noop, locks_device=True)
    with pytest.raises(TypeError):
        registry.register("X", lambda rt, node: 0)
    registry.register("X", builtin.noop)
    registry.register("X", builtin.noop)  # same place: allowed (module reloads)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("X", workload.busy)

    def make():
        @kernel("Local", registry=registry)
        def local(rt, node):
            return np.int32(0)

    with pytest.raises(ValueError, match="module-level"):
        make()


def test_trace_printer_default():
    builder = GraphBuilder()
    builder.add_node("Busy", attributes=[5])
    graph = builder.finalize()
    assert REGISTRY["Busy"].trace(graph, 0) == "Busy(node=0, attrs=[5])"


def test_mix_matches_numpy_and_salts_distinct():
    nodes = np.array([0, 1, 2, 2**31 - 1], dtype=np.int64)
    salt = FOLD_SALTS["Checksum5"]
    assert [int(mix(int(n), np.uint64(salt))) for n in nodes] == mix_numpy(nodes, salt).tolist()
    assert len(set(FOLD_SALTS.values())) == len(FOLD_SALTS)


def test_user_kernel_runs_through_generated_dispatch():
    builder = GraphBuilder()
    builder.add_node("Checksum0")
    builder.add_node("Triple")
    builder.add_edge(0, 1)
    graph = builder.finalize()
    executor = prepare_executor(graph, "sequential", registry=USER_REGISTRY)
    expected = expected_checksum(graph, nodes=[0]) + 3 * int(mix_numpy([1], 12345)[0])
    assert executor.run().checksum == expected % 2**64
    assert executor.launch_count == 1
    source = open(sys.modules[executor._dispatch.__module__].__file__).read()
    triple_id = USER_REGISTRY.names().index("Triple")
    assert f"from {__name__} import triple as _kernel{triple_id}" in source
    with pytest.raises(UnknownKernelError):
        prepare_executor(graph, "sequential")  # not in the default registry


def test_hash_changes_when_a_kernel_module_changes(tmp_path, monkeypatch):
    module_path = tmp_path / "rtsoa_test_user_module.py"
    module_path.write_text(
        textwrap.dedent(
            """
            import numpy as np
            from rtsoa.kernels import KernelRegistry, kernel

            LOCAL = KernelRegistry()

            @kernel("Seven", registry=LOCAL)
            def seven(rt, node):
                return np.int32(7)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("RTSOA_CACHE_DIR", str(tmp_path / "cache"))
    import rtsoa_test_user_module as user

    before = registry_hash(user.LOCAL)
    assert registry_hash(user.LOCAL) == before
    module = load_dispatch(user.LOCAL)
    assert module.__file__ == str(tmp_path / "cache" / f"rtsoa_dispatch_{before}.py")
    assert "def dispatch(rt, kernel, node)" in generate_source(user.LOCAL, before)
    assert not list((tmp_path / "cache").glob("*.tmp"))
    module_path.write_text(module_path.read_text() + "\n# edited\n")
    assert registry_hash(user.LOCAL) != before
    edited = registry_hash(user.LOCAL)
    user.LOCAL.depends_on("rtsoa.kernels.status")
    assert registry_hash(user.LOCAL) != edited
    user.LOCAL.register("Noop", builtin.noop)
    assert registry_hash(user.LOCAL) != before


def test_kernels_in_main_are_rejected():
    registry = KernelRegistry()
    info = registry.register("Noop", builtin.noop)
    registry._entries["Noop"] = info._replace(module="__main__")
    with pytest.raises(ValueError, match="cannot import"):
        load_dispatch(registry)


_FRESH = """
import time
start = time.perf_counter()
from rtsoa.graph.generators import generate
from rtsoa.executors import prepare_executor
graph = generate("random", 2000, seed=1)
executor = prepare_executor(graph, "{executor}")
result = executor.run()
stats = executor._loop.stats
print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()),
      result.nodes_executed, time.perf_counter() - start)
"""


@pytest.mark.parametrize("executor", ["sequential"])
def test_fresh_process_with_warm_cache_does_not_compile(executor):
    code = _FRESH.format(executor=executor)
    env = dict(os.environ)
    for _ in range(2):  # the first process may compile (cold cache); the second must not
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
    hits, misses, executed, seconds = out.stdout.split()
    assert (int(hits), int(misses), int(executed)) == (1, 0, 2000), out.stdout


def test_dispatch_holds_only_the_kernel_modules_a_graph_uses():
    from rtsoa.graph.generators import generate
    from rtsoa.kernels.dispatch import included_kernels

    names = REGISTRY.names()
    checksum_graph = generate("random", 200, seed=1)
    lowered_graph = generate("lowered", 200, seed=1)
    checksum_ex = prepare_executor(checksum_graph, "sequential")
    lowered_ex = prepare_executor(lowered_graph, "sequential")
    checksum_source = checksum_ex._dispatch.py_func.__globals__
    lowered_source = lowered_ex._dispatch.py_func.__globals__
    alloc_id = names.index("AllocMemory")
    checksum_id = names.index("Checksum0")
    assert f"_kernel{checksum_id}" in checksum_source
    assert f"_kernel{alloc_id}" not in checksum_source
    assert f"_kernel{alloc_id}" in lowered_source
    assert f"_kernel{checksum_id}" not in lowered_source
    # Whole modules: a graph using one built-in gets every built-in of that module.
    included = included_kernels(REGISTRY, [checksum_id])
    assert names.index("Checksum15") in included and names.index("Noop") in included
    assert alloc_id not in included
    # Busy / Fail / FailWhen live in their own module (rtsoa.kernels.workload): a graph of
    # checksum kernels does not compile them.
    assert names.index("Busy") not in included and names.index("FailWhen") not in included
    assert included_kernels(REGISTRY, None) == tuple(range(len(names)))
    assert checksum_ex.run().checksum == expected_checksum(checksum_graph)
    assert lowered_ex.run().checksum == expected_checksum(lowered_graph)
