"""The multithread executor's plans: the loop's state as two bundles, and how a choice of who
serves which class queue (`worker_classes.queues_served`) becomes those bundles.

A `Plan` is one way to share the work among the workers: each worker's `WorkerState` and the
`RunState` they share. An executor holds a plan per sharing ("classes", and "host" where the
root has host work); the plans share every array of the run state but `plain` and
`node_critical`, which follow from who serves what. docs/multithread.md has the algorithm.
"""

from typing import NamedTuple

import numpy as np

from rtsoa.abi.views import read_only
from rtsoa.executors.admission import Admission, private_admissions
from rtsoa.executors.ready_queues import QUEUES, RANK_SHIFT
from rtsoa.executors.relation_state import RelationState, largest_waiter_row
from rtsoa.executors.worker_classes import queues_served, single_writer
from rtsoa.kernels.abi import line_zeros


class WorkerState(NamedTuple):
    """What one worker's loop reads and writes alone (one per worker, sized at prepare)."""

    index: np.int64  # the worker's number (0: the calling thread)
    serves: np.ndarray  # bool[QUEUES]: the class queues it pops
    sole: np.ndarray  # bool[QUEUES]: those it alone pops (their nodes go to its private batch)
    released: np.ndarray  # int32[largest waiter row]: the Frees one of its Launches re-queues
    bits: np.ndarray  # int64[ranks / 64 + 2]: the private batch, a bit per rank (no lock)
    admission: Admission  # its admission window: one all workers share, or its own
    alone: np.bool_  # it alone runs every root node, the single writer of every in-degree
    straight: np.bool_  # alone and no relations: it runs the rank order, rank by rank
    # while another worker idles, it queues a shared successor it released rather than run
    # it next itself ("launches": the memory worker hands the launches its allocations
    # release to idle workers and stays free for the next allocation)
    hands_off: np.bool_
    by_class: np.ndarray  # int64[QUEUES]: the nodes of each class queue it ran in this run


class RunState(NamedTuple):
    """What the workers of one executor share (sized at prepare, re-armed by `arm_run`)."""

    order: np.ndarray  # int32[ranks]: the node of each rank (read-only)
    ranks: np.ndarray  # int32[n]: the rank of each node (read-only)
    keys: np.ndarray  # int64[n]: heap key rank << RANK_SHIFT | node (read-only)
    node_queue: np.ndarray  # int8[n]: the class queue of each node (read-only)
    node_critical: np.ndarray  # bool[n]: runs holding the device lock (read-only)
    in_degree: np.ndarray  # int32[n]: live in-degrees, from the template at each arming
    plain: np.ndarray  # bool[n]: one worker alone decrements it (a plain store, no atomic)
    heaps: np.ndarray  # int64[QUEUES, largest class + 2]: the class queues' heaps
    control: np.ndarray  # int64[CONTROL_SIZE]: the control words (ready_queues)
    relations: RelationState  # Free -> Launch relations without edges, and their wait words
    max_steps: np.int64  # the step limit per worker


class Plan(NamedTuple):
    """One way to share the work among the workers: what each serves and the state that
    follows from it (`MultithreadExecutor._plan`)."""

    sharing: str  # "classes", "host" or "launches" (see MultithreadExecutor)
    workers: list  # WorkerState per worker
    run_state: RunState  # shares every array but `plain` and `node_critical` with other plans
    working: list  # bool per worker: does it serve a queue holding a node of the root?
    shares_device: bool  # several workers call into the device: its lock is taken (device.lock)


