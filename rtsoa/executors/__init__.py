"""Executors: njit loops that schedule a graph's nodes and dispatch their kernels.

from rtsoa.executors import prepare_executor
ex = prepare_executor(graph, executor="auto")   # sequential / topological / priority
result = ex.run()                                # RunResult, or raises KernelError
"""

from rtsoa.executors.errors import KernelError
from rtsoa.executors.executor import (
    AUTO_PRIORITY_MIN_LAUNCHES,
    EXECUTORS,
    Executor,
    RunResult,
    prepare_executor,
    resolve_executor,
)
from rtsoa.executors.subscribers import Profiler, Subscriber, Tracer

__all__ = [
    "AUTO_PRIORITY_MIN_LAUNCHES",
    "EXECUTORS",
    "Executor",
    "KernelError",
    "Profiler",
    "RunResult",
    "Subscriber",
    "Tracer",
    "prepare_executor",
    "resolve_executor",
]
