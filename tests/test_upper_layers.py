"""The upper layers of the package import in pipeline order, without cycles:

    ... executors <- lowering <- model API (rtsoa.runtime) <- report <- batch <- cli

Each module of a layer imports only modules of its own layer or of the layers below it, and the
import graph of these layers has no cycle, counting imports inside functions too (a cycle
held together by a function-local import breaks the package as soon as one of them moves to
the top of its file). The lower layers (graph, device, ops, kernels, executors) import none of
these. Read from the source with `ast`, so nothing here is imported.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "rtsoa"
# bottom to top; a module's layer is the first of these its dotted name starts with
UPPER = ("rtsoa.lowering", "rtsoa.runtime", "rtsoa.report", "rtsoa.batch", "rtsoa.cli")
LOWER = ("rtsoa.graph", "rtsoa.device", "rtsoa.ops", "rtsoa.kernels", "rtsoa.executors")


def _modules():
    """{dotted module name: source path} of every module of the package."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _resolve(name, modules):
    """The module `name` (a module or a name in one) belongs to, or None outside the package."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(modules):
    """{module: {imported module}}: every `import` / `from ... import` of the package."""
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets.update(f"{node.module}.{alias.name}" for alias in node.names)
        resolved = {_resolve(target, modules) for target in targets if target.startswith("rtsoa")}
        graph[name] = {target for target in resolved if target and target != name}
    return graph


def _layer(name, layers):
    for rank, prefix in enumerate(layers):
        if name == prefix or name.startswith(prefix + "."):
            return rank
    return None


def test_the_layer_order_is_known():
    modules = _modules()
    for prefix in UPPER + LOWER:
        assert prefix in modules, f"{prefix} is not a module of the package"


def test_upper_layers_import_only_their_own_layer_and_the_ones_below():
    graph = _imports(_modules())
    upward = []
    for module, targets in sorted(graph.items()):
        rank = _layer(module, UPPER)
        for target in sorted(targets):
            target_rank = _layer(target, UPPER)
            if target_rank is None:
                continue
            if rank is None and _layer(module, LOWER) is not None:
                upward.append(f"{module} (lower layers) imports {target}")
            elif rank is not None and target_rank > rank:
                upward.append(f"{module} ({UPPER[rank]}) imports {target} ({UPPER[target_rank]})")
    assert upward == []


def _cycle(graph):
    """One import cycle of `graph` ({module: {module}}) as a list of modules, or None."""
    state = {}  # module -> "open" while on the DFS path, "done" after
    path = []

    def visit(module):
        state[module] = "open"
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                return path[path.index(target) :] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def test_the_upper_layers_have_no_import_cycle():
    graph = {
        module: {target for target in targets if _layer(target, UPPER) is not None}
        for module, targets in _imports(_modules()).items()
        if _layer(module, UPPER) is not None
    }
    assert _cycle(graph) is None


def test_the_cycle_finder_finds_cycles():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
