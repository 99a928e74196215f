"""Whole-process cold and warm starts of `rtsoa run` on the committed example graphs.

`timeraw_run_cold`: a new interpreter with empty Numba and rtsoa caches runs
`rtsoa run datasets/<graph>` (load, validate, prepare, compile everything, one run, the report).
Targets: random-10k <= 6 s, lowered-4k <= 12 s. `timeraw_run_warm`: the same with the caches
warmed in setup (target < 1 s). Reproduce:
`cd asv_bench && asv run --python=same --quick -b bench_coldstart`.
"""

import subprocess
import sys

from .common import REPO_ROOT, process_preamble

GRAPHS = ("random-10k", "lowered-4k")


def run_code(graph, cold):
    """Python source running `rtsoa run` on a committed graph, optionally with empty caches."""
    path = REPO_ROOT / "datasets" / f"{graph}.rtsoa"
    lines = process_preamble(cold)
    lines += [  # the report goes to a buffer: asv's timeraw reads the timing from stdout
        "import contextlib, io",
        "from rtsoa.cli import main",
        "with contextlib.redirect_stdout(io.StringIO()) as report:",
        f"    status = main(['run', {str(path)!r}, '--no-progress'])",
        "assert not status, (status, report.getvalue())",
    ]
    return "\n".join(lines) + "\n"


class ColdStart:
    """`rtsoa run` of a committed graph in a fresh process."""

    params = (GRAPHS,)
    param_names = ("graph",)
    number = 1
    repeat = (1, 3, 300.0)
    warmup_time = 0
    timeout = 900

    def setup(self, graph):
        result = subprocess.run(
            [sys.executable, "-c", run_code(graph, cold=False)], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr

    def timeraw_run_cold(self, graph):
        return run_code(graph, cold=True)

    def timeraw_run_warm(self, graph):
        return run_code(graph, cold=False)


MODELS = ("mlp", "resnet18")


def _model_files(model):
    """(ONNX path, inputs .npz path) of a model: the committed example, or a ResNet-18 of
    quarter width on 64 x 64 images (rtsoa.testing.cnn) written to the temp directory."""
    if model == "mlp":
        return REPO_ROOT / "datasets" / "mlp.onnx", REPO_ROOT / "datasets" / "mlp-inputs.npz"
    import tempfile
    from pathlib import Path

    import numpy as np
    import onnx

    from rtsoa.testing.cnn import resnet

    directory = Path(tempfile.gettempdir())
    path, inputs = directory / "rtsoa-bench-resnet18.onnx", directory / "rtsoa-bench-resnet18.npz"
    onnx.save(resnet(18, width=0.25, classes=10, size=64, seed=0), path)
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    np.savez(inputs, x=x)
    return path, inputs


def model_run_code(path, inputs, cold):
    """Python source running `rtsoa run MODEL --inputs NPZ`; `cold`: every cache empty (the
    lowered-model cache too)."""
    lines = process_preamble(cold)
    if cold:
        lines.append("os.environ['RTSOA_LOWERED_DIR'] = os.path.join(cache_dir, 'lowered')")
    lines += [
        "import contextlib, io",
        "from rtsoa.cli import main",
        "with contextlib.redirect_stdout(io.StringIO()) as report:",
        f"    status = main(['run', {str(path)!r}, '--inputs', {str(inputs)!r}, '--no-progress'])",
        "assert not status, (status, report.getvalue())",
    ]
    return "\n".join(lines) + "\n"


class ModelColdStart:
    """`rtsoa run MODEL.onnx --inputs` in a fresh process: cold (empty Numba, rtsoa and
    lowered-model caches: lowering, the model's ops and the executor compile) and warm.
    Targets: mlp cold <= 5 s, resnet18 cold <= 15 s, warm <= 1 s."""

    params = (MODELS,)
    param_names = ("model",)
    number = 1
    repeat = (1, 3, 300.0)
    warmup_time = 0
    timeout = 900

    def setup(self, model):
        self.files = _model_files(model)
        result = subprocess.run(
            [sys.executable, "-c", model_run_code(*self.files, cold=False)],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr

    def timeraw_first_run_cold(self, model):
        return model_run_code(*self.files, cold=True)

    def timeraw_first_run_warm(self, model):
        return model_run_code(*self.files, cold=False)
