"""Kernels of lowered models: shape inference, constants and launches of real compute ops.

A compute node of a model (Conv, Add, ...) is lowered to

    OpInferShape -> AllocMemory (one per output) -> OpLaunch -> ... FreeMemory (after the last use)

and a weight to ConstTensor -> AllocMemory -> UploadConstant in Init (FreeMemory in DeInit).
A tensor is two values: a SHAPE value (its run-time rank, dtype and dims in
`rt.values.shapes`, its byte size in the slot) and a MEMORY_BLOCK value (its device block).

Both op kernels carry the same attributes: a header (op code, inputs, outputs, a bit mask of the
present inputs, a bit mask of the inputs whose data shape inference reads) and then the op's
own slots (`rtsoa.ops`). Their inputs:
- OpInferShape: the SHAPE value of every present input, then the MEMORY_BLOCK value of every
  present data input; outputs: one SHAPE value per op output.
- OpLaunch: (MEMORY_BLOCK, SHAPE) of every present input, then of every output; no outputs.

Each op is called through its own compiled entry, whose address is `rt.graph.functions[code]`
(`rtsoa.ops.library.op_addresses`, `rtsoa.ops.call`; 0 for an op the graph was not prepared
with, which the kernels refuse). Every
index a kernel takes from attributes or shapes is checked here first (the graph may come from
a hostile file): counts against the node's input / output lists, ranks against MAX_RANK,
sizes against int64 and the blocks' sizes.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_inline_llvm
from rtsoa.abi.dtypes import ITEMSIZE
from rtsoa.abi.status import (
    STATUS_BAD_OP_NODE,
    STATUS_BAD_TENSOR,
    STATUS_CONSTANT_RANGE,
    STATUS_INVALID_BLOCK,
    STATUS_NO_OP_LIBRARY,
    STATUS_SHAPE_CHANGED,
    STATUS_VIEW_TOO_LARGE,
)
from rtsoa.device import block_location, device_access, launch_begin
from rtsoa.device.arena import resolve_placement
from rtsoa.device.layout import PLACEMENT_HBM
from rtsoa.device.lock import device_enter, device_exit
from rtsoa.graph.schema import MAX_RANK, DType, Placement, ValueKind
from rtsoa.kernels.abi import (
    SHAPE_DIMS,
    SHAPE_DTYPE,
    SHAPE_RANK,
    attribute,
    input_count,
    input_value,
    output_value,
)
from rtsoa.kernels.checksum import FOLD_SALTS, fold
from rtsoa.kernels.registry import kernel
from rtsoa.ops.abi import ENTRY_COLUMN, MAX_OP_OPERANDS, MAX_OPERANDS, RESULT_ROW, ROW_WIDTH
from rtsoa.ops.call import call_entry

HEADER = 5  # op code, inputs, outputs, present mask, data mask
_INT64_MAX = np.iinfo(np.int64).max
_INFER_SALT = np.uint64(FOLD_SALTS["OpInferShape"])
_LAUNCH_SALT = np.uint64(FOLD_SALTS["OpLaunch"])
_CONST_SALT = np.uint64(FOLD_SALTS["ConstTensor"])
_UPLOAD_SALT = np.uint64(FOLD_SALTS["UploadConstant"])


def shape_outputs(builder, node, count=1):
    """Outputs creator of OpInferShape / ConstTensor: `count` SHAPE values."""
    return [
        builder.add_value(
            kind=ValueKind.SHAPE, dtype=DType.INT64, placement=Placement.HOST, producer=node
        )
        for _ in range(count)
    ]


@jit_inline_ir
def _popcount(mask):
    count = np.int64(0)
    while mask:
        count += mask & 1
        mask >>= 1
    return count


@jit_inline_ir
def _bits(mask, limit):
    """Is `mask` a non-negative bit mask below 2**limit?"""
    return mask >= 0 and (limit >= 63 or mask < (np.int64(1) << limit))


@jit_inline_llvm
def _size_of(shapes, value):
    """Byte size of a shape row (rank, dtype, dims), or -1 if malformed or overflowing."""
    rank = shapes[value, SHAPE_RANK]
    code = shapes[value, SHAPE_DTYPE]
    if rank < 0 or rank > MAX_RANK or code <= 0 or code >= ITEMSIZE.shape[0]:
        return np.int64(-1)
    size = ITEMSIZE[code]
    for axis in range(rank):
        d = shapes[value, SHAPE_DIMS + axis]
        if d < 0:
            return np.int64(-1)
        if d > 0 and size > _INT64_MAX // d:
            return np.int64(-1)
        size *= d
    return size


@jit_inline_llvm
def _fill_row(rt, table, row, shape_value, block_value):
    """Operand row `row` from a SHAPE value and (block_value >= 0) its block; a status."""
    shapes = rt.values.shapes
    nbytes = _size_of(shapes, shape_value)
    if nbytes < 0:
        return np.int32(STATUS_BAD_TENSOR)
    table[row, 0] = -1
    table[row, 1] = nbytes
    table[row, 2] = shapes[shape_value, SHAPE_DTYPE]
    rank = shapes[shape_value, SHAPE_RANK]
    table[row, 3] = rank
    for axis in range(MAX_RANK):
        table[row, 4 + axis] = shapes[shape_value, SHAPE_DIMS + axis] if axis < rank else 0
    if block_value >= 0:
        placement, offset, size = block_location(rt.device, rt.values.slots[block_value])
        if placement < 0:
            return np.int32(STATUS_INVALID_BLOCK)
        if resolve_placement(placement) != PLACEMENT_HBM:
            return np.int32(STATUS_INVALID_BLOCK)
        if nbytes > size:
            return np.int32(STATUS_VIEW_TOO_LARGE)
        table[row, 0] = offset
    return np.int32(0)


@jit_inline_ir
def _absent_row(table, row):
    table[row, 0] = -1
    table[row, 1] = 0
    table[row, 2] = 0
    table[row, 3] = -1


@jit_inline_llvm
def _header(rt, node, inputs_needed_per_present, per_data, extra_inputs):
    """(code, n_in, n_out, present, data, status) with the counts checked against the node."""
    code = attribute(rt, node, 0)
    n_in = attribute(rt, node, 1)
    n_out = attribute(rt, node, 2)
    present = attribute(rt, node, 3)
    data = attribute(rt, node, 4)
    ok = n_in >= 0 and n_out >= 0 and n_in + n_out <= MAX_OP_OPERANDS
    ok = ok and _bits(present, n_in) and _bits(data, n_in)
    if ok:
        data = data & present
        expected = inputs_needed_per_present * _popcount(present) + per_data * _popcount(data)
        ok = input_count(rt, node) == expected + extra_inputs * n_out
    status = np.int32(0) if ok else np.int32(STATUS_BAD_OP_NODE)
    return code, n_in, n_out, present, data, status


@jit_inline_ir
def _attrs(rt, node):
    start = rt.graph.attr_offsets[node] + HEADER
    end = rt.graph.attr_offsets[node + 1]
    return rt.graph.attr_pool[start:end], rt.graph.attr_float[start:end]


@jit_inline_ir
def _op_entry(rt, code):
    """The entry address of op `code` in the graph's table; 0 (refused) outside it."""
    if code < 0 or code >= rt.graph.functions.shape[0]:
        return np.int64(0)
    return rt.graph.functions[code]


