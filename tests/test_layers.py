"""rtsoa's import graph is a DAG in the pipeline order of its layers (read with `ast`, nothing
is imported): abi <- graph <- device <- ops <- kernels <- executors <- lowering <- model API
(rtsoa/runtime) <- batch <- cli. Each layer imports only itself and the layers below it;
function-local imports are for optional dependencies only. Known exceptions are listed below,
each with why; the lists only ever shrink."""

import ast
import pathlib
import sys

import rtsoa

PACKAGE = pathlib.Path(rtsoa.__file__).parent

# Bottom to top. A module belongs to the first layer one of whose prefixes it starts with.
LAYERS = (
    ("abi", ("rtsoa.abi",)),  # statuses, dtypes, operand layout, views: imports nothing of rtsoa
    ("toolchain", ("rtsoa._numba", "rtsoa._jit", "rtsoa._bundle", "rtsoa._version")),
    ("errors", ("rtsoa.errors", "rtsoa.limits")),
    ("graph", ("rtsoa.graph",)),
    ("device", ("rtsoa.device",)),
    ("ops", ("rtsoa.ops",)),
    ("host", ("rtsoa.host",)),  # host steps: string ops in Python (below lowering and runtime)
    ("kernels", ("rtsoa.kernels",)),
    ("executors", ("rtsoa.executors",)),
    ("lowering", ("rtsoa.lowering",)),
    ("model API", ("rtsoa.runtime", "rtsoa.backend")),
    ("report", ("rtsoa.report",)),  # run summaries the CLI and batch both print or record
    ("batch", ("rtsoa.batch",)),
    ("cli", ("rtsoa.cli", "rtsoa.caches", "rtsoa.prewarm")),
    ("package", ("rtsoa.testing", "rtsoa")),  # the public namespace and test helpers
)

# Optional dependencies, imported where they are used so rtsoa runs without them.
OPTIONAL = (
    "onnx",
    "google",  # protobuf, onnx's
    "onnxruntime",
    "dask",
    "distributed",
    "matplotlib",
    "PIL",  # Pillow, ImageDecoder's: imported when a model uses the op
    "polars",
    "psutil",
)

# Imports that go up the layers, each an edge (importer, imported). They shrink to nothing as
# the upper layers and the op dispatch are reorganised.
UPWARD = set()

# Edges inside a layer that close a cycle, if one must be kept for a while; removing them
# leaves the graph acyclic. None today: keep it that way.
CYCLE_EDGES = set()

# Function-local imports of rtsoa modules kept on purpose: importing module -> why.
LOCAL = {
    # cold start: the helper process and `rtsoa run` import only what the run needs
    "rtsoa.prewarm": "cold start imports only what a run needs",
    "rtsoa.caches": "`rtsoa cache` must not compile or import the op library",
    # the package's lazy attributes (the model API on first use)
    "rtsoa": "the model API's classes load on first use",
    # startup: importing the lowering, the model API and batch at the top of the CLI's
    # modules would cost every `rtsoa` start (rtsoa.cli.model's docstring)
    "rtsoa.cli.batch": "CLI startup cost",
    "rtsoa.cli.model": "CLI startup cost",
    "rtsoa.cli.compile": "CLI startup cost",
    "rtsoa.testing.conformance_worker": "test helper: imports the model API when a case runs",
    "rtsoa.testing.conformance": "test helper: imports the model API when a case runs",
    "rtsoa.testing.workloads": "test helper: builds graphs when asked",
}
# Function-local imports of other modules that are not optional dependencies, by importer.
LOCAL_OTHER = {
    "rtsoa._numba.caching",  # Numba internals, imported where each patch is installed
    "rtsoa._numba.compat",
    "rtsoa._numba.dispatcher",
    "rtsoa._numba.events",
    "rtsoa._numba.flags",
    "rtsoa._numba.messages",
    "rtsoa._numba.symbols",
    "rtsoa.prewarm",  # cold start
    "rtsoa.ops.parts",  # SciPy's BLAS, loaded at the first pooled run (scipy.linalg: 0.3 s)
}


