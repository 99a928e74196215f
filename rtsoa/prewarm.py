"""A cold `rtsoa run` on two cores: of a saved graph, and of an ONNX model.

On a cold cache, most of the first run of a lowered graph is compiling: the device's
functions (the allocator above all, ~14 s of one core here for `datasets/lowered-4k.rtsoa`)
and, before them, the graph's validation, race check and priority order (~6 s). They do not
depend on each other, so when the graph calls the device (a kernel with a critical section)
and Numba's disk cache does not hold the device's malloc for these sources and this machine:

* this process compiles the device functions the lowered kernels call, `device_malloc`
  first (`compile_device_functions`), then goes on as usual;
* a helper process (`python -m rtsoa.prewarm GRAPH EXECUTOR`) meanwhile validates the graph,
  binds it, computes the sequential executor's order, compiles the device's smaller entry
  points from the other end of the list and the device synchronisation, all into Numba's disk
  cache; when this process gets there, it loads them.

Nothing waits for the helper: whatever it has not cached yet when this process needs it is
compiled here, as without it, and a helper that fails (a graph that does not validate, a
crash) costs nothing but its core's time. `finish` reaps it at the end of the run. No helper
starts on a warm cache, with caching switched off, with one usable core
(`RTSOA_COMPILE_JOBS=1`, see `rtsoa.ops.library.compile_jobs`), for a graph that never calls
the device, or for a saved lowered model (its kernels call the device otherwise, and the op
library has its own parallel compile). The helper validates the graph before it runs any
compiled code on it.

An ONNX model (`cold_start_model`) is lowered before it runs, and lowering compiles the
model's ops; the model runtime (the device, the executor loop over the lowered kernels,
validation, the race check, the order) is the same for every model. So on a cold cache a
helper (`python -m rtsoa.prewarm --model EXECUTOR`) compiles the device functions, then lowers,
loads and runs a built-in model of one op (`tiny_model`: a graph input through Identity and a
weight, the lowered kernels a real model uses) while this process lowers the user's model with
its ops compiled here alone (`rtsoa.ops.library.cores_in_use`); before loading the model, this
process waits for the helper (`finish`), whose work is what the load would compile, and then
loads it from the cache.
"""

import os
import subprocess
import sys

HELPER_TIMEOUT = 120  # seconds `finish` waits for a helper still working before it kills it


def _signatures():
    """[(device function, argument types)] in the order this process compiles them: the
    types the lowered kernels call them with (`rtsoa.kernels.lowered`)."""
    import numba
    from numba import types

    from rtsoa.device import (
        Device,
        device_access,
        device_free,
        device_malloc,
        event_record,
        launch_begin,
        stream_wait_event,
    )

    state = numba.typeof(Device(hbm_bytes=1 << 20).state)
    i64 = types.int64
    return [
        (device_malloc, (state, i64, i64, i64)),
        (device_free, (state, i64, i64)),
        (device_access, (state, i64, i64, types.boolean)),
        (launch_begin, (state, i64, i64, i64)),
        (event_record, (state, i64, i64)),
        (stream_wait_event, (state, i64, i64)),
    ]


def _device_cache_state():
    """None when Numba's disk cache is off for the device (a helper would work in vain),
    else whether it holds `device_malloc` for these sources and this machine."""
    from rtsoa._numba.caching import cached_signatures, is_cached
    from rtsoa.device import device_malloc

    if not is_cached(device_malloc):
        return None
    try:
        return bool(cached_signatures(device_malloc))
    except Exception:  # noqa: BLE001 - an unreadable index: Numba recompiles, so do we
        return False


def uses_device(graph):
    """Does any node of `graph` run a registered kernel with a critical section (one that
    calls the device)? Names the registry does not know count as no (validation or binding
    reports them)."""
    from rtsoa.kernels.registry import REGISTRY

    return any(name in REGISTRY and REGISTRY[name].critical_section for name in graph.kernel_names)


def compile_device_functions(helper=False):
    """Compile (or load from the disk cache) the device functions the lowered kernels call;
    `helper`: all but `device_malloc`, from the last (the helper's share). Returns how many."""
    signatures = _signatures()
    if helper:
        signatures = signatures[:0:-1]
    for function, argument_types in signatures:
        function.compile(argument_types)
    return len(signatures)


