"""Job kinds: how a batch runs a job, keyed by the suffix of its path.

A new kind plugs in with `@job_kind(".suffix", "what it is")` on one function
`run(job, settings) -> dict of result fields`, which runs in a worker process and raises to
report a failed job. rtsoa's own kinds (saved graphs, ONNX models) are registered by
`rtsoa/batch/worker.py`, beside the code that runs them.
"""

from typing import NamedTuple

from rtsoa.abi.registry import Registry


class JobKind(NamedTuple):
    suffix: str
    description: str
    run: object  # (job, settings) -> dict of result fields; runs in a worker
    takes_inputs: bool


JOB_KINDS = Registry("job kind")  # suffix -> JobKind


def job_kind(suffix, description, takes_inputs=False):
    """Decorator: register `run(job, settings) -> dict of result fields` for paths ending in
    `suffix`. The function runs in a worker process; it raises to report a failed job."""

    def register(run):
        JOB_KINDS.add(suffix, JobKind(suffix, description, run, takes_inputs), replace=True)
        return run

    return register
