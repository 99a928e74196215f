#!/usr/bin/env bash
# Run one mutation-testing config on a scratch copy of this checkout (cosmic-ray edits the
# sources it mutates, so never point it at a working tree you care about).
#   [MUTATION_ONLY=f,g] mutation/run.sh validate|executors|allocator [SCRATCH_DIR]
# Needs the dev extra (pip install -e ".[dev]"). Writes the session database and the report
# (cr-report, survivors with their diffs) into SCRATCH_DIR (default /tmp/rtsoa-mutation-NAME).
set -euo pipefail
name="$1"
here="$(cd "$(dirname "$0")/.." && pwd)"
scratch="${2:-/tmp/rtsoa-mutation-$name}"
rm -rf "$scratch" && mkdir -p "$scratch"
git -C "$here" archive HEAD | tar -x -C "$scratch"  # the committed tree, no caches
cd "$scratch"
export PYTHONPATH="$scratch" RTSOA_CACHE_DIR="$scratch/.cache/rtsoa" NUMBA_CACHE_DIR="$scratch/.cache/numba"
config="mutation/$name.toml"
session="$scratch/$name.sqlite"
cosmic-ray init "$config" "$session"
cr-filter-operators "$session" "$config"
python mutation/filter_functions.py "$session" "$config" --only "${MUTATION_ONLY:-}"
cosmic-ray baseline "$config"
cosmic-ray exec "$config" "$session"
cr-report "$session" --show-pending > "$scratch/$name-report.txt"
tail -n 3 "$scratch/$name-report.txt"