def make_plan(graph, nodes, threads, sharing, shared, admission, section, locks, straight):
    """The Plan of `sharing` for `threads` workers running `nodes` (the root) of `graph`,
    over the `shared` RunState's arrays. `admission`: the window all workers would share
    (`release_keys`); `section`: bool per node, its kernel has a critical section; `locks`:
    bool per node, its kernel takes the device lock itself (`KernelInfo.locks_device`);
    `straight`: let a worker alone run the rank order straight (`MultithreadExecutor`)."""
    n = graph.num_nodes
    nodes = np.ascontiguousarray(nodes, dtype=np.int32)
    classes = shared.node_queue
    serves = queues_served(threads, sharing)
    # private batches: a worker that alone serves a queue keeps the nodes of it it
    # releases itself (each node is kept at most once per run)
    sole = serves & (serves.sum(axis=0) == 1)
    root_queues = np.unique(classes[nodes])
    # Two threads, each class queue holding root nodes with one server (by classes): each
    # worker's window is its own, with no mark or `low` shared between cores per node
    single_servers = bool(np.all(serves[:, root_queues].sum(axis=0) == 1))
    if threads == 2 and admission.window != 0 and single_servers:
        rank = shared.keys >> RANK_SHIFT
        admissions = private_admissions(admission, rank, classes, serves)
    else:
        admissions = [admission] * threads
    owner = np.full(QUEUES, -1, dtype=np.int64)
    for queue in range(QUEUES):
        servers = np.flatnonzero(serves[:, queue])
        owner[queue] = servers[0] if servers.shape[0] == 1 else -1
    plain = np.zeros(n, dtype=np.bool_)
    single_writer(graph.succ_offsets, graph.succ_targets, owner[classes], nodes, plain)
    # a worker that alone runs the whole root, every in-degree with it as single writer
    single = plain | (np.asarray(graph.in_degree) == 0)  # start nodes have no writer
    has_relations = shared.relations.waiter_frees.shape[0] > 0
    rows = max(largest_waiter_row(shared.relations), 1)
    # a bit per rank, and a spare word (the take's scan stops at a set bit, so never
    # reads past the last rank's word; the spare only guards a miscount)
    words = (int(admission.count) >> 6) + 2
    workers = []
    for index in range(threads):
        alone = bool(np.all(sole[index, root_queues])) and bool(np.all(single[nodes]))
        workers.append(
            WorkerState(
                index=np.int64(index),
                serves=serves[index],
                sole=sole[index],
                released=line_zeros(rows, np.int32),
                bits=line_zeros(words if sole[index].any() else 1, np.int64),
                admission=admissions[index],
                alone=np.bool_(alone),
                straight=np.bool_(alone and straight and not has_relations),
                hands_off=np.bool_(sharing == "launches"),
                by_class=line_zeros(QUEUES, np.int64),
            )
        )
    # a worker that serves no queue holding a node of the root never has work: it is not
    # started (a spinning thread would only take its core, or its core's sibling, from
    # the others)
    working = [index == 0 or bool(serves[index, root_queues].any()) for index in range(len(serves))]
    # The device lock orders the device calls of different workers; where one worker serves
    # every class queue holding a critical node (two threads by classes: the device worker),
    # they never overlap and the lock is not taken. Where it is, the executor holds it around
    # a critical kernel, but a kernel that locks the device itself (an op launch) holds it
    # only around its device calls.
    critical_queues = np.unique(classes[nodes][section[nodes]])
    shares_device = int(serves[:, critical_queues].any(axis=1).sum()) > 1
    section = section & ~locks if shares_device else np.zeros_like(section)
    run_state = shared._replace(node_critical=read_only(section), plain=read_only(plain))
    return Plan(sharing, workers, run_state, working, shares_device)


def nodes_per_class(plan, nodes_per_worker, threads):
    """int64[threads, QUEUES]: the nodes of each class queue each worker of `plan` ran in its
    last run (`nodes_per_worker` each; zeros without a plan). A worker running the rank order
    straight does not count them as it goes (one load less per node): its classes are those
    of the first ranks, as many as it ran."""
    counts = np.zeros((threads, QUEUES), dtype=np.int64)
    if plan is None:
        return counts
    run = plan.run_state
    for index, worker in enumerate(plan.workers):
        ran = nodes_per_worker[index]
        if worker.straight and ran:
            ranks = np.asarray(run.order)[:ran]
            counts[index] = np.bincount(np.asarray(run.node_queue)[ranks], minlength=QUEUES)
        else:
            counts[index] = worker.by_class
    return counts
