"""Running one job where a worker runs it (a local worker process or a Dask worker): the
job kinds' run functions, the per-process graph cache and the first-compile lock.

`run_job(job, settings)` never raises for a failing job: it returns the job's result row with
`status` "ok", or the error's type name and its message. Only the death of the process (a
crash in a user kernel, an out-of-memory kill) loses the row; the pool records that itself.

First compile. A fresh worker with a warm disk cache loads machine code and compiles nothing.
With a cold cache the first worker to reach a kind of job compiles it while holding an
exclusive `flock` on `<cache dir>/batch-compile.lock`; the others wait for the lock and then
load what it wrote, so no two workers compile the same thing. The lock is taken around
loading, preparing and compiling (never the run) of the first job of each process and the
first job of each (executor, kernel set) in a process, and only until one such job has
completed with the current sources: it then leaves a marker file (named by a hash of the key,
the kernel registry with its sources and rtsoa's package stamp, and NUMBA_CACHE_DIR) and warm
workers start in parallel without the lock.

The --timeout clock (local workers) runs for the whole job, lowering, loading and preparing
included, except while this process warms up: the first job of each key here waits for the
compile lock and loads or compiles machine code (bounded work, minutes on a cold cache) with
the clock paused (`on_warm_up`). A model job loads (compiles, when cold) only the ops its
model runs, when its lowering and load first need them, with the clock paused for that too
(`rtsoa.ops.library.on_entry_loads`), and every compile pauses it (`rtsoa._numba.events`); the
rest of its lowering is timed.
"""

import fcntl
import hashlib
import importlib
import importlib.util
import os
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np
from numba import typeof

from rtsoa._numba.events import on_compile
from rtsoa.batch.kinds import JOB_KINDS, job_kind
from rtsoa.device import device_for_graph
from rtsoa.errors import UnsupportedJob
from rtsoa.executors import prepare_executor
from rtsoa.graph.io import load_graph
from rtsoa.graph.schema import ValueKind
from rtsoa.kernels import REGISTRY
from rtsoa.kernels.abi import is_model
from rtsoa.kernels.dispatch import cache_dir, registry_hash
from rtsoa.lowering.cache import lower_cached
from rtsoa.ops.library import on_entry_loads
from rtsoa.report import device_summary
from rtsoa.runtime.model import ModelExecutor
from rtsoa.runtime.npz import file_arrays, read_inputs


class Settings(NamedTuple):
    """A batch's options that workers need (picklable)."""

    executor: str = "auto"  # default executor of jobs that name none
    kernels: str = "all"  # prepare_executor(kernels=...): "all" shares one dispatch
    imports: tuple = ()  # modules imported first in each worker (user kernels register)
    hazards: bool = True  # the device's happens-before checker
    timeout: float | None = None  # seconds per job (local pool: the worker is killed)


def import_modules(names):
    """Import each module once per process (user kernel modules register their kernels)."""
    for name in names:
        importlib.import_module(name)


# ---- the first-compile lock ------------------------------------------------------------------
_warmed = set()  # keys whose first job this process has run
_lock_guard = threading.RLock()  # threads of one process (Dask worker threads)
_lock_depth = [0]
_lock_file = [None]


def _cache_directory():
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _warm_marker(key):
    """The file saying `key`'s first job completed with these sources, this registry and this
    Numba cache: a process that finds it loads the caches without taking the lock."""
    text = f"{key!r} {registry_hash(REGISTRY)} {os.environ.get('NUMBA_CACHE_DIR', '')}"
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    return _cache_directory() / f"batch-warm-{digest}"


@contextmanager
def first_compile_lock(key):
    """Hold the cache directory's compile lock while the first job of `key` loads and
    prepares in this process, unless a job of `key` completed before with the same sources (a
    no-op afterwards, and when this process already holds it). Yields whether this is the
    first job of `key` here; `key` is marked warm only when the body completes. Until then
    the job's --timeout clock is paused (a warm-up: see the module docstring)."""
    if key in _warmed:
        yield False
        return
    with _warming_up():
        with _cold_lock(key) as first:
            yield first


@contextmanager
def _cold_lock(key):
    marker = _warm_marker(key)
    if marker.exists():
        _warmed.add(key)
        yield False
        return
    with _lock_guard:
        if _lock_depth[0] == 0:
            handle = open(_cache_directory() / "batch-compile.lock", "a+b")  # noqa: SIM115
            fcntl.flock(handle, fcntl.LOCK_EX)
            _lock_file[0] = handle
        _lock_depth[0] += 1
        try:
            yield True
            marker.touch()
            _warmed.add(key)  # a job that failed before compiling leaves the key cold
        finally:
            _lock_depth[0] -= 1
            if _lock_depth[0] == 0:
                handle, _lock_file[0] = _lock_file[0], None
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()


# ---- the graph cache -------------------------------------------------------------------------
_GRAPHS_KEPT = 8  # validated graphs a worker keeps mapped (most recently used)
_graphs = OrderedDict()  # signature -> ExecuteGraph
_graphs_guard = threading.Lock()


