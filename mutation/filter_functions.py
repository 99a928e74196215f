"""cosmic-ray filter: mutate only the functions a config names.

    python mutation/filter_functions.py SESSION.sqlite CONFIG.toml [--only NAME,NAME]

Reads `[cosmic-ray.filters.function-filter] functions = ["name", ...]` from the config and
marks as skipped every pending mutation that lies outside a function (or method) of one of
those names in its module, so a run covers the functions that matter within the time there is.
`--only` narrows the list further for one run (mutation/run.sh passes $MUTATION_ONLY). Like
cosmic-ray's own filters it only edits the session database.
"""

import ast
import sys
from argparse import ArgumentParser, Namespace

from cosmic_ray.config import load_config
from cosmic_ray.tools.filters.filter_app import FilterApp
from cosmic_ray.work_db import WorkDB
from cosmic_ray.work_item import WorkerOutcome, WorkResult


def function_lines(path, names):
    """(first, last) source lines of every function or method in `path` named in `names`."""
    tree = ast.parse(open(path).read())
    return [
        (node.lineno, node.end_lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in names
    ]


class FunctionFilter(FilterApp):
    """Skip mutations outside the named functions."""

    def description(self):
        return __doc__

    def add_args(self, parser: ArgumentParser):
        parser.add_argument("config", help="Config file naming the functions")
        parser.add_argument("--only", default="", help="comma-separated subset of them")

    def filter(self, work_db: WorkDB, args: Namespace):
        config = load_config(args.config)
        names = set(config.sub("filters", "function-filter").get("functions", ()))
        if args.only:
            names &= set(args.only.split(","))
        if not names:
            return
        spans = {}
        for item in work_db.pending_work_items:
            for mutation in item.mutations:
                path = str(mutation.module_path)
                if path not in spans:
                    spans[path] = function_lines(path, names)
                line = mutation.start_pos[0]
                if not any(first <= line <= last for first, last in spans[path]):
                    work_db.set_result(
                        item.job_id,
                        WorkResult(
                            output="outside the functions named in function-filter",
                            worker_outcome=WorkerOutcome.SKIPPED,
                        ),
                    )
                    break


if __name__ == "__main__":
    sys.exit(FunctionFilter().main())
