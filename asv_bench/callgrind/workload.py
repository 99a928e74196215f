"""Workloads for count.sh: set up, signal `ready`, wait for `go`, run K rounds, signal `done`,
wait for `exit` (count.sh switches callgrind's instrumentation on and off in between)."""

import os
import sys
import time

import numpy as np


def pairs():
    from rtsoa.device import AllocatorConfig, Device
    from rtsoa.testing.workloads import churn_fill, churn_run, churn_workload

    initial, victims, sizes = churn_workload(0, 200_000)
    device = Device(hbm_bytes=4 << 30, trace=True, allocator=AllocatorConfig())
    handles = np.zeros(initial.size, dtype=np.int64)
    state = device.state
    assert churn_fill(state, 0, initial, handles, 0) == 0
    assert churn_run(state, 0, victims, sizes, handles, 0) == 0
    return lambda: churn_run(state, 0, victims, sizes, handles, 0)


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
