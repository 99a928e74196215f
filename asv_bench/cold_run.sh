#!/usr/bin/env bash
# Whole-process cold run of `rtsoa run` on a committed graph, empty Numba and rtsoa caches,
# pinned to one core; prints wall and user time. Compare two checkouts by alternating them:
#   for i in 1 2 3 4; do for t in /path/before /path/after; do asv_bench/cold_run.sh $t random-10k; done; done
# TREE: a checkout of rtsoa (its sources are imported first); GRAPH: a name under datasets/.
set -euo pipefail
tree="$(cd "$1" && pwd)"
graph="$2"
caches="$(mktemp -d /tmp/rtsoa-cold-XXXX)"
trap 'rm -rf "$caches"' EXIT
/usr/bin/time -f "$tree $graph %e s wall %U s user" env PYTHONPATH="$tree" \
    NUMBA_CACHE_DIR="$caches/numba" RTSOA_CACHE_DIR="$caches/rtsoa" taskset -c 1 python -c "
import contextlib, io
from rtsoa.cli import main
with contextlib.redirect_stdout(io.StringIO()) as report:
    status = main(['run', '$tree/datasets/$graph.rtsoa', '--no-progress'])
assert not status, report.getvalue()
"