@kernel(
    "OpInferShape",
    requires={"attributes": HEADER},
    outputs=shape_outputs,
)
def op_infer_shape(rt, node):
    """Run-time shape inference of one op: output SHAPE values from the inputs' shapes (and the
    data of its data inputs)."""
    code, n_in, n_out, present, data, status = _header(rt, node, 1, 1, 0)
    if status != 0:
        return status
    if rt.graph.output_offsets[node + 1] - rt.graph.output_offsets[node] != n_out:
        return np.int32(STATUS_BAD_OP_NODE)
    address = _op_entry(rt, code)
    if address == 0:
        return np.int32(STATUS_NO_OP_LIBRARY)
    table = rt.worker.table
    shape_k = 0
    data_k = _popcount(present)
    for row in range(n_in):
        if (present >> row) & 1 == 0:
            _absent_row(table, row)
            continue
        block = np.int64(-1)
        if (data >> row) & 1:
            block = np.int64(input_value(rt, node, data_k))
            data_k += 1
        status = _fill_row(rt, table, row, input_value(rt, node, shape_k), block)
        shape_k += 1
        if status != 0:
            return status
    for k in range(n_out):
        table[n_in + k, 3] = 0
        table[n_in + k, 2] = 0
    attrs, fattrs = _attrs(rt, node)
    status = call_entry(address, 0, code, rt.device.arena_hbm, table, attrs, fattrs, n_in, n_out)
    if status != 0:
        return status
    shapes = rt.values.shapes
    for k in range(n_out):
        value = output_value(rt, node, k)
        row = n_in + k
        rank = table[row, 3]
        if rank < 0 or rank > MAX_RANK:
            return np.int32(STATUS_BAD_TENSOR)
        shapes[value, SHAPE_RANK] = rank
        shapes[value, SHAPE_DTYPE] = table[row, 2]
        for axis in range(MAX_RANK):
            shapes[value, SHAPE_DIMS + axis] = table[row, 4 + axis] if axis < rank else 0
        nbytes = _size_of(shapes, value)
        if nbytes < 0:
            return np.int32(STATUS_BAD_TENSOR)
        rt.values.slots[value] = nbytes
    return fold(rt, node, _INFER_SALT)


