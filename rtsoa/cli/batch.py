"""The `rtsoa batch` command: its arguments and what it prints.

The batch machinery (`rtsoa.batch`: pyarrow's Parquet writer, worker processes) is imported
when the command runs, not when the command line is built: every `rtsoa` start would pay it.
"""

import argparse
import json
import math
import signal
import sys

from rtsoa.executors import EXECUTORS


def register(subcommands):
    """Add `batch` to the `rtsoa` subparsers."""
    parser = subcommands.add_parser("batch", help="run many saved graphs, one result row per job")
    add_arguments(parser, ["auto", *EXECUTORS])
    parser.set_defaults(handler=run_command)


def add_arguments(parser, executors):
    """The `batch` subparser's arguments (`executors`: the --executor choices)."""
    parser.add_argument("jobs", nargs="*", help="saved graph directories (.rtsoa) to run")
    parser.add_argument(
        "--manifest",
        action="append",
        default=[],
        metavar="FILE",
        help="file of jobs ('-': standard input), one per line: a path, or a JSON object with "
        "path and optionally job (its name), executor, inputs; repeatable",
    )
    parser.add_argument("--executor", default="auto", choices=executors)
    parser.add_argument(
        "--kernels",
        default="all",
        choices=["all", "used"],
        help="dispatch holding every registered kernel, shared by all graphs (one compile per "
        "batch), or only the kernel modules each graph uses",
    )
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE in every worker first (user kernels register); repeatable",
    )
    parser.add_argument(
        "--workers", type=int, metavar="N", help="worker processes (default: one per CPU)"
    )
    parser.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="run on Dask: tcp://HOST:PORT of a scheduler, or local (a LocalCluster here)",
    )
    parser.add_argument("--resume", action="store_true", help="skip jobs already in OUTPUT")
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="with --resume: run again the jobs whose status in OUTPUT is not ok",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace OUTPUT even if it is not a results file"
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="seconds a job may take (lowering, loading, preparing and running it); its "
        "worker is then killed and replaced (local workers; a worker's warm-up, loading or "
        "compiling machine code for its first job of a kind, is not counted)",
    )
    parser.add_argument(
        "--no-hazard-check",
        dest="hazard_check",
        action="store_false",
        help="switch the device's happens-before checker off (faster)",
    )
    parser.add_argument(
        "-o", "--output", required=True, help="results file: Arrow IPC, or Parquet if .parquet"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    parser.add_argument("--no-progress", dest="progress", action="store_false")


def _seconds(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: the timeout must be a positive number")
    return value


def _terminate(number, frame):
    raise KeyboardInterrupt


def run_command(args, executors=None):
    """`rtsoa batch`; returns the exit status (130 after Ctrl-C). `executors`: the allowed
    executor names (None: auto and every registered executor)."""
    from rtsoa.batch.jobs import BatchError, collect_jobs  # see the module docstring
    from rtsoa.batch.runner import BatchInterrupted, check_imports, run_batch
    from rtsoa.batch.worker import Settings

    if executors is None:
        executors = ["auto", *EXECUTORS]

    if args.cluster is not None:
        if args.timeout is not None:
            raise BatchError("--timeout applies to local workers, not to --cluster")
        if args.workers is not None and args.cluster != "local":
            raise BatchError(
                "--workers applies to local runs and --cluster local; a remote "
                "cluster has its own workers"
            )
    if args.retry_failed and not args.resume:
        raise BatchError("--retry-failed goes with --resume (it reruns the failed jobs of OUTPUT)")
    jobs = collect_jobs(args.jobs, args.manifest, executors=executors)
    check_imports(args.imports)
    settings = Settings(
        executor=args.executor,
        kernels=args.kernels,
        imports=tuple(args.imports),
        hazards=args.hazard_check,
        timeout=args.timeout,
    )
    previous = signal.signal(signal.SIGTERM, _terminate)  # `kill`: like Ctrl-C
    try:
        summary = run_batch(
            jobs,
            args.output,
            settings=settings,
            workers=args.workers,
            cluster=args.cluster,
            resume=args.resume,
            retry_failed=args.retry_failed,
            force=args.force,
            progress=None if args.progress else False,
        )
    except BatchInterrupted as interrupt:
        summary = interrupt.summary
        left = summary.jobs - summary.skipped - summary.recorded
        print(
            f"rtsoa batch: interrupted: {summary.recorded} row(s) of this run are in "
            f"{summary.output}, {left} job(s) not run; add --resume to finish them",
            file=sys.stderr,
        )
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        print(json.dumps({**summary._asdict(), "jobs_per_second": summary.rate}))
        return 0
    counts = ", ".join(
        f"{count} {status}"
        for status, count in sorted(summary.statuses.items(), key=lambda item: item[0] != "ok")
    )
    skipped = f" ({summary.skipped} already in the file, skipped)" if summary.skipped else ""
    print(
        f"{summary.jobs} job(s){skipped}: {counts or 'nothing to run'} in "
        f"{summary.seconds:.2f} s ({summary.rate:.1f} jobs/s, {summary.workers} worker(s)); "
        f"results in {summary.output}"
    )
    return 0
