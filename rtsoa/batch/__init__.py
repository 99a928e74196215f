"""Batch execution: many saved graphs (later: ONNX models with input sets) run by local worker
processes or a Dask cluster, one result row per job in an Arrow IPC or Parquet file.

`rtsoa batch` is the command line over `collect_jobs` + `run_batch`; see the README's Batch
section. Job kinds (`JOB_KINDS`, keyed by path suffix) say how a job runs; `run_job` runs one
where a worker runs it.
"""

from rtsoa.batch.jobs import JOB_KINDS, BatchError, Job, collect_jobs, job_kind, read_manifest
from rtsoa.batch.results import COLUMNS, RESULT_SCHEMA, ResultsFile, read_results
from rtsoa.batch.runner import BatchInterrupted, BatchSummary, default_workers, run_batch
from rtsoa.batch.worker import Settings, run_job

__all__ = [
    "BatchError",
    "BatchInterrupted",
    "BatchSummary",
    "COLUMNS",
    "JOB_KINDS",
    "Job",
    "RESULT_SCHEMA",
    "ResultsFile",
    "Settings",
    "collect_jobs",
    "default_workers",
    "job_kind",
    "read_manifest",
    "read_results",
    "run_batch",
    "run_job",
]
