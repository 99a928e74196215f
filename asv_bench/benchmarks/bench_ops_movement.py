"""The data-movement copy engine off its contiguous fast path: word copies against byte copies.

A transpose moving the innermost axis is the copy engine's element-by-element path. Its two
forms run on the same offset tables back to back in one process: `gather_axes` (one 2-, 4- or
8-byte word per element, what every op uses for aligned rows) and `copy_runs` over bytes with
the element size as width (the byte-at-a-time loop, which misaligned rows still take and
which was the only path before). numpy's transpose copy (`np.ascontiguousarray(x.T)`) is the
outside baseline. Setup asserts both forms equal numpy's result.

    cd asv_bench && python -m benchmarks.bench_ops_movement
"""

import statistics
import time

import numpy as np

from .common import ensure_rtsoa_importable

# name -> (dtype, shape, perm)
CASES = {
    "float32 512x512 T": (np.float32, (512, 512), (1, 0)),
    "int64 256x512 T": (np.int64, (256, 512), (1, 0)),
    "int16 512x512 T": (np.int16, (512, 512), (1, 0)),
    "float32 8x64x64x16 NHWC->NCHW": (np.float32, (8, 64, 64, 16), (0, 3, 1, 2)),
}


class _Transpose:
    """One transpose prepared for the three copies; `check` asserts they agree."""

    def __init__(self, name):
        ensure_rtsoa_importable()
        from rtsoa.ops.copying import copy_runs, gather_axes, linear_tables

        kind, shape, perm = CASES[name]
        self.x = np.random.default_rng(5).standard_normal(shape).astype(kind)
        self.perm = perm
        strides = np.cumprod((shape[1:] + (1,))[::-1])[::-1].astype(np.int64)
        dims = np.array([shape[p] for p in perm], dtype=np.int64)
        steps = np.array([strides[p] for p in perm], dtype=np.int64)
        self.tables, self.starts = linear_tables(dims, np.zeros(len(perm), np.int64), steps)
        self.dims = dims
        self.out_strides = np.cumprod((tuple(dims[1:]) + (1,))[::-1])[::-1].astype(np.int64)
        self.size = self.x.itemsize
        self.total = np.int64(self.x.size)
        self.src = self.x.view(np.uint8).reshape(-1)
        self.dst = np.zeros_like(self.src)
        self.gather_axes = gather_axes
        self.copy_runs = copy_runs

    def words(self):
        status = self.gather_axes(
            self.src,
            self.dst,
            self.size,
            self.dims,
            self.tables,
            self.starts,
            self.out_strides,
            0,
        )
        assert status == 0

    def bytes(self):
        self.copy_runs(
            self.src,
            self.dst,
            self.size,
            self.dims,
            self.tables,
            self.starts,
            self.out_strides,
            0,
            self.total,
        )

    def numpy(self):
        return np.ascontiguousarray(self.x.transpose(self.perm))

    def check(self):
        want = self.numpy().view(np.uint8).reshape(-1)
        for copy in (self.words, self.bytes):
            self.dst[:] = 0
            copy()
            np.testing.assert_array_equal(self.dst, want)


def ratios(case, rounds=15, repeats=10):
    """Medians (s) of the word copy, the byte copy and numpy, rounds interleaved."""
    times = {"words": [], "bytes": [], "numpy": []}
    for _ in range(rounds):
        for name in times:
            run = getattr(case, name)
            start = time.perf_counter()
            for _ in range(repeats):
                run()
            times[name].append((time.perf_counter() - start) / repeats)
    return {name: statistics.median(values) for name, values in times.items()}


class CopyWordsVersusBytes:
    """Element-by-element copies: words over bytes, and words over numpy's transpose."""

    params = list(CASES)
    param_names = ["case"]
    timeout = 300

    def setup(self, name):
        self.case = _Transpose(name)
        self.case.check()

    def time_words(self, name):
        self.case.words()

    def time_bytes(self, name):
        self.case.bytes()

    def time_numpy(self, name):
        self.case.numpy()

    def track_words_over_bytes(self, name):
        medians = ratios(self.case)
        return medians["words"] / medians["bytes"]

    track_words_over_bytes.unit = "ratio"

    def track_words_over_numpy(self, name):
        medians = ratios(self.case)
        return medians["words"] / medians["numpy"]

    track_words_over_numpy.unit = "ratio"


def main():
    """Print each case's medians and ratios."""
    for name in CASES:
        case = _Transpose(name)
        case.check()
        m = ratios(case)
        print(
            f"{name:32} words {m['words'] * 1e6:8.0f} us  bytes {m['bytes'] * 1e6:8.0f} us  "
            f"numpy {m['numpy'] * 1e6:8.0f} us  words/bytes {m['words'] / m['bytes']:.2f}  "
            f"words/numpy {m['words'] / m['numpy']:.2f}"
        )


if __name__ == "__main__":
    main()
