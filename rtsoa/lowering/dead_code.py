"""Pass 3 of lowering, dead code: op calls nothing reachable from the graph outputs reads are
dropped."""


def drop_dead(graph, calls):
    """Pass 3: the calls whose outputs reach a graph output."""
    needed = set(graph.outputs)
    kept = []
    for call in reversed(calls):
        if any(name in needed for name in call.outputs if name):
            kept.append(call)
            needed.update(name for name in call.inputs if name)
    kept.reverse()
    return kept
