"""Kernels: the registry, the generated dispatch, the kernel ABI and the built-in kernels.

Importing this package registers the built-ins: builtin, workload (busy work, faults),
lowered-graph stand-ins, control flow
(and the model control-flow kernels lowered ONNX If / Loop use).
Dispatch ids are positions in the sorted kernel names, so import order does not matter.
"""

from rtsoa.abi.status import (
    STATUS_BAD_NOTIFY,
    STATUS_END_OF_SEQUENCE,
    STATUS_NOTIFY_BASE,
    STATUS_OK,
    STATUS_QUEUE_OVERFLOW,
)
from rtsoa.kernels import (  # noqa: F401  (register built-ins)
    arithmetic,
    builtin,
    compute,
    control_flow,
    lowered,
    model_control,
    workload,
)
from rtsoa.kernels.abi import (
    GraphArrays,
    Runtime,
    ValueState,
    WorkerState,
    attribute,
    float_attribute,
    input_count,
    input_value,
    output_value,
    successor_count,
)
from rtsoa.kernels.checksum import FOLD_SALTS, expected_checksum, fold, mix
from rtsoa.kernels.registry import REGISTRY, KernelInfo, KernelRegistry, KernelTables, kernel
from rtsoa.kernels.status import notify
from rtsoa.kernels.tensors import block_view, value_view

__all__ = [
    "FOLD_SALTS",
    "GraphArrays",
    "KernelInfo",
    "KernelRegistry",
    "KernelTables",
    "REGISTRY",
    "Runtime",
    "STATUS_BAD_NOTIFY",
    "STATUS_END_OF_SEQUENCE",
    "STATUS_NOTIFY_BASE",
    "STATUS_OK",
    "STATUS_QUEUE_OVERFLOW",
    "ValueState",
    "WorkerState",
    "attribute",
    "block_view",
    "expected_checksum",
    "float_attribute",
    "fold",
    "input_count",
    "input_value",
    "kernel",
    "mix",
    "notify",
    "output_value",
    "successor_count",
    "value_view",
]
