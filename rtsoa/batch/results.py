"""The results file of a batch: one row per job, always a valid file.

Rows are kept in memory and the whole file is rewritten atomically at most every
`flush_seconds` (1 s), and at the end or on Ctrl-C: written to a new file next to the target,
flushed to disk, renamed over the target (os.replace) and the directory flushed, as
`save_graph` publishes a graph. A reader, a killed batch, a power loss or a full disk never
leaves a torn file, only one that lacks the latest rows. The interval grows with the cost of
a rewrite (at most ~2 % of the batch's time goes to writing). Arrow IPC file format, or
Parquet when the name ends in `.parquet`; both carry the schema metadata `rtsoa.results`,
which is how an existing file is recognised as a results file (replaced without asking, or
resumed with `--resume`).

What `-o` may name: nothing yet, or a regular file (a results file is replaced or resumed; any
other regular file only with `force`). A directory, FIFO, device, socket or symbolic link is
refused with or without `force`, before it is opened: the rename would replace the node itself
(a device node, or a link with a file), and opening a FIFO blocks.
"""

import fcntl
import glob
import mmap
import os
import stat
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rtsoa.batch.jobs import BatchError
from rtsoa.graph.atomic_save import fsync_path
from rtsoa.graph.io import is_graph_directory

RESULTS_KEY = b"rtsoa.results"
RESULTS_VERSION = b"1"

# column -> (type, meaning); the table of result columns in docs/batch.md is this one.
COLUMNS = {
    "job": (pa.string(), "job name (its path unless the manifest names it)"),
    "graph": (pa.string(), "the graph (or model) path the job ran"),
    "executor": (pa.string(), "executor that ran it (the option asked for if none did)"),
    "status": (
        pa.string(),
        '"ok", the error type ("KernelError", ...), "crashed", "timeout", or "unsupported"',
    ),
    "message": (pa.string(), "the error's message, empty when ok"),
    "wall_seconds": (pa.float64(), "the job's wall time in its worker (load, prepare, run)"),
    "run_seconds": (pa.float64(), "the executor's run alone"),
    "device_time_ns": (pa.float64(), "simulated device time of the run"),
    "nodes_executed": (pa.int64(), "nodes the run executed (up to the failing one)"),
    "peak_device_bytes": (pa.int64(), "peak allocated device bytes, all placements"),
    "peak_reserved_bytes": (pa.int64(), "peak reserved (cached) device bytes"),
    "hazards": (pa.int64(), "happens-before violations the device recorded"),
    "checksum": (pa.uint64(), "the run's output checksum"),
    "worker": (pa.string(), "host and pid (local) or address (Dask) of the worker"),
}
RESULT_SCHEMA = pa.schema(
    [pa.field(name, kind) for name, (kind, _) in COLUMNS.items()],
    metadata={RESULTS_KEY: RESULTS_VERSION},
)


def rows_batch(rows):
    """A record batch of result rows (dicts; a column a row lacks is null)."""
    return pa.RecordBatch.from_pylist(rows, schema=RESULT_SCHEMA)


def rows_message(rows):
    """Result rows as the bytes a local worker sends (one Arrow IPC record batch: the parent
    reads it without a per-row Python step)."""
    return rows_batch(rows).serialize().to_pybytes()


def read_rows_message(data):
    """The record batch of a worker's `rows_message`."""
    return pa.ipc.read_record_batch(pa.py_buffer(data), RESULT_SCHEMA)


def is_parquet(path):
    return str(path).endswith(".parquet")


