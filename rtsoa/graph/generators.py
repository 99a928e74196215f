"""Synthetic ExecuteGraphs: chain, random DAG, layered, and lowered-like.

Generation is vectorized numpy plus one jitted sampler, so a 1,000,000-node / 10,000,000-edge
graph takes seconds. The same (kind, nodes, options, seed) always gives the same graph.
Synthetic nodes run the cheap built-in kernels "Checksum0" .. "Checksum{K-1}"; lowered-like
graphs follow a lowered model's InferShape -> AllocMemory -> LaunchKernel -> FreeMemory pattern.

Every option is checked before anything is allocated: an out-of-range value, or one making
more nodes than int32 ids hold, raises `OptionError` naming the option, and a graph whose
generation would not fit in memory raises `TooLargeError` with the estimate.
"""

import inspect
from typing import NamedTuple

import numpy as np

from rtsoa._jit import jit
from rtsoa.abi.registry import Registry
from rtsoa.errors import OptionError
from rtsoa.graph.builder import GraphBuilder
from rtsoa.graph.schema import MAX_STREAMS, DType, Placement, ValueKind, WorkerClass
from rtsoa.limits import check_fits

LOWERED_KERNELS = ("InferShape", "AllocMemory", "LaunchKernel", "FreeMemory")
EVENTS_PER_STREAM = 64  # event ids a stream's RecordEvent nodes cycle through
MAX_NODES = (1 << 31) - 1  # node ids are int32
MAX_SEED = (1 << 63) - 1  # the jitted sampler takes int64 seeds and counts
MAX_BUFFER_BYTES = 1 << 40  # lowered buffer sizes (and the launch bytes derived from them)
# Peak bytes while generating, per node and per edge / input / output / attribute row: a
# little above what 1M-node graphs of every kind measure (90-110 per node, 13-20 per link).
BYTES_PER_NODE = 128
BYTES_PER_LINK = 24


