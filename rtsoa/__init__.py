"""rtsoa: a data-oriented execution runtime for execute graphs, with Numba-compiled hot loops."""

from rtsoa.errors import GraphFormatError, RtsoaError, UnknownKernelError
from rtsoa.executors import KernelError, Profiler, RunResult, Subscriber, Tracer, prepare_executor
from rtsoa.graph.builder import GraphBuilder, float_bits
from rtsoa.graph.graph import ExecuteGraph, GraphMeta
from rtsoa.graph.io import load_graph, save_graph
from rtsoa.graph.schema import FORMAT_VERSION, DType, GraphKind, Placement, ValueKind, WorkerClass
from rtsoa.graph.validate import validate_graph
from rtsoa.kernels import REGISTRY, kernel
from rtsoa.runtime.api import is_dynamic, load_executor

__version__ = "0.1.0"

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
    "Session",
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


def __getattr__(name):  # the model API's classes, imported on first use (see rtsoa.runtime)
    if name in ("Execution", "ModelExecutor", "ModelStateError", "Session", "StreamExecutor"):
        import rtsoa.runtime

        return getattr(rtsoa.runtime, name)
    raise AttributeError(f"module 'rtsoa' has no attribute {name!r}")
