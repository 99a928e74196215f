"""`load_executor` and `is_dynamic`: the entry points of the reference's gert API (3.1).

LoadExecutorFromFile(path)                    load_executor("m.onnx" / "m.rtsoa")
LoadExecutorFromModelData(bytes)              load_executor(onnx_bytes)
... (data, ExecutorOption)                    load_executor(data, executor="topological")
...WithRtSession(data, session)               load_executor(data, session=session)
... (data, LoadExecutorArgs)                  load_executor(data, session=..., allocator=...)
LoadStreamExecutorFromModelData(data)         load_executor(data, stream_executor=True)
IsDynamicModel(model)                         is_dynamic(model)

... (data, LoadExecutorArgs + FileConstantMems) load_executor(data, device=d, constant_memory=)
"""

import os

from rtsoa.errors import ModelInputError


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
    """A loaded ModelExecutor (or a StreamExecutor with `stream_executor=True`) from an ONNX
    file / bytes / ModelProto (lowered on the fly), a saved .rtsoa directory or an ExecuteGraph.
    `executor`: auto, sequential, topological, priority; `session`: share weights with the
    session's other executors; `allocator`: memory allocator of the input blocks;
    stream / event / notify allocators: external, all or none. `constant_memory`: {weight
    (initializer) name: device array or block handle} of weights the caller holds in
    `device`'s memory, used in place of uploaded copies (see rtsoa/runtime/constants.py).
    `base_dir`: the directory an ONNX model's external data is relative to (default: the
    model file's directory; bytes and a ModelProto have none: one with external data is
    refused unless it is given)."""
    from rtsoa.runtime.forks import CALLS
    from rtsoa.runtime.model import ModelExecutor
    from rtsoa.runtime.sources import graph_of
    from rtsoa.runtime.streams import StreamExecutor

    if isinstance(source, str | os.PathLike) and not os.path.exists(source):
        raise ModelInputError(f"{os.fspath(source)!r}: no such file or directory")
    options = {
        "allocator": allocator,
        "stream_allocator": stream_allocator,
        "event_allocator": event_allocator,
        "notify_allocator": notify_allocator,
    }
    if stream_executor:
        if device is not None or hbm_bytes is not None:
            raise ModelInputError(
                "a StreamExecutor gets its devices from its session: pass "
                "session=rtsoa.Session(hbm_bytes=...) instead of device / hbm_bytes"
            )
        if constant_memory is not None:
            raise ModelInputError(
                "constant_memory is memory of one device; a StreamExecutor runs its streams on "
                "devices of its own (load one ModelExecutor per device instead)"
            )
        return StreamExecutor(source, executor, session=session, base_dir=base_dir, **options)
    graph = graph_of(source, base_dir=base_dir)
    if constant_memory is not None:
        options["constant_memory"] = constant_memory
    with CALLS:  # a fork waits for the device's creation (forks.py)
        model = ModelExecutor(graph, executor, device, hbm_bytes, session=session, **options)
        return model.load() if load else model


def is_dynamic(source):
    """Whether a model has dynamic shapes (a symbolic or unknown dim in an input or output, or
    an intermediate of unknown rank): for an ExecuteGraph, a ModelExecutor / StreamExecutor,
    a saved .rtsoa directory, or an ONNX model (ModelProto, path or bytes; read, not lowered)."""
    from rtsoa.graph.graph import ExecuteGraph
    from rtsoa.graph.graph import is_dynamic as graph_is_dynamic

    graph = getattr(source, "graph", None)
    if isinstance(graph, ExecuteGraph):
        return graph_is_dynamic(graph)
    if isinstance(source, ExecuteGraph):
        return graph_is_dynamic(source)
    if isinstance(source, str | os.PathLike) and os.path.isdir(source):
        from rtsoa.graph.io import load_graph

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
