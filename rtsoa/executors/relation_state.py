"""Exact Free -> Launch relations at run time: the multithread executor's generation state.

The reference runtime keeps, per schedule, an epoch and per-node
launch-submitted / free-executed / required-launch generations plus an unmet count. rtsoa
keeps one int64 *wait word* per node instead, tagged with the run's epoch so that a new run
needs no clearing (a word whose tag is not the current epoch reads as zero):

    word = epoch << 32 | PARKED_BIT (bit 31) | met (bits 0-30)

- `met` counts this run's successful submissions of the Free's related Launches; each
  Launch adds one to every waiting Free's word (`on_launch_submitted`), so a Launch related
  to several Frees counts once for each of them and never twice for one.
- `PARKED_BIT` is set by the Free itself when a worker takes it (`on_free_ready`). Both
  updates are compare-and-swaps on the same word, so they are totally ordered: if the Free
  arms first and finds `met` short of its relation count, the Launch whose add completes
  the count sees the bit and re-queues the Free (it was parked: outstanding, no worker
  blocked); if the last Launch adds first, the Free finds the count complete and runs at
  once. Exactly one of the two runs it. A re-queued Free sees its bit already set and runs.
- Only successful Launches report (the loop calls `on_launch_submitted` after a zero
  status); failed and end-of-sequence nodes advance nothing.

Memory: the forward CSR is the graph's own (`relation_offsets`, int32 `relation_targets`,
not copied); the reverse CSR by Launch (int64 offsets, int32 Frees) and the wait words are
built at prepare: 8 (n + 1) + 4 r + 8 n bytes for n nodes and r relations.
"""

from typing import NamedTuple

import numpy as np

from rtsoa._jit import jit, jit_inline_ir, jit_out_of_line
from rtsoa.abi.views import read_only
from rtsoa.device.atomics import atomic_cas, atomic_load
from rtsoa.errors import GraphFormatError

EPOCH_SHIFT = 32
PARKED_BIT = 1 << 31
MET_MASK = PARKED_BIT - 1
# Epochs are kept in 32 bits of the word; the executor clears the words before the tag wraps.
MAX_EPOCH = (1 << 31) - 1


class RelationState(NamedTuple):
    """Relations of one root graph's Frees and their per-run wait words (sized at prepare)."""

    offsets: np.ndarray  # int64[n + 1]: the graph's CSR of relations by Free node
    launches: np.ndarray  # int32[r]: the graph's related Launch of each entry
    waiter_offsets: np.ndarray  # int64[n + 1]: CSR by Launch node of the Frees naming it
    waiter_frees: np.ndarray  # int32[r]: those Frees, in increasing node order
    waits: np.ndarray  # int64[n]: wait word per Free (see the module docstring)


def structural_bytes(relations, include_graph=True):
    """Bytes of the arrays `relations` holds (the graph's forward CSR too, unless told not)."""
    own = relations.waiter_offsets.nbytes + relations.waiter_frees.nbytes
    own += relations.waits.nbytes
    if include_graph:
        own += relations.offsets.nbytes + relations.launches.nbytes
    return int(own)


@jit
def _reverse_csr(offsets, launches, root, whole, waiter_offsets, waiter_frees):
    """Fill the CSR by Launch of the root Frees' relations; returns the first entry whose
    Launch is outside the root, or -1. Counting sort: counts, prefix sum, scatter.
    The whole root's scatter is one flat pass over the entries, not a loop over Frees and
    their rows: the short inner loop's set-up per Free costs more than the entries (asv
    RelationPrepare).

    `waiter_offsets` has n + 2 rows: Launch l is counted in row l + 2, so that after the
    prefix sum row l + 1 is l's start, which the scatter advances to l's end; rows 0 .. n
    are then the CSR, with no shifting pass. `whole` (every node in the root, the usual
    case) skips the per-node and per-entry root tests. Indices go through uint64, which
    spares Numba's negative-index wraparound; a negative Launch reads as huge and fails the
    range test."""
    n = root.shape[0]
    limit = np.uint64(n)
    if whole:
        for entry in range(launches.shape[0]):
            launch = np.uint64(launches[entry])
            if launch >= limit:
                return entry
            waiter_offsets[launch + np.uint64(2)] += 1
    else:
        for free in range(n):
            if not root[free]:
                continue
            for entry in range(offsets[free], offsets[free + 1]):
                launch = np.uint64(launches[entry])
                if launch >= limit or not root[launch]:
                    return entry
                waiter_offsets[launch + np.uint64(2)] += 1
    for i in range(2, n + 2):
        waiter_offsets[i] += waiter_offsets[i - 1]
    # scatter: row l + 1 walks from l's start to l's end
    if whole:  # one flat pass over the entries, the Free advanced at its row's end
        free = 0
        row_end = offsets[1] if n else 0
        for entry in range(launches.shape[0]):
            while entry >= row_end:
                free += 1
                row_end = offsets[free + 1]
            launch = np.uint64(launches[entry]) + np.uint64(1)
            position = np.uint64(waiter_offsets[launch])
            waiter_frees[position] = free
            waiter_offsets[launch] = position + np.uint64(1)
        return -1
    for free in range(n):
        if not root[free]:
            continue
        for entry in range(offsets[free], offsets[free + 1]):
            launch = np.uint64(launches[entry]) + np.uint64(1)
            waiter_frees[waiter_offsets[launch]] = free
            waiter_offsets[launch] += 1
    return -1


