"""ModelExecutor: a lowered model on a simulated device, with the reference's lifecycle.

    with rtsoa.load_model("model.onnx") as model:      # lowers, prepares, runs Init
        outputs = model.execute_sync({"x": x})          # {name: numpy array}

`load()` runs Init once (weights uploaded to the device) and prepares Main; `execute_sync`
checks the inputs against the model (count, names, dtypes, ranks, static and symbolic dims),
copies them to device blocks, runs Main, copies the outputs back and frees their blocks;
`unload()` runs DeInit. Calling out of order raises `ModelStateError`. One execute at a time
(an executor's run state serves one run; a second thread gets ExecutorBusyError).
"""

import os

import numpy as np

from rtsoa.errors import ModelInputError, RtsoaError
from rtsoa.graph.schema import MAX_RANK, DType, GraphKind, ValueKind
from rtsoa.kernels.runtime import SHAPE_DIMS, SHAPE_DTYPE, SHAPE_RANK, is_model, new_values
from rtsoa.ops.abi import NUMPY_DTYPES

DEFAULT_HBM_BYTES = 1 << 30
# Every kernel a lowered model runs: Init, Main and DeInit (and every model) share one compiled
# dispatch and loop over these.
MODEL_KERNELS = (
    "AllocMemory",
    "ConstTensor",
    "FreeMemory",
    "OpInferShape",
    "OpLaunch",
    "RecordEvent",
    "StreamWaitEvent",
    "UploadConstant",
)


class ModelStateError(RtsoaError, RuntimeError):
    """A ModelExecutor call out of order (execute before load, load twice, after unload)."""


_NUMPY = {int(code): np.dtype(kind) for code, kind in NUMPY_DTYPES.items()}


def _numpy(dtype):
    return _NUMPY[int(dtype)]


