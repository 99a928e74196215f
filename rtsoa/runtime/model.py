"""ModelExecutor: a lowered model on a simulated device, with the reference's lifecycle.

    with rtsoa.InferenceSession("model.onnx") as model:  # lowers, prepares, runs Init
        outputs = model.execute_sync({"x": x})          # {name: numpy array}
        run = model.execute({"x": x}, stream=1)         # enqueued behind stream 1's work
        outputs = run.result()                          # waits for it (device clock)

`load()` runs Init once per device (weights uploaded; see shared_weights.py for sharing) and
prepares Main on the executor's own stream(s) and value state; `unload()` releases them and
runs DeInit when the weights' last user goes. Calling out of order raises `ModelStateError`.

What "asynchronous" means on the simulated device: see execution.py. Calls on one executor are
serialised (one run at a time, in call order, as on one stream).
"""

import contextlib
import math
import threading

import numpy as np

from rtsoa.device.allocators import Allocator
from rtsoa.errors import ModelInputError, ModelStateError
from rtsoa.executors import Subscriber, prepare_executor
from rtsoa.executors.calibration import CALIBRATION_LIMIT, calibrate_with
from rtsoa.executors.cancel import CancelFlag
from rtsoa.graph.schema import MAX_RANK, DType, GraphKind, ValueKind
from rtsoa.host.kinds import is_map_sequence
from rtsoa.host.program import HostModel
from rtsoa.kernels.abi import SHAPE_DIMS, SHAPE_DTYPE, SHAPE_RANK, is_model
from rtsoa.ops.abi import NUMPY_DTYPES
from rtsoa.runtime import external_weights, host_steps, resources
from rtsoa.runtime.checks import check_inputs, check_outputs, numpy_dtype
from rtsoa.runtime.execution import Execution
from rtsoa.runtime.forks import CALLS
from rtsoa.runtime.kept_shapes import kept_shapes_graph
from rtsoa.runtime.resources import ModelResourceError
from rtsoa.runtime.shared_weights import (
    DEFAULT_HBM_BYTES,
    MODEL_KERNELS,
    ModelHome,
    model_device,
)
from rtsoa.runtime.sources import graph_of
from rtsoa.runtime.staging import InputStaging

__all__ = [
    "DEFAULT_HBM_BYTES",
    "MODEL_KERNELS",
    "Execution",
    "ModelExecutor",
    "ModelStateError",
    "graph_of",
    "is_model",
]


