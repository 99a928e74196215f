"""Pass 3 of lowering, dead code: op calls nothing reachable from the graph outputs reads are
dropped (and, for If / Loop subgraphs, from the names a body returns)."""


def live_calls(calls, needed):
    """The calls whose outputs reach a name of `needed`, in their order."""
    needed = set(needed)
    kept = []
    for call in reversed(calls):
        if any(name in needed for name in call.outputs if name):
            kept.append(call)
            needed.update(name for name in call.inputs if name)
    kept.reverse()
    return kept


def drop_dead(graph, calls):
    """Pass 3: the calls whose outputs reach a graph output."""
    return live_calls(calls, graph.outputs)