def _modules():
    """{module name: (path, is package)} of every .py file of rtsoa."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        modules[".".join(parts)] = (path, is_package)
    return modules


MODULES = _modules()


def _resolve(name):
    """The rtsoa module `name` refers to (`rtsoa.kernels.abi.make_runtime` -> the module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module):
    """(imported name, is function-local, line) of every import in `module`."""
    path, is_package = MODULES[module]
    package = module if is_package else module.rpartition(".")[0]
    found = []

    def visit(node, local):
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((alias.name, inner, child.lineno) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                found.extend((f"{base}.{alias.name}", inner, child.lineno) for alias in child.names)
            else:
                visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def _edges():
    """{(importer, imported rtsoa module)}: module-level and function-level imports."""
    edges = set()
    for module in MODULES:
        for name, _, _ in _imports(module):
            if name == "rtsoa" or name.startswith("rtsoa."):
                target = _resolve(name)
                if target is not None and target != module:
                    edges.add((module, target))
    return edges


def layer_of(module):
    """Index of `module`'s layer in LAYERS."""
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
            return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def _cycle(edges):
    """One cycle of the directed graph `edges` as a list of modules, or None."""
    successors = {}
    for source, target in edges:
        successors.setdefault(source, []).append(target)
    state = {}  # module -> 1 on the current path, 2 done
    path = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(MODULES)))

    def visit(module):
        state[module] = 1
        path.append(module)
        for target in successors.get(module, ()):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(successors):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_the_abi_layer_imports_nothing_else_of_rtsoa():
    found = [
        f"{module}:{line}: {name}"
        for module in MODULES
        if layer_of(module) == 0
        for name, _, line in _imports(module)
        if (name == "rtsoa" or name.startswith("rtsoa.")) and layer_of(_resolve(name)) != 0
    ]
    assert not found, "rtsoa.abi is the leaf layer:\n" + "\n".join(found)


def test_each_layer_imports_only_the_layers_below_it():
    upward = {
        (source, target) for source, target in _edges() if layer_of(target) > layer_of(source)
    }
    unexpected = sorted(upward - UPWARD)
    assert not unexpected, "imports up the layers:\n" + "\n".join(
        f"{source} ({LAYERS[layer_of(source)][0]}) -> {target} ({LAYERS[layer_of(target)][0]})"
        for source, target in unexpected
    )
    stale = sorted(UPWARD - upward)
    assert not stale, f"fixed, remove them from UPWARD: {stale}"


def test_the_import_graph_has_no_cycle():
    edges = _edges()
    cycle = _cycle(edges - CYCLE_EDGES - UPWARD)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
    stale = sorted(CYCLE_EDGES - edges)
    assert not stale, f"gone, remove them from CYCLE_EDGES: {stale}"


def test_function_local_imports_are_for_optional_dependencies_only():
    found = []
    for module in sorted(MODULES):
        for name, local, line in _imports(module):
            if not local or name.split(".")[0] in OPTIONAL:
                continue
            is_rtsoa = name == "rtsoa" or name.startswith("rtsoa.")
            if module in (LOCAL if is_rtsoa else LOCAL_OTHER):
                continue
            found.append(f"{module}:{line}: {name}")
    assert not found, "function-local imports of required modules:\n" + "\n".join(found)


def test_the_checks_catch_what_they_look_for():
    assert _cycle({("a", "b"), ("b", "c"), ("c", "a")}) == ["a", "b", "c", "a"]
    assert _cycle({("a", "b"), ("b", "c"), ("a", "c")}) is None
    assert layer_of("rtsoa.abi.status") < layer_of("rtsoa.graph.schema")
    assert layer_of("rtsoa.device.device") < layer_of("rtsoa.kernels.abi")
    assert layer_of("rtsoa.runtime.model") < layer_of("rtsoa.batch.jobs") < layer_of("rtsoa.cli")
    assert _resolve("rtsoa.kernels.abi.make_runtime") == "rtsoa.kernels.abi"
