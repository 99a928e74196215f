"""Real models against onnxruntime, single thread both, ratios measured in one process.

- `ModelLatency.track_ratio_vs_onnxruntime`: median latency of one `execute_sync` over
  onnxruntime's `run` on the same inputs (interleaved rounds). `mlp-1000`: ~1,000 ops on small
  tensors, where runtime overhead dominates (target <= 1.0). Both fuse MatMul -> Add -> Relu
  (onnxruntime into FusedGemm, rtsoa into MatMulBias: rtsoa/lowering/fuse.py).
  `cnn-32`: a small CNN with real compute (recorded with where the time goes:
  docs/performance.md). `track_unfused_ratio_vs_onnxruntime_unoptimized`, for information:
  every op of the model on both sides (rtsoa `lower(fuse=False)`, onnxruntime with graph
  optimizations off), the runtimes' cost per op on equal work.
- `Lowering.time_lower`: lowering a ~1,000-op model (target < 1 s).
- `ModelStart.timeraw_load_and_first_inference`: a fresh process with warm caches loads the
  committed example model and runs one inference (target < 2 s).
- `OpLibraryCold.timeraw_compile`: a fresh process with empty caches compiles every op's entry
  (`rtsoa compile --all`, `rtsoa.ops.library.op_library`), with this machine's cores (`jobs` 2
  here) and with one (target: no slower than the single-entry library it replaced; a model
  compiles only its own ops, see bench_coldstart.ModelColdStart).

Reproduce: `cd asv_bench && asv run --python=same --quick -b bench_models`.
"""

import subprocess
import sys
import time

import numpy as np

from .common import REPO_ROOT, process_preamble

EXAMPLE = REPO_ROOT / "datasets" / "mlp.onnx"


def _models():
    from rtsoa.testing.models import mlp, small_cnn

    return {
        # 333 layers x (MatMul, Add, Relu) + Gemm = 1,000 ops on [1, 16] tensors
        "mlp-1000": (mlp(seed=0, features=16, hidden=16, classes=4, layers=333), (1, 16)),
        # 13 ops, ~0.3 GFLOP an inference: three 3x3 convs of 32 channels on 8 x 32 x 32 images,
        # a residual Add, BatchNorm, pools, Gemm, Softmax (real compute: the kernels' speed)
        "cnn-32": (small_cnn(seed=0, channels=32, classes=10, size=32), (8, 3, 32, 32)),
    }


def _interleaved_medians(first, second, rounds=7, calls=20):
    a, b = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            first()
        a.append((time.perf_counter() - start) / calls)
        start = time.perf_counter()
        for _ in range(calls):
            second()
        b.append((time.perf_counter() - start) / calls)
    return float(np.median(a)), float(np.median(b))


class ModelLatency:
    params = (("mlp-1000", "cnn-32"),)
    param_names = ("model",)
    timeout = 900

    def setup(self, name):
        import onnxruntime as ort

        from rtsoa.lowering import lower
        from rtsoa.runtime.model import ModelExecutor

        def load(graph):  # one thread, as onnxruntime here (no intra-op pool)
            return ModelExecutor(graph, intra_op_threads=1).load()

        proto, shape = _models()[name]
        self.inputs = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
        self.model = load(lower(proto))
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(proto.SerializeToString(), options)
        want = self.session.run(None, self.inputs)[0]
        got = self.model.execute_sync(self.inputs)["y"]
        assert np.allclose(got, want, rtol=1e-3, atol=1e-4), "rtsoa disagrees with onnxruntime"
        self.unfused = load(lower(proto, fuse=False))
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        self.unoptimized = ort.InferenceSession(proto.SerializeToString(), options)
        got = self.unfused.execute_sync(self.inputs)["y"]
        want = self.unoptimized.run(None, self.inputs)[0]
        assert np.allclose(got, want, rtol=1e-3, atol=1e-4), "rtsoa disagrees with onnxruntime"

    def teardown(self, name):
        self.model.unload()
        self.unfused.unload()

    def time_rtsoa(self, name):
        self.model.execute_sync(self.inputs)

    def time_onnxruntime(self, name):
        self.session.run(None, self.inputs)

    def track_ratio_vs_onnxruntime(self, name):
        ours, theirs = _interleaved_medians(
            lambda: self.model.execute_sync(self.inputs),
            lambda: self.session.run(None, self.inputs),
        )
        return ours / theirs

    def track_unfused_ratio_vs_onnxruntime_unoptimized(self, name):
        ours, theirs = _interleaved_medians(
            lambda: self.unfused.execute_sync(self.inputs),
            lambda: self.unoptimized.run(None, self.inputs),
        )
        return ours / theirs

    track_ratio_vs_onnxruntime.unit = "rtsoa / onnxruntime"
    track_unfused_ratio_vs_onnxruntime_unoptimized.unit = "rtsoa / onnxruntime"


class Lowering:
    timeout = 600

    def setup(self):
        self.proto = _models()["mlp-1000"][0]
        from rtsoa.lowering import lower

        lower(self.proto)  # warm the op library

    def time_lower(self):
        from rtsoa.lowering import lower

        lower(self.proto)


class ModelStart:
    number = 1
    repeat = (1, 3, 120.0)
    warmup_time = 0
    timeout = 600

    def _code(self):
        lines = process_preamble(False)
        lines += [
            "import numpy as np",
            "from rtsoa.runtime import load_model",
            f"model = load_model({str(EXAMPLE)!r})",
            "y = model.execute_sync({'x': np.ones((1, 16), np.float32)})",
            "assert y['y'].shape == (1, 4)",
        ]
        return "\n".join(lines) + "\n"

    def setup(self):
        result = subprocess.run([sys.executable, "-c", self._code()], capture_output=True)
        assert result.returncode == 0, result.stderr

    def timeraw_load_and_first_inference(self):
        return self._code()


class OpLibraryCold:
    """Cold compile of every op's entry, in a fresh process with empty Numba and rtsoa caches
    (helper processes included, as `rtsoa compile --all` in a container build pays it)."""

    params = (("cores", "one"),)
    param_names = ("jobs",)
    number = 1
    repeat = (1, 1, 1200.0)
    warmup_time = 0
    timeout = 1200

    def timeraw_compile(self, jobs):
        lines = process_preamble(True)
        lines += [
            "from rtsoa.ops.library import compile_jobs, op_library",
            "from rtsoa.ops.registry import compiled_op_names",
            f"addresses = op_library({'compile_jobs()' if jobs == 'cores' else '1'})",
            "assert sorted(addresses) == sorted(compiled_op_names()) and all(addresses.values())",
        ]
        return "\n".join(lines) + "\n"