def cold_start(path, executor="auto"):
    """Before `rtsoa run` loads the saved graph at `path`: on a cold cache for a graph that
    calls the device, start the helper and compile the device functions here (see the
    module docstring). Returns the helper (a `subprocess.Popen`) or None."""
    from rtsoa.graph.io import load_graph
    from rtsoa.kernels.abi import is_model
    from rtsoa.ops.library import compile_jobs

    try:
        if compile_jobs() < 2:
            return None
        probe = load_graph(path, validate=False)  # names only: no compiled code runs on it
        if is_model(probe) or not uses_device(probe) or _device_cache_state() is not False:
            return None  # models: the op library compiles on all cores (rtsoa.ops.library)
    except Exception:  # noqa: BLE001 - only an optimisation: the real load reports the file
        return None
    command = [sys.executable, "-m", "rtsoa.prewarm", os.fspath(path), str(executor)]
    try:
        helper = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        helper = None
    compile_device_functions()
    return helper


def tiny_model():
    """The built-in model the model helper runs: y = Identity(x) and the weight w as a second
    output, float32: ops-table, input, weight upload and output kernels, one cheap op."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "rtsoa_prewarm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [4]),
        ],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def cold_start_model(executor="auto"):
    """Before `rtsoa run` lowers an ONNX model: on a cold cache with two usable cores, start
    the model helper (see the module docstring). Returns it (a `subprocess.Popen`) or None."""
    from rtsoa.ops.library import compile_jobs

    try:
        if compile_jobs() < 2 or _device_cache_state() is not False:
            return None
    except Exception:  # noqa: BLE001 - only an optimisation
        return None
    command = [sys.executable, "-m", "rtsoa.prewarm", "--model", str(executor)]
    try:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None


def _model_helper(executor):
    """The model helper's work: the device functions first (lowering does not call them, so
    the other process, lowering meanwhile, compiles what both need and this one then loads
    it), then the tiny model lowered, loaded and run once."""
    import numpy as np

    from rtsoa.device import Device
    from rtsoa.lowering import lower
    from rtsoa.runtime.model import ModelExecutor

    compile_device_functions()
    Device(hbm_bytes=1 << 20).synchronize()

    with ModelExecutor(lower(tiny_model()), executor=executor) as model:
        outputs = model.execute_sync({"x": np.ones((2, 4), dtype=np.float32)})
    if not np.array_equal(outputs["y"], np.ones((2, 4), dtype=np.float32)):
        raise RuntimeError("the prewarm model computed a wrong answer")


def finish(helper, timeout=HELPER_TIMEOUT):
    """Reap the helper (killed if still working after `timeout` s); its exit status, or None
    without one. Safe to call twice."""
    if helper is None:
        return None
    try:
        return helper.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        helper.kill()
        return helper.wait()


def _helper(path, executor):
    """The helper's work (see the module docstring); raises what validation raises."""
    from rtsoa.device import Device
    from rtsoa.executors.base import bind, resolve_executor
    from rtsoa.executors.sequential import priority_order
    from rtsoa.graph.io import load_graph

    graph = load_graph(path)  # validated before any compiled code runs on its contents
    binding = bind(graph)
    name = resolve_executor(executor, binding.control_flow, binding.launch_count)
    if name == "sequential":
        priority_order(graph, binding.nodes, binding.starts)
    compile_device_functions(helper=True)
    Device(hbm_bytes=1 << 20).synchronize()  # the end-of-run synchronisation's entry


def main(argv=None):
    """`python -m rtsoa.prewarm GRAPH [EXECUTOR]`: the helper of `cold_start`;
    `python -m rtsoa.prewarm --model [EXECUTOR]`: the helper of `cold_start_model`."""
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2:
        print(
            "usage: python -m rtsoa.prewarm (GRAPH | --model) [EXECUTOR]",
            file=sys.stderr,
        )
        return 2
    executor = args[1] if len(args) > 1 else "auto"
    if args[0] == "--model":
        _model_helper(executor)
    else:
        _helper(args[0], executor)
    return 0


if __name__ == "__main__":
    sys.exit(main())