def _signature(path):
    """Identity of a saved graph's files: any save or edit changes it (None: not a directory,
    load_graph names the problem)."""
    try:
        directory = os.stat(path)
        with os.scandir(path) as entries:
            files = sorted(
                (entry.name, stat.st_ino, stat.st_size, stat.st_mtime_ns)
                for entry in entries
                for stat in (entry.stat(),)
            )
    except OSError:
        return None
    real = os.path.realpath(path)
    return real, directory.st_dev, directory.st_ino, directory.st_ctime_ns, tuple(files)


def load_cached(path):
    """`load_graph(path)`, validated once per worker while the files stay the same."""
    signature = _signature(path)
    if signature is None:
        return load_graph(path)
    with _graphs_guard:
        graph = _graphs.get(signature)
        if graph is not None:
            _graphs.move_to_end(signature)
            return graph
    graph = load_graph(path)
    with _graphs_guard:
        _graphs[signature] = graph
        while len(_graphs) > _GRAPHS_KEPT:
            _graphs.popitem(last=False)
    return graph


# ---- the --timeout clock ---------------------------------------------------------------------
_clock_hooks = [None]  # (pause, resume) of the local pool's job clock; None elsewhere (Dask)


def on_warm_up(pause, resume):
    """Call `pause()` when a job starts warming this process up (see `first_compile_lock`) and
    `resume()` when that is done: the local pool's --timeout does not count warm-ups, nor the
    loading and compiling of op entries in a model's lowering and load
    (`rtsoa.ops.library.on_entry_loads`), nor any other compile (`rtsoa._numba.events`)."""
    _clock_hooks[0] = (pause, resume)
    on_entry_loads(pause, resume)
    on_compile(pause, resume)


@contextmanager
def _warming_up():
    hooks = _clock_hooks[0]
    if hooks is None:
        yield
        return
    pause, resume = hooks
    pause()
    try:
        yield
    finally:
        resume()


# ---- runs ------------------------------------------------------------------------------------


def _load_machine_code(executor):
    """Compile (or load from the disk cache) the executor's loop before its run, so the run
    and its timeout hold no compile. Reaches into `Executor._loop` / `_arguments` (a Numba
    dispatcher and its arguments); if they change, the run compiles as before."""
    loop = getattr(executor, "_loop", None)
    arguments = getattr(executor, "_arguments", None)
    if loop is None or arguments is None or not hasattr(loop, "compile") or loop.signatures:
        return  # compiled already: typing ~50 arguments again costs more than a small job
    loop.compile(tuple(typeof(value) for value in (executor.runtime, *arguments, None)))


# ---- prepared executors and devices, per thread -----------------------------------------------
# A job of a graph the worker has run before reuses its prepared executor (the sequential
# executor's topological order, the bound kernels, the loop) and the worker's device for
# graphs of its size, reset to its just-built state: building a device (and reading the
# machine's memory for its checks) and ordering the graph were most of a job's cost. Per
# thread: a Dask worker may run jobs on several threads, and a device serves one run at a time.
_EXECUTORS_KEPT = 8
_prepared = threading.local()


def _thread_caches():
    if not hasattr(_prepared, "executors"):
        _prepared.executors = OrderedDict()  # key -> (graph, executor)
        _prepared.devices = {}  # device settings -> Device
    return _prepared.executors, _prepared.devices


def _device_key(graph, hazards):
    """What `device_for_graph` sizes a device by: streams, events, whether the graph holds
    memory values (a tiny device otherwise), and the hazard checker."""
    memory = bool((graph.value_kind == ValueKind.MEMORY_BLOCK).any())
    return (
        max(int(graph.meta.stream_count), 1),
        max(int(graph.meta.event_count), 1),
        memory,
        bool(hazards),
    )


def prepared_executor(graph, executor_option, settings):
    """(executor, first) for `graph`: prepared once per thread on a device of this thread
    (one per device size), reused while the graph object is the cached one (its files are
    unchanged); `first` says it was prepared now. The caller resets the device before a run."""
    executors, devices = _thread_caches()
    key = (id(graph), executor_option, settings.kernels, settings.imports, settings.hazards)
    entry = executors.get(key)
    if entry is not None and entry[0] is graph:
        executors.move_to_end(key)
        return entry[1], False
    device_key = _device_key(graph, settings.hazards)
    device = devices.get(device_key)
    if device is None:
        hazards = None if settings.hazards else False  # None: the device's default (on)
        device = devices[device_key] = device_for_graph(graph, hazards=hazards)
    executor = prepare_executor(
        graph, executor=executor_option, device=device, kernels=settings.kernels
    )
    executors[key] = (graph, executor)  # the graph is kept, so its id is not reused
    while len(executors) > _EXECUTORS_KEPT:
        executors.popitem(last=False)
    return executor, True


