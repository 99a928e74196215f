"""rtsoa: a data-oriented execution runtime for execute graphs, with Numba-compiled hot loops."""

from rtsoa._version import __version__ as __version__
from rtsoa.errors import GraphFormatError, RtsoaError, UnknownKernelError
from rtsoa.executors import KernelError, Profiler, RunResult, Subscriber, Tracer, prepare_executor
from rtsoa.graph.builder import GraphBuilder, float_bits
from rtsoa.graph.graph import ExecuteGraph, GraphMeta
from rtsoa.graph.io import load_graph, save_graph
from rtsoa.graph.schema import FORMAT_VERSION, DType, GraphKind, Placement, ValueKind, WorkerClass
from rtsoa.graph.validate import validate_graph
from rtsoa.kernels import REGISTRY, kernel

__all__ = [
    "DType",
    "Execution",
    "ExecuteGraph",
    "FORMAT_VERSION",
    "GraphBuilder",
    "GraphFormatError",
    "GraphKind",
    "GraphMeta",
    "KernelError",
    "ModelExecutor",
    "ModelStateError",
    "Profiler",
    "REGISTRY",
    "RunResult",
    "InferenceSession",
    "SessionOptions",
    "SharedWeights",
    "TensorInfo",
    "StreamExecutor",
    "Subscriber",
    "Tracer",
    "kernel",
    "prepare_executor",
    "Placement",
    "RtsoaError",
    "UnknownKernelError",
    "ValueKind",
    "WorkerClass",
    "float_bits",
    "is_dynamic",
    "load_executor",
    "load_graph",
    "save_graph",
    "validate_graph",
]


# The model API, imported on first use (see rtsoa.runtime): plain graph users do not pay for it
_MODEL_API = (
    "Execution",
    "InferenceSession",
    "ModelExecutor",
    "ModelStateError",
    "SessionOptions",
    "SharedWeights",
    "StreamExecutor",
    "TensorInfo",
    "is_dynamic",
    "load_executor",  # deprecated: warns when called
)


def __getattr__(name):
    if name in _MODEL_API or name in ("Session", "runtime"):  # Session: deprecated, warns
        import rtsoa.runtime

        return rtsoa.runtime if name == "runtime" else getattr(rtsoa.runtime, name)
    raise AttributeError(f"module 'rtsoa' has no attribute {name!r}")
