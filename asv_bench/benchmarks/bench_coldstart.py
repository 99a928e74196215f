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
