"""What a batch runs: jobs, the job kinds keyed by path suffix, and reading them from the
command line and manifest files.

A job is one saved graph (`NAME.rtsoa/`) run once on a fresh simulated device, or later one
ONNX model with an input set. The job kind is chosen by the path's suffix (`JOB_KINDS`); a new
kind plugs in with `@job_kind(".suffix")` and one function `run(job, settings) -> row fields`
(`rtsoa/batch/kinds.py`). Everything here runs in the parent process, before any worker
starts: a bad job list is refused with one line naming the job and where it came from.

Manifest format: one job per line; blank lines and lines starting with `#` are skipped. A line
is either a path, or a JSON object `{"path": ..., "job": NAME, "executor": ..., "inputs": ...}`
(only `path` is required). Relative paths are relative to the manifest's directory (the current
directory for `-`, standard input, or a pipe). Lines are at most 64 KiB. A job's name
defaults to its path; two jobs may not share a name (name repeated runs of one graph).
"""

import json
import os
import sys
from typing import NamedTuple

import rtsoa.batch.worker  # noqa: F401  (registers rtsoa's own job kinds)
from rtsoa.batch.kinds import JOB_KINDS, JobKind, job_kind
from rtsoa.errors import BatchError
from rtsoa.executors import EXECUTORS

__all__ = ["JOB_KINDS", "BatchError", "Job", "JobKind", "collect_jobs", "job_kind"]


class Job(NamedTuple):
    """One job of a batch (picklable: it travels to worker processes and Dask workers)."""

    name: str  # unique in the batch; the `job` column of the results
    path: str  # as resolved for the run (the `graph` column)
    kind: str  # key of JOB_KINDS, the suffix (".rtsoa", ".onnx")
    source: str  # where it was listed: "argument 2", "manifest jobs.txt line 4"
    executor: str | None = None  # None: the batch's --executor
    inputs: str | None = None  # input set of a model job (None for graph jobs)


def kind_of(path):
    """The JOB_KINDS key for `path` (by suffix), or None."""
    trimmed = path.rstrip("/" + os.sep)
    for suffix in JOB_KINDS:
        if trimmed.endswith(suffix):
            return suffix
    return None


def _kinds_text():
    return " or ".join(f"{kind.description} ({suffix})" for suffix, kind in JOB_KINDS.items())


def make_job(path, source, name=None, executor=None, inputs=None, executors=None):
    """A checked Job: the path exists and has a job kind, the options fit the kind.

    `executors`: allowed executor names (None: auto and every registered executor)."""
    if not isinstance(path, str) or not path:
        raise BatchError(f"{source}: the job path must be a non-empty string, got {path!r}")
    kind = kind_of(path)
    if kind is None:
        raise BatchError(f"{source}: {path!r} is not a job: expected {_kinds_text()}")
    if not os.path.exists(path):
        raise BatchError(f"{source}: {path} does not exist")
    if name is None:
        name = path
    if not isinstance(name, str) or not name.strip():
        raise BatchError(f"{source}: the job name must be a non-empty string, got {name!r}")
    if executors is None:
        executors = ["auto", *EXECUTORS]
    if executor is not None and (not isinstance(executor, str) or executor not in executors):
        choices = ", ".join(executors)
        raise BatchError(f"{source}: unknown executor {executor!r}; choose one of {choices}")
    if inputs is not None:
        if not JOB_KINDS[kind].takes_inputs:
            raise BatchError(f"{source}: inputs apply to model jobs; {path} is a saved graph")
        if not isinstance(inputs, str) or not os.path.exists(inputs):
            raise BatchError(f"{source}: inputs {inputs!r} do not exist")
    return Job(name, path, kind, source, executor, inputs)


_MANIFEST_KEYS = ("path", "job", "executor", "inputs")
MANIFEST_LINE_BYTES = 1 << 16


def read_manifest(manifest, executors=None):
    """The jobs listed in the manifest file `manifest` (see the module docstring); "-" reads
    standard input. Relative paths are relative to the manifest's directory, or to the
    current directory for standard input, a pipe or a device."""
    if manifest == "-":
        return _manifest_jobs(sys.stdin.buffer, "-", "", executors)
    try:
        file = open(manifest, "rb")  # noqa: SIM115 (closed below; a pipe works too)
    except FileNotFoundError:
        raise BatchError(f"manifest {manifest} does not exist") from None
    except IsADirectoryError:
        raise BatchError(f"manifest {manifest} is a directory, not a file of jobs") from None
    except OSError as error:
        raise BatchError(f"manifest {manifest}: {error.strerror}") from None
    base = os.path.dirname(manifest) if os.path.isfile(manifest) else ""
    with file:
        return _manifest_jobs(file, manifest, base, executors)


def _manifest_jobs(file, manifest, base, executors):
    jobs = []
    number = 0
    while True:
        try:
            raw = file.readline(MANIFEST_LINE_BYTES + 1)
        except OSError as error:
            raise BatchError(f"manifest {manifest}: {error.strerror}") from None
        if not raw:
            return jobs
        number += 1
        where = f"manifest {manifest} line {number}"
        if len(raw) > MANIFEST_LINE_BYTES:
            raise BatchError(f"{where}: longer than {MANIFEST_LINE_BYTES:,} bytes")
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise BatchError(f"{where}: not UTF-8 text") from None
        if not line or line.startswith("#"):
            continue
        if "\0" in line:
            raise BatchError(f"{where}: holds a NUL byte")
        fields = {"path": line}
        if line.startswith("{"):
            fields = _json_line(line, where)
        path = fields["path"]
        if isinstance(path, str) and path and not os.path.isabs(path):
            path = os.path.normpath(os.path.join(base, path))
        jobs.append(
            make_job(
                path,
                where,
                name=fields.get("job"),
                executor=fields.get("executor"),
                inputs=fields.get("inputs"),
                executors=executors,
            )
        )


def _json_line(line, where):
    try:
        fields = json.loads(line)
    except json.JSONDecodeError as error:
        raise BatchError(f"{where}: not a path or a JSON object ({error.msg})") from None
    unknown = sorted(set(fields) - set(_MANIFEST_KEYS))
    if unknown:
        raise BatchError(
            f"{where}: unknown key {unknown[0]!r}; a job takes {', '.join(_MANIFEST_KEYS)}"
        )
    if "path" not in fields:
        raise BatchError(f"{where}: the job has no 'path'")
    return fields


def collect_jobs(paths=(), manifests=(), executors=None):
    """Jobs from command-line paths then manifests, checked, names unique (BatchError)."""
    jobs = [
        make_job(
            os.path.normpath(path) if path else path, f"argument {number}", executors=executors
        )
        for number, path in enumerate(paths, start=1)
    ]
    for manifest in manifests:
        jobs.extend(read_manifest(manifest, executors))
    seen = {}
    for job in jobs:
        first = seen.setdefault(job.name, job)
        if first is not job:
            raise BatchError(
                f"job {job.name!r} is listed twice ({first.source} and {job.source}); give "
                'repeated runs their own names in a manifest: {"job": "NAME", "path": ...}'
            )
    if not jobs:
        raise BatchError("no jobs: give graph paths or --manifest FILE")
    return jobs