def relation_state(graph, root):
    """The RelationState of the Frees in `root` (bool per node), checked: a relation whose
    Launch is outside the root raises GraphFormatError naming the Free and the Launch."""
    n = graph.num_nodes
    offsets = read_only(graph.relation_offsets)
    launches = read_only(np.ascontiguousarray(graph.relation_targets, dtype=np.int32))
    root = np.ascontiguousarray(root, dtype=np.bool_)
    if root.shape != (n,):
        raise ValueError(f"root must be a bool per node ({n}), not shape {root.shape}")
    waiter_offsets = np.zeros(n + 2, dtype=np.int64)
    whole = bool(root.all())
    if whole:
        entries_in_root = launches.shape[0]
    else:
        entries_in_root = int(np.diff(graph.relation_offsets)[root].sum()) if n else 0
    waiter_frees = np.empty(entries_in_root, dtype=np.int32)
    bad = _reverse_csr(offsets, launches, root, whole, waiter_offsets, waiter_frees)
    if bad >= 0:
        free = int(np.searchsorted(graph.relation_offsets, bad, side="right") - 1)
        raise GraphFormatError(
            f"Free node {free} is related to Launch node {int(launches[bad])}, which is not in "
            "the graph being run (relations must not cross owner graphs)",
            "relations",
            "launch",
            row=free,
        )
    return RelationState(
        offsets=offsets,
        launches=launches,
        waiter_offsets=read_only(waiter_offsets[: n + 1]),
        waiter_frees=read_only(waiter_frees),
        waits=np.zeros(n, dtype=np.int64),
    )


def no_relations(n):
    """The RelationState of a root whose every relation keeps its Launch -> Free edge (or
    that has none): the edge already runs the Free after its Launch, so there is nothing to
    wait for and the executor's loop skips the relation checks (`waiter_frees` is empty)."""
    offsets = read_only(np.zeros(n + 1, dtype=np.int64))
    empty = read_only(np.zeros(0, dtype=np.int32))
    return RelationState(
        offsets=offsets,
        launches=empty,
        waiter_offsets=offsets,
        waiter_frees=empty,
        waits=np.zeros(n, dtype=np.int64),
    )


@jit_inline_ir
def _state_of(word, epoch):
    """The PARKED_BIT | met bits of `word` in this epoch (0 for a word of an earlier run)."""
    if (word >> EPOCH_SHIFT) == epoch:
        return word & (PARKED_BIT | MET_MASK)
    return np.int64(0)


@jit_inline_ir
def is_related_free(relations, node):
    """Has `node` relations (a Free that may have to wait)? The one test every node pays."""
    return relations.offsets[node + 1] > relations.offsets[node]


@jit_inline_ir
def is_related_launch(relations, node):
    """Is `node` the Launch of some relation (it reports its submission)?"""
    return relations.waiter_offsets[node + 1] > relations.waiter_offsets[node]


@jit_out_of_line
def on_free_ready(relations, free, epoch):
    """A worker took `free`, which has relations: True to run it now (every related Launch
    of this run was submitted, or its last one re-queued it), False if it is now parked (the
    Launch that completes its count re-queues it; see the module docstring)."""
    need = relations.offsets[free + 1] - relations.offsets[free]
    waits = relations.waits
    while True:
        old = atomic_load(waits, free)
        state = _state_of(old, epoch)
        if state & PARKED_BIT:
            return True  # re-queued by its last related Launch
        new = (epoch << EPOCH_SHIFT) | state | PARKED_BIT
        if atomic_cas(waits, free, old, new) == old:
            return (state & MET_MASK) == need


@jit_out_of_line
def on_launch_submitted(relations, launch, epoch, released):
    """`launch` succeeded: count it for every Free related to it; the parked Frees whose
    count it completed are written to `released` (sized for the largest row). Returns how
    many were written (the caller queues them)."""
    waits = relations.waits
    offsets = relations.offsets
    count = 0
    for w in range(relations.waiter_offsets[launch], relations.waiter_offsets[launch + 1]):
        free = relations.waiter_frees[w]
        need = offsets[free + 1] - offsets[free]
        while True:
            old = atomic_load(waits, free)
            state = _state_of(old, epoch) + 1
            if atomic_cas(waits, free, old, (epoch << EPOCH_SHIFT) | state) == old:
                break
        if (state & PARKED_BIT) and (state & MET_MASK) == need:
            released[count] = free
            count += 1
    return np.int64(count)


def largest_waiter_row(relations):
    """The most Frees related to one Launch (the size `on_launch_submitted` may write)."""
    if relations.waiter_frees.shape[0] == 0:
        return 0
    return int(np.diff(relations.waiter_offsets).max())