def file_kind(mode):
    """What a `st_mode` is, in words ("a regular file", "a FIFO", "a directory", ...)."""
    kinds = (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    for test, kind in kinds:
        if test(mode):
            return kind
    return "not a regular file"


def _read_regular(path):
    """The bytes of the regular file `path`, mapped; BatchError for anything else, checked on
    the open descriptor (opened without blocking: a FIFO is refused, not waited on)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise BatchError(f"{path}: {error.strerror}") from None
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise BatchError(f"{path} is {file_kind(mode)}, not an rtsoa batch results file")
        try:
            return pa.py_buffer(mmap.mmap(descriptor, 0, access=mmap.ACCESS_READ))
        except ValueError:  # an empty file cannot be mapped
            return pa.py_buffer(b"")
    finally:
        os.close(descriptor)


def read_results(path):
    """The results table at `path` (BatchError if it is not an rtsoa batch results file)."""
    data = _read_regular(os.fspath(path))
    try:
        if is_parquet(path):
            table = pq.read_table(pa.BufferReader(data))
        else:
            table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    except (pa.ArrowException, OSError, ValueError) as error:
        raise BatchError(f"{path} is not an rtsoa batch results file ({error})") from None
    metadata = table.schema.metadata or {}
    if metadata.get(RESULTS_KEY) != RESULTS_VERSION or not table.schema.equals(
        RESULT_SCHEMA, check_metadata=False
    ):
        raise BatchError(f"{path} is not an rtsoa batch results file (other columns)")
    return table.replace_schema_metadata(RESULT_SCHEMA.metadata)


class ResultsFile:
    """Where a batch's rows go. `done` holds the job names already recorded (resume; with
    `retry_failed` only those whose status is "ok")."""

    def __init__(self, path, resume=False, force=False, flush_seconds=1.0, retry_failed=False):
        self.path = os.fspath(path)
        self.flush_seconds = flush_seconds
        self._batches = []  # record batches: those in the file, then those added
        self._dirty = False  # rows added since the last rewrite
        self.done = set()
        self._check_target(resume, force, retry_failed)
        self._last_flush = time.monotonic()
        self._write_cost = 0.0

    def _check_target(self, resume, force, retry_failed):
        path = self.path
        if os.path.basename(path.rstrip("/")) in ("", ".", ".."):
            raise BatchError(f"-o {path!r}: name a results file like results.arrow")
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise BatchError(f"-o {path}: directory {directory} does not exist")
        if is_graph_directory(directory):
            raise BatchError(
                f"-o {path} is inside the graph directory {directory}; write the "
                "results elsewhere (a save of that graph would delete them)"
            )
        self._check_kind()  # refused before a lock file is made next to it
        self._lock()
        self._remove_leftovers()
        if not self._check_kind():
            return
        if resume:
            table = read_results(path)
            if retry_failed:  # their rows go at the next rewrite, replaced by the new ones
                table = table.filter(pc.equal(table.column("status"), "ok"))
            self._batches = table.to_batches()
            self.done = set(table.column("job").to_pylist())
            return
        try:
            read_results(path)
            return  # a results file: replaced, like `gen -o` replaces a graph
        except BatchError:
            pass
        if not force:
            raise BatchError(
                f"-o {path} exists and is not an rtsoa batch results file; refusing to replace "
                "it (--force replaces it, --resume continues a results file)"
            )

    def _check_kind(self, now=""):
        """Whether `path` exists; BatchError unless it is a regular file (never followed,
        whatever `force` says: see the module docstring). `now`: " now" at a rewrite."""
        path = self.path
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return False
        if stat.S_ISREG(mode):
            return True
        if stat.S_ISLNK(mode):
            raise BatchError(
                f"-o {path} is{now} a symbolic link (to {os.readlink(path)}); results are "
                "written to a new file renamed over the name, which would replace the link: "
                "name the file itself"
            )
        raise BatchError(
            f"-o {path} is{now} {file_kind(mode)}, not a regular file; refusing to write "
            "results there (--force replaces only a results file or a regular file)"
        )

    def _lock(self):
        """One batch writes a results file at a time (their rewrites would drop each other's
        rows): an exclusive flock on `.NAME.lock` next to it, held while this object lives."""
        directory, name = os.path.split(os.path.abspath(self.path))
        lock = os.path.join(directory, f".{name}.lock")
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC  # never a link's target
        try:
            self._lock_file = os.fdopen(os.open(lock, flags, 0o666), "a+b")
        except OSError as error:
            raise BatchError(f"-o {self.path}: cannot open the lock file {lock}: {error}") from None
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise BatchError(f"-o {self.path}: another rtsoa batch is writing it") from None

    def close(self):
        """Release the results file's lock (after the last flush)."""
        if getattr(self, "_lock_file", None) is not None:
            self._lock_file.close()
            self._lock_file = None

    def _staging(self):
        directory, name = os.path.split(os.path.abspath(self.path))
        return os.path.join(directory, f".{name}.partial-{os.getpid()}")

    @staticmethod
    def _create_staging(staging):
        """A new file at `staging`, never an existing entry followed (a stale one of this pid
        is removed first)."""
        if os.path.lexists(staging):
            os.unlink(staging)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.fdopen(os.open(staging, flags, 0o666), "wb")

    def _remove_leftovers(self):
        """Staging files of batches that died while writing (their pid is gone)."""
        directory, name = os.path.split(os.path.abspath(self.path))
        for leftover in glob.glob(
            os.path.join(glob.escape(directory), f".{glob.escape(name)}.partial-*")
        ):
            pid = leftover.rsplit("-", 1)[1]
            if pid.isdigit() and not _alive(int(pid)):
                os.unlink(leftover)

    def add(self, row):
        """Record one job's row (a dict); see `add_batch`."""
        self.add_batch(rows_batch([row]))

    def add_batch(self, batch):
        """Record a record batch of rows (RESULT_SCHEMA); the file is rewritten when the flush
        interval has passed."""
        self._batches.append(batch)
        self._dirty = True
        self.done.update(batch.column("job").to_pylist())
        interval = max(self.flush_seconds, 50 * self._write_cost)
        if time.monotonic() - self._last_flush >= interval:
            self.flush()

    def table(self):
        """Every row so far (file and added) as one table."""
        return pa.Table.from_batches(self._batches, schema=RESULT_SCHEMA)

    def flush(self, if_changed=False):
        """Rewrite the file atomically with every row so far (with `if_changed`: only if rows
        were added since the last rewrite; a batch that records nothing writes nothing)."""
        if if_changed and not self._dirty:
            return
        start = time.monotonic()
        table = self.table().combine_chunks()
        self._check_kind(now=" now")  # it may have been replaced since the batch began
        staging = self._staging()
        try:
            with self._create_staging(staging) as file:
                if is_parquet(self.path):
                    pq.write_table(table, file)
                else:
                    with pa.ipc.new_file(file, RESULT_SCHEMA) as writer:
                        writer.write_table(table)
                file.flush()
                os.fsync(file.fileno())  # on disk before the rename makes it the results
            os.replace(staging, self.path)
        except BaseException:
            if os.path.lexists(staging):
                os.unlink(staging)
            raise
        fsync_path(os.path.dirname(os.path.abspath(self.path)), directory=True)
        self._batches = table.to_batches()
        self._dirty = False
        self._last_flush = time.monotonic()
        self._write_cost = self._last_flush - start


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
