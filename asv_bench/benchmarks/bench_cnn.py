"""Published CNN architectures against onnxruntime, ratios measured in one process.

The networks are built in code with random weights (`rtsoa.testing.cnn`: ResNet-18 / -50,
MobileNetV2, DenseNet-121, Inception-v1), full width, at two input shapes: one 224 x 224
image ("1x224") and a batch of eight 64 x 64 images ("8x64"). Each runs on rtsoa and on
onnxruntime (its default graph optimisations, which fold BatchNormalization into the convs and
fuse activations), in one process; `track_ratio_vs_onnxruntime` is rtsoa's median latency
over onnxruntime's (target <= 1.0). Threads:

- "one": onnxruntime with one intra-op and one inter-op thread; rtsoa with
  `intra_op_threads=1` and its BLAS limited to one thread (threadpoolctl, around the whole
  measurement: entering the limit costs ~0.7 ms, which a limit per run added to rtsoa's side),
  so both compute on one core; runs interleaved one by one;
- "default": both as a user gets them (onnxruntime's default intra-op pool, rtsoa's default
  `intra_op_threads`: one thread per core sharing the convolutions and pools,
  `rtsoa.ops.parts`, kept if the model's first runs measured it faster; setup runs them),
  each measured alone (`alone_medians`): after a run, onnxruntime's pool
  threads spin on the cores for a while (and rtsoa's helpers briefly), and a run of the other
  runtime that starts then shares the cores with them. Interleaved one by one, both ran up to
  twice as slow as alone (ResNet-18: rtsoa 105 ms against 50 ms alone, onnxruntime 47 ms
  against 24 ms).

`CnnLayout` splits the one-thread gap: rtsoa against onnxruntime with its NCHWc layout
transformation off (ORT_ENABLE_EXTENDED: every fusion kept, the convs computed in NCHW as
rtsoa computes them), and what that layout gives onnxruntime.

`track_device_peak_mib` is rtsoa's peak allocated device memory (weights included) over the
model's load and inferences: the lowering's frees and the caching allocator's result.

`CnnMemory.track_peak_rss_growth_mib` sets both runtimes side by side on memory: in a fresh
process per runtime, the model built and both libraries imported, the peak resident set is
reset (Linux `/proc/self/clear_refs`), then the model is loaded (rtsoa: lowered and loaded;
onnxruntime: an InferenceSession with its default CPU arena) and run three times; the figure
is the peak resident set's growth over that, weights, arena and plans included. (onnxruntime
has no public arena statistic; the resident set is what both cost a host.)
`CnnMemory.track_steady_rss_growth_mib` is the resident set's growth after those three runs
for a model loaded from its file, as a server holds it: rtsoa's lowering served from the disk
cache an earlier process filled, its weights then held once (the mapped constants leave the
resident set after Init's upload: `rtsoa.graph.pages`).

Reproduce: `cd asv_bench && asv run --python=same --quick -b bench_cnn`.
"""

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from .common import alone_medians

MODELS = ("resnet18", "resnet50", "mobilenet_v2", "densenet121", "inception_v1")
SHAPES = {"1x224": (1, 224), "8x64": (8, 64)}


def _interleaved_medians(first, second, rounds=5):
    a, b = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        first()
        a.append(time.perf_counter() - start)
        start = time.perf_counter()
        second()
        b.append(time.perf_counter() - start)
    return float(np.median(a)), float(np.median(b))


def _network(model, shape):
    """(ONNX model, inputs) of `model` at `shape` (a SHAPES key): random weights and inputs."""
    from rtsoa.testing.cnn import ARCHITECTURES

    batch, size = SHAPES[shape]
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((batch, 3, size, size)).astype(np.float32)}
    return ARCHITECTURES[model](size=size), inputs


