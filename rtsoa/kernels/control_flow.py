"""Control flow inside one flat graph (the reference's way), and builder helpers that emit it.

If / Case:  inputs -> SwitchNotify -> one BranchPivot per branch -> branch nodes -> BranchDone
            -> WaitAnyone (in-degree clamped to 1) -> consumers.
While:      Enter -> WaitAnyone -> LoopCond -> CondSwitchNotify -> {BranchPivot -> body ->
            LoopIncrement -> BranchDone -> WaitAnyone (back edge), Exit}.

A switch kernel returns `notify(k)`, a status that carries the chosen successor's index k: the
executor then decrements only that successor, so untaken branches never run, and no state is
shared between threads. Queue executors re-arm a node's in-degree when they push it, so loop
bodies run again.
Successor order is insertion order (the CSR build is stable): branch k is successor k.
"""

from typing import NamedTuple

import numpy as np

from rtsoa.graph.schema import GraphKind, ValueKind
from rtsoa.kernels.abi import attribute, input_value, output_value, successor_count
from rtsoa.kernels.registry import REGISTRY, kernel
from rtsoa.kernels.status import notify

# -- kernels ---------------------------------------------------------------------------------


def int_output(builder, node):
    """Outputs creator of kernels that produce one INT value."""
    return [builder.add_value(kind=ValueKind.INT, producer=node)]


@kernel("SwitchNotify", control_flow=True, requires={"inputs": 1, "successors": 1})
def switch_notify(rt, node):
    """input: branch index; notifies only that branch's pivot (clamped to the branch count)."""
    branch = rt.values.slots[input_value(rt, node, 0)]
    return notify(min(max(branch, 0), successor_count(rt, node) - 1))


@kernel("CondSwitchNotify", control_flow=True, requires={"inputs": 1, "successors": 2})
def cond_switch_notify(rt, node):
    """input: condition; notifies successor 0 (loop body) if non-zero, else 1 (exit)."""
    condition = rt.values.slots[input_value(rt, node, 0)]
    return notify(np.int64(condition == 0))


@kernel("BranchPivot", control_flow=True)
def branch_pivot(rt, node):
    """Entry of one branch or loop body."""
    return np.int32(0)


@kernel("BranchDone", control_flow=True)
def branch_done(rt, node):
    """Exit of one branch or loop body."""
    return np.int32(0)


@kernel("WaitAnyone", control_flow=True)
def wait_anyone(rt, node):
    """Join that fires on the first predecessor (in-degree clamped to 1 in the graph)."""
    return np.int32(0)


@kernel(
    "Enter",
    control_flow=True,
    requires={"outputs": 1},
    outputs=int_output,
)
def enter(rt, node):
    """Loop entry: output the iteration counter, reset to 0."""
    rt.values.slots[output_value(rt, node, 0)] = 0
    return np.int32(0)


@kernel("Exit", control_flow=True)
def exit_loop(rt, node):
    """Loop exit."""
    return np.int32(0)


@kernel(
    "LoopCond",
    control_flow=True,
    requires={"inputs": 1, "outputs": 1, "attributes": 1},
    outputs=int_output,
)
def loop_cond(rt, node):
    """attrs [iterations]; input counter; output 1 while counter < iterations, else 0."""
    counter = rt.values.slots[input_value(rt, node, 0)]
    limit = attribute(rt, node, 0)
    rt.values.slots[output_value(rt, node, 0)] = np.int64(counter < limit)
    return np.int32(0)


@kernel("LoopIncrement", control_flow=True, requires={"inputs": 1})
def loop_increment(rt, node):
    """input: the counter, incremented in place."""
    rt.values.slots[input_value(rt, node, 0)] += 1
    return np.int32(0)


@kernel(
    "ConstInt",
    requires={"attributes": 1, "outputs": 1},
    outputs=int_output,
)
def const_int(rt, node):
    """attrs [value]; output: that value."""
    rt.values.slots[output_value(rt, node, 0)] = attribute(rt, node, 0)
    return np.int32(0)


# -- builder helpers -------------------------------------------------------------------------


class IfNodes(NamedTuple):
    switch: int  # the SwitchNotify node
    pivots: list  # BranchPivot per branch
    dones: list  # BranchDone per branch
    join: int  # the WaitAnyone node: consumers take an edge from it
    subgraphs: list  # BRANCH subgraph id per branch


