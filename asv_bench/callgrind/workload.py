"""Workloads for count.sh: set up, signal `ready`, wait for `go`, run K rounds, signal `done`,
wait for `exit` (count.sh switches callgrind's instrumentation on and off in between).

`pairs` is the asv benchmark `MallocFreePair` (trace on, quick lists), set up by the
benchmark itself: one round is its `time_pairs`."""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # asv_bench: the benchmarks


def pairs():
    from benchmarks.bench_device import MallocFreePair

    benchmark = MallocFreePair()
    benchmark.setup(True, True)
    return lambda: benchmark.time_pairs(True, True)


def main():
    name, rounds, marks = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    step = {"pairs": pairs}[name]()

    def mark(what):
        open(os.path.join(marks, what), "w").close()

    def wait(what):
        while not os.path.exists(os.path.join(marks, what)):
            time.sleep(0.05)

    mark("ready")
    wait("go")
    for _ in range(rounds):
        step()
    mark("done")
    wait("exit")


if __name__ == "__main__":
    main()
