"""Compile baseline.c once into a cache directory and wrap its entry points with ctypes.

The shared library is named by a hash of the C source, the flags and the gcc version, so an
edit recompiles and concurrent benchmark processes never load a half-written file.
"""

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

SOURCE = Path(__file__).with_name("baseline.c")
CFLAGS = ("-O2", "-shared", "-fPIC")
EXECUTORS = ("sequential", "topological", "priority")

# Must equal the KERNEL(...) constants in baseline.c (checked when the library loads). They
# copy rtsoa's Checksum<k> kernels (rtsoa/kernels/checksum.py) so that both do the same work
# and the benchmark can assert equal checksums; this module does not import rtsoa.
_GOLDEN = 0x9E3779B97F4A7C15
CHECKSUM_SALTS = np.array([((k + 1) * _GOLDEN) % 2**64 for k in range(8)], dtype=np.uint64)
CHECKSUM_MULTIPLIER = np.uint64(0xBF58476D1CE4E5B9)
CHECKSUM_SHIFT = np.uint64(31)

_POINTER = ctypes.c_void_p
_I64 = ctypes.c_int64
_U64 = ctypes.c_uint64
_SIGNATURES = {
    "rt_sequential": (_I64, [_I64, _POINTER, _POINTER, _POINTER]),
    "rt_kahn": (_I64, [_I64] + [_POINTER] * 5 + [_I64, _POINTER, _POINTER, _U64, _POINTER]),
    "rt_kahn_trace": (
        _I64,
        [_I64] + [_POINTER] * 5 + [_I64, _POINTER, _POINTER, _U64, _POINTER, _POINTER],
    ),
    "rt_heap": (_I64, [_I64] + [_POINTER] * 6 + [_I64, _POINTER, _POINTER, _POINTER]),
    "rt_heap_trace": (
        _I64,
        [_I64] + [_POINTER] * 6 + [_I64, _POINTER, _POINTER, _POINTER, _POINTER],
    ),
    "rt_kernel_fold": (_U64, [ctypes.c_int32, ctypes.c_int32]),
}

_library = None


class CompilerNotFound(RuntimeError):
    """gcc is not on PATH, so the C baselines cannot be built."""


def cache_dir():
    """Where compiled baselines live: $RTSOA_BENCH_CACHE or <tmp>/rtsoa-bench."""
    configured = os.environ.get("RTSOA_BENCH_CACHE")
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "rtsoa-bench"


def _compile(compiler):
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    digest = hashlib.sha256()
    digest.update(SOURCE.read_bytes())
    digest.update(" ".join(CFLAGS).encode())
    digest.update(version.encode())
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"baseline-{digest.hexdigest()[:16]}.so"
    if target.exists():
        return target
    staging = directory / f".{target.name}.{os.getpid()}.tmp"
    command = [compiler, *CFLAGS, "-Wall", "-o", str(staging), str(SOURCE)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr}")
    os.replace(staging, target)  # atomic: other processes see the old state or the whole file
    return target


def load_library():
    """The compiled baseline library (compiled on first use; CompilerNotFound without gcc)."""
    global _library
    if _library is not None:
        return _library
    compiler = shutil.which("gcc")
    if compiler is None:
        raise CompilerNotFound("gcc is not on PATH; the C baselines need it")
    library = ctypes.CDLL(str(_compile(compiler)))
    for name, (restype, argtypes) in _SIGNATURES.items():
        function = getattr(library, name)
        function.restype = restype
        function.argtypes = argtypes
    probe = np.array([0, 1, 12345, 2**31 - 1], dtype=np.int32)
    for k in range(8):
        expected = _fold(probe, np.full(probe.shape, k, dtype=np.int32))
        folded = [library.rt_kernel_fold(k, int(node)) for node in probe]
        if folded != [int(value) for value in expected]:
            raise RuntimeError(f"kernel {k}: the checksum formula differs between C and loader.py")
    _library = library
    return library


def _fold(nodes, kernel_ids):
    x = (nodes.astype(np.uint64) + CHECKSUM_SALTS[kernel_ids]) * CHECKSUM_MULTIPLIER
    return x ^ (x >> CHECKSUM_SHIFT)


def reference_checksum(kernel_ids):
    """NumPy reference: the sum over nodes of kernel k's fold of the node id, mod 2**64."""
    kernel_ids = np.asarray(kernel_ids)
    nodes = np.arange(kernel_ids.shape[0], dtype=np.uint64)
    return int(_fold(nodes, kernel_ids).sum(dtype=np.uint64))  # uint64 arithmetic wraps


def _array(values, dtype):
    return np.ascontiguousarray(values, dtype=dtype)


def _address(array):
    return array.ctypes.data


