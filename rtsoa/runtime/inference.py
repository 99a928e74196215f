"""InferenceSession: the one public model entry, shaped like onnxruntime's.

    options = rtsoa.SessionOptions(executor="topological", hbm_bytes=1 << 28)
    with rtsoa.InferenceSession("model.onnx", options) as session:   # lowered, loaded
        [y] = session.run(["y"], {"x": x})                            # as onnxruntime
        outputs = session.execute_sync({"x": x})                      # {name: array}
        session.get_inputs()   # [TensorInfo(name="x", dtype=float32, shape=["batch", 16])]

A session is made from an ONNX model (path, bytes, ModelProto: lowered on the fly, or taken
from the lowering cache), a saved .rtsoa directory or an ExecuteGraph, and is loaded when
made (Init has run, Main is prepared). It is a `ModelExecutor`: `execute` (asynchronous, on a
stream), `execute_sync`, subscribers, `cancel`, `unload` all apply. `SessionOptions` holds
what the session is made with, checked when the options are made (`SessionOptionsError`
naming the field); the weights' and allocators' own checks run when the session is made.
"""

import dataclasses
import os
from typing import NamedTuple

import numpy as np

from rtsoa.device import Device
from rtsoa.errors import LoweringError, ModelInputError, SessionOptionsError
from rtsoa.executors import EXECUTORS
from rtsoa.executors.multithread import MAX_THREADS
from rtsoa.host.program import HostModel
from rtsoa.lowering.lower import fusions_of
from rtsoa.lowering.onnx_import import load_onnx
from rtsoa.lowering.sequence_io import takes_sequences
from rtsoa.ops.parts import threads_problem
from rtsoa.runtime.forks import CALLS
from rtsoa.runtime.model import ModelExecutor
from rtsoa.runtime.sequence_session import SequenceSession, chosen_outputs
from rtsoa.runtime.shared_weights import SharedWeights
from rtsoa.runtime.sources import graph_of

# onnxruntime's element type names where they differ from numpy's
_ONNXRUNTIME_TYPE_NAMES = {"float32": "float", "float64": "double", "object": "string"}


