"""Where a model comes from: an ExecuteGraph, a saved .rtsoa directory or an ONNX model."""

import os

from rtsoa.errors import ModelInputError
from rtsoa.graph.graph import ExecuteGraph
from rtsoa.graph.io import load_graph
from rtsoa.host.program import HostModel
from rtsoa.lowering.cache import lower_cached
from rtsoa.runtime.forks import CALLS


def graph_of(source, base_dir=None, fuse=True):
    """The lowered graph of an ExecuteGraph, saved .rtsoa directory or ONNX model (path,
    bytes, ModelProto: lowered on the fly; a path or bytes lowered before comes from the disk
    cache, `rtsoa.lowering.cache`). `base_dir`: the directory an ONNX model's external data
    is relative to (default: a path's own directory; bytes and a ModelProto have none, and
    one with external data is refused without it). `fuse`: the lowering's fusions (`lower`'s
    `fuse`), for an ONNX model only."""
    lowered = isinstance(source, ExecuteGraph | HostModel)
    if isinstance(source, str | os.PathLike) and os.path.isdir(source):
        lowered, source = True, load_graph(source)
    if lowered:
        if base_dir is not None:
            raise ModelInputError("base_dir applies to ONNX models, not to lowered graphs")
        if fuse is not True:
            raise ModelInputError("fuse applies to ONNX models, not to lowered graphs")
        return source
    if not isinstance(source, str | os.PathLike | bytes | bytearray):
        import onnx  # only now: importing it costs ~1 s, and a cached model does not need it

        if not isinstance(source, onnx.ModelProto):
            raise ModelInputError(
                "a model is an ExecuteGraph, a saved .rtsoa directory or an ONNX model (path, "
                f"bytes, ModelProto), got {type(source).__name__}"
            )
    try:
        with CALLS:  # a fork waits for the lowering (forks.py)
            return lower_cached(source, base_dir=base_dir, fuse=fuse)
    except Exception as error:
        from google.protobuf.message import DecodeError

        if isinstance(error, DecodeError):
            raise ModelInputError(f"not an ONNX model: {error}") from None
        raise
