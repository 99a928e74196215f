"""Exact Free -> Launch relations in the multithread executor: per-event costs, prepare time
and structural memory, against the reference runtime's published figures (33 ns / 44 ns /
146 ns per event, Prepare of 100,000 nodes and 1,000,000 relations in 6.313 ms with
11,300,008 B; targets: at most 33 / 44 / 146 ns, 2 ms and 11.3 MB).

The events, as the reference's TaskScheduler sees them and as rtsoa's loop runs them. Each
is timed as a jitted loop over 100,000 occurrences calling the functions `run_multithread`
calls (`rtsoa.executors.relation_state`), in a graph that has relations; the loop's other
per-node work (queues, dispatch, in-degrees) is not part of an event:
- **unrelated node event** (`track_unrelated_node_ns`): a node that is neither a related
  Free nor a related Launch is taken and succeeds: the two relation tests the loop makes
  for every node (`is_related_free` before it runs, `is_related_launch` after it
  succeeded). `track_empty_loop_ns` is the same loop without them (the measuring loop's own
  cost, included in every event figure).
- **immediate exact wait** (`track_immediate_wait_ns`): a Free with one relation whose
  Launch was already submitted in this run is taken: the tests and `on_free_ready`, which
  finds its count complete and lets it run at once (no parking).
- **one active Free / Launch occurrence** (`track_free_launch_occurrence_ns`): one
  relation whose Free is taken before its Launch ran: the Free parks (`on_free_ready` ->
  False), the Launch succeeds and reports (`on_launch_submitted`, which hands the Free
  back for re-queueing), the Free is taken again and runs (`on_free_ready` -> True). The
  queue push and pop of the re-queued Free are the loop's ordinary queue operations and
  are not included.

Prepare (`time_prepare_relation_state`, `track_prepare_relation_state_ms`): building the
executor's relation state for 100,000 nodes and 1,000,000 relations (`relation_state`: the
checks that every related Launch is in the graph being run, the reverse CSR by Launch, the
wait words), what the reference's TaskScheduler::Prepare does. The whole
`prepare_executor(..., "multithread")` of that graph (binding, order, queues, dispatch
load) is `track_prepare_executor_ms`, for information. Structural memory
(`track_structural_bytes`): bytes of the arrays the relation state holds, counted with
`nbytes`, the graph's forward CSR included (`track_structural_bytes_own` without it).

Print the figures with `cd asv_bench && python -m benchmarks.bench_multithread_relations`.
"""

import os
import statistics
import time

import numpy as np
from numba import njit

from .common import _import as import_rtsoa
from .multithread_workloads import pair_graph, relation_graph

relation_state_module = import_rtsoa("rtsoa.executors.relation_state")
is_related_free = relation_state_module.is_related_free
is_related_launch = relation_state_module.is_related_launch
on_free_ready = relation_state_module.on_free_ready
on_launch_submitted = relation_state_module.on_launch_submitted

PAIRS = 100_000  # Free / Launch pairs of the per-event workload
UNRELATED = 100_000  # nodes in no relation, after the pairs
PREPARE_NODES = 100_000
PREPARE_RELATIONS_PER_NODE = 10  # 1,000,000 relations
REPEATS = 11
REFERENCE = {"unrelated": 33.0, "immediate": 44.0, "occurrence": 146.0}


@njit(nogil=True)
def _empty_loop(relations, nodes):
    total = 0
    for i in range(nodes.shape[0]):
        total += nodes[i] & 1
    return total


@njit(nogil=True)
def _unrelated_events(relations, nodes):
    related = 0
    for i in range(nodes.shape[0]):
        node = nodes[i]
        if is_related_free(relations, node):
            related += 1
        if is_related_launch(relations, node):
            related += 1
    return related


@njit(nogil=True)
def _submit_all(relations, pairs, epoch, released):
    released_total = 0
    for i in range(pairs):
        released_total += on_launch_submitted(relations, 2 * i + 1, epoch, released)
    return released_total


@njit(nogil=True)
def _immediate_waits(relations, pairs, epoch):
    ran = 0
    for i in range(pairs):
        free = 2 * i
        if is_related_free(relations, free) and on_free_ready(relations, free, epoch):
            ran += 1
    return ran


@njit(nogil=True)
def _occurrences(relations, pairs, epoch, released):
    completed = 0
    for i in range(pairs):
        free = 2 * i
        launch = free + 1
        parked = is_related_free(relations, free) and not on_free_ready(relations, free, epoch)
        if is_related_launch(relations, launch):
            count = on_launch_submitted(relations, launch, epoch, released)
            if parked and count == 1 and released[0] == free:
                if on_free_ready(relations, free, epoch):
                    completed += 1
    return completed


