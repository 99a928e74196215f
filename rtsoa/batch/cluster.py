"""The same batch on a Dask distributed cluster: `--cluster tcp://HOST:PORT` connects to a
running scheduler, `--cluster local` starts a LocalCluster of `workers` processes here.

Each job is one task running `rtsoa.batch.worker.run_job`, so the rows are the same as a local
run's (the `worker` column holds the Dask worker's address). Workers must see the job paths
(a shared filesystem) and, to compile nothing, a warm rtsoa / Numba cache (RTSOA_CACHE_DIR and
NUMBA_CACHE_DIR); the first-compile lock works across the workers of one machine. A task whose
worker process dies is recorded as "crashed" (on a LocalCluster the scheduler gives up after
the first death; a remote scheduler retries it on other workers per its
`distributed.scheduler.allowed-failures`). dask and distributed are the optional extra
`rtsoa[dask]`.
"""

import re
import uuid

from rtsoa.batch.jobs import BatchError
from rtsoa.batch.local import main_without_file
from rtsoa.batch.results import rows_batch
from rtsoa.batch.worker import run_job

_ADDRESS = re.compile(r"^(tcp|tls)://[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}$")
_IN_FLIGHT_PER_WORKER = 4  # tasks submitted ahead per worker (the rest wait client-side)


def _distributed():
    try:
        import distributed
    except ImportError:
        raise BatchError(
            "--cluster needs dask and distributed, which are not installed: pip install rtsoa[dask]"
        ) from None
    return distributed


def _run_on_worker(job, settings):
    """`run_job` with the Dask worker's address in the `worker` column."""
    from distributed import get_worker

    row = run_job(job, settings)
    row["worker"] = get_worker().address
    return row


class DaskPool:
    """Jobs as Dask tasks; `run(jobs)` yields record batches of rows, like `LocalPool`."""

    def __init__(self, cluster, workers, settings, connect_timeout=10):
        if cluster != "local" and not _ADDRESS.match(cluster):
            raise BatchError(
                f"--cluster {cluster!r}: expected tcp://HOST:PORT (a Dask scheduler) or local"
            )
        distributed = _distributed()
        import dask

        self.settings = settings
        self._cluster = None
        self._hidden_main = None
        if cluster == "local":
            # nannies restart workers for the pool's whole life: keep a stdin __main__ hidden
            self._hidden_main = main_without_file()
            self._hidden_main.__enter__()
            # a crashing job must not take down worker after worker: give up on first death
            config = {"distributed.scheduler.allowed-failures": 0}
            try:
                with dask.config.set(config):
                    self._cluster = distributed.LocalCluster(
                        n_workers=workers,
                        threads_per_worker=1,
                        processes=True,
                        dashboard_address=None,
                        silence_logs=50,
                    )
            except RuntimeError as error:
                self.close()
                raise BatchError(
                    f"--cluster local: the LocalCluster did not start ({error})"
                ) from None
            address = self._cluster.scheduler_address
        else:
            address = cluster
        try:
            self.client = distributed.Client(address, timeout=connect_timeout)
        except (OSError, TimeoutError) as error:
            self.close()
            raise BatchError(
                f"--cluster {cluster}: cannot reach the Dask scheduler ({error})"
            ) from None
        self.address = address  # the scheduler's
        self.size = max(len(self.client.scheduler_info().get("workers", {})), 1)
        self._distributed = distributed

    def run(self, jobs):
        """Yield a record batch (RESULT_SCHEMA) per job with its row (completion order)."""
        distributed = self._distributed
        token = uuid.uuid4().hex[:12]
        pending = iter(enumerate(jobs))
        futures = {}  # future key -> job
        completed = distributed.as_completed()

        def submit(count):
            for _ in range(count):
                item = next(pending, None)
                if item is None:
                    return
                number, job = item
                future = self.client.submit(
                    _run_on_worker,
                    job,
                    self.settings,
                    key=f"rtsoa-batch-{token}-{number}",
                    pure=False,
                    retries=0,
                )
                futures[future.key] = job
                completed.add(future)

        submit(self.size * _IN_FLIGHT_PER_WORKER)
        for future in completed:
            job = futures.pop(future.key)
            yield rows_batch([self._row(future, job)])
            future.release()
            submit(1)

    def _row(self, future, job):
        if future.status == "finished":
            return future.result()
        error = future.exception()
        killed = type(error).__name__ == "KilledWorker"
        return {
            "job": job.name,
            "graph": job.path,
            "executor": job.executor or self.settings.executor,
            "status": "crashed" if killed else type(error).__name__,
            "message": (
                f"the Dask worker running it died ({error}); the cluster replaced it"
                if killed
                else " ".join(str(error).split())
            ),
        }

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
            self.client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
        if self._hidden_main is not None:
            self._hidden_main.__exit__(None, None, None)
            self._hidden_main = None
