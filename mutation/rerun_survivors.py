"""Mark the survivors of a cosmic-ray session as not run, so `cosmic-ray exec` runs them again.

    python mutation/rerun_survivors.py SESSION.sqlite [--timeouts] [--jobs ID,ID,...]

mutation/run.sh calls it with MUTATION_RERUN=1, after a test was added to kill them: the re-run
shows whether it does. `--timeouts` resets the mutants cosmic-ray stopped at its timeout too
(counted killed: wrongly so when a loaded machine made an honest test run too slow). Prints
how many were reset. `--jobs` resets only the survivors with those job ids (the ones a new test
targets, when the others were judged equivalent and re-running them all costs too long).
(cosmic-ray has no command for this; its session database keeps one result row per job, which
this deletes for the survivors.)
"""

import sqlite3
import sys

from cosmic_ray.work_item import TestOutcome


def main(session, timeouts=False, jobs=None):
    outcome = TestOutcome.SURVIVED
    survived = "test_outcome IN (?, ?)"
    arguments = [outcome.name, outcome.value]
    if jobs is not None:
        survived += f" AND job_id IN ({', '.join('?' * len(jobs))})"
        arguments += jobs
    with sqlite3.connect(session) as db:
        reset = db.execute(f"DELETE FROM work_results WHERE {survived}", arguments).rowcount
        if timeouts:
            reset += db.execute("DELETE FROM work_results WHERE output = 'timeout'").rowcount
    print(f"{reset} mutant(s) of {session} marked to run again")


if __name__ == "__main__":
    options = sys.argv[2:]
    jobs = options[options.index("--jobs") + 1].split(",") if "--jobs" in options else None
    main(sys.argv[1], "--timeouts" in options, jobs)
