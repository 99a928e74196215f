"""Compiling and loading op entries: only the ops a model uses, in parallel on a cold cache.

Each op has its own compiled entry (`rtsoa.ops.entry`). `load_ops(names)` returns their
addresses in this process, compiling what Numba's disk cache does not hold yet; `op_addresses`
makes a graph's table of them (what the op kernels call, by the graph's op code), and lowering
loads the ops of a model before it folds constants. So a model pays for the ops it contains,
and the op library as a whole (`--all`) is only ever compiled on request. An op registered
with `variants=True` also has one entry per dtype of its input 0, named `<op>[<dtype>]`
(`MatMul[float32]`, see `rtsoa.ops.entry`): where all of a graph's (or a fold's) uses of the op
have one dtype, `entry_for` picks that variant unless the generic entry is the one already
compiled, so a cold model compiles only its dtypes and a warm cache is reused as it is.
Three promises:

* **No compile twice.** An op's entry is imported under an exclusive lock on its own file
  (`<cache dir>/ops/<module>.lock`), so processes that start together (batch workers, test
  runs, a user's shells) wait for the one compiling it and then load its machine code from
  Numba's disk cache; a marker file next to it records that it compiled.
* **Every core.** When more than one op is cold, they are split into `jobs` shares, whole op
  modules together (the ops of one module share most of their out-of-line helpers), and
  `jobs - 1` helper processes compile the other shares while this one compiles its own; then
  every entry loads from the cache. A helper that fails costs nothing but time: what it did
  not compile is compiled here. Without Numba's disk cache (caching switched off) helpers would
  compile in vain, so none are started.
* **Progress.** On a terminal a progress bar shows how many ops are compiled and which one
  this process compiles (`tqdm`, on stderr); elsewhere nothing is printed.

    python -m rtsoa.ops [--all] [--jobs N]   # `rtsoa compile` also takes models
"""

import argparse
import contextlib
import fcntl
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from rtsoa._jit import cache_dir, jit_out_of_line
from rtsoa._numba.caching import RtsoaCacheImpl, _probe, is_cached
from rtsoa.abi.dtypes import DTYPE_OF_NAME, DTYPES
from rtsoa.errors import RtsoaError, UnknownOpError
from rtsoa.graph.atomic_save import write_text
from rtsoa.graph.op_table import op_rows
from rtsoa.ops.abi import COL_DTYPE, MAX_OPERANDS, MODE_INFER, ROW_WIDTH
from rtsoa.ops.call import call_entry
from rtsoa.ops.entry import check_variant, entry_key, entry_source, import_entry, module_name
from rtsoa.ops.registry import OPS, compiled_op_names

_guard = threading.Lock()  # threads of one process (the flock is per open file)
_addresses = {}  # entry id (op name, or `<op>[<dtype>]`) -> its address in this process
_VARIANT = re.compile(r"(?P<op>[^\[\]]+)\[(?P<dtype>\w+)\]")
INFER_ONLY = ":infer"  # the suffix of an infer-only entry's id (`infer_entry`)
_POLL_SECONDS = 0.25  # how often the progress bar counts the helpers' markers


_load_hooks = [None]  # (pause, resume) around loading new entries (`on_entry_loads`), or None
_busy = [0]  # cores another compile of this run occupies (`cores_in_use`)
_busy_guard = threading.Lock()


@contextlib.contextmanager
def cores_in_use(count):
    """Within the block, `count` of the cores `compile_jobs` counts are taken by other work of
    this run (a cold start's helper process), so a cold op compile starts fewer helpers."""
    with _busy_guard:
        _busy[0] += count
    try:
        yield
    finally:
        with _busy_guard:
            _busy[0] -= count


def on_entry_loads(pause, resume):
    """Call `pause()` before `load_ops` loads entries new to this process (compiling the cold
    ones, or waiting for another process compiling them), and `resume()` after: a batch
    worker's --timeout does not count loading machine code (`rtsoa.batch.worker.on_warm_up`).
    None, None: no hooks."""
    _load_hooks[0] = None if pause is None else (pause, resume)


@contextlib.contextmanager
def _loading(missing):
    hooks = _load_hooks[0]
    if not missing or hooks is None:
        yield
        return
    pause, resume = hooks
    pause()
    try:
        yield
    finally:
        resume()