class PreparedBaseline:
    """One C executor bound to one graph's arrays, with its work buffers allocated once."""

    def __init__(
        self, executor, succ_offsets, succ_targets, in_degree, kernel_ids, node_priority=None
    ):
        if executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {EXECUTORS}, not {executor!r}")
        self.executor = executor
        self.library = load_library()
        self.succ_offsets = _array(succ_offsets, np.int64)
        self.succ_targets = _array(succ_targets, np.int32)
        self.in_degree_template = _array(in_degree, np.int32)
        self.kernel_ids = _array(kernel_ids, np.int32)
        n = self.kernel_ids.shape[0]
        if node_priority is None:
            node_priority = np.zeros(n, dtype=np.int32)
        self.node_priority = _array(node_priority, np.int32)
        self.num_nodes = n
        if self.kernel_ids.size and (self.kernel_ids.min() < 0 or self.kernel_ids.max() > 7):
            raise ValueError("kernel ids must be in 0..7")
        if self.succ_offsets.shape[0] != n + 1 or self.in_degree_template.shape[0] != n:
            raise ValueError("succ_offsets must have n + 1 entries and in_degree n")

        self.sources = np.flatnonzero(self.in_degree_template == 0).astype(np.int32)
        self.source_keys = np.sort(_heap_keys(self.node_priority[self.sources], self.sources))
        self.in_degree = np.empty(n, dtype=np.int32)
        capacity = 1 << max(int(n - 1).bit_length(), 0)
        self.queue = np.empty(max(capacity, 1), dtype=np.int32)
        self.queue_mask = max(capacity, 1) - 1
        self.heap = np.empty(max(n, 1), dtype=np.uint64)
        self.checksum = np.zeros(1, dtype=np.uint64)
        if executor == "sequential":
            # The order rtsoa's sequential executor uses: Kahn with a priority-ordered ready set.
            self.order = self._run_heap(trace=True)[2]
            if self.order.shape[0] != n:
                raise ValueError("the graph has a cycle; no sequential order exists")
        self.run = {
            "sequential": self._run_sequential,
            "topological": self._run_kahn,
            "priority": self._run_heap,
        }[executor]

    def _run_sequential(self):
        executed = self.library.rt_sequential(
            self.num_nodes, _address(self.order), _address(self.kernel_ids), _address(self.checksum)
        )
        return executed, int(self.checksum[0])

    def _run_kahn(self, trace=False):
        arguments = [
            self.num_nodes,
            _address(self.succ_offsets),
            _address(self.succ_targets),
            _address(self.in_degree_template),
            _address(self.kernel_ids),
            _address(self.sources),
            self.sources.shape[0],
            _address(self.in_degree),
            _address(self.queue),
            self.queue_mask,
            _address(self.checksum),
        ]
        if not trace:
            return self.library.rt_kahn(*arguments), int(self.checksum[0])
        visited = np.full(self.num_nodes, -1, dtype=np.int32)
        executed = self.library.rt_kahn_trace(*arguments, _address(visited))
        return executed, int(self.checksum[0]), visited[:executed]

    def _run_heap(self, trace=False):
        arguments = [
            self.num_nodes,
            _address(self.succ_offsets),
            _address(self.succ_targets),
            _address(self.in_degree_template),
            _address(self.kernel_ids),
            _address(self.node_priority),
            _address(self.source_keys),
            self.source_keys.shape[0],
            _address(self.in_degree),
            _address(self.heap),
            _address(self.checksum),
        ]
        if not trace:
            return self.library.rt_heap(*arguments), int(self.checksum[0])
        visited = np.full(self.num_nodes, -1, dtype=np.int32)
        executed = self.library.rt_heap_trace(*arguments, _address(visited))
        return executed, int(self.checksum[0]), visited[:executed]

    def visit_order(self):
        """Run once and return (nodes_executed, checksum, order of visits) for checking."""
        if self.executor == "sequential":
            executed, checksum = self._run_sequential()
            return executed, checksum, self.order[:executed].copy()
        if self.executor == "topological":
            return self._run_kahn(trace=True)
        return self._run_heap(trace=True)


def _heap_keys(priorities, nodes):
    flipped = (priorities.astype(np.int64) + 2**31).astype(np.uint64)  # signed -> ordered unsigned
    return (flipped << np.uint64(32)) | nodes.astype(np.uint64)


def prepare_baseline(
    executor, succ_offsets, succ_targets, in_degree, kernel_ids, node_priority=None
):
    """A `PreparedBaseline`; `run()` returns (nodes_executed, checksum)."""
    return PreparedBaseline(
        executor, succ_offsets, succ_targets, in_degree, kernel_ids, node_priority
    )


def topological_order(succ_offsets, succ_targets, in_degree, node_priority=None):
    """Kahn's order with a (priority, id)-ordered ready set, computed by the C heap executor."""
    kernel_ids = np.zeros(np.asarray(in_degree).shape[0], dtype=np.int32)
    baseline = PreparedBaseline(
        "priority", succ_offsets, succ_targets, in_degree, kernel_ids, node_priority
    )
    return baseline.visit_order()[2]