@kernel("OpInferShapeKept", requires={"attributes": HEADER}, outputs=shape_outputs)
def op_infer_shape_kept(rt, node):
    """OpInferShape in a rerun of Main whose inputs have the shapes of the run before, in a
    model whose every shape follows from its input shapes alone (`rtsoa.runtime.kept`): the
    output SHAPE values that run wrote still hold, so this folds the checksum as
    OpInferShape does and nothing else. The launch still checks the shapes against the op."""
    return fold(rt, node, _INFER_SALT)


@kernel(
    "OpLaunch",
    worker="launch",
    critical_section="launch",
    requires={"attributes": HEADER},
    locks_device=True,
)
def op_launch(rt, node):
    """Compute one op on the device arena: declares its reads and writes to the hazard checker
    and advances its stream by the cost model (bytes moved, the op's flop estimate). Only those
    device calls hold the device lock (`rtsoa.device.lock`): a multithread run computes
    several launches at once."""
    code, n_in, n_out, present, data, status = _header(rt, node, 2, 0, 2)
    if status != 0:
        return status
    address = _op_entry(rt, code)
    if address == 0:
        return np.int32(STATUS_NO_OP_LIBRARY)
    table = rt.worker.table
    k = 0
    moved = np.int64(0)
    for row in range(n_in + n_out):
        if row < n_in and (present >> row) & 1 == 0:
            _absent_row(table, row)
            continue
        status = _fill_row(rt, table, row, input_value(rt, node, k + 1), input_value(rt, node, k))
        k += 2
        if status != 0:
            return status
        moved += table[row, 1]
    attrs, fattrs = _attrs(rt, node)
    arena = rt.device.arena_hbm
    # the output shapes the blocks were allocated for must be what the op infers now
    check = rt.worker.check_table
    for row in range(n_in + n_out):
        for column in range(ROW_WIDTH):
            check[row, column] = table[row, column]
    check[MAX_OPERANDS, 0] = 0
    status = call_entry(address, 0, code, arena, check, attrs, fattrs, n_in, n_out)
    if status != 0:
        return status
    for row in range(n_in, n_in + n_out):
        for column in range(2, ROW_WIDTH):
            if check[row, column] != table[row, column]:
                return np.int32(STATUS_SHAPE_CHANGED)
    flops = max(check[MAX_OPERANDS, 0], np.int64(0))
    stream = np.int64(rt.graph.node_stream[node])
    device_enter(rt.device)  # the device calls only: the computation runs outside the lock
    task = launch_begin(rt.device, stream, moved, flops)
    status = np.int32(0) if task >= 0 else np.int32(-task)
    k = 0
    for row in range(n_in + n_out):
        if status != 0:
            break
        if row < n_in and (present >> row) & 1 == 0:
            continue
        handle = rt.values.slots[input_value(rt, node, k)]
        status = np.int32(device_access(rt.device, stream, handle, row >= n_in))
        k += 2
    device_exit(rt.device)
    if status != 0:
        return status
    table[RESULT_ROW, ENTRY_COLUMN] = address  # for an op that shares its parts (ops.parts)
    status = call_entry(address, 1, code, arena, table, attrs, fattrs, n_in, n_out)
    if status != 0:
        return status
    return fold(rt, node, _LAUNCH_SALT)