def compile_jobs():
    """Processes a cold compile uses: $RTSOA_COMPILE_JOBS, else the usable cores (at most 4),
    less the cores `cores_in_use` reserves (at least 1)."""
    configured = os.environ.get("RTSOA_COMPILE_JOBS", "").strip()
    if configured:
        try:
            jobs = int(configured)
        except ValueError:
            raise ValueError(f"RTSOA_COMPILE_JOBS={configured!r} is not a whole number") from None
        if jobs < 1:
            raise ValueError(f"RTSOA_COMPILE_JOBS={configured!r} must be at least 1")
    else:
        jobs = min(4, len(os.sched_getaffinity(0)))
    return max(1, jobs - _busy[0])


def ops_dir():
    """Where the generated entry modules (and their markers and locks) go: $RTSOA_OPS_DIR,
    else `<rtsoa cache dir>/ops`."""
    configured = os.environ.get("RTSOA_OPS_DIR")
    return Path(configured) if configured else cache_dir() / "ops"


def entries_numba_dir():
    """Where Numba's cache keeps the op entries' machine code (`ops_dir()/__pycache__`, or a
    directory under NUMBA_CACHE_DIR), as Numba's locators choose it for the entry modules
    there (Numba's locators need an existing source file: without one, nothing is cached)."""
    directory = ops_dir()
    sources = sorted(directory.glob("rtsoa_op_*.py")) if directory.is_dir() else []
    for locator_class in RtsoaCacheImpl._locator_classes if sources else ():
        locator = locator_class.from_function(_probe, os.fspath(sources[0]))
        if locator is not None:
            return Path(locator.get_cache_path())
    return directory / "__pycache__"


def _definition(name):
    definition = OPS.get(name)
    if definition is None:
        raise UnknownOpError(f"op {name!r} is not registered in this rtsoa")
    return definition


def _parse(entry):
    """(OpDef, DType code or None) of entry id `entry` (an infer-only entry's: its op's, None);
    UnknownOpError for an op not registered or a variant it does not have."""
    if entry.endswith(INFER_ONLY):
        return _definition(entry[: -len(INFER_ONLY)]), None
    match = _VARIANT.fullmatch(entry)
    if match is None:
        return _definition(entry), None
    definition = _definition(match["op"])
    kind = DTYPE_OF_NAME.get(match["dtype"])
    if kind is None:
        raise UnknownOpError(f"entry {entry!r}: {match['dtype']!r} is not an rtsoa dtype")
    try:
        check_variant(definition, kind)
    except ValueError as error:
        raise UnknownOpError(f"entry {entry!r}: {error}") from None
    return definition, kind


def entry_id(name, kind=None):
    """The id of op `name`'s generic entry (`kind` None) or of its variant for DType `kind`."""
    return name if kind is None else f"{name}[{DTYPES[kind].name}]"


def infer_entry(name):
    """The id of op `name`'s infer-only entry (`rtsoa.ops.entry`)."""
    return f"{name}{INFER_ONLY}"


def entry_for_infer(name, kinds):
    """The entry lowering runs op `name`'s shape inference with: the entry `entry_for` picks
    if it is loaded or compiled (no new compile), else the infer-only one, whose compile
    leaves out the compute (an op fused away, or never folded, needs no compute)."""
    entry = entry_for(name, kinds)
    if entry in _addresses or is_compiled(entry):
        return entry
    return infer_entry(name)


def entry_for(name, kinds):
    """The entry op `name` should run with when its input 0 has the DType codes `kinds` (an
    iterable; codes unknown to rtsoa count as none): the variant of the one dtype, if the op
    has variants and that dtype, unless the generic entry is loaded or compiled and the
    variant is not (so a warm cache is used as it is); else the generic entry."""
    definition = _definition(name)
    kinds = set(kinds)
    if not definition.variants or len(kinds) != 1:
        return name
    kind = kinds.pop()
    if kind not in definition.dtypes[0]:
        return name  # the generic entry refuses it with the op's own status
    variant = entry_id(name, kind)
    if variant in _addresses or is_compiled(variant):
        return variant
    if name in _addresses or is_compiled(name):
        return name
    return variant


_modules = {}  # (entry id, id of its OpDef) -> (OpDef, module name): its key hashed once


def _files(entry):
    """(module name, source path, marker path, lock path) of entry `entry`."""
    definition, kind = _parse(entry)
    known = _modules.get((entry, id(definition)))
    if known is None or known[0] is not definition:
        module = module_name(definition, kind, entry.endswith(INFER_ONLY))
        known = _modules[entry, id(definition)] = (definition, module)
    module = known[1]
    directory = ops_dir()
    return module, *(directory / f"{module}{suffix}" for suffix in (".py", ".compiled", ".lock"))


