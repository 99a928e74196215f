"""Batch execution: many saved graphs and ONNX models with input sets run by local worker
processes or a Dask cluster, one result row per job in an Arrow IPC or Parquet file.

`rtsoa batch` is the command line over `collect_jobs` + `run_batch`; see docs/batch.md. Job
kinds (`JOB_KINDS`, keyed by path suffix) say how a job runs; `run_job` runs one where a worker
runs it. Names are imported on first use, so that building the `rtsoa` command
line (`rtsoa.cli.batch`) does not load the batch machinery.
"""

import importlib

_MODULES = {
    "BatchError": "jobs",
    "JOB_KINDS": "kinds",
    "Job": "jobs",
    "collect_jobs": "jobs",
    "job_kind": "kinds",
    "read_manifest": "jobs",
    "COLUMNS": "results",
    "RESULT_SCHEMA": "results",
    "ResultsFile": "results",
    "read_results": "results",
    "BatchInterrupted": "runner",
    "BatchSummary": "runner",
    "default_workers": "runner",
    "run_batch": "runner",
    "Settings": "worker",
    "run_job": "worker",
}

__all__ = sorted(_MODULES)


def __getattr__(name):
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'rtsoa.batch' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rtsoa.batch.{module}"), name)


def __dir__():
    return sorted(set(globals()) | set(_MODULES))