def _option(name, value, low, high=MAX_SEED):
    """`value` as an int in [low, high] (default: what an int64 holds), else OptionError."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise OptionError(name, f"must be an integer, got {value!r}")
    value = int(value)
    if not low <= value <= high:
        raise OptionError(name, f"must be in {low:,} .. {high:,}, got {value:,}")
    return value


def _check_common(nodes, seed, kernels):
    """The options every generator takes, as ints in range."""
    return (
        _option("nodes", nodes, 1, MAX_NODES),
        _option("seed", seed, 0, MAX_SEED),
        _option("kernels", kernels, 1, 16),
    )


def _check_size(what, nodes, links, option="nodes"):
    """Refuse a graph of `nodes` nodes and `links` edge / input / output / attribute rows whose
    ids would not fit int32 or whose generation would not fit in memory."""
    if nodes > MAX_NODES:
        raise OptionError(
            option,
            f"{what} would have {nodes:,} nodes, more than a graph holds ({MAX_NODES:,}: node "
            "ids are int32)",
        )
    estimate = nodes * BYTES_PER_NODE + links * BYTES_PER_LINK
    check_fits(f"generating {what} ({nodes:,} nodes, {links:,} edges and links)", estimate)


def checksum_kernel_names(count):
    """Names of the first `count` built-in checksum kernels."""
    count = _option("kernels", count, 1, 16)
    return [f"Checksum{k}" for k in range(count)]


@jit
def _sample_predecessors(low, high, per_node, seed):
    """For each node i, min(per_node, high[i] - low[i]) distinct picks from [low[i], high[i]).

    Floyd's algorithm per node; returns (sources, targets) with sources the picks.
    """
    np.random.seed(seed)
    n = low.shape[0]
    total = 0
    for i in range(n):
        total += min(per_node, max(high[i] - low[i], 0))
    sources = np.empty(total, dtype=np.int32)
    targets = np.empty(total, dtype=np.int32)
    write = 0
    for i in range(n):
        size = max(high[i] - low[i], 0)
        count = min(per_node, size)
        start = write
        for j in range(size - count, size):
            pick = np.random.randint(0, j + 1)
            for s in range(start, write):
                if sources[s] == low[i] + pick:
                    pick = j
                    break
            sources[write] = low[i] + pick
            targets[write] = i
            write += 1
    return sources, targets


def _kernel_column(builder, rng, n, kernels):
    names = checksum_kernel_names(kernels)
    table = np.array([builder.kernel_index(name) for name in names], dtype=np.int32)
    return table[rng.integers(0, kernels, n)]


def _synthetic(name, n, sources, targets, kernels, seed):
    builder = GraphBuilder(name=name)
    rng = np.random.default_rng(seed)
    builder.add_nodes(_kernel_column(builder, rng, n, kernels))
    builder.add_edges(sources, targets)
    return builder.finalize()


def chain(nodes, seed=0, kernels=8):
    """0 -> 1 -> ... -> n-1."""
    nodes, seed, kernels = _check_common(nodes, seed, kernels)
    _check_size("a chain", nodes, nodes)
    ids = np.arange(nodes - 1, dtype=np.int32)
    return _synthetic(f"chain-{nodes}", nodes, ids, ids + 1, kernels, seed)


def random_dag(nodes, seed=0, kernels=8, edges_per_node=10, window=1000):
    """Each node draws `edges_per_node` distinct predecessors from the previous `window` nodes."""
    nodes, seed, kernels = _check_common(nodes, seed, kernels)
    window = _option("window", window, 1)
    edges_per_node = _option("edges_per_node", edges_per_node, 0)
    _check_size("a random graph", nodes, nodes * min(edges_per_node, window))
    high = np.arange(nodes, dtype=np.int64)
    low = np.maximum(high - window, 0)
    sources, targets = _sample_predecessors(low, high, edges_per_node, seed)
    return _synthetic(f"random-{nodes}", nodes, sources, targets, kernels, seed)


def layered(nodes, seed=0, kernels=8, width=100, fan_in=4, layers=None):
    """Layers of `width` nodes; each node draws `fan_in` predecessors from the layer before.

    `layers` (if given) fixes the node count to layers * width instead of `nodes`.
    """
    nodes, seed, kernels = _check_common(nodes, seed, kernels)
    width = _option("width", width, 1)
    fan_in = _option("fan_in", fan_in, 0)
    if layers is not None:
        nodes = _option("layers", layers, 1) * width
    what = f"a layered graph of width {width:,}"
    _check_size(what, nodes, nodes * min(fan_in, width), "nodes" if layers is None else "layers")
    layer = np.arange(nodes, dtype=np.int64) // width
    low = np.maximum(layer - 1, 0) * width
    high = np.where(layer > 0, layer * width, 0)
    sources, targets = _sample_predecessors(low, high, fan_in, seed)
    return _synthetic(f"layered-{nodes}", nodes, sources, targets, kernels, seed)


def lowered(
    nodes, seed=0, kernels=8, fan_in=2, window=64, streams=1, min_bytes=1, max_bytes=5 << 20
):
    """A lowered-model-like graph: per compute op InferShape -> AllocMemory -> LaunchKernel ->
    FreeMemory, where each op consumes the outputs of up to `fan_in` earlier ops (drawn from the
    previous `window` ops) and each output's Free (its guarder) runs after its last consumer.

    `kernels` is accepted for a uniform interface; the four lowered kernels are always used.
    Sizes are log-uniform in [min_bytes, max_bytes]. `streams` is at most what the simulated
    device has (MAX_STREAMS), so every generated graph runs.
    """
    nodes, seed, _ = _check_common(nodes, seed, kernels)
    fan_in = _option("fan_in", fan_in, 0)
    window = _option("window", window, 1)
    streams = _option("streams", streams, 1, MAX_STREAMS)
    max_bytes = _option("max_bytes", max_bytes, 1, MAX_BUFFER_BYTES)
    min_bytes = _option("min_bytes", min_bytes, 1, max_bytes)
    ops = max(nodes // 4, 1)
    # per op: 4 nodes, with 2+ streams up to 1 + fan_in event nodes; ~12 + 10 * fan_in links
    per_op = 4 + (1 + min(fan_in, window) if streams > 1 else 0)
    _check_size("a lowered graph", ops * per_op, ops * (12 + 10 * min(fan_in, window)))
    rng = np.random.default_rng(seed)
    events = streams * EVENTS_PER_STREAM if streams > 1 else 0
    builder = GraphBuilder(name=f"lowered-{ops * 4}", stream_count=streams, event_count=events)
    op = np.arange(ops, dtype=np.int64)
    producer_op, consumer_op = _sample_predecessors(np.maximum(op - window, 0), op, fan_in, seed)
    producer_op = producer_op.astype(np.int64)
    consumer_op = consumer_op.astype(np.int64)
    infer, alloc, launch, free = (4 * op + k for k in range(4))

    # Priorities as the reference assigns them: launch = topo index * 10 + 9, its ancestors
    # the same, a Free the max of its ancestors (its own launch and every consumer's launch).
    launch_priority = op * 10 + 9
    free_priority = launch_priority.copy()
    np.maximum.at(free_priority, producer_op, launch_priority[consumer_op])
    priority = np.stack([launch_priority, launch_priority, launch_priority, free_priority], 1)
    stream = np.repeat(op % streams, 4)
    kernel_ids = np.array([builder.kernel_index(k) for k in LOWERED_KERNELS], dtype=np.int32)
    workers = np.array(
        [WorkerClass.NORMAL, WorkerClass.MEMORY, WorkerClass.LAUNCH, WorkerClass.MEMORY],
        dtype=np.int8,
    )
    builder.add_nodes(
        np.tile(kernel_ids, ops),
        priority=priority.reshape(-1),
        stream=stream,
        worker=np.tile(workers, ops),
        compute_node=np.repeat(op, 4),
    )

    shape = builder.add_values(infer, ValueKind.SHAPE, DType.INT64, Placement.HOST) + op
    block = builder.add_values(alloc, ValueKind.MEMORY_BLOCK, DType.UINT8) + op

    # Edges: the op's own chain, then data edges between ops and guarder (Free) edges.
    builder.add_edges(
        np.concatenate(
            [infer, alloc, launch, infer[producer_op], launch[producer_op], launch[consumer_op]]
        ),
        np.concatenate(
            [alloc, launch, free, infer[consumer_op], launch[consumer_op], free[producer_op]]
        ),
    )
    builder.add_relations(free[producer_op], launch[consumer_op])
    # Inputs in argument order: a launch reads its own block first, then its producers' blocks.
    builder.add_inputs(
        np.concatenate([infer[consumer_op], alloc, launch, launch[consumer_op], free]),
        np.concatenate([shape[producer_op], shape, block, block[producer_op], block]),
    )
    nbytes = np.exp(rng.uniform(np.log(min_bytes), np.log(max_bytes), ops)).astype(np.int64)
    fan = np.bincount(consumer_op, minlength=ops)
    builder.add_attributes(np.concatenate([infer, alloc]), np.concatenate([nbytes, nbytes]))
    builder.add_attributes(
        np.concatenate([launch, launch]),
        np.concatenate([nbytes * (1 + fan), 2 * nbytes * (1 + fan)]),
    )
    if streams > 1:
        _add_cross_stream_events(
            builder, producer_op, consumer_op, launch, launch_priority, streams
        )
    return builder.finalize()


def _add_cross_stream_events(builder, producer_op, consumer_op, launch, launch_priority, streams):
    """Order every cross-stream data edge with an event: producer launch -> RecordEvent (on the
    producer's stream) -> StreamWaitEvent (on the consumer's stream) -> consumer launch.

    A stream reuses its event ids cyclically; a wait that sees a later record of the same id
    on the same stream is ordered after more work than it needs, never less.
    """
    op_stream = np.arange(launch.shape[0], dtype=np.int64) % streams
    event_of_op = (
        op_stream * EVENTS_PER_STREAM + (np.arange(launch.shape[0]) // streams) % EVENTS_PER_STREAM
    )
    cross = op_stream[producer_op] != op_stream[consumer_op]
    producers, consumers = producer_op[cross], consumer_op[cross]
    recorders = np.unique(producers)
    first = builder.add_nodes(
        np.full(recorders.shape[0], "RecordEvent"),
        priority=launch_priority[recorders],
        stream=op_stream[recorders],
        worker=WorkerClass.LAUNCH,
        compute_node=recorders,
    )
    record_node = np.full(launch.shape[0], -1, dtype=np.int64)
    record_node[recorders] = first + np.arange(recorders.shape[0])
    builder.add_attributes(record_node[recorders], event_of_op[recorders])
    first = builder.add_nodes(
        np.full(producers.shape[0], "StreamWaitEvent"),
        priority=launch_priority[consumers],
        stream=op_stream[consumers],
        worker=WorkerClass.LAUNCH,
        compute_node=consumers,
    )
    waits = first + np.arange(producers.shape[0])
    builder.add_attributes(waits, event_of_op[producers])
    builder.add_edges(
        np.concatenate([launch[recorders], record_node[producers], waits]),
        np.concatenate([record_node[recorders], waits, launch[consumers]]),
    )


class Generator(NamedTuple):
    """A registered generator: `function(nodes, seed=, kernels=, **options)`."""

    function: object
    options: dict  # option name -> default, the keyword arguments beyond nodes / seed / kernels


_COMMON = ("nodes", "seed", "kernels")


def _generator(function):
    parameters = inspect.signature(function).parameters
    options = {name: p.default for name, p in parameters.items() if name not in _COMMON}
    return Generator(function, options)


# kind -> Generator; `rtsoa gen` offers exactly these kinds and options.
GENERATORS = Registry.of(
    "generator",
    {
        "chain": _generator(chain),
        "random": _generator(random_dag),
        "layered": _generator(layered),
        "lowered": _generator(lowered),
    },
)
KINDS = tuple(GENERATORS)


def generate(kind, nodes, seed=0, kernels=8, **options):
    """Generate a graph of `kind` (one of KINDS) with about `nodes` nodes.

    Options set to None take the generator's default; an option the kind does not take is a
    ValueError, one out of range (or making more nodes than int32 ids hold) an `OptionError`
    naming it, and a graph whose generation would not fit in memory (estimated before anything
    is allocated) a `TooLargeError`.
    """
    if kind not in GENERATORS:
        raise ValueError(f"unknown generator {kind!r}; choose from {', '.join(KINDS)}")
    generator = GENERATORS[kind]
    options = {key: value for key, value in options.items() if value is not None}
    unknown = sorted(set(options) - set(generator.options))
    if unknown:
        raise ValueError(f"generator {kind!r} takes no option {unknown[0]!r}")
    return generator.function(nodes, seed=seed, kernels=kernels, **options)