def is_compiled(entry):
    """Whether entry `entry` (an op name, or `<op>[<dtype>]`) compiled for these sources, this
    Numba and this rtsoa (its marker exists): loading it then reads Numba's disk cache instead
    of compiling."""
    return _files(entry)[2].exists()


def all_entries(names=None):
    """Entry ids of ops `names` (default: every registered op): each op's generic entry, then
    its variants by dtype code."""
    entries = []
    for name in compiled_op_names() if names is None else names:
        definition = _definition(name)
        entries.append(name)
        if definition.variants:
            entries.extend(entry_id(name, kind) for kind in sorted(definition.dtypes[0]))
    return entries


def _load(entry):
    """Import entry `entry`'s module under its file lock (compiling it if needed); its
    address."""
    module_name, source, marker, lock_path = _files(entry)
    if not source.exists():
        definition, kind = _parse(entry)
        infer_only = entry.endswith(INFER_ONLY)
        key = entry_key(definition, kind, infer_only)
        write_text(source, entry_source(definition, key, kind, infer_only))
    with open(lock_path, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        module = import_entry(source, module_name)
        marker.touch()
    return int(module.entry.address)


def _caching():
    """Whether op functions are cached on disk at all (helpers would compile in vain)."""
    return is_cached(next(iter(OPS.values())).compute)


def load_ops(names, jobs=None, progress=None):
    """{entry id: address} of entries `names` (op names, or `<op>[<dtype>]` variants), each
    compiled (or loaded) on first use; cold ones are compiled by `jobs` processes (default
    `compile_jobs()`; 1: this process alone). `progress`: show a bar (default: when stderr is
    a terminal and anything is cold). UnknownOpError names an op that is not registered."""
    names = sorted(set(names))
    for name in names:
        _parse(name)
    with _guard:
        missing = [name for name in names if name not in _addresses]
        cold = [name for name in missing if not is_compiled(name)]
        if progress is None:
            progress = bool(cold) and sys.stderr.isatty()
        jobs = compile_jobs() if jobs is None else jobs
        with _loading(missing), _Progress(cold, progress) as bar:
            if jobs > 1 and len(cold) > 1 and _caching():
                helpers = _start_helpers(shares(cold, jobs)[1:])
                try:
                    for name in shares(cold, jobs)[0]:
                        bar.compiling(name)
                        _addresses[name] = _load(name)
                finally:
                    for helper in helpers:
                        helper.wait()
            for name in missing:
                if name not in _addresses:
                    bar.compiling(name)
                    _addresses[name] = _load(name)
        return {name: _addresses[name] for name in names}


def op_address(name):
    """The address of entry `name` (an op name, or `<op>[<dtype>]`) in this process (compiled
    or loaded on first use)."""
    return load_ops([name])[name]


def op_addresses(graph):
    """The op entry table of `graph` (int64, one row per row of its ops table): the address of
    the entry of each op its op nodes run (`graph_entries`), compiled or loaded now; 0 for
    rows no node uses, which the op kernels refuse. Kernels index it with an op node's op
    slot."""
    entries = graph_entries(graph)
    addresses = load_ops(entries.values())
    table = np.zeros(max(len(graph.op_names), 1), dtype=np.int64)
    for row, entry in entries.items():
        table[row] = addresses[entry]
    return table


def graph_entries(graph):
    """{ops row: entry id} of the ops `graph`'s op nodes run: `entry_for` each op with the
    dtypes the graph gives its input 0 at its launches."""
    nodes, rows = op_rows(graph)
    kinds = _launch_kinds(graph, nodes, rows)
    return {
        int(row): entry_for(graph.op_names[row], kinds.get(int(row), ()))
        for row in np.unique(rows).tolist()
    }


def _launch_kinds(graph, nodes, rows):
    """{ops row: set of DType codes} of input 0 at the OpLaunch nodes of each row
    (`_input_kinds`); a row without launches is absent."""
    if "OpLaunch" not in graph.kernel_names or nodes.shape[0] == 0:
        return {}
    launches = graph.node_kernel[nodes] == graph.kernel_names.index("OpLaunch")
    rows = rows[launches]
    pairs = np.unique(np.stack([rows, _input_kinds(graph, nodes[launches])]), axis=1)
    kinds = {}
    for row, kind in pairs.T.tolist():
        kinds.setdefault(row, set()).add(kind)
    return kinds


def _input_kinds(graph, launches):
    """The DType code of input 0 of each OpLaunch node `launches` (its first (MEMORY_BLOCK,
    SHAPE) pair), or -1 where the graph does not say it for sure. A weight's block holds raw
    bytes (UINT8): its dtype is the ConstTensor attribute of its SHAPE value. Otherwise the
    block's own dtype, trusted only for a graph input or an AllocMemory output (what lowering
    types); any other producer (a branch's select, a graph built by hand), or an index outside
    the graph's tables (an unvalidated file), gives -1, so the op runs its generic entry."""
    offsets = np.asarray(graph.input_offsets, dtype=np.int64)
    values = np.asarray(graph.input_values, dtype=np.int64)
    inside = (launches >= 0) & (launches < offsets.shape[0] - 1)
    start = np.where(inside, offsets[np.where(inside, launches, 0)], -1)
    end = np.where(inside, offsets[np.where(inside, launches + 1, 0)], -1)
    ok = (start >= 0) & (start + 2 <= end) & (start + 2 <= values.shape[0])
    block = np.where(ok, values[np.where(ok, start, 0)], -1)
    shape = np.where(ok, values[np.where(ok, start + 1, 0)], -1)
    count = graph.value_dtype.shape[0]
    ok &= (block >= 0) & (block < count) & (shape >= 0) & (shape < count)
    block, shape = np.where(ok, block, 0), np.where(ok, shape, 0)
    shape_producer, shape_kernel = _producers(graph, shape)
    block_producer, block_kernel = _producers(graph, block)
    kinds = np.where(
        ok & ((block_producer < 0) | (block_kernel == _kernel_index(graph, "AllocMemory"))),
        graph.value_dtype[block].astype(np.int64),
        -1,
    )
    weight = ok & (shape_kernel == _kernel_index(graph, "ConstTensor"))
    attr_offsets, pool = graph.attr_offsets, graph.attr_pool
    first = np.where(weight, attr_offsets[np.where(weight, shape_producer, 0)], 0)
    following = np.where(weight, attr_offsets[np.where(weight, shape_producer + 1, 0)], 0)
    has_dtype = weight & (first < following) & (first < pool.shape[0])
    kinds = np.where(weight, -1, kinds)
    kinds[has_dtype] = pool[first[has_dtype]]
    return kinds


def _producers(graph, values):
    """(producer node, its kernel id) of each of `values`: the producer as the graph says (-1:
    no node makes it), the kernel -1 where there is none or it lies outside the tables."""
    producer = np.asarray(graph.value_producer, dtype=np.int64)[values]
    valid = (producer >= 0) & (producer < graph.node_kernel.shape[0])
    kernel = np.where(valid, graph.node_kernel[np.where(valid, producer, 0)], -1).astype(np.int64)
    kernel = np.where((kernel >= 0) & (kernel < len(graph.kernel_names)), kernel, -1)
    return producer, kernel


def _kernel_index(graph, name):
    """The kernels-table row of kernel `name` in `graph` (-2, matching no node, if absent)."""
    return graph.kernel_names.index(name) if name in graph.kernel_names else -2


def op_library(jobs=None):
    """Load every registered op's generic entry (compiling what is cold, on `jobs`
    processes); returns {op name: entry address}."""
    return load_ops(compiled_op_names(), jobs)


def shares(names, jobs):
    """Split op names into `jobs` lists, the ops of one module together (they share most of
    their out-of-line helpers, and a helper two processes both need is compiled by both).
    Modules go, largest first, to the list with the fewest ops."""
    modules = {}
    for name in names:
        definition, _ = _parse(name)
        module = getattr(definition.compute, "py_func", definition.compute).__module__
        modules.setdefault(module, []).append(name)
    split = [[] for _ in range(jobs)]
    for module in sorted(modules, key=lambda module: (-len(modules[module]), module)):
        min(split, key=len).extend(modules[module])
    return split


def _start_helpers(lists):
    helpers = []
    for names in lists:
        if not names:
            continue
        command = [sys.executable, "-m", "rtsoa.ops", "--jobs", "1", "--ops", *names]
        try:
            helpers.append(
                subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        except OSError:
            pass  # this process compiles that share itself
    return helpers


class _Progress:
    """A tqdm bar over the cold ops (counted by their markers, helpers' included), or nothing."""

    def __init__(self, cold, enabled):
        self.cold = cold
        self.enabled = enabled and bool(cold)
        self.bar = None
        self.stop = threading.Event()
        self.thread = None

    def __enter__(self):
        if self.enabled:
            self.bar = tqdm(total=len(self.cold), unit="op", desc="compiling ops", leave=True)
            self.thread = threading.Thread(target=self._poll, daemon=True)
            self.thread.start()
        return self

    def compiling(self, name):
        if self.bar is not None:
            self.bar.set_postfix_str(name)

    def _count(self):
        return sum(is_compiled(name) for name in self.cold)

    def _poll(self):
        while not self.stop.wait(_POLL_SECONDS):
            self.bar.n = self._count()
            self.bar.refresh()

    def __exit__(self, *exc):
        if self.bar is not None:
            self.stop.set()
            self.thread.join()
            self.bar.n = self._count()
            self.bar.set_postfix_str("")
            self.bar.close()
        return False


@jit_out_of_line
def _run_op(address, mode, code, arena, table, attrs, n_in, n_out):
    return call_entry(address, mode, code, arena, table, attrs, attrs.view(np.float64), n_in, n_out)


def run_op(mode, code, arena, table, attrs, n_in, n_out, entry=None):
    """Python-side call of op `code`'s entry (`rtsoa.ops.compiled_op_names()` position;
    compiled or loaded on first use; the variant of input 0's dtype where `entry_for` picks
    one, for MODE_INFER the one `entry_for_infer` picks, or the entry id `entry` of that op):
    lowering's static shapes and constant folding.
    `arena` a uint8 array, `table` from `abi.new_table()`, `attrs` int64 slots."""
    names = compiled_op_names()
    if not 0 <= code < len(names):
        raise ValueError(f"op code {code} is outside the {len(names)} codes of this rtsoa")
    arena = np.ascontiguousarray(arena, dtype=np.uint8).reshape(-1)
    if arena.size == 0:
        arena = np.zeros(8, dtype=np.uint8)
    attrs = np.ascontiguousarray(attrs, dtype=np.int64)
    if attrs.size == 0:
        attrs = np.zeros(1, dtype=np.int64)
    if table.shape != (MAX_OPERANDS + 1, ROW_WIDTH) or table.dtype != np.int64:
        raise ValueError("table must come from rtsoa.ops.abi.new_table()")
    if not (0 <= n_in and 0 <= n_out and n_in + n_out <= MAX_OPERANDS):
        raise ValueError(f"{n_in} inputs + {n_out} outputs exceed {MAX_OPERANDS} operands")
    if entry is None:
        choose = entry_for_infer if mode == MODE_INFER else entry_for
        entry = choose(names[code], (int(table[0, COL_DTYPE]),) if n_in > 0 else ())
    elif _parse(entry)[0].name != names[code]:
        raise ValueError(f"entry {entry!r} is not an entry of op {names[code]!r}")
    return int(
        _run_op(
            np.int64(op_address(entry)),
            np.int64(mode),
            np.int64(code),
            arena,
            table,
            attrs,
            np.int64(n_in),
            np.int64(n_out),
        )
    )


def add_arguments(parser):
    """`--all` and `--jobs N` (and `--ops`, what helper processes are given)."""
    parser.add_argument("--all", action="store_true", help="every registered op (the default)")
    parser.add_argument("--jobs", type=int, default=None, help="processes for a cold compile")
    parser.add_argument("--ops", nargs="+", default=None, help=argparse.SUPPRESS)  # a helper


def run(args, names=None):
    """Compile (or load) op entries ahead of time: `names`, or every registered op."""
    if args.jobs is not None and args.jobs < 1:
        raise ValueError("--jobs must be at least 1")
    if args.ops is not None:  # a helper of load_ops
        load_ops(args.ops, jobs=1, progress=False)
        return 0
    start = time.perf_counter()
    names = set(compiled_op_names() if names is None else names)
    cold = sum(not is_compiled(name) for name in names)
    load_ops(names, args.jobs)
    elapsed = time.perf_counter() - start
    print(f"{len(names)} ops ready ({cold} compiled) in {elapsed:.1f} s; cache: {ops_dir()}")
    return 0


def main(argv=None):
    """`python -m rtsoa.ops [--all] [--jobs N]`: `rtsoa compile` without models."""
    parser = argparse.ArgumentParser(prog="python -m rtsoa.ops", description=__doc__)
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except (ValueError, OSError, RtsoaError) as error:
        parser.error(str(error))
