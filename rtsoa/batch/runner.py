"""`run_batch`: jobs -> worker pool (local processes or Dask) -> results file, with a
progress bar; Ctrl-C leaves a valid results file with the rows done so far."""

import importlib.util
import os
import signal
import threading
import time
from collections import Counter
from typing import NamedTuple

from tqdm import tqdm

from rtsoa.batch.cluster import DaskPool
from rtsoa.batch.jobs import BatchError
from rtsoa.batch.local import LocalPool
from rtsoa.batch.results import ResultsFile
from rtsoa.batch.worker import Settings
from rtsoa.errors import BatchInterrupted
from rtsoa.limits import check_count, check_fits

# Memory of one worker process (Python, numpy, pyarrow, numba, rtsoa, a dispatch module and a
# lowered graph's device loaded), its resident set rounded down; used to refuse --workers that
# cannot fit (asv bench_batch measures a worker's memory).
WORKER_BYTES = 200 << 20
MAX_WORKERS = 1024


class BatchSummary(NamedTuple):
    output: str
    jobs: int  # listed
    skipped: int  # already in the results file (--resume)
    recorded: int  # rows written by this run
    statuses: dict  # status -> count over this run's rows
    seconds: float
    workers: int

    @property
    def rate(self):
        return self.recorded / self.seconds if self.seconds > 0 else 0.0


def default_workers():
    """One worker per CPU this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def check_workers(workers):
    """`--workers` as an int in 1 .. MAX_WORKERS whose processes fit in memory."""
    workers = check_count("--workers", workers, 1, MAX_WORKERS)
    check_fits(
        f"--workers {workers} (about {WORKER_BYTES >> 20} MiB per worker)", workers * WORKER_BYTES
    )
    return workers


def run_batch(
    jobs,
    output,
    settings=None,
    workers=None,
    cluster=None,
    resume=False,
    force=False,
    progress=None,
    pool=None,
    retry_failed=False,
):
    """Run `jobs` (from `rtsoa.batch.collect_jobs`) and write one row per job to `output`.

    `workers`: local processes, or the LocalCluster's size with `cluster="local"` (default: one
    per CPU; never more than there are jobs to run). `cluster`: None (local processes),
    "local" or "tcp://HOST:PORT" (Dask). `resume`: keep the rows of an existing results file
    and skip their jobs (with `retry_failed`, only the jobs whose status is "ok"). `force`:
    replace an `output` that is not a results file. `progress`: True / False, or None for a
    bar only on a terminal. `pool`: a started `LocalPool` / `DaskPool` to reuse (its workers
    and settings; it is left open), instead of `workers` / `cluster` / `settings`. Returns a
    BatchSummary; Ctrl-C raises BatchInterrupted after writing the rows done so far.
    """
    settings = Settings() if settings is None else settings
    if pool is None:
        workers = check_workers(default_workers() if workers is None else workers)
    results = ResultsFile(output, resume=resume, force=force, retry_failed=retry_failed)
    todo = [job for job in jobs if job.name not in results.done]
    statuses = Counter()
    start = time.perf_counter()
    own_pool = pool is None
    size = 0 if own_pool else pool.size

    def summary():
        seconds = time.perf_counter() - start
        recorded = sum(statuses.values())
        return BatchSummary(
            str(output),
            len(jobs),
            len(jobs) - len(todo),
            recorded,
            dict(statuses),
            seconds,
            size,
        )

    bar = tqdm(
        total=len(todo),
        desc="batch",
        unit="job",
        disable=None if progress is None else not progress,
        smoothing=0.1,
    )
    bar.set_postfix(failed=0, crashed=0, refresh=False)
    interrupted = False
    try:
        if todo and own_pool:
            pool = _pool(cluster, min(workers, len(todo)), settings)
            size = pool.size
        if todo:
            for batch in pool.run(todo):  # record batches of rows
                results.add_batch(batch)
                batch_statuses = Counter(batch.column("status").to_pylist())
                statuses.update(batch_statuses)
                bar.update(batch.num_rows)
                if set(batch_statuses) != {"ok"} and not bar.disable:  # the postfix: ~40 us
                    failed = sum(count for status, count in statuses.items() if status != "ok")
                    bar.set_postfix(failed=failed, crashed=statuses["crashed"], refresh=False)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.close()
        if own_pool and pool is not None:
            interrupted = _close_holding_interrupts(pool) or interrupted
        results.flush(if_changed=True)
        results.close()
    if interrupted:
        raise BatchInterrupted(summary())
    return summary()


def _close_holding_interrupts(pool):
    """`pool.close()` with Ctrl-C and SIGTERM held back until it returns (it is bounded: a
    short join, then the workers are killed); returns whether one arrived meanwhile. A Ctrl-C
    that lands while the pool closes (at the end of a batch, or while the first one is being
    handled) would otherwise cut the close short and end the process with a traceback."""
    if threading.current_thread() is not threading.main_thread():
        pool.close()
        return False
    arrived = []
    held = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    held = {number: handler for number, handler in held.items() if handler is not None}
    for number in held:
        signal.signal(number, lambda received, frame: arrived.append(received))
    try:
        pool.close()
    finally:
        for number, handler in held.items():
            signal.signal(number, handler)
    return bool(arrived)


def _pool(cluster, workers, settings):
    if cluster is None:
        return LocalPool(workers, settings)
    return DaskPool(cluster, workers, settings)


def check_imports(modules):
    """Each `--import` module is importable here (BatchError naming it otherwise)."""
    for name in modules:
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError) as error:
            raise BatchError(f"--import {name}: {error}") from None
        if found is None:
            raise BatchError(f"--import {name}: no module named {name!r} (is it on PYTHONPATH?)")
