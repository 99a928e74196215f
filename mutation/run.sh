#!/usr/bin/env bash
# Run one mutation-testing config on a scratch copy of this checkout (cosmic-ray edits the
# sources it mutates, so never point it at a working tree you care about).
#   [MUTATION_ONLY=f,g] mutation/run.sh CONFIG [SCRATCH_DIR]   (CONFIG: a mutation/CONFIG.toml,
#   validate, validate-jit, executors, allocator, lowering, multithread, model or atomics)
#   MUTATION_NICE=1 (any form): each test run lowers itself to autogroup nice 19 (cosmic-ray
#   starts it in a new session, out of reach of `nice` on this script)
#   MUTATION_TIMEOUT=SECONDS: the per-mutant timeout instead of the config's (a config whose
#   hanging mutants dominate its run, on a machine where its tests' times are known)
#   MUTATION_RERUN=1 [MUTATION_RERUN_TIMEOUTS=1] [MUTATION_RERUN_JOBS=id,id] mutation/run.sh NAME [SCRATCH_DIR]
# The first form starts a fresh session; the second re-runs the survivors of the session in
# SCRATCH_DIR against the tree as now committed (after a test was added to kill them) and
# runs whatever the first left pending (an interrupted run resumes); with
# MUTATION_RERUN_TIMEOUTS=1 the mutants stopped by the timeout too; with MUTATION_RERUN_JOBS only
# the survivors with those cosmic-ray job ids (summary.py prints them).
# Needs the dev extra (pip install -e ".[dev]"). Writes the session database, cr-report's
# report and mutation/summary.py's table per function (with the survivors' diffs) into
# SCRATCH_DIR (default /tmp/rtsoa-mutation-NAME), and prints how long each stage took.
set -euo pipefail
name="$1"
here="$(cd "$(dirname "$0")/.." && pwd)"
scratch="${2:-/tmp/rtsoa-mutation-$name}"
session="$scratch/$name.sqlite"
if [ -n "${MUTATION_RERUN:-}" ]; then
    [ -f "$session" ] || { echo "no session $session to re-run" >&2; exit 1; }
    git -C "$here" archive HEAD | tar -x -C "$scratch"  # the tests as committed now
else
    rm -rf "$scratch" && mkdir -p "$scratch"
    git -C "$here" archive HEAD | tar -x -C "$scratch"  # the committed tree, no caches
fi
cd "$scratch"
export PYTHONPATH="$scratch" RTSOA_CACHE_DIR="$scratch/.cache/rtsoa" NUMBA_CACHE_DIR="$scratch/.cache/numba"
config="mutation/$name.toml"
if [ -n "${MUTATION_NICE:-}" ]; then
    # cosmic-ray starts each test run in a new session, so in a new autogroup at nice 0 that
    # `nice` on this script never reaches: make the (scratch copy's) test command lower itself.
    python - "$config" <<'PY'
import json
import sys
import tomllib
path = sys.argv[1]
command = tomllib.load(open(path, "rb"))["cosmic-ray"]["test-command"]
if "autogroup" not in command:
    prefix = "sh -c 'echo 19 > /proc/self/autogroup; exec nice -n 19 \"$@\"' sh "
    lines = open(path).read().split("\n")
    i = next(k for k, line in enumerate(lines) if line.startswith("test-command"))
    # a TOML basic string (JSON's escapes are valid TOML): the command may hold any quotes
    lines[i] = "test-command = " + json.dumps(prefix + command)
    open(path, "w").write("\n".join(lines))
PY
fi
if [ -n "${MUTATION_TIMEOUT:-}" ]; then
    sed -i "s/^timeout = .*/timeout = ${MUTATION_TIMEOUT}/" "$config"
fi
# Bytecode of the unmutated sources: cosmic-ray runs the tests with PYTHONDONTWRITEBYTECODE=1,
# so without it every test run compiles all of rtsoa's modules again. A mutated file is written
# after the extraction (its mtime differs from the one its .pyc records), so it is compiled anew.
python -m compileall -q rtsoa tests > /dev/null
# The unmutated tree's cache stamp, for a config whose mutants leave jitted code alone
# (validate.toml sets RTSOA_MUTATION_STAMP_FILE to it; see tests/conftest.py).
python -c "from rtsoa._jit import source_stamp; print(source_stamp())" > .mutation-stamp
stage() {  # stage NAME COMMAND...: run it and print its wall time
    local start=$SECONDS
    "${@:2}"
    echo "$name: $1 took $((SECONDS - start)) s"
}
if [ -n "${MUTATION_RERUN:-}" ]; then
    stage "reset survivors" python mutation/rerun_survivors.py "$session" ${MUTATION_RERUN_TIMEOUTS:+--timeouts} \
        ${MUTATION_RERUN_JOBS:+--jobs "$MUTATION_RERUN_JOBS"}
else
    stage init cosmic-ray init "$config" "$session"
    cr-filter-operators "$session" "$config"
    python mutation/filter_functions.py "$session" "$config" --only "${MUTATION_ONLY:-}"
fi
# The first test run fills the scratch's Numba cache (a compile of what the tests use), which
# may take longer than the per-mutant timeout that `cosmic-ray baseline` applies: run it once
# without a timeout first (it must pass: the unmutated tree).
warm() {
    python -c 'import shlex, subprocess, sys, tomllib
command = tomllib.load(open(sys.argv[1], "rb"))["cosmic-ray"]["test-command"]
# a session of its own, as cosmic-ray gives each test run: a MUTATION_NICE command then
# lowers its own autogroup, not the one of this script and its caller
done = subprocess.run(shlex.split(command), stdout=subprocess.DEVNULL, start_new_session=True)
sys.exit(done.returncode)' "$config"
}
stage "warm-up test run" warm
stage baseline cosmic-ray baseline "$config"
stage exec cosmic-ray exec "$config" "$session"
cr-report "$session" --show-pending > "$scratch/$name-report.txt"
python mutation/summary.py "$session" --diffs > "$scratch/$name-summary.txt"
tail -n 3 "$scratch/$name-report.txt"
sed -n '/^| file/,/survivor(s)/p' "$scratch/$name-summary.txt"
