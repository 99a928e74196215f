"""Executors: njit loops that schedule a graph's nodes and dispatch their kernels.

from rtsoa.executors import prepare_executor
ex = prepare_executor(graph, executor="auto")   # or a name in EXECUTORS
result = ex.run()                                # RunResult, or raises KernelError

One file per executor (sequential, topological, priority, multithread), each holding its
preparation and its loop; `base.py` holds what they share.
"""

from rtsoa.errors import ExecutorBusyError, KernelError, RunCancelled, RunInterrupted, RunTimeout
from rtsoa.executors import (  # noqa: F401  (register them)
    multithread,
    priority,
    sequential,
    topological,
)
from rtsoa.executors.base import (
    AUTO_PRIORITY_MIN_LAUNCHES,
    DEFAULT_MAX_STEPS,
    EXECUTORS,
    Executor,
    RunResult,
    default_device,
    prepare_executor,
    resolve_executor,
)
from rtsoa.executors.subscribers import Profiler, Subscriber, Tracer

__all__ = [
    "AUTO_PRIORITY_MIN_LAUNCHES",
    "DEFAULT_MAX_STEPS",
    "EXECUTORS",
    "Executor",
    "ExecutorBusyError",
    "KernelError",
    "Profiler",
    "RunCancelled",
    "RunInterrupted",
    "RunResult",
    "RunTimeout",
    "Subscriber",
    "Tracer",
    "default_device",
    "prepare_executor",
    "resolve_executor",
]