class WhileNodes(NamedTuple):
    enter: int
    join: int  # WaitAnyone at the loop head
    cond: int  # LoopCond
    switch: int  # CondSwitchNotify
    pivot: int  # body entry
    done: int  # body exit (back edge to join)
    exit: int  # consumers take an edge from it
    counter: int  # value id of the iteration counter
    cond_graph: int
    body_graph: int


def _leaves(builder, subgraph, pivot, body, *extra):
    if body is None:
        return [pivot]
    leaves = body(builder, subgraph, pivot, *extra)
    return list(leaves) if leaves else [pivot]


def add_const_int(builder, value, graph=GraphKind.MAIN, after=()):
    """A ConstInt node; returns (node, value id)."""
    node, (out,) = REGISTRY.add_node(builder, "ConstInt", graph=graph, attributes=[int(value)])
    for before in after:
        builder.add_edge(before, node)
    return node, out


def add_if(builder, condition, branches, graph=GraphKind.MAIN, after=()):
    """If / Case on the INT value `condition` (branch index, clamped to the branch count).

    `branches`: one callable per branch, `branch(builder, subgraph, pivot) -> leaf nodes`, which
    adds its nodes in `subgraph`, each reachable from `pivot`, and returns the nodes the
    branch ends in (none: the pivot alone); None for an empty branch. Edges from `after` go to
    the switch: include the condition's producer (e.g. the node of `add_const_int`) unless it
    is already ordered before. Returns IfNodes; consumers follow `join`.
    """
    switch = builder.add_node("SwitchNotify", graph=graph, inputs=[condition])
    for before in after:
        builder.add_edge(before, switch)
    pivots, dones, subgraphs = [], [], []
    for _ in branches:
        subgraph = builder.add_subgraph(GraphKind.BRANCH, parent=graph)
        pivot = builder.add_node("BranchPivot", graph=subgraph)
        builder.add_edge(switch, pivot)  # successor k of the switch is branch k
        pivots.append(pivot)
        subgraphs.append(subgraph)
    join = builder.add_node("WaitAnyone", graph=graph, wait_anyone=True)
    for subgraph, pivot, branch in zip(subgraphs, pivots, branches, strict=True):
        leaves = _leaves(builder, subgraph, pivot, branch)
        done = builder.add_node("BranchDone", graph=subgraph)
        for leaf in leaves:
            builder.add_edge(leaf, done)
        builder.add_edge(done, join)
        dones.append(done)
    return IfNodes(switch, pivots, dones, join, subgraphs)


def add_while(builder, iterations, body=None, graph=GraphKind.MAIN, after=()):
    """A While loop running `body` `iterations` times (0 is allowed).

    `body(builder, subgraph, pivot, counter) -> leaf nodes` as for `add_if`; `counter` is the
    INT value holding the iteration number (0-based) inside the body, which nodes of the body
    may read (e.g. as an If condition). Returns WhileNodes; consumers follow `exit`.
    """
    enter, (counter,) = REGISTRY.add_node(builder, "Enter", graph=graph)
    for before in after:
        builder.add_edge(before, enter)
    cond_graph = builder.add_subgraph(GraphKind.LOOP_COND, parent=graph)
    body_graph = builder.add_subgraph(GraphKind.LOOP_BODY, parent=graph)
    join = builder.add_node("WaitAnyone", graph=graph, wait_anyone=True)
    cond, (flag,) = REGISTRY.add_node(
        builder, "LoopCond", graph=cond_graph, inputs=[counter], attributes=[int(iterations)]
    )
    switch = builder.add_node("CondSwitchNotify", graph=cond_graph, inputs=[flag])
    pivot = builder.add_node("BranchPivot", graph=body_graph)
    exit_node = builder.add_node("Exit", graph=graph)
    builder.add_edge(enter, join)
    builder.add_edge(join, cond)
    builder.add_edge(cond, switch)
    builder.add_edge(switch, pivot)  # successor 0: run the body
    builder.add_edge(switch, exit_node)  # successor 1: leave the loop
    leaves = _leaves(builder, body_graph, pivot, body, counter)
    increment = builder.add_node("LoopIncrement", graph=body_graph, inputs=[counter])
    for leaf in leaves:
        builder.add_edge(leaf, increment)
    done = builder.add_node("BranchDone", graph=body_graph)
    builder.add_edge(increment, done)
    builder.add_edge(done, join)  # the back edge
    builder.has_loops = True
    return WhileNodes(
        enter, join, cond, switch, pivot, done, exit_node, counter, cond_graph, body_graph
    )
