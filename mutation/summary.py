"""Mutants of a cosmic-ray session counted by the function they sit in, and the survivors.

    python mutation/summary.py SESSION.sqlite [--diffs]

Run from the tree the session mutated (mutation/run.sh does). Prints a markdown table per
module (function, run, killed, of them timed out, survived, incompetent, not run) and then every
survivor as `job id  file:line  operator`, with its diff when `--diffs` is given. Mutants outside
the functions the config names (skipped by mutation/filter_functions.py) are not counted.
"""

import ast
import sys
from collections import Counter, defaultdict

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome


def innermost_function(spans, line):
    """Name of the innermost function whose lines hold `line` ('<module>' if none)."""
    inside = [(last - first, name) for first, last, name in spans if first <= line <= last]
    return min(inside)[1] if inside else "<module>"


def function_spans(path):
    tree = ast.parse(open(path).read())
    return [
        (node.lineno, node.end_lineno, node.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def main(session, show_diffs=False):
    spans = {}
    counts = defaultdict(Counter)
    survivors = []
    with use_db(session, WorkDB.Mode.open) as db:
        results = dict(db.results)
        for item in db.work_items:
            mutation = item.mutations[0]
            path = str(mutation.module_path)
            if path not in spans:
                spans[path] = function_spans(path)
            key = (path.rsplit("/", 1)[-1], innermost_function(spans[path], mutation.start_pos[0]))
            result = results.get(item.job_id)
            if result is None:
                counts[key]["not run"] += 1
                continue
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            counts[key]["run"] += 1
            if result.test_outcome == TestOutcome.KILLED:
                counts[key]["killed"] += 1
                if result.output == "timeout":  # cosmic-ray's verdict for a run it stopped
                    counts[key]["timeout"] += 1
            elif result.test_outcome == TestOutcome.SURVIVED:
                counts[key]["survived"] += 1
                survivors.append((item, mutation, result))
            else:
                counts[key]["incompetent"] += 1
    columns = ("run", "killed", "timeout", "survived", "incompetent", "not run")
    print("| file | function | " + " | ".join(columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    total = Counter()
    for (module, function), count in sorted(counts.items()):
        total.update(count)
        print(f"| {module} | {function} | " + " | ".join(str(count[c]) for c in columns) + " |")
    print("| total | | " + " | ".join(str(total[c]) for c in columns) + " |")
    print(f"\n{len(survivors)} survivor(s)")
    for item, mutation, result in survivors:
        where = f"{mutation.module_path}:{mutation.start_pos[0]}"
        print(f"{item.job_id}  {where}  {mutation.operator_name} #{mutation.occurrence}")
        if show_diffs:
            print(result.diff)


if __name__ == "__main__":
    main(sys.argv[1], "--diffs" in sys.argv[2:])
