"""Write one mutant of a cosmic-ray session into a tree, to run tests against it by hand.

    python mutation/apply_mutant.py SESSION.sqlite JOB_ID_PREFIX [TREE]

TREE (default: this checkout) gets the mutated file in place of its own; the mutated file's
path is printed (undo with `git checkout -- PATH`). Run the tests with the unmutated tree's
cache stamp, as the configs do, so no jitted code compiles for the mutant:

    python -c "from rtsoa._jit import source_stamp; print(source_stamp())" > /tmp/stamp
    python mutation/apply_mutant.py /tmp/rtsoa-mutation-model/model.sqlite 1e97df15
    RTSOA_MUTATION_STAMP_FILE=/tmp/stamp python -m pytest -x -q tests/test_models.py
    git checkout -- rtsoa/runtime/checks.py

A job id prefix that matches no mutant, or several, is an error naming it.
"""

import json
import sqlite3
import sys
from pathlib import Path

from cosmic_ray.mutating import mutate_code
from cosmic_ray.plugins import get_operator


def mutant(session, prefix):
    """(module path, operator name, operator args, occurrence) of the job `prefix` names."""
    rows = (
        sqlite3.connect(session)
        .execute(
            "SELECT module_path, operator_name, operator_args, occurrence FROM mutation_specs "
            "WHERE job_id LIKE ?",
            (prefix + "%",),
        )
        .fetchall()
    )
    if len(rows) != 1:
        raise SystemExit(f"job id {prefix!r} matches {len(rows)} mutants of {session}")
    return rows[0]


def main(session, prefix, tree="."):
    path, operator, arguments, occurrence = mutant(session, prefix)
    arguments = json.loads(arguments) if arguments else {}
    if isinstance(arguments, str):  # stored as a JSON string of the JSON object
        arguments = json.loads(arguments)
    target = Path(tree, path)
    mutated = mutate_code(target.read_text(), get_operator(operator)(**arguments), occurrence)
    if mutated is None:
        raise SystemExit(f"job {prefix!r}: {operator} #{occurrence} does not apply to {target}")
    target.write_text(mutated)
    print(path)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