# ---- job kinds -------------------------------------------------------------------------------
@job_kind(".rtsoa", "a saved graph directory")
def run_graph(job, settings):
    """Load the graph (cached), take its prepared executor (cached) with the worker's device
    reset to its just-built state, and run its Main graph once."""
    fields = {}
    executor_option = job.executor or settings.executor
    with first_compile_lock(("process",)):
        graph = load_cached(job.path)
    if is_model(graph):  # a lowered model runs as `rtsoa run` runs it: inputs checked
        return _run_lowered(job, settings, graph)
    kernel_set = None if settings.kernels == "all" else frozenset(graph.kernel_names)
    key = (executor_option, settings.kernels, kernel_set, settings.imports)
    with first_compile_lock(key) as first:
        executor, prepared = prepared_executor(graph, executor_option, settings)
        device = executor.device
        fields["executor"] = executor.name
        if prepared:
            _load_machine_code(executor)
        if first:  # what runs after the run, compiled under the lock too (no-ops here)
            device.synchronize()
            device.stats()
    device.reset()  # each job starts on a device as new: its statistics are its own
    # the run holds no lock: a hung kernel must not stop the other workers
    start = time.perf_counter()
    try:
        result = executor.run()
    except Exception as error:
        fields["run_seconds"] = time.perf_counter() - start
        fields["nodes_executed"] = getattr(error, "nodes_executed", None)
        error.batch_fields = fields
        raise
    fields["run_seconds"] = time.perf_counter() - start
    device.synchronize()
    summary = device_summary(device, device.host_time, 0, "default")
    fields.update(
        nodes_executed=result.nodes_executed,
        checksum=result.checksum,
        device_time_ns=summary["time_ns_per_run"],
        peak_device_bytes=summary["peak_allocated_bytes"],
        peak_reserved_bytes=summary["peak_reserved_bytes"],
        hazards=summary["hazards"],
    )
    return fields


@job_kind(".onnx", "an ONNX model", takes_inputs=True)
def run_model(job, settings):
    """ONNX model jobs: lowered (once per worker and path), loaded on a fresh device, run once
    on the job's input set (`inputs`: an .npz by input name; none for a model without
    inputs). The checksum column is a 64-bit digest of the outputs' bytes (a sequence of
    maps: of its keys and values, `rtsoa.runtime.npz.file_arrays`)."""
    graph = _lowered.get(job.path)  # its ops load untimed (`on_warm_up`), the rest is timed
    if graph is None:
        graph = _lowered[job.path] = lower_cached(job.path)
    return _run_lowered(job, settings, graph)


def _output_bytes(array):
    """An output's bytes for the checksum: a string tensor's UTF-8 text, element by element."""
    if array.dtype.kind in "OU":
        return b"".join(str(v).encode() + b"\0" for v in array.ravel().tolist())
    return np.ascontiguousarray(array).tobytes()


def _run_lowered(job, settings, graph):
    """A lowered model's job: its inputs checked as `rtsoa run` checks them (before loading),
    loaded on a fresh device, run once; the checksum is a digest of the outputs' bytes."""
    fields = {}
    inputs = read_inputs(job.inputs) if job.inputs else {}
    # each op whole on the worker's thread: a batch's parallelism is its worker processes,
    # and a job's output digest does not depend on the machine's core count
    model = ModelExecutor(graph, executor=job.executor or settings.executor, intra_op_threads=1)
    model.check_inputs(inputs)
    with first_compile_lock(("model", job.executor or settings.executor)):
        model.load()
    start = time.perf_counter()
    try:
        outputs = model.execute_sync(inputs)
    finally:
        fields["run_seconds"] = time.perf_counter() - start
    digest = hashlib.sha256()
    arrays = file_arrays(outputs)  # a sequence of maps: its keys and values, as files hold it
    for name in sorted(arrays):
        digest.update(name.encode() + _output_bytes(arrays[name]))
    device = model.device
    stats = device.stats()
    fields.update(
        executor=model.main.name,
        nodes_executed=None,
        checksum=int.from_bytes(digest.digest()[:8], "little"),
        device_time_ns=int(device.host_time),
        peak_device_bytes=int(stats["hbm"]["allocated_bytes.peak"]),
        hazards=int(device.hazard_count),
    )
    model.unload()
    return fields


_lowered = {}  # path -> lowered graph, per worker process


# ---- one job ---------------------------------------------------------------------------------
def run_job(job, settings):
    """The result row of `job` (see `rtsoa.batch.results.RESULT_SCHEMA`); never raises for a
    failing job."""
    start = time.perf_counter()
    row = {"job": job.name, "graph": job.path, "executor": job.executor or settings.executor}
    try:
        import_modules(settings.imports)
        row.update(JOB_KINDS[job.kind].run(job, settings))
        row["status"], row["message"] = "ok", ""
    except UnsupportedJob as error:
        row["status"], row["message"] = "unsupported", str(error)
    except Exception as error:  # recorded, the batch goes on
        row.update(getattr(error, "batch_fields", {}))
        row["status"], row["message"] = type(error).__name__, _one_line(error)
    row["wall_seconds"] = time.perf_counter() - start
    row["worker"] = worker_name()
    return row


def _one_line(error):
    text = " ".join(str(error).split())
    return text or repr(error)


_worker_name = [None]


def worker_name():
    """Who ran the job: 'HOST pid N' (the Dask worker sets its address instead)."""
    if _worker_name[0] is None:
        _worker_name[0] = f"{os.uname().nodename} pid {os.getpid()}"
    return _worker_name[0]
