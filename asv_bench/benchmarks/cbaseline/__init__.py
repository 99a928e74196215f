"""C baselines for rtsoa's executors: compiled with gcc at first use, called through ctypes.

`prepare_baseline(executor, ...)` mirrors `rtsoa.executors.prepare_executor`: it allocates the
work buffers once and returns an object whose `run()` executes the whole graph in C and returns
`(nodes_executed, checksum)`. The C kernels and `reference_checksum` define the checksum.
"""

from .loader import (
    CHECKSUM_MULTIPLIER,
    CHECKSUM_SALTS,
    EXECUTORS,
    CompilerNotFound,
    PreparedBaseline,
    load_library,
    prepare_baseline,
    reference_checksum,
    topological_order,
)

__all__ = [
    "CHECKSUM_MULTIPLIER",
    "CHECKSUM_SALTS",
    "EXECUTORS",
    "CompilerNotFound",
    "PreparedBaseline",
    "load_library",
    "prepare_baseline",
    "reference_checksum",
    "topological_order",
]