@dataclasses.dataclass(frozen=True)
class SessionOptions:
    """How an `InferenceSession` is made. Every field is optional.

    - `executor`: "auto" or a registered executor name (sequential, topological, ...).
    - `device`: a `rtsoa.device.Device` to load the model on (default: one sized for it);
      `hbm_bytes`: the arena size of that default device, in bytes.
    - `shared_weights`: a `SharedWeights` whose executors share one upload of the weights
      (instead of `device`).
    - `allocator`: a `rtsoa.device.allocators.Allocator` for the input blocks;
      `stream_allocator`, `event_allocator`, `notify_allocator`: external allocators of
      stream / event / notify indices, all or none.
    - `constant_memory`: {weight name: device array or block handle} of weights the caller
      holds in `device`'s memory, used in place (see rtsoa/runtime/external_weights.py).
    - `base_dir`: the directory an ONNX model's external data is relative to (default: the
      model file's directory; bytes and a ModelProto have none).
    - `fuse`: the fusions an ONNX model is lowered with, as `rtsoa.lowering.lower` takes
      them: True every one, False none, or the names to run (`rtsoa.lowering.fuse.FUSIONS`;
      e.g. every name but "winograd" keeps the direct 3 x 3 convs, bit for bit).
    - `threads`: how many threads run the model (onnxruntime's `intra_op_num_threads` is the
      nearest): 1 a one-thread executor, 2 .. 64 the multithread executor's workers (with
      `executor` "auto" or "multithread"); None the executor's default. The ops' BLAS calls
      use the process's BLAS thread pool whatever this says.
    - `intra_op_threads`: how many threads compute one large op (onnxruntime's
      `intra_op_num_threads`): the launching thread and `intra_op_threads` - 1 helper threads
      share its parts (convolutions, pools, batch normalizations; `rtsoa.ops.parts`), and the
      process's OpenBLAS runs on one thread during the session's runs. 1: every op runs whole
      on the thread that launches it. None: one thread per core for a model with such ops,
      else 1 (`rtsoa.ops.parts.auto_threads`), and the pool is kept only if it is faster: the
      first runs measure the model with and without it (`session.parts_choice`).
    """

    executor: str = "auto"
    device: Device | None = None
    hbm_bytes: int | None = None
    shared_weights: SharedWeights | None = None
    allocator: object = None
    stream_allocator: object = None
    event_allocator: object = None
    notify_allocator: object = None
    constant_memory: dict | None = None
    base_dir: str | os.PathLike | None = None
    threads: int | None = None
    fuse: bool | tuple = True
    intra_op_threads: int | None = None

    def __post_init__(self):
        executors = ["auto", *EXECUTORS]
        if not isinstance(self.executor, str) or self.executor not in executors:
            raise SessionOptionsError(
                f"SessionOptions.executor: unknown executor {self.executor!r}; choose one of "
                f"{', '.join(executors)}"
            )
        _check_type("device", self.device, Device, "a rtsoa.device.Device")
        if self.hbm_bytes is not None and (
            isinstance(self.hbm_bytes, bool)
            or not isinstance(self.hbm_bytes, int | np.integer)
            or self.hbm_bytes < 1
        ):
            raise SessionOptionsError(
                f"SessionOptions.hbm_bytes: a positive number of bytes, got {self.hbm_bytes!r}"
            )
        _check_type("shared_weights", self.shared_weights, SharedWeights, "a SharedWeights")
        _check_type("base_dir", self.base_dir, str | os.PathLike, "a directory path")
        if self.fuse is not True:  # kept as a sorted tuple of names (False: none)
            iterable = isinstance(self.fuse, tuple | list | set | frozenset)
            if not (self.fuse is False or iterable) or not all(
                isinstance(name, str) for name in (self.fuse or ())
            ):
                raise SessionOptionsError(
                    "SessionOptions.fuse: True, False or fusion names (a tuple, list or set of "
                    f"str), got {self.fuse!r}"
                )
            try:
                object.__setattr__(self, "fuse", tuple(sorted(fusions_of(self.fuse))))
            except ValueError as error:
                raise SessionOptionsError(f"SessionOptions.fuse: {error}") from None
        if self.threads is not None:
            if isinstance(self.threads, bool) or not isinstance(self.threads, int | np.integer):
                raise SessionOptionsError(
                    f"SessionOptions.threads: an int or None, got {type(self.threads).__name__}"
                )
            if not 1 <= self.threads <= MAX_THREADS:
                raise SessionOptionsError(
                    f"SessionOptions.threads: 1 .. {MAX_THREADS}, got {self.threads}"
                )
            if self.threads == 1 and self.executor == "multithread":
                raise SessionOptionsError(
                    "SessionOptions.threads: the multithread executor runs 2 or more threads, "
                    "got 1 (use executor='auto' or a one-thread executor)"
                )
            if self.threads > 1 and self.executor not in ("auto", "multithread"):
                raise SessionOptionsError(
                    f"SessionOptions.threads: {self.threads} threads need the multithread "
                    f"executor (or 'auto'), not {self.executor!r}"
                )
        if self.intra_op_threads is not None:
            problem = threads_problem(self.intra_op_threads)
            if problem is not None:
                raise SessionOptionsError(f"SessionOptions.intra_op_threads: {problem}")


def _check_type(field, value, kind, what):
    if value is not None and not isinstance(value, kind):
        raise SessionOptionsError(
            f"SessionOptions.{field}: {what} or None, got {type(value).__name__}"
        )


class TensorInfo(NamedTuple):
    """A model input or output: its name, numpy dtype (None when the model does not say) and
    shape (a list of ints, symbol names such as "batch", and None for unknown dims; None for
    an unknown rank); `value_type` names a value that is not a tensor (a sequence of maps)."""

    name: str
    dtype: np.dtype | None
    shape: list | None
    value_type: str | None = None  # a value that is not a tensor: its ONNX type

    @property
    def type(self):
        """The type as onnxruntime's `NodeArg.type` spells it: 'tensor(float)', or
        'seq(map(int64,tensor(float)))' for ZipMap's output."""
        if self.value_type is not None:
            return self.value_type
        if self.dtype is None:
            return None
        name = np.dtype(self.dtype).name
        return f"tensor({_ONNXRUNTIME_TYPE_NAMES.get(name, name)})"