class ModelExecutor:
    """A lowered model (ExecuteGraph with named inputs and outputs) on a device.

    `device` / `hbm_bytes`: the device of a private home (default: one sized for the graph);
    `session`: place the executor in a `SharedWeights` instead (see shared_weights.py).
    `allocator`: a `rtsoa.device.allocators.Allocator` for the input blocks (its handles must be
    blocks of this executor's device: the compiled kernels read device blocks only);
    `stream_allocator`, `event_allocator`, `notify_allocator`: external allocators, all or none
    (see resources.py). `constant_memory`: {weight name: device array or block handle} of
    weights the caller holds in `device`'s memory, used in place (any subset of the weights
    named by the graph; see external_weights.py). `threads`: how many threads run Main
    (`prepare_executor`'s: 1 a one-thread executor, 2 or more the multithread executor's
    workers; None: the executor's default). `intra_op_threads`: how many threads compute one
    large op (its calling thread and `intra_op_threads` - 1 helpers, `rtsoa.ops.parts`); the
    process's OpenBLAS runs on one thread during this executor's runs; 1: ops run whole on the
    thread that launches them, the BLAS as the process has it. None: a pool of one thread per
    core for a model whose ops share parts (`rtsoa.ops.parts.auto_threads`), kept only if it is
    faster: its first runs measure the model with the pool and without it
    (`resources.PartsChoice`; `parts_choice.chosen` tells which it kept).
    """

    def __init__(
        self,
        graph,
        executor="auto",
        device=None,
        hbm_bytes=None,
        *,
        session=None,
        allocator=None,
        stream_allocator=None,
        event_allocator=None,
        notify_allocator=None,
        constant_memory=None,
        threads=None,
        intra_op_threads=None,
    ):
        self.host = None  # the HostProgram run around the device graph (rtsoa.host), or None
        if isinstance(graph, HostModel):
            self.host, graph = graph.program, graph.device
        if not is_model(graph) and (self.host is None or graph.num_nodes):
            raise ModelInputError(
                f"graph {graph.meta.name!r} is not a lowered model (it runs no op kernels); "
                "run it with rtsoa.prepare_executor"
            )
        external = resources.check_all_or_none(stream_allocator, event_allocator, notify_allocator)
        if session is not None and device is not None:
            raise ModelResourceError("give a device or a session, not both")
        self.graph = graph
        self.executor_name = executor
        self.threads = threads
        self.intra_op_threads = resources.intra_op_threads(intra_op_threads, graph)
        self.parts_choice = resources.PartsChoice(self.intra_op_threads, intra_op_threads is None)
        self.parts_pool = None  # the helpers of intra-op parts while loaded (load())
        self.session = session
        if session is not None:
            if constant_memory is not None:
                raise ModelResourceError(
                    "constant_memory is memory of one device: give that device (device=...), "
                    "not a session"
                )
            self.home = session.home_for(graph)
        elif constant_memory is not None:
            if device is None:
                raise ModelResourceError(
                    "constant_memory is memory of the model's device: pass the device it was "
                    "allocated on (device=...)"
                )
            named = external_weights.weight_names(graph)
            caller_blocks = external_weights.resolve(constant_memory, named, device)
            weights = {weight.block: weight for weight in named.values()}
            pairs = [(weights[block], handle) for block, handle in caller_blocks.items()]
            self.home = ModelHome(graph, device, external=pairs)
        else:
            self.home = ModelHome(graph, device or model_device(graph, hbm_bytes))
        self.device = self.home.device
        if allocator is not None:
            if not isinstance(allocator, Allocator):
                raise ModelResourceError(
                    "allocator must be a rtsoa.device.allocators.Allocator, got "
                    f"{type(allocator).__name__}"
                )
        self.allocator = allocator
        if external:
            self._allocators = (stream_allocator, event_allocator, notify_allocator)
        else:
            self._allocators = (self.home.streams, self.home.events, self.home.notifies)
        self.stream_count = max(int(graph.meta.stream_count), 1)
        self.event_count = max(int(graph.meta.event_count), 0)
        # the simulated device has no notify objects: a model declaring some cannot load here
        self.notify_count = int(graph.meta.notify_count)
        if self.notify_count:
            raise ModelResourceError(
                f"graph {graph.meta.name!r} declares {self.notify_count} notify object(s); the "
                "simulated device has none"
            )
        description = graph.io_description()
        self.inputs = []  # (name, block value, shape value, DType, dims)
        for name, block, dtype, dims in description["inputs"]:
            shape = block - 1
            if (
                shape < 0
                or graph.value_kind[shape] != ValueKind.SHAPE
                or graph.value_producer[shape] != -1
                or graph.value_kind[block] != ValueKind.MEMORY_BLOCK
            ):
                raise ModelInputError(f"graph input {name!r} is not laid out as lowering does")
            if dtype not in NUMPY_DTYPES:
                raise ModelInputError(f"graph input {name!r} has no element type")
            self.inputs.append((name, block, shape, DType(dtype), dims))
        self.outputs = []  # (name, block value, shape value, numpy dtype or None, dims)
        for name, block, dtype, dims in description["outputs"]:
            producer = int(graph.value_producer[block])
            if producer < 0 or graph.kernel_name(producer) != "AllocMemory":
                raise ModelInputError(f"graph output {name!r} is not laid out as lowering does")
            shape = int(graph.inputs(producer)[0])
            kind = numpy_dtype(dtype) if dtype in NUMPY_DTYPES else None
            self.outputs.append((name, block, shape, kind, dims))
        self.input_names = [entry[0] for entry in self.inputs]
        self.output_names = [entry[0] for entry in self.outputs]
        if self.host is not None:  # the device graph's inputs and outputs are not the model's
            self._device_io = host_steps.DeviceIO(self.input_names, self.inputs, self.output_names)
            self.input_names = [value.name for value in self.host.inputs]
            self.output_names = [value.name for value in self.host.outputs]
        self._main = None
        self._kept = None  # Main keeping the shapes of the run before (see kept_shapes.py), or None
        self._last_shapes = None  # input shapes and dtypes of the last successful run
        self.kept_runs = 0  # runs that took the kept path
        self._staging = None  # the inputs' device blocks while loaded (staging.py)
        self._lock = threading.Lock()  # one run at a time, in call order
        self.cancellation = CancelFlag()  # polled by Main's runs (both preparations of it)
        self._subscribers = []
        self.values = None
        self.streams = ()  # device streams Main runs on (streams[0]: the default stream)
        self.events = ()  # device events: one per stream (completion), one to join a caller
        self.notifies = ()
        self.state = "created"
        self.iterations = 0

    # -- lifecycle -------------------------------------------------------------------------
    def load(self):
        """Take streams and events, reference (or upload, once per device) the weights, and
        prepare Main on this executor's streams and value state."""
        with CALLS, self._lock:  # a fork waits for it (forks.py)
            if self.state != "created":
                raise ModelStateError(f"load() on a model that is {self.state}")
            stream_alloc, event_alloc, notify_alloc = self._allocators
            device = self.device
            taken = []
            try:
                self.streams = resources.acquire(
                    stream_alloc, "stream", self.stream_count, device.num_streams
                )
                taken.append((stream_alloc, self.streams))
                self.events = resources.acquire(
                    event_alloc, "event", self.stream_count + 1, device.num_events
                )
                taken.append((event_alloc, self.events))
                self.notifies = resources.acquire(notify_alloc, "notify", self.notify_count, 1)
                taken.append((notify_alloc, self.notifies))
                graph = self.graph
                if list(self.streams) != list(range(self.stream_count)):
                    mapping = np.asarray(self.streams, dtype=graph.node_stream.dtype)
                    graph = graph._replace(node_stream=mapping[graph.node_stream])
                self.values = self.home.acquire()
                taken.append((None, None))

                def prepare(main_graph):
                    return prepare_executor(
                        main_graph,
                        self.executor_name,
                        root=GraphKind.MAIN,
                        device=device,
                        values=self.values,
                        kernels=MODEL_KERNELS,
                        threads=self.threads,
                        cancel=self.cancellation,
                    )

                self._main = prepare(graph)
                kept = kept_shapes_graph(graph)  # reruns at the same input shapes (kept_shapes.py)
                self._kept = None if kept is None else prepare(kept)
                self.parts_pool = resources.parts_pool(self.intra_op_threads, self.executors)
            except BaseException:
                self.parts_pool = resources.release_parts_pool(self.parts_pool, self.executors)
                for allocator, indices in reversed(taken):
                    if allocator is None:
                        self._release_home()
                    else:
                        allocator.release(indices)
                self.streams = self.events = self.notifies = ()
                raise
            self._staging = InputStaging(self.device, self.streams[0], self.inputs, self.allocator)
            with self.home.lock:
                self._staging.make()
            self.state = "loaded"
        return self

    def unload(self):
        """Release streams, events and this executor's values; DeInit runs when the weights'
        last user goes (a session's weights live until the session closes)."""
        with CALLS, self._lock:
            if self.state != "loaded":
                raise ModelStateError(f"unload() on a model that is {self.state}")
            with self.home.lock:
                self.device.synchronize()
                self._staging.release()
            stream_alloc, event_alloc, notify_alloc = self._allocators
            stream_alloc.release(self.streams)
            event_alloc.release(self.events)
            notify_alloc.release(self.notifies)
            self._release_home()
            resources.release_parts_pool(self.parts_pool, self.executors)
            self.state = "unloaded"  # `main` stays readable (its name, record); runs are refused

    def _release_home(self):
        """One user of the home fewer: a private home runs DeInit now; a session decides."""
        if self.session is None:
            self.home.release(deinit=True)
        else:
            self.session.release(self.home)

    def __enter__(self):
        if self.state == "created":
            self.load()
        return self

    def __exit__(self, *exc):
        if self.state == "loaded":
            self.unload()
        return False

    @property
    def main(self):
        """The Main graph's executor."""
        return self._main

    @property
    def executors(self):
        """Every executor a run may use: Main's, and the one of reruns that keep the shapes of
        the run before (`rtsoa.runtime.kept_shapes`) where the model has one; set an option
        such as a multithread executor's `sharing` on each."""
        return [executor for executor in (self._main, self._kept) if executor is not None]

    # -- queries -----------------------------------------------------------------------------
    def describe(self):
        """The model description: stream / event / notify counts, inputs and outputs with
        dtypes and (symbolic) shapes ("batch" for a symbol, None for an unknown dim). An
        output that is a sequence of maps (ZipMap's: a list of dicts) has dtype None and its
        ONNX type under "type": "seq(map(int64,tensor(float)))"."""

        def entry(name, dtype, dims):
            return {
                "name": name,
                "dtype": None if dtype is None else str(np.dtype(dtype)),
                "shape": None if dims is None else list(dims),
            }

        def host_entry(value):
            described = entry(value.name, host_steps.host_dtype(value.kind), value.dims)
            if is_map_sequence(value.kind):  # a list of dicts: named by its ONNX type
                described["type"] = value.kind
            return described

        if self.host is not None:
            inputs = [host_entry(value) for value in self.host.inputs]
            outputs = [host_entry(value) for value in self.host.outputs]
        else:
            inputs = [entry(n, numpy_dtype(t), d) for n, _b, _s, t, d in self.inputs]
            outputs = [entry(n, t, d) for n, _b, _s, t, d in self.outputs]
        return {
            "name": self.graph.meta.name,
            "stream_count": self.stream_count,
            "event_count": self.event_count,
            "notify_count": self.notify_count,
            "inputs": inputs,
            "outputs": outputs,
            "is_dynamic": any(_dynamic(item["shape"]) for item in inputs + outputs),
        }

    @property
    def subscribers(self):
        """Subscribers (rtsoa.executors.Profiler / Tracer / Subscriber) every run reports to."""
        return tuple(self._subscribers)

    def add_subscriber(self, subscriber):
        if not isinstance(subscriber, Subscriber):
            raise TypeError(
                f"a subscriber must be an rtsoa.executors.Subscriber, got {subscriber!r}"
            )
        self._subscribers.append(subscriber)
        return subscriber

    def remove_subscriber(self, subscriber):
        self._subscribers.remove(subscriber)

    # -- checks ------------------------------------------------------------------------------
    def check_inputs(self, inputs):
        """Arrays of `inputs` in the model's order, after every check (ModelInputError)."""
        if self.host is not None:
            checked = host_steps.check_feeds(self.host, inputs)
            return [checked[name] for name in self.input_names]
        return self._check_inputs(inputs)[0]

    def _check_inputs(self, inputs):
        return check_inputs(self, inputs)

    def check_outputs(self, outputs, inputs, symbols=None):
        """Caller-provided output buffers {name: array}, checked before the run: known names,
        writable numpy arrays, the model's dtype, rank and the dims known from the model and
        the inputs; and the reference's I/O address-reuse check: no buffer may overlap an
        input (the model still reads it) or another output buffer. Returns {name: buffer}."""
        return check_outputs(self, outputs, inputs, symbols)

    # -- execution ---------------------------------------------------------------------------
    def execute(self, inputs, outputs=None, stream=None, subscriber=None, timeout=None):
        """Enqueue a run of Main on `inputs` ({name: array}); returns an `Execution` (its
        `result()` waits). `outputs`: buffers to write outputs into, in place (checked, see
        check_outputs); outputs not given are new arrays. `stream`: a stream index of this
        executor's device; the run starts after the work already on it and the stream waits
        for the run (None: the executor's default stream). `subscriber`: extra subscribers of
        this run, besides `subscribers`. `timeout`: seconds the run may take (its host work,
        from its start) before it stops with RunTimeout.

        A run stops on `timeout`, on `cancel()` from another thread (RunCancelled) and, called
        from the main thread, on Ctrl-C (RunInterrupted, a KeyboardInterrupt raised after
        the run stopped); its blocks are freed as after a failed run and the next execute
        runs normally (see rtsoa.executors.cancel)."""
        return self._execute(inputs, outputs, stream, subscriber, sync=False, timeout=timeout)

    def cancel(self):
        """Stop the run in progress (from another thread): it raises RunCancelled. With no
        run in progress, nothing happens."""
        self.cancellation.cancel()

    def _execute(self, inputs, outputs, stream, subscriber, sync, timeout=None):
        with CALLS, self._lock:  # a fork waits for the run (forks.py)
            if self.state != "loaded":
                raise ModelStateError(
                    f"execute on a model that is {self.state}; call load() first"
                    if self.state == "created"
                    else f"execute on a model that is {self.state}"
                )
            # host steps: the whole run, prologue to epilogue, is one stoppable scope
            hosted = self.host is not None
            with self.cancellation.scope(timeout) if hosted else contextlib.nullcontext():
                return self._execute_checked(inputs, outputs, stream, subscriber, sync, timeout)

    def _execute_checked(self, inputs, outputs, stream, subscriber, sync, timeout):
        if self.host is None:
            arrays, symbols = self._check_inputs(inputs)
            buffers = self.check_outputs(outputs, arrays, symbols) if outputs else {}
        else:
            values, arrays, buffers = self._host_prologue(inputs, outputs)
        device = self.device
        if stream is not None:
            if isinstance(stream, bool) or not isinstance(stream, int | np.integer):
                raise ModelInputError(f"stream must be a stream index, got {stream!r}")
            if not 0 <= stream < device.num_streams:
                raise ModelInputError(
                    f"stream {stream} is not a stream of the device (0..{device.num_streams - 1})"
                )
            stream = int(stream)
        subscribers = self._subscribers
        if subscriber is not None:
            extra = list(subscriber) if isinstance(subscriber, list | tuple) else [subscriber]
            subscribers = subscribers + extra
        with self.home.lock, self.cancellation.scope(timeout):
            results = self._run(arrays, buffers, stream, subscribers or None, not sync)
            if sync:  # execute_sync: wait for the run's streams (no completion events)
                for own in self.streams:
                    device.synchronize(own)
        if self.host is not None:
            results = host_steps.after(self.host, values, results, self.cancellation.stop_before)
        self.iterations += 1
        if sync:
            return results
        done = self.events[: self.stream_count]
        return Execution(
            self, results, done, self.streams[0] if stream is None else stream, self.iterations
        )

    def _host_prologue(self, inputs, outputs):
        """(host values, device input arrays, no buffers): the model's inputs checked and the
        host steps before the device graph run (rtsoa.runtime.host_steps)."""
        if outputs:
            raise ModelInputError(
                "output buffers are not supported for a model with host steps (string values)"
            )
        values, feeds = host_steps.before(self.host, inputs, self.cancellation.stop_before)
        return values, check_inputs(self._device_io, feeds)[0], {}

    def _run(self, arrays, buffers, stream, subscribers, record):
        device = self.device
        own = self.streams[0]
        join = stream is not None and stream not in self.streams
        if join:  # the run starts after the work already on the caller's stream
            device.record_event(self.events[-1], stream)
            for model_stream in self.streams:
                device.wait_event(model_stream, self.events[-1])
        slots = self.values.slots
        shapes = self.values.shapes
        handles = []  # blocks of an external memory allocator, freed after the run
        try:
            for index, array in enumerate(arrays):
                name, block, shape, dtype, _dims = self.inputs[index]
                nbytes = array.nbytes
                handle, view = self._staging.block(index, name, nbytes, handles)
                view[:nbytes].view(array.dtype).reshape(array.shape)[...] = array
                slots[block] = handle
                slots[shape] = nbytes
                row = shapes[shape]
                row[SHAPE_RANK] = array.ndim
                row[SHAPE_DTYPE] = int(dtype)
                row[SHAPE_DIMS : SHAPE_DIMS + MAX_RANK] = 0
                row[SHAPE_DIMS : SHAPE_DIMS + array.ndim] = array.shape
            if handles:
                self._staging.check_handles(handles)
            shapes_key = tuple((array.shape, array.dtype.str) for array in arrays)
            kept = self._kept is not None and subscribers is None
            kept = kept and shapes_key == self._last_shapes
            self._last_shapes = None  # set again only if this run succeeds
            executor = self._kept if kept else self._main
            self.parts_pool = resources.pooled_run(
                self.parts_choice,
                self.parts_pool,
                self.executors,
                shapes_key,
                lambda: executor.run(subscriber=subscribers),
                plain=subscribers is None,
            )
            results = self._collect(buffers, own)
            self._last_shapes = shapes_key
            self.kept_runs += kept
        except BaseException:
            # Main's own blocks were released by its executor; staging this run grew goes too,
            # so failing runs leave the executor's memory as load() left it
            self._staging.restore()
            raise
        finally:
            for handle in handles:
                self.allocator.free(handle)
        if record or join:
            for model_stream, event in zip(self.streams, self.events, strict=False):
                device.record_event(event, model_stream)
                if join:  # the caller's stream waits for the run
                    device.wait_event(stream, event)
        return results

    def _collect(self, buffers, stream):
        slots = self.values.slots
        shapes = self.values.shapes
        device = self.device
        results = {}
        problem = None
        for name, block, shape, _dtype, _dims in self.outputs:
            rank = int(shapes[shape, SHAPE_RANK])
            dims = tuple(int(d) for d in shapes[shape, SHAPE_DIMS : SHAPE_DIMS + rank])
            dtype = numpy_dtype(int(shapes[shape, SHAPE_DTYPE]))
            handle = int(slots[block])
            nbytes = math.prod(dims) * dtype.itemsize
            data = device.view(handle)[:nbytes].view(dtype).reshape(dims)
            buffer = buffers.get(name)
            if buffer is None:
                results[name] = data.copy()
            elif buffer.shape != dims or buffer.dtype != dtype:
                problem = problem or (
                    f"output {name!r} has shape {buffer.shape} ({buffer.dtype}), the run "
                    f"produced {dims} ({dtype}); it was not written"
                )
            else:
                np.copyto(buffer, data)
                results[name] = buffer
            device.free(handle, stream)
            slots[block] = -1
        if problem:
            raise ModelInputError(problem)
        return results

    def execute_sync(self, inputs, outputs=None, subscriber=None, timeout=None):
        """execute() on the default stream, then wait; returns {output name: array}.
        `timeout`, `cancel()` and Ctrl-C stop it as they stop execute()."""
        return self._execute(inputs, outputs, None, subscriber, sync=True, timeout=timeout)

    @property
    def calibrating(self):
        """Whether the model still times its plain runs to choose how it runs: the intra-op
        pool (`parts_choice`), or the sharing plan under "auto" of the multithread executor
        that runs at the last run's shapes (Main's before a first run, else the one keeping
        the shapes where the model has it)."""
        kept = self._kept is not None and self._last_shapes is not None
        executor = self._kept if kept else self._main  # None until loaded
        return self.parts_choice.calibrating or (executor is not None and executor.calibrating)

    def calibrate(self, inputs, limit=CALIBRATION_LIMIT):
        """Run the model on `inputs` (plain runs, outputs dropped) until nothing is left to
        choose by timing (`calibrating`), so that runs timed afterwards, a benchmark's or
        `rtsoa run --repeat`'s, count no trial. Stops early once a run is not counted by any
        choice (runs with subscribers, or `inputs` of other shapes than the model's first
        run, are never timed) and after `limit` runs. Returns how many runs it made.
        ModelStateError unless the model is loaded."""
        if self.state != "loaded":
            raise ModelStateError(f"calibrate on a model that is {self.state}; call load() first")
        return calibrate_with(
            lambda: self.execute_sync(inputs),
            lambda: self.calibrating,
            self._calibration_runs,
            limit,
        )

    def _calibration_runs(self):
        counts = [e.calibration_runs for e in self.executors]
        return self.parts_choice.calibration_runs + sum(counts)

    def synchronize(self):
        """Wait for every run of this executor (its streams)."""
        with CALLS, self.home.lock:
            for stream in self.streams:
                self.device.synchronize(stream)


def _dynamic(shape):
    return shape is None or any(not isinstance(d, int) for d in shape)
