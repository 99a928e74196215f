"""External constant memory: weights the caller holds in device memory, used in place by Init.

The reference loads a model with FileConstantMems / an outer weight memory: the caller has put
the weights into device memory and the runtime uses that memory instead of uploading copies.
Here the compute kernels read tensors from the simulated device's arena only, so the caller's
memory is memory of the model's device:

    device = rtsoa.Device(...)                           # or model_device(graph)
    handle = device.malloc(w.nbytes)
    device.view(handle, w.dtype).reshape(w.shape)[...] = w   # the caller loads the weight
    options = SessionOptions(device=device, constant_memory={"W0": device.view(handle, ...)})
    InferenceSession(model, options)

`constant_memory` maps a weight's name (its ONNX initializer name) to a view of a live block
of that device (as `device.view` returns, of the weight's dtype and shape) or to the block's
handle. Any subset of the weights may be given: Init skips the given weights' AllocMemory and
UploadConstant (their shapes are still set) and uploads the others as usual, in the order it
would run them all; the value slot of a given weight holds the caller's block. DeInit does not
free the caller's blocks: the caller owns them, and must keep them alive and unchanged while
the model is loaded.

Names. Lowering names each constant it uploads in the graph's tensors table by its tensor's
name (an initializer's, or a Constant node's or a folded value's output), so a lowered graph,
in memory or saved and loaded again, names its weights. An initializer folded at lowering into
another constant (e.g. through a Transpose), or unused, is not a weight of the lowered model;
the folded constant is, under its own name. A graph saved by an rtsoa that did not record the
names is refused (lower the model again).
"""

from typing import NamedTuple

import numpy as np

from rtsoa.device.layout import PCFG_ALIGNMENT, PLACEMENT_HBM
from rtsoa.errors import ConstantMemoryError, GraphFormatError, InvalidBlock
from rtsoa.executors import prepare_executor
from rtsoa.executors.base import bind
from rtsoa.executors.sequential import SequentialExecutor, priority_order
from rtsoa.graph.schema import GraphKind
from rtsoa.runtime.checks import numpy_dtype, show_dims


class Weight(NamedTuple):
    """A constant Init uploads (ConstTensor -> AllocMemory -> UploadConstant, DeInit free)."""

    block: int  # its MEMORY_BLOCK value
    dtype: np.dtype
    shape: tuple
    nbytes: int
    offset: int  # its bytes in the graph's constant blob
    skipped_init: tuple  # AllocMemory and UploadConstant nodes (not run for external memory)
    skipped_deinit: tuple  # the DeInit FreeMemory nodes of its block


def init_weights(graph):
    """Every weight of `graph`'s Init, in node order."""
    root = graph.root_of_graph()[graph.node_graph]
    frees = {}
    for node in np.flatnonzero(root == GraphKind.DEINIT).tolist():
        if graph.kernel_name(node) == "FreeMemory":
            frees.setdefault(int(graph.inputs(node)[0]), []).append(node)
    weights = []
    for upload in np.flatnonzero(root == GraphKind.INIT).tolist():
        if graph.kernel_name(upload) != "UploadConstant":
            continue
        block = int(graph.inputs(upload)[0])
        alloc = int(graph.value_producer[block])
        if alloc < 0 or graph.kernel_name(alloc) != "AllocMemory" or not graph.inputs(alloc).size:
            continue
        const = int(graph.value_producer[int(graph.inputs(alloc)[0])])
        if const < 0 or graph.kernel_name(const) != "ConstTensor":
            continue
        code, rank, *dims = graph.attributes(const).tolist()
        offset, length = graph.attributes(upload).tolist()[:2]
        weights.append(
            Weight(
                block=block,
                dtype=numpy_dtype(code),
                shape=tuple(dims[:rank]),
                nbytes=int(length),
                offset=int(offset),
                skipped_init=(alloc, upload),
                skipped_deinit=tuple(frees.get(block, ())),
            )
        )
    return weights


def weight_names(graph):
    """{name: Weight} of `graph`'s Init weights, named by its tensors table; None when it
    names none of them (lowered before lowering recorded weight names)."""
    weights = init_weights(graph)
    named = {}
    for weight in weights:
        info = graph.tensor_info(weight.block)
        if info is not None:
            named[info[0]] = weight
    if weights and not named:
        return None
    return named


