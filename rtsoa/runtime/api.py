"""The entry points of the reference's gert API (3.1), and the deprecated ones.

LoadExecutorFromFile(path)                    InferenceSession("m.onnx" / "m.rtsoa")
LoadExecutorFromModelData(bytes)              InferenceSession(onnx_bytes)
... (data, ExecutorOption)                    InferenceSession(data, SessionOptions(executor=...))
...WithRtSession(data, session)               ... SessionOptions(shared_weights=weights)
... (data, LoadExecutorArgs)                  ... SessionOptions(shared_weights=..., allocator=...)
LoadStreamExecutorFromModelData(data)         StreamExecutor(data)
IsDynamicModel(model)                         is_dynamic(model)

... (data, LoadExecutorArgs + FileConstantMems) SessionOptions(device=d, constant_memory=...)

`load_executor` and `load_model`, two entries doing what `InferenceSession` does, still work
and warn (DeprecationWarning); they go in the next version.
"""

import os
import warnings

from rtsoa.errors import ModelInputError
from rtsoa.graph.graph import ExecuteGraph
from rtsoa.graph.graph import is_dynamic as graph_is_dynamic
from rtsoa.graph.io import load_graph
from rtsoa.runtime.inference import InferenceSession, SessionOptions
from rtsoa.runtime.streams import StreamExecutor


def _deprecated(name):
    warnings.warn(
        f"{name} is deprecated: use rtsoa.InferenceSession(source, rtsoa.SessionOptions(...))",
        DeprecationWarning,
        stacklevel=3,
    )


def load_executor(
    source,
    executor="auto",
    session=None,
    allocator=None,
    *,
    stream_allocator=None,
    event_allocator=None,
    notify_allocator=None,
    device=None,
    hbm_bytes=None,
    stream_executor=False,
    load=True,
    constant_memory=None,
    base_dir=None,
):
    """Deprecated: `InferenceSession(source, SessionOptions(...))` (the keywords are the
    options' fields, `session` is `shared_weights`), or `StreamExecutor(source, ...)` for
    `stream_executor=True`; `load=False`: `InferenceSession.created(source, options)`."""
    _deprecated("rtsoa.load_executor")
    if isinstance(source, str | os.PathLike) and not os.path.exists(source):
        raise ModelInputError(f"{os.fspath(source)!r}: no such file or directory")
    allocators = {
        "allocator": allocator,
        "stream_allocator": stream_allocator,
        "event_allocator": event_allocator,
        "notify_allocator": notify_allocator,
    }
    if stream_executor:
        if device is not None or hbm_bytes is not None:
            raise ModelInputError(
                "a StreamExecutor gets its devices from its session: pass "
                "session=rtsoa.SharedWeights(hbm_bytes=...) instead of device / hbm_bytes"
            )
        if constant_memory is not None:
            raise ModelInputError(
                "constant_memory is memory of one device; a StreamExecutor runs its streams on "
                "devices of its own (load one ModelExecutor per device instead)"
            )
        return StreamExecutor(source, executor, session=session, base_dir=base_dir, **allocators)
    options = SessionOptions(
        executor=executor,
        device=device,
        hbm_bytes=hbm_bytes,
        shared_weights=session,
        constant_memory=constant_memory,
        base_dir=base_dir,
        **allocators,
    )
    return InferenceSession(source, options) if load else InferenceSession.created(source, options)


def load_model(
    source, executor="auto", device=None, hbm_bytes=None, load=True, base_dir=None, **options
):
    """Deprecated: `InferenceSession(source, SessionOptions(...))`. `options`: the other
    fields (`session` for `shared_weights`, allocators)."""
    _deprecated("rtsoa.runtime.load_model")
    if "session" in options:
        options["shared_weights"] = options.pop("session")
    settings = SessionOptions(
        executor=executor, device=device, hbm_bytes=hbm_bytes, base_dir=base_dir, **options
    )
    return (
        InferenceSession(source, settings) if load else InferenceSession.created(source, settings)
    )


def is_dynamic(source):
    """Whether a model has dynamic shapes (a symbolic or unknown dim in an input or output, or
    an intermediate of unknown rank): for an ExecuteGraph, a ModelExecutor / StreamExecutor,
    a saved .rtsoa directory, or an ONNX model (ModelProto, path or bytes; read, not lowered)."""
    graph = getattr(source, "graph", None)
    if isinstance(graph, ExecuteGraph):
        return graph_is_dynamic(graph)
    if isinstance(source, ExecuteGraph):
        return graph_is_dynamic(source)
    if isinstance(source, str | os.PathLike) and os.path.isdir(source):
        return graph_is_dynamic(load_graph(source))
    return _onnx_is_dynamic(source)


def _onnx_is_dynamic(source):
    import onnx

    if isinstance(source, bytes | bytearray | memoryview):
        try:
            proto = onnx.load_from_string(bytes(source))
        except Exception as error:  # protobuf's DecodeError and friends
            raise ModelInputError(f"bytes are not an ONNX model: {error}") from None
    elif isinstance(source, str | os.PathLike):
        if not os.path.exists(source):
            raise ModelInputError(f"{os.fspath(source)!r}: no such file or directory")
        try:
            proto = onnx.load(os.fspath(source), load_external_data=False)
        except Exception as error:
            raise ModelInputError(f"{os.fspath(source)!r} is not an ONNX model: {error}") from None
    elif isinstance(source, onnx.ModelProto):
        proto = source
    else:
        raise ModelInputError(
            "is_dynamic takes an ExecuteGraph, ModelExecutor, StreamExecutor, .rtsoa directory "
            f"or ONNX model (path, bytes, ModelProto), got {type(source).__name__}"
        )
    initializers = {init.name for init in proto.graph.initializer}
    values = [v for v in proto.graph.input if v.name not in initializers]
    values += list(proto.graph.output)
    for value in values:
        tensor = value.type.tensor_type
        if not tensor.HasField("shape"):
            return True
        for dim in tensor.shape.dim:
            if not dim.HasField("dim_value"):
                return True
    return False