def _onnxruntime(proto, one, level=None):
    """onnxruntime's session of `proto`: one intra- and inter-op thread if `one`, else its
    default pools; `level` a graph optimisation level (None: its default)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if one:
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
    if level is not None:
        options.graph_optimization_level = level
    return ort.InferenceSession(proto.SerializeToString(), options)


def _rtsoa(proto, one):
    """(rtsoa's loaded model of `proto`, the context its runs are timed in): with `one`,
    `intra_op_threads=1` and one BLAS thread for the whole measurement, not per run
    (entering threadpoolctl's limits costs ~0.7 ms, which a per-run limit added to rtsoa's
    side alone); else rtsoa's defaults."""
    from threadpoolctl import threadpool_limits

    from rtsoa.lowering import lower
    from rtsoa.runtime.model import ModelExecutor

    intra_op_threads = 1 if one else None  # None: rtsoa's default
    model = ModelExecutor(lower(proto), intra_op_threads=intra_op_threads).load()
    return model, (lambda: threadpool_limits(1)) if one else contextlib.nullcontext


class CnnLatency:
    params = (MODELS, tuple(SHAPES), ("one", "default"))
    param_names = ("model", "input", "threads")
    timeout = 1200

    def setup(self, model, shape, threads):
        proto, self.inputs = _network(model, shape)
        one = threads == "one"
        self.session = _onnxruntime(proto, one)
        self.model, self.limits = _rtsoa(proto, one)
        want = self.session.run(None, self.inputs)[0]
        with self.limits():
            got = self._ours()
            assert np.allclose(got, want, rtol=1e-3, atol=1e-5), "rtsoa disagrees with onnxruntime"
            self.model.calibrate(self.inputs)  # rtsoa's default: the pool measured, kept or not

    def teardown(self, model, shape, threads):
        self.model.unload()

    def _ours(self):
        return self.model.execute_sync(self.inputs)["y"]

    def track_ratio_vs_onnxruntime(self, model, shape, threads):
        medians = _interleaved_medians if threads == "one" else alone_medians
        with self.limits():
            ours, theirs = medians(self._ours, lambda: self.session.run(None, self.inputs))
        return ours / theirs

    def track_device_peak_mib(self, model, shape, threads):
        return self.model.device.stats()["hbm"]["allocated_bytes.peak"] / 2**20

    track_ratio_vs_onnxruntime.unit = "rtsoa / onnxruntime"
    track_device_peak_mib.unit = "MiB"


class CnnLayout:
    """Where the gap to onnxruntime comes from: its default graph optimisations
    (ORT_ENABLE_ALL) include a layout transformation that runs the convs, pools and their
    neighbours on channel-blocked NCHWc data (MLAS's direct convolutions over blocks of 8 or
    16 channels), which rtsoa does not have; ORT_ENABLE_EXTENDED keeps every fusion (BatchNorm
    folding, Conv + activation) but computes in NCHW, as rtsoa does.
    `track_ratio_vs_onnxruntime_nchw` is rtsoa's latency over onnxruntime's with
    ORT_ENABLE_EXTENDED (the kernels compared like for like); `track_nchwc_gain` is
    onnxruntime's ORT_ENABLE_EXTENDED latency over its default's (what its layout gives it).
    Threads as `CnnLatency`'s: "one" (one thread on every side, the three interleaved call by
    call) and "default" (as a user gets them, each pair timed alone, `alone_medians`)."""

    params = (MODELS, ("1x224",), ("one", "default"))
    param_names = ("model", "input", "threads")
    timeout = 1200

    def setup(self, model, shape, threads):
        import onnxruntime as ort

        proto, self.inputs = _network(model, shape)
        one = threads == "one"
        levels = ort.GraphOptimizationLevel
        self.sessions = {
            "all": _onnxruntime(proto, one, levels.ORT_ENABLE_ALL),
            "nchw": _onnxruntime(proto, one, levels.ORT_ENABLE_EXTENDED),
        }
        self.model, self.limits = _rtsoa(proto, one)
        want = self.sessions["all"].run(None, self.inputs)[0]
        with self.limits():
            got = self.model.execute_sync(self.inputs)["y"]
            self.model.calibrate(self.inputs)  # rtsoa's default: the pool measured, kept or not
        for session in self.sessions.values():
            theirs = session.run(None, self.inputs)[0]
            assert np.allclose(theirs, want, rtol=1e-3, atol=1e-5), "onnxruntime's levels differ"
        assert np.allclose(got, want, rtol=1e-3, atol=1e-5), "rtsoa disagrees with onnxruntime"
        self.one = one
        self.ratios = None

    def teardown(self, model, shape, threads):
        self.model.unload()

    def _runs(self):
        runs = {"rtsoa": lambda: self.model.execute_sync(self.inputs)}
        for name, session in self.sessions.items():
            runs[name] = lambda session=session: session.run(None, self.inputs)
        return runs

    def _measure(self, rounds=7):
        """{"rtsoa": rtsoa / onnxruntime NCHW, "nchwc": NCHW / NCHWc}, measured once."""
        if self.ratios is not None:
            return self.ratios
        runs = self._runs()
        if self.one:
            seconds = {name: [] for name in runs}
            with self.limits():
                for run in runs.values():  # warm
                    run()
                for _ in range(rounds):
                    for name, run in runs.items():
                        start = time.perf_counter()
                        run()
                        seconds[name].append(time.perf_counter() - start)
            medians = {name: float(np.median(values)) for name, values in seconds.items()}
            ours, nchw, nchwc = medians["rtsoa"], medians["nchw"], medians["all"]
            self.ratios = {"rtsoa": ours / nchw, "nchwc": nchw / nchwc}
        else:
            ours, theirs = alone_medians(runs["rtsoa"], runs["nchw"])
            nchw, nchwc = alone_medians(runs["nchw"], runs["all"])
            self.ratios = {"rtsoa": ours / theirs, "nchwc": nchw / nchwc}
        return self.ratios

    def track_ratio_vs_onnxruntime_nchw(self, model, shape, threads):
        return self._measure()["rtsoa"]

    def track_nchwc_gain(self, model, shape, threads):
        return self._measure()["nchwc"]

    track_ratio_vs_onnxruntime_nchw.unit = "rtsoa / onnxruntime NCHW"
    track_nchwc_gain.unit = "NCHW / NCHWc"


class CnnFusion:
    """The lowering's Conv -> Add -> Relu / Clip fusion (FusedConv): a model's latency with it
    over without it (the other fusions in both), one BLAS thread, interleaved in one process
    (below 1: the fusion pays)."""

    params = (("resnet18", "mobilenet_v2", "resnet50"), ("1x224",))
    param_names = ("model", "input")
    timeout = 1200
    fusion = "conv_activation"  # the one `rtsoa.lowering.fuse.FUSIONS` entry measured
    exact = True  # the fusion gives the unfused ops' bits (else: within 1e-5 of max |y|)
    intra_op_threads = 1  # both executors compute every op whole on one thread

    def setup(self, model, shape):
        from threadpoolctl import threadpool_limits

        from rtsoa.lowering import lower
        from rtsoa.lowering.fuse import FUSIONS
        from rtsoa.runtime.model import ModelExecutor

        proto, self.inputs = _network(model, shape)
        # every fusion, and every fusion but the one measured
        others = tuple(name for name in FUSIONS if name != self.fusion)
        intra = self.intra_op_threads
        fused = lower(proto, fuse=(*others, self.fusion))
        self.fused = ModelExecutor(fused, intra_op_threads=intra).load()
        self.unfused = ModelExecutor(lower(proto, fuse=others), intra_op_threads=intra).load()
        self.limits = threadpool_limits
        with self.limits(1):
            want = self.unfused.execute_sync(self.inputs)["y"]
            got = self.fused.execute_sync(self.inputs)["y"]
        if self.exact:
            assert np.array_equal(got, want), "the fused model's bits differ from the unfused one's"
        else:
            error = np.abs(got - want).max() / np.abs(want).max()
            assert error <= 1e-5, f"the fused model is {error:.1e} of max |y| off the unfused one"

    def teardown(self, model, shape):
        self.fused.unload()
        self.unfused.unload()

    def track_fused_over_unfused(self, model, shape):
        with self.limits(1):
            fused, unfused = _interleaved_medians(
                lambda: self.fused.execute_sync(self.inputs),
                lambda: self.unfused.execute_sync(self.inputs),
            )
        return fused / unfused

    track_fused_over_unfused.unit = "fused / unfused"


class CnnBatchNormFusion(CnnFusion):
    """The lowering's BatchNormalization -> Relu fusion (FusedBatchNormalization) on the
    normalizations no conv absorbs (DenseNet's, after each Concat): a model's latency with it
    over without it (the other fusions in both), as `CnnFusion` measures."""

    params = (("densenet121",), ("1x224",))
    fusion = "batch_norm_activation"


class CnnWinograd(CnnFusion):
    """The lowering's Winograd convolutions (WinogradConv, fusion "winograd"): a model's latency
    with them over the direct convs (the other fusions in both), on one thread (as `CnnFusion`
    measures) and on the default threads (rtsoa's intra-op pool; each model alone, as
    `CnnLatency`'s default rows)."""

    params = (
        ("resnet18", "resnet50", "densenet121", "inception_v1"),
        ("1x224",),
        ("one", "default"),
    )
    param_names = ("model", "input", "threads")
    fusion = "winograd"
    exact = False

    def setup(self, model, shape, threads):
        self.intra_op_threads = 1 if threads == "one" else None
        super().setup(model, shape)

    def teardown(self, model, shape, threads):
        super().teardown(model, shape)

    def track_fused_over_unfused(self, model, shape, threads):
        if threads == "one":
            return super().track_fused_over_unfused(model, shape)
        fused, unfused = alone_medians(
            lambda: self.fused.execute_sync(self.inputs),
            lambda: self.unfused.execute_sync(self.inputs),
        )
        return fused / unfused

    track_fused_over_unfused.unit = "fused / unfused"


_MEMORY_PROBE = """
import json, sys
import numpy as np
import onnxruntime as ort
from rtsoa import InferenceSession
from rtsoa.lowering import lower
from rtsoa.testing.cnn import ARCHITECTURES

name, batch, size, side, source = sys.argv[1:6]
batch, size = int(batch), int(size)
if source == "file":  # the model file, lowered and kept on disk by an earlier process
    path = sys.argv[6]
else:
    proto = ARCHITECTURES[name](size=size)
    data = proto.SerializeToString()
x = np.random.default_rng(0).standard_normal((batch, 3, size, size)).astype(np.float32)

def rss_kib(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field + " not in /proc/self/status")

with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")  # the peak resident set (VmHWM) starts again from the current one
before = rss_kib("VmRSS")
if side == "rtsoa":
    model = InferenceSession(path if source == "file" else lower(proto))
    for _ in range(3):
        model.run(None, {"x": x})
else:
    model = path if source == "file" else data
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for _ in range(3):
        session.run(None, {"x": x})
peak, steady = rss_kib("VmHWM") - before, rss_kib("VmRSS") - before
print(json.dumps({"growth_kib": peak, "steady_kib": steady}))
"""


def _probe(model, shape, runtime, source, timeout, *extra):
    batch, size = SHAPES[shape]
    command = [sys.executable, "-c", _MEMORY_PROBE, model, str(batch), str(size), runtime, source]
    done = subprocess.run([*command, *extra], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"memory probe failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


class CnnMemory:
    """Resident-set growth of loading and running each model, rtsoa and onnxruntime each in a
    fresh process (see the module docstring): the peak for a model built in memory, and the
    steady state after three runs of a model loaded from its file (rtsoa's lowering kept on
    disk by an earlier process, as any run after the first finds it)."""

    params = (MODELS, tuple(SHAPES), ("rtsoa", "onnxruntime"))
    param_names = ("model", "input", "runtime")
    timeout = 600

    def setup(self, model, shape, runtime):
        from rtsoa.testing.cnn import ARCHITECTURES

        self.directory = tempfile.TemporaryDirectory(prefix="rtsoa-bench-memory-")
        self.path = os.path.join(self.directory.name, "model.onnx")
        batch, size = SHAPES[shape]
        with open(self.path, "wb") as file:
            file.write(ARCHITECTURES[model](size=size).SerializeToString())
        os.environ["RTSOA_LOWERED_DIR"] = os.path.join(self.directory.name, "lowered")

    def teardown(self, model, shape, runtime):
        os.environ.pop("RTSOA_LOWERED_DIR", None)
        self.directory.cleanup()

    def track_peak_rss_growth_mib(self, model, shape, runtime):
        return _probe(model, shape, runtime, "proto", self.timeout)["growth_kib"] / 1024

    track_peak_rss_growth_mib.unit = "MiB"

    def track_steady_rss_growth_mib(self, model, shape, runtime):
        if runtime == "rtsoa":  # the first run lowers and keeps the lowered graph on disk
            _probe(model, shape, runtime, "file", self.timeout, self.path)
        return _probe(model, shape, runtime, "file", self.timeout, self.path)["steady_kib"] / 1024

    track_steady_rss_growth_mib.unit = "MiB"


def main():
    """`python -m benchmarks.bench_cnn [MODEL ...]`: the ratios as a table, without asv."""
    names = sys.argv[1:] or MODELS
    print(f"{'model':14} {'input':6} {'threads':8} {'ratio':>6} {'peak MiB':>9}")
    for name in names:
        for shape in SHAPES:
            for threads in ("one", "default"):
                bench = CnnLatency()
                bench.setup(name, shape, threads)
                ratio = bench.track_ratio_vs_onnxruntime(name, shape, threads)
                peak = bench.track_device_peak_mib(name, shape, threads)
                bench.teardown(name, shape, threads)
                print(f"{name:14} {shape:6} {threads:8} {ratio:6.2f} {peak:9.1f}", flush=True)
    print(f"{'model':14} {'input':6} {'rtsoa RSS MiB':>14} {'onnxruntime RSS MiB':>20}")
    memory = CnnMemory()
    for name in names:
        for shape in SHAPES:
            ours, theirs = (
                memory.track_peak_rss_growth_mib(name, shape, side)
                for side in ("rtsoa", "onnxruntime")
            )
            print(f"{name:14} {shape:6} {ours:14.1f} {theirs:20.1f}", flush=True)


if __name__ == "__main__":
    main()