def resolve(constant_memory, weights, device):
    """{block value: handle} of the caller's weights, every entry checked against its weight
    and `device` (ConstantMemoryError naming the weight); `weights`: `weight_names`."""

    if not isinstance(constant_memory, dict):
        raise ConstantMemoryError(
            "constant_memory must be a dict of weight name -> device array or block handle, "
            f"got {type(constant_memory).__name__}"
        )
    if weights is None:
        raise ConstantMemoryError(
            "the graph does not name its weights (it was lowered by an rtsoa that did not "
            "record their names): lower the ONNX model again, or load the model itself"
        )
    alignment = int(device.state.placement_config[PLACEMENT_HBM, PCFG_ALIGNMENT])
    resolved = {}
    owners = {}
    for name, memory in constant_memory.items():
        where = f"constant_memory[{name!r}]"
        weight = weights.get(name)
        if weight is None:
            raise ConstantMemoryError(
                f"{where}: the model has no weight {name!r} uploaded by Init (unknown, or "
                f"folded into another constant at lowering); its weights are {sorted(weights)}",
                name,
            )
        if isinstance(memory, np.ndarray):
            handle = _array_handle(where, name, memory, weight, device, alignment)
        elif isinstance(memory, int | np.integer) and not isinstance(memory, bool):
            handle = int(memory)
        else:
            raise ConstantMemoryError(
                f"{where} must be a device array (device.view) or a block handle, got "
                f"{type(memory).__name__}",
                name,
            )
        try:
            placement, _offset, size = device.location(handle)
        except (InvalidBlock, ValueError) as error:
            raise ConstantMemoryError(
                f"{where} is not a live block of the model's device: {error}", name
            ) from None
        if placement != "hbm":
            raise ConstantMemoryError(f"{where} is {placement} memory; weights live in hbm", name)
        if size < weight.nbytes:
            raise ConstantMemoryError(
                f"{where} is a block of {size} bytes; the weight needs {weight.nbytes} "
                f"({weight.dtype} {show_dims(weight.shape)})",
                name,
            )
        if handle in owners:
            raise ConstantMemoryError(
                f"{where} is the block of constant_memory[{owners[handle]!r}]; each weight "
                "needs its own block",
                name,
            )
        owners[handle] = name
        resolved[weight.block] = handle
    return resolved


def _array_handle(where, name, array, weight, device, alignment):
    """The block handle of a caller's device array, after its dtype / shape / layout checks."""

    if array.dtype != weight.dtype:
        raise ConstantMemoryError(
            f"{where} has dtype {array.dtype}, the weight is {weight.dtype}", name
        )
    if array.shape != weight.shape:
        raise ConstantMemoryError(
            f"{where} has shape {array.shape}, the weight is {show_dims(weight.shape)}", name
        )
    if not array.flags.c_contiguous:
        raise ConstantMemoryError(
            f"{where} is not C-contiguous; the kernels read a weight as one dense block", name
        )
    address = array.__array_interface__["data"][0]
    arenas = (device.state.arena_hbm, device.state.arena_p2p, device.state.arena_host)
    inside = [arena for arena in arenas if arena.shape[0] and np.may_share_memory(array, arena)]
    if not inside:
        raise ConstantMemoryError(
            f"{where} is not memory of the model's device; the kernels read device memory only, "
            "so a host array would need the upload copy constant_memory avoids: allocate the "
            "weight with device.malloc and pass device.view(handle, dtype).reshape(shape)",
            name,
        )
    if (address - inside[0].__array_interface__["data"][0]) % alignment:  # arena offset
        raise ConstantMemoryError(
            f"{where} starts at an address that is not {alignment}-byte aligned (the device's "
            "block alignment): pass the view of a whole block",
            name,
        )
    try:
        return device.handle_of(array)
    except InvalidBlock as error:
        message = f"{where}: {error}; pass the view of a whole block"
        raise ConstantMemoryError(message, name) from None


def prepare_root(graph, root, skipped, **prepare):
    """The sequential executor of `root` (Init or DeInit) without the `skipped` nodes (those
    of the caller's weights): the others run in the order the whole root would run them.

    The order is computed over the whole root and the skipped nodes are then dropped from it
    (a subsequence of a topological order is one of the nodes kept, as none of them waits for
    a skipped node). Filtering the root's nodes before ordering is wrong: Kahn's order walks
    every successor edge, so a kept ConstTensor made its skipped AllocMemory ready again, the
    skipped nodes took places in the order and the last uploads were cut off (with every
    weight external they happened to come last, so only mixes showed it)."""

    if not skipped:
        return prepare_executor(graph, "sequential", root=root, **prepare)
    binding = bind(graph, root)
    skipped = np.asarray(sorted(skipped), dtype=binding.nodes.dtype)
    for node in skipped.tolist():
        waiting = np.setdiff1d(graph.successors(node), skipped)
        if waiting.size:  # never the case for lowered weights: the order could not reach it
            raise ConstantMemoryError(
                f"node {int(waiting[0])} of {root.name} waits for node {node}, which "
                "external constant memory skips"
            )
    order = priority_order(graph, binding.nodes, binding.starts)
    if order is None:
        raise GraphFormatError(f"the {root.name} graph has a cycle", "edges", "target")
    order = order[~np.isin(order, skipped)]
    binding = binding._replace(
        nodes=np.setdiff1d(binding.nodes, skipped).astype(binding.nodes.dtype),
        starts=np.setdiff1d(binding.starts, skipped).astype(binding.starts.dtype),
    )
    return _OrderedSequential(graph, binding, order, **prepare)


class _OrderedSequential(SequentialExecutor):
    """The sequential executor on an order given to it (prepare_root's), not computed."""

    def __init__(self, graph, binding, order, **prepare):
        self._given_order = np.ascontiguousarray(order, dtype=np.int32)
        super().__init__(graph, binding, **prepare)

    def _prepare(self):
        return (self._given_order, self.cancel_words)
