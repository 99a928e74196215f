"""Kernels: the registry, the generated dispatch, the runtime tuple and the built-in kernels.

Importing this package registers the built-ins (in a fixed order, so their dispatch ids are
stable): builtin, lowered-graph stand-ins, control flow.
"""

from rtsoa.kernels import builtin, control_flow, lowered  # noqa: F401  (register built-ins)
from rtsoa.kernels.checksum import FOLD_SALTS, expected_checksum, fold, mix
from rtsoa.kernels.registry import REGISTRY, KernelInfo, KernelRegistry, kernel
from rtsoa.kernels.runtime import STATE_SCRATCH, STATE_SELECT, Runtime
from rtsoa.kernels.status import (
    STATUS_END_OF_SEQUENCE,
    STATUS_NOTIFY_ONE,
    STATUS_OK,
    STATUS_QUEUE_OVERFLOW,
)

__all__ = [
    "FOLD_SALTS",
    "KernelInfo",
    "KernelRegistry",
    "REGISTRY",
    "Runtime",
    "STATE_SCRATCH",
    "STATE_SELECT",
    "STATUS_END_OF_SEQUENCE",
    "STATUS_NOTIFY_ONE",
    "STATUS_OK",
    "STATUS_QUEUE_OVERFLOW",
    "expected_checksum",
    "fold",
    "kernel",
    "mix",
]