class ModelExecutor:
    """A lowered model (ExecuteGraph with named inputs and outputs) on a device."""

    def __init__(self, graph, executor="auto", device=None, hbm_bytes=None):
        if not is_model(graph):
            raise ModelInputError(
                f"graph {graph.meta.name!r} is not a lowered model (it runs no op kernels); "
                "run it with rtsoa.prepare_executor"
            )
        from rtsoa.device import device_for_graph

        self.graph = graph
        self.executor_name = executor
        self.device = device or device_for_graph(graph, hbm_bytes=hbm_bytes or DEFAULT_HBM_BYTES)
        self.values = new_values(graph.num_values, shapes=True)
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
        self.outputs = []  # (name, block value, shape value)
        for name, block, _dtype, _dims in description["outputs"]:
            producer = int(graph.value_producer[block])
            if producer < 0 or graph.kernel_name(producer) != "AllocMemory":
                raise ModelInputError(f"graph output {name!r} is not laid out as lowering does")
            shape = int(graph.inputs(producer)[0])
            self.outputs.append((name, block, shape))
        self._executors = None
        self.state = "created"
        self.iterations = 0

    # -- lifecycle -------------------------------------------------------------------------
    def load(self):
        """Run Init (weights to the device) and prepare Main and DeInit."""
        from rtsoa.executors import prepare_executor

        if self.state != "created":
            raise ModelStateError(f"load() on a model that is {self.state}")
        prepare = {"device": self.device, "values": self.values, "kernels": MODEL_KERNELS}
        init = prepare_executor(self.graph, "sequential", root=GraphKind.INIT, **prepare)
        main = prepare_executor(self.graph, self.executor_name, root=GraphKind.MAIN, **prepare)
        deinit = prepare_executor(self.graph, "sequential", root=GraphKind.DEINIT, **prepare)
        init.run()
        self.device.synchronize()  # weights are on the device before any stream reads them
        self._executors = (init, main, deinit)
        self.state = "loaded"
        return self

    def unload(self):
        """Run DeInit (weights released); the model cannot execute afterwards."""
        if self.state != "loaded":
            raise ModelStateError(f"unload() on a model that is {self.state}")
        self._executors[2].run()
        self.state = "unloaded"

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
        return self._executors[1] if self._executors else None

    # -- execution ---------------------------------------------------------------------------
    def check_inputs(self, inputs):
        """Arrays of `inputs` in the model's order, after every check (ModelInputError)."""
        if not isinstance(inputs, dict):
            raise ModelInputError("inputs must be a dict of name -> array")
        names = [entry[0] for entry in self.inputs]
        missing = [name for name in names if name not in inputs]
        if missing:
            raise ModelInputError(f"missing input(s) {missing}; the model takes {names}")
        extra = sorted(set(inputs) - set(names))
        if extra:
            raise ModelInputError(f"unexpected input(s) {extra}; the model takes {names}")
        symbols = {}
        arrays = []
        for name, _block, _shape, dtype, dims in self.inputs:
            array = np.asarray(inputs[name])
            expected = _numpy(dtype)
            if array.dtype != expected:
                raise ModelInputError(
                    f"input {name!r} has dtype {array.dtype}, the model takes {expected}"
                )
            if array.ndim > MAX_RANK:
                raise ModelInputError(f"input {name!r} has rank {array.ndim} > {MAX_RANK}")
            if dims is not None:
                if array.ndim != len(dims):
                    raise ModelInputError(
                        f"input {name!r} has rank {array.ndim}, the model takes {len(dims)} "
                        f"(shape {_show(dims)})"
                    )
                for axis, (size, want) in enumerate(zip(array.shape, dims, strict=True)):
                    if isinstance(want, int) and size != want:
                        raise ModelInputError(
                            f"input {name!r} has shape {array.shape}, the model takes "
                            f"{_show(dims)} (axis {axis})"
                        )
                    if isinstance(want, str):
                        seen = symbols.setdefault(want, (size, name))
                        if seen[0] != size:
                            raise ModelInputError(
                                f"input {name!r} axis {axis} is {size}, but symbol {want!r} is "
                                f"{seen[0]} in input {seen[1]!r}"
                            )
            arrays.append(np.ascontiguousarray(array))
        return arrays

    def execute_sync(self, inputs, subscriber=None):
        """Run Main on `inputs` ({name: array}); returns {output name: array}. `subscriber`:
        profiler / tracer subscribers of the Main run (`rtsoa.executors.Subscriber`)."""
        if self.state != "loaded":
            raise ModelStateError(f"execute on a model that is {self.state}; call load() first")
        arrays = self.check_inputs(inputs)
        device = self.device
        slots = self.values.slots
        shapes = self.values.shapes
        handles = []
        try:
            for (_name, block, shape, dtype, _dims), array in zip(self.inputs, arrays, strict=True):
                handle = device.malloc(max(array.nbytes, 1))
                handles.append(handle)
                device.view(handle)[: array.nbytes] = array.view(np.uint8).reshape(-1)
                slots[block] = handle
                slots[shape] = array.nbytes
                shapes[shape, SHAPE_RANK] = array.ndim
                shapes[shape, SHAPE_DTYPE] = int(dtype)
                shapes[shape, SHAPE_DIMS : SHAPE_DIMS + MAX_RANK] = 0
                shapes[shape, SHAPE_DIMS : SHAPE_DIMS + array.ndim] = array.shape
            self.main.run(subscriber=subscriber)
            self.iterations += 1
            device.synchronize()  # the host reads the outputs after every stream's work
            return self._collect()
        finally:
            for handle in handles:
                device.free(handle)

    def _collect(self):
        slots = self.values.slots
        shapes = self.values.shapes
        results = {}
        for name, block, shape in self.outputs:
            rank = int(shapes[shape, SHAPE_RANK])
            dims = tuple(int(d) for d in shapes[shape, SHAPE_DIMS : SHAPE_DIMS + rank])
            dtype = _numpy(int(shapes[shape, SHAPE_DTYPE]))
            handle = int(slots[block])
            nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
            data = self.device.view(handle)[:nbytes]
            results[name] = data.view(dtype).reshape(dims).copy()
            self.device.free(handle)
            slots[block] = -1
        return results

    def describe(self):
        """Inputs and outputs with dtypes and (symbolic) dims, as a dict."""
        return self.graph.io_description()


def _show(dims):
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def load_model(source, executor="auto", device=None, hbm_bytes=None, load=True):
    """A ModelExecutor from a lowered graph (ExecuteGraph or saved directory) or an ONNX
    model (path, bytes, ModelProto, lowered on the fly); loaded unless `load=False`."""
    from rtsoa.graph.graph import ExecuteGraph

    if isinstance(source, ExecuteGraph):
        graph = source
    elif isinstance(source, str | os.PathLike) and os.path.isdir(source):
        from rtsoa.graph.io import load_graph

        graph = load_graph(source)
    else:
        from rtsoa.lowering import lower

        graph = lower(source)
    model = ModelExecutor(graph, executor=executor, device=device, hbm_bytes=hbm_bytes)
    return model.load() if load else model
