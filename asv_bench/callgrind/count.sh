#!/usr/bin/env bash
# Instructions a workload executes, counted by callgrind (independent of the machine's load,
# unlike times on this shared 2-core VM). Instrumentation is off during start-up and set-up
# and switched on around the measured part only, which the workload script brackets with
# marker files.
#   asv_bench/callgrind/count.sh TREE pairs K
# TREE: a checkout to import rtsoa from (a `git worktree` of the commit to measure). Prints the
# instructions of K churn rounds of 200,000 malloc + free pairs (trace on, quick lists). Numba's
# disk cache is keyed by the CPU and valgrind's emulated CPU is another one, so the first count
# of a tree compiles what it runs under valgrind (~7 minutes here) and writes those entries;
# later counts load them (~20 s). (A model workload would compile the op library under
# valgrind: hours.) The workload is asv's `MallocFreePair` from this checkout's asv_bench.
# Compare trees by the same K.
set -euo pipefail
tree="$(cd "$1" && pwd)"; workload="$2"; k="$3"
here="$(cd "$(dirname "$0")" && pwd)"
marks="$(mktemp -d)"
out="$marks/callgrind.out"
PYTHONPATH="$tree" valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
    "$(python -c 'import sys; print(sys.executable)')" "$here/workload.py" "$workload" "$k" "$marks" \
    > "$marks/log" 2>&1 &
vg=$!
until [ -e "$marks/ready" ]; do sleep 1; kill -0 $vg 2>/dev/null || { cat "$marks/log"; exit 1; }; done
callgrind_control -i on $vg > /dev/null
sleep 1
callgrind_control -z $vg > /dev/null
touch "$marks/go"
until [ -e "$marks/done" ]; do sleep 1; done
callgrind_control -i off $vg > /dev/null
touch "$marks/exit"
wait $vg
echo "$tree $workload K=$k: $(grep -o 'Collected : [0-9]*' "$marks/log" | grep -o '[0-9]*') instructions"
rm -rf "$marks"
