"""Mark the survivors of a cosmic-ray session as not run, so `cosmic-ray exec` runs them again.

    python mutation/rerun_survivors.py SESSION.sqlite [--timeouts]

mutation/run.sh calls it with MUTATION_RERUN=1, after a test was added to kill them: the re-run
shows whether it does. `--timeouts` resets the mutants cosmic-ray stopped at its timeout too
(counted killed: wrongly so when a loaded machine made an honest test run too slow). Prints
how many were reset. (cosmic-ray has no command for this; its
session database keeps one result row per job, which this deletes for the survivors.)
"""

import sqlite3
import sys

from cosmic_ray.work_item import TestOutcome


def main(session, timeouts=False):
    outcome = TestOutcome.SURVIVED
    with sqlite3.connect(session) as db:
        cursor = db.execute(
            "DELETE FROM work_results WHERE test_outcome IN (?, ?)", (outcome.name, outcome.value)
        )
        reset = cursor.rowcount
        if timeouts:
            reset += db.execute("DELETE FROM work_results WHERE output = 'timeout'").rowcount
    print(f"{reset} mutant(s) of {session} marked to run again")


if __name__ == "__main__":
    main(sys.argv[1], "--timeouts" in sys.argv[2:])