class InferenceSession(ModelExecutor):
    """A model loaded and ready to run: `InferenceSession(source, options=None)`.

    `source`: an ONNX model (path, bytes, ModelProto), a saved .rtsoa directory or an
    ExecuteGraph; `options`: a `SessionOptions`. See the module docstring."""

    def __new__(cls, source=None, options=None):
        """An InferenceSession, or a `SequenceSession` for an ONNX model whose graph inputs or
        outputs are sequences or optionals (it is lowered per run's sequences)."""
        session = super().__new__(cls)
        if cls is InferenceSession and _onnx_source(source):
            chosen = options if isinstance(options, SessionOptions) else SessionOptions()
            base_dir = chosen.base_dir
            try:
                session._lowered = graph_of(source, base_dir=base_dir, fuse=chosen.fuse)
            except LoweringError:
                if not _takes_sequences(source, base_dir):
                    raise
                return _sequence_session(source, options)
            lowered = session._lowered
            # a model with host steps (string values) takes and returns no sequences
            outputs = [] if isinstance(lowered, HostModel) else lowered.io_description()["outputs"]
            if any(entry[0].endswith("]") for entry in outputs):
                if _takes_sequences(source, base_dir):  # a sequence output's elements
                    return _sequence_session(source, options)
        return session

    def __init__(self, source, options=None):
        with CALLS:  # a fork waits for the device's creation and the load (forks.py)
            self._create(source, options)
            self.load()

    @classmethod
    def created(cls, source, options=None):
        """A session made but not loaded yet (`load()` runs Init and prepares Main)."""
        session = cls.__new__(cls)
        with CALLS:
            session._create(source, options)
        return session

    def _create(self, source, options):
        if options is None:
            options = SessionOptions()
        if not isinstance(options, SessionOptions):
            raise SessionOptionsError(
                f"options must be a rtsoa.SessionOptions, got {type(options).__name__}"
            )
        if isinstance(source, str | os.PathLike) and not os.path.exists(source):
            raise ModelInputError(f"{os.fspath(source)!r}: no such file or directory")
        graph = getattr(self, "_lowered", None)  # lowered by __new__ already
        if graph is None:
            graph = graph_of(source, base_dir=options.base_dir, fuse=options.fuse)
        self._lowered = None
        extra = {}
        if options.constant_memory is not None:
            extra["constant_memory"] = options.constant_memory
        ModelExecutor.__init__(
            self,
            graph,
            options.executor,
            options.device,
            options.hbm_bytes,
            session=options.shared_weights,
            allocator=options.allocator,
            stream_allocator=options.stream_allocator,
            event_allocator=options.event_allocator,
            notify_allocator=options.notify_allocator,
            threads=options.threads,
            intra_op_threads=options.intra_op_threads,
            **extra,
        )
        self.options = options

    def get_inputs(self):
        """The model's inputs in order, as `TensorInfo` (name, dtype, shape)."""
        return [self._info(entry) for entry in self.describe()["inputs"]]

    def get_outputs(self):
        """The model's outputs in order, as `TensorInfo` (name, dtype, shape)."""
        return [self._info(entry) for entry in self.describe()["outputs"]]

    @staticmethod
    def _info(entry):
        dtype = None if entry["dtype"] is None else np.dtype(entry["dtype"])
        return TensorInfo(entry["name"], dtype, entry["shape"], entry.get("type"))

    def run(self, output_names, input_feed):
        """onnxruntime's `run`: the outputs named by `output_names` (None or empty: all, in
        the model's order) as a list of arrays, computed from `input_feed` ({name: array})."""
        output_names = chosen_outputs(output_names, self.output_names)
        outputs = self.execute_sync(input_feed)
        return [outputs[name] for name in output_names]

    def close(self):
        """Unload the session (DeInit runs when its weights' last user goes); idempotent."""
        if self.state == "loaded":
            self.unload()


def _sequence_session(source, options):
    """A SequenceSession of `source` whose specialisations are InferenceSessions."""
    options = SessionOptions() if options is None else options
    if not isinstance(options, SessionOptions):
        raise SessionOptionsError(
            f"options must be a rtsoa.SessionOptions, got {type(options).__name__}"
        )

    lowered = dataclasses.replace(options, base_dir=None, fuse=True)  # the data: in the bytes

    def open_session(data):  # made as `created` makes one: no dispatch to a SequenceSession
        graph = graph_of(data, fuse=options.fuse)
        if not len(graph.graph_outputs):
            return None  # every output an empty sequence or absent: nothing to run
        session = InferenceSession.created(graph, lowered)
        with CALLS:
            return session.load()

    return SequenceSession(source, options, open_session)


def _onnx_source(source):
    """Whether `source` is an ONNX model (bytes, a ModelProto, a path to a file)."""
    if isinstance(source, bytes | bytearray):
        return True
    if isinstance(source, str | os.PathLike):
        return os.path.isfile(source)
    return type(source).__name__ == "ModelProto"


def _takes_sequences(source, base_dir):
    """Whether an ONNX model has sequence or optional graph inputs or outputs."""
    try:
        return takes_sequences(load_onnx(source, base_dir=base_dir))
    except Exception:  # not a readable model: the lowering's own error stands
        return False