@kernel("ConstTensor", requires={"attributes": 2, "outputs": 1}, outputs=shape_outputs)
def const_tensor(rt, node):
    """attrs [dtype, rank, dims...]: its output SHAPE value gets that shape (weights, constants,
    and tensors whose shape is known at lowering time)."""
    rank = attribute(rt, node, 1)
    count = rt.graph.attr_offsets[node + 1] - rt.graph.attr_offsets[node]
    if rank < 0 or rank > MAX_RANK or count < 2 + rank:
        return np.int32(STATUS_BAD_TENSOR)
    value = output_value(rt, node, 0)
    shapes = rt.values.shapes
    shapes[value, SHAPE_RANK] = rank
    shapes[value, SHAPE_DTYPE] = attribute(rt, node, 0)
    for axis in range(MAX_RANK):
        shapes[value, SHAPE_DIMS + axis] = attribute(rt, node, 2 + axis) if axis < rank else 0
    nbytes = _size_of(shapes, value)
    if nbytes < 0:
        return np.int32(STATUS_BAD_TENSOR)
    rt.values.slots[value] = nbytes
    return fold(rt, node, _CONST_SALT)


@kernel(
    "UploadConstant",
    worker="launch",
    critical_section="launch",
    requires={"attributes": 2, "inputs": 1},
)
def upload_constant(rt, node):
    """attrs [offset, nbytes] in the graph's constant blob; input: the block to copy them to
    (host-to-device copy on the node's stream)."""
    offset = attribute(rt, node, 0)
    nbytes = attribute(rt, node, 1)
    blob = rt.graph.constants
    if offset < 0 or nbytes < 0 or offset > blob.shape[0] or nbytes > blob.shape[0] - offset:
        return np.int32(STATUS_CONSTANT_RANGE)
    handle = rt.values.slots[input_value(rt, node, 0)]
    placement, start, size = block_location(rt.device, handle)
    if placement < 0 or resolve_placement(placement) != PLACEMENT_HBM:
        return np.int32(STATUS_INVALID_BLOCK)
    if nbytes > size:
        return np.int32(STATUS_CONSTANT_RANGE)
    stream = np.int64(rt.graph.node_stream[node])
    task = launch_begin(rt.device, stream, nbytes, np.int64(0))
    if task < 0:
        return np.int32(-task)
    status = device_access(rt.device, stream, handle, True)
    if status != 0:
        return np.int32(status)
    arena = rt.device.arena_hbm
    for i in range(nbytes):
        arena[start + i] = blob[offset + i]
    return fold(rt, node, _UPLOAD_SALT)
