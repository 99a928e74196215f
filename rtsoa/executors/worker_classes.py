"""Which worker runs what in the multithread executor: the default thread count, the class
queues each worker serves, and the nodes whose in-degree one worker alone decrements (see
docs/multithread.md, "Worker classes"). A node's class is
`rtsoa.kernels.relations.node_classes`."""

import numpy as np

from rtsoa._jit import jit
from rtsoa.executors.ready_queues import QUEUES
from rtsoa.graph.schema import WorkerClass

# How the work is shared: "classes", host (NORMAL) work by the NORMAL workers alone (the
# reference's design); "host", host work by every worker beside its own class's work;
# "launches", host work and launches by every worker (memory work stays with the memory
# worker); "auto", measured per graph (`MultithreadExecutor.sharing`).
SHARINGS = ("auto", "classes", "host", "launches")


def default_threads():
    """Threads when none are given: 2, one NORMAL and one device worker (asv BusyWork and
    RandomDag measure it; docs/multithread.md)."""
    return 2


def queues_served(threads, sharing="classes"):
    """bool[threads, QUEUES]: which class queues each worker pops from. Worker 1 is the
    MEMORY worker, worker 2 the LAUNCH worker (with two threads worker 1 serves both), the
    others NORMAL; with `sharing` "host" every worker serves the NORMAL queue too, with
    "launches" the NORMAL and the LAUNCH queues."""
    serves = np.zeros((threads, QUEUES), dtype=np.bool_)
    serves[:, WorkerClass.NORMAL] = True
    serves[1, :] = False
    serves[1, WorkerClass.MEMORY] = True
    if threads > 2:
        serves[2, :] = False
        serves[2, WorkerClass.LAUNCH] = True
    else:
        serves[1, WorkerClass.LAUNCH] = True
    if sharing in ("host", "launches"):
        serves[:, WorkerClass.NORMAL] = True
    if sharing == "launches":
        serves[:, WorkerClass.LAUNCH] = True
    return serves


@jit
def single_writer(succ_offsets, succ_targets, node_owner, nodes, plain):
    """plain[v] = every predecessor of v is run by the same single worker (node_owner >= 0)."""
    writer = np.full(plain.shape[0], -2, dtype=np.int64)  # -2: no predecessor seen yet
    for i in range(nodes.shape[0]):
        node = nodes[i]
        owner = node_owner[node]
        for e in range(succ_offsets[node], succ_offsets[node + 1]):
            target = succ_targets[e]
            if writer[target] == -2:
                writer[target] = owner
            elif writer[target] != owner:
                writer[target] = -1
    for i in range(plain.shape[0]):
        plain[i] = writer[i] >= 0