def _median_seconds(run, repeats=REPEATS):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class RelationEvents:
    """ns per relation event (see the module docstring for each event's definition)."""

    def setup(self):
        graph = pair_graph(PAIRS, unrelated=UNRELATED)
        root = np.ones(graph.num_nodes, dtype=np.bool_)
        self.relations = relation_state_module.relation_state(graph, root)
        self.released = np.zeros(1, dtype=np.int32)
        self.epoch = 0
        # warm the JIT and check what each loop does
        # the unrelated nodes in a shuffled order, as a run takes them (and so that the
        # compiler cannot turn the measuring loop into vector compares of adjacent rows)
        rng = np.random.default_rng(3)
        self.unrelated = rng.permutation(np.arange(2 * PAIRS, 2 * PAIRS + UNRELATED))
        assert _unrelated_events(self.relations, self.unrelated) == 0
        _empty_loop(self.relations, self.unrelated)
        self._next_epoch()
        assert _submit_all(self.relations, PAIRS, self.epoch, self.released) == 0
        assert _immediate_waits(self.relations, PAIRS, self.epoch) == PAIRS
        self._next_epoch()
        assert _occurrences(self.relations, PAIRS, self.epoch, self.released) == PAIRS
        self.figures = None

    def _next_epoch(self):
        self.epoch += 1
        return self.epoch

    def _immediate_pass(self):
        epoch = self._next_epoch()
        _submit_all(self.relations, PAIRS, epoch, self.released)  # untimed: Launches first
        start = time.perf_counter()
        assert _immediate_waits(self.relations, PAIRS, epoch) == PAIRS
        return time.perf_counter() - start

    def _occurrence_pass(self):
        epoch = self._next_epoch()
        start = time.perf_counter()
        assert _occurrences(self.relations, PAIRS, epoch, self.released) == PAIRS
        return time.perf_counter() - start

    def _measure(self):
        if self.figures is None:
            relations, nodes = self.relations, self.unrelated
            empty = _median_seconds(lambda: _empty_loop(relations, nodes))
            unrelated = _median_seconds(lambda: _unrelated_events(relations, nodes))
            immediate = statistics.median(self._immediate_pass() for _ in range(REPEATS))
            occurrence = statistics.median(self._occurrence_pass() for _ in range(REPEATS))
            self.figures = {
                "empty": empty * 1e9 / UNRELATED,
                "unrelated": unrelated * 1e9 / UNRELATED,
                "immediate": immediate * 1e9 / PAIRS,
                "occurrence": occurrence * 1e9 / PAIRS,
            }
        return self.figures

    def track_empty_loop_ns(self):
        return self._measure()["empty"]

    def track_unrelated_node_ns(self):
        return self._measure()["unrelated"]

    def track_immediate_wait_ns(self):
        return self._measure()["immediate"]

    def track_free_launch_occurrence_ns(self):
        return self._measure()["occurrence"]

    def track_unrelated_to_reference(self):
        return self._measure()["unrelated"] / REFERENCE["unrelated"]

    def track_immediate_to_reference(self):
        return self._measure()["immediate"] / REFERENCE["immediate"]

    def track_occurrence_to_reference(self):
        return self._measure()["occurrence"] / REFERENCE["occurrence"]

    track_empty_loop_ns.unit = "ns"
    track_unrelated_node_ns.unit = "ns"
    track_immediate_wait_ns.unit = "ns"
    track_free_launch_occurrence_ns.unit = "ns"


class RelationPrepare:
    """Prepare time and structural memory for 100,000 nodes and 1,000,000 relations."""

    timeout = 600

    def setup(self):
        self.graph = relation_graph(PREPARE_NODES, PREPARE_RELATIONS_PER_NODE)
        assert self.graph.relation_targets.shape[0] == PREPARE_NODES * PREPARE_RELATIONS_PER_NODE
        self.root = np.ones(self.graph.num_nodes, dtype=np.bool_)
        state = relation_state_module.relation_state(self.graph, self.root)  # warm the JIT
        expected = np.bincount(self.graph.relation_targets, minlength=self.graph.num_nodes)
        assert np.array_equal(np.diff(state.waiter_offsets), expected)
        self.state = state

    def _prepare(self):
        return relation_state_module.relation_state(self.graph, self.root)

    def time_prepare_relation_state(self):
        self._prepare()

    def track_prepare_relation_state_ms(self):
        return _median_seconds(self._prepare) * 1e3

    def track_prepare_executor_ms(self):
        executors = import_rtsoa("rtsoa.executors")
        executors.prepare_executor(self.graph, "multithread")  # warm: dispatch, order JIT
        return (
            _median_seconds(
                lambda: executors.prepare_executor(self.graph, "multithread"), repeats=3
            )
            * 1e3
        )

    def track_structural_bytes(self):
        return relation_state_module.structural_bytes(self.state)

    def track_structural_bytes_own(self):
        return relation_state_module.structural_bytes(self.state, include_graph=False)

    track_prepare_relation_state_ms.unit = "ms"
    track_prepare_executor_ms.unit = "ms"
    track_structural_bytes.unit = "bytes"
    track_structural_bytes_own.unit = "bytes"


def main():
    """Print the figures, each against its target."""
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    events = RelationEvents()
    events.setup()
    figures = events._measure()
    print(f"measuring loop alone          {figures['empty']:7.2f} ns per node")
    for name, label in (
        ("unrelated", "unrelated node event"),
        ("immediate", "immediate exact wait"),
        ("occurrence", "Free / Launch occurrence"),
    ):
        value = figures[name]
        reference = REFERENCE[name]
        ratio = value / reference
        print(f"{label:29} {value:7.2f} ns   (reference {reference:.0f} ns, ratio {ratio:.2f})")
    prepare = RelationPrepare()
    prepare.setup()
    relations = prepare.graph.relation_targets.shape[0]
    print(
        f"prepare relation state, {prepare.graph.num_nodes:,} nodes / {relations:,} relations: "
        f"{prepare.track_prepare_relation_state_ms():.2f} ms (target 2 ms)"
    )
    print(
        f"structural memory {prepare.track_structural_bytes():,} B "
        f"({prepare.track_structural_bytes_own():,} B without the graph's forward CSR; "
        "target 11,300,000 B)"
    )
    print(f"whole prepare_executor of that graph: {prepare.track_prepare_executor_ms():.1f} ms")
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
