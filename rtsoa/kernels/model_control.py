"""Kernels that lowered ONNX If / Loop need besides the control-flow nodes of control_flow.py.

A tensor of a lowered model is two values, a SHAPE value (its shape row in
`rt.values.shapes`, its byte size in the slot) and a MEMORY_BLOCK value (its device block
handle). Control flow moves tensors between owners instead of copying them:

- TensorToInt: the host reads a one-element integer / bool tensor from device memory into an
  INT value (an If condition, a Loop trip count or condition), like the data-dependent shape
  kernels read Reshape's shape.
- IntToTensor: writes an INT value (the Loop's iteration counter) into an int64 scalar tensor,
  a host-to-device copy on the node's stream.
- SelectTensor: after an If's join, the tensor the branch that ran produced becomes the If's
  output (a phi node): the branch index chooses one (SHAPE, MEMORY_BLOCK) pair, whose shape
  row and block handle are moved to the node's outputs.
- MoveTensor: at the end of a Loop body, an iteration's result becomes the loop-carried value
  for the next iteration (its old block freed by a FreeMemory before).
- LoopContinue: an ONNX Loop's condition: counter < trip count and the condition in force.

A moved block has exactly one owner afterwards: the source's block slot is set to NO_BLOCK, as
FreeMemory does, so a failed run's clean-up and the leak count never see it twice. These
kernels index `rt.values.shapes` by value id; a graph that runs them without shape rows (not a
lowered model) fails with STATUS_NO_SHAPE_ROWS instead of reading past the table.
"""

import numpy as np

from rtsoa._jit import jit_inline_ir
from rtsoa.abi.dtypes import INTEGER_BYTES, INTEGER_SIGNED
from rtsoa.abi.status import (
    STATUS_INVALID_BLOCK,
    STATUS_NO_SHAPE_ROWS,
    STATUS_NOT_A_SCALAR,
    STATUS_SCALAR_DTYPE,
    STATUS_VIEW_TOO_LARGE,
)
from rtsoa.device import block_location, device_access, launch_begin
from rtsoa.device.arena import resolve_placement
from rtsoa.device.layout import PLACEMENT_HBM
from rtsoa.graph.schema import MAX_RANK, DType, Placement, ValueKind
from rtsoa.kernels.abi import (
    SHAPE_DIMS,
    SHAPE_DTYPE,
    SHAPE_RANK,
    SHAPE_WIDTH,
    input_count,
    input_value,
    output_value,
)
from rtsoa.kernels.control_flow import int_output
from rtsoa.kernels.lowered import NO_BLOCK
from rtsoa.kernels.registry import kernel

_INT64 = int(DType.INT64)


def tensor_outputs(builder, node, dtype=DType.UINT8):
    """Outputs creator of SelectTensor: a SHAPE value and a MEMORY_BLOCK value (`dtype`: the
    element type of the tensor it holds)."""
    shape = builder.add_value(
        kind=ValueKind.SHAPE, dtype=DType.INT64, placement=Placement.HOST, producer=node
    )
    block = builder.add_value(
        kind=ValueKind.MEMORY_BLOCK, dtype=dtype, placement=Placement.DEVICE_HBM, producer=node
    )
    return [shape, block]


@jit_inline_ir
def _has_rows(rt, value):
    return value < rt.values.shapes.shape[0]


@jit_inline_ir
def _move(rt, source_shape, source_block, target_shape, target_block):
    """The tensor (source_shape, source_block) becomes (target_shape, target_block)."""
    shapes = rt.values.shapes
    slots = rt.values.slots
    for column in range(SHAPE_WIDTH):
        shapes[target_shape, column] = shapes[source_shape, column]
    slots[target_shape] = slots[source_shape]
    slots[target_block] = slots[source_block]
    if source_block != target_block:
        slots[source_block] = NO_BLOCK


@kernel("TensorToInt", requires={"inputs": 2, "outputs": 1}, outputs=int_output)
def tensor_to_int(rt, node):
    """inputs: SHAPE and MEMORY_BLOCK of a one-element integer or bool tensor; output: its
    value as an INT (bool: 0 / 1). The host reads device memory, as shape kernels do."""
    shape = input_value(rt, node, 0)
    if not _has_rows(rt, shape):
        return np.int32(STATUS_NO_SHAPE_ROWS)
    shapes = rt.values.shapes
    rank = shapes[shape, SHAPE_RANK]
    if rank < 0 or rank > MAX_RANK:
        return np.int32(STATUS_NOT_A_SCALAR)
    for axis in range(rank):
        if shapes[shape, SHAPE_DIMS + axis] != 1:
            return np.int32(STATUS_NOT_A_SCALAR)
    code = shapes[shape, SHAPE_DTYPE]
    if code < 0 or code >= INTEGER_BYTES.shape[0] or INTEGER_BYTES[code] == 0:
        return np.int32(STATUS_SCALAR_DTYPE)
    nbytes = INTEGER_BYTES[code]
    placement, offset, size = block_location(rt.device, rt.values.slots[input_value(rt, node, 1)])
    if placement < 0 or resolve_placement(placement) != PLACEMENT_HBM:
        return np.int32(STATUS_INVALID_BLOCK)
    if nbytes > size:
        return np.int32(STATUS_VIEW_TOO_LARGE)
    arena = rt.device.arena_hbm
    value = np.int64(0)
    for i in range(nbytes):
        value |= np.int64(arena[offset + i]) << np.int64(8 * i)
    if INTEGER_SIGNED[code] and nbytes < 8:
        bits = np.int64(8 * nbytes)
        if (value >> (bits - 1)) & 1:
            value -= np.int64(1) << bits
    rt.values.slots[output_value(rt, node, 0)] = value
    return np.int32(0)


@kernel("IntToTensor", worker="launch", critical_section="launch", requires={"inputs": 3})
def int_to_tensor(rt, node):
    """inputs: an INT value, then SHAPE and MEMORY_BLOCK of an int64 scalar tensor: writes the
    integer into the block (a host-to-device copy on the node's stream)."""
    shape = input_value(rt, node, 1)
    if not _has_rows(rt, shape):
        return np.int32(STATUS_NO_SHAPE_ROWS)
    shapes = rt.values.shapes
    if shapes[shape, SHAPE_DTYPE] != _INT64 or shapes[shape, SHAPE_RANK] != 0:
        return np.int32(STATUS_SCALAR_DTYPE)
    handle = rt.values.slots[input_value(rt, node, 2)]
    placement, offset, size = block_location(rt.device, handle)
    if placement < 0 or resolve_placement(placement) != PLACEMENT_HBM:
        return np.int32(STATUS_INVALID_BLOCK)
    if size < 8:
        return np.int32(STATUS_VIEW_TOO_LARGE)
    stream = np.int64(rt.graph.node_stream[node])
    task = launch_begin(rt.device, stream, np.int64(8), np.int64(0))
    if task < 0:
        return np.int32(-task)
    status = device_access(rt.device, stream, handle, True)
    if status != 0:
        return np.int32(status)
    value = rt.values.slots[input_value(rt, node, 0)]
    arena = rt.device.arena_hbm
    for i in range(8):
        arena[offset + i] = np.uint8((value >> np.int64(8 * i)) & 0xFF)
    return np.int32(0)


@kernel("SelectTensor", requires={"inputs": 3, "outputs": 2}, outputs=tensor_outputs)
def select_tensor(rt, node):
    """inputs: a branch index (INT, clamped to the pairs), then one (SHAPE, MEMORY_BLOCK) pair
    per branch; outputs: SHAPE, MEMORY_BLOCK. The chosen pair's tensor is moved to the outputs
    (an If's result after its join: only the branch that ran wrote its pair)."""
    pairs = (input_count(rt, node) - 1) // 2
    branch = min(max(rt.values.slots[input_value(rt, node, 0)], 0), pairs - 1)
    source_shape = input_value(rt, node, 1 + 2 * branch)
    target_shape = output_value(rt, node, 0)
    if not (_has_rows(rt, source_shape) and _has_rows(rt, target_shape)):
        return np.int32(STATUS_NO_SHAPE_ROWS)
    source_block = input_value(rt, node, 2 + 2 * branch)
    _move(rt, source_shape, source_block, target_shape, output_value(rt, node, 1))
    return np.int32(0)


@kernel("MoveTensor", requires={"inputs": 4})
def move_tensor(rt, node):
    """inputs: SHAPE, MEMORY_BLOCK of a source tensor, then of a target tensor: the source
    becomes the target (a Loop body's result re-bound as the loop-carried value of the next
    iteration; the target's old block was freed before, the source's slot is cleared). Like
    LoopIncrement, it writes loop state it owns: the target values are its inputs."""
    source_shape = input_value(rt, node, 0)
    target_shape = input_value(rt, node, 2)
    if not (_has_rows(rt, source_shape) and _has_rows(rt, target_shape)):
        return np.int32(STATUS_NO_SHAPE_ROWS)
    _move(rt, source_shape, input_value(rt, node, 1), target_shape, input_value(rt, node, 3))
    return np.int32(0)


@kernel(
    "LoopContinue",
    control_flow=True,
    requires={"inputs": 4, "outputs": 1},
    outputs=int_output,
)
def loop_continue(rt, node):
    """inputs: iteration counter, trip count, condition before the first iteration, condition
    the body computed; output: 1 while counter < trip count and the condition in force (the
    first one at counter 0, the body's after) is non-zero, else 0 (ONNX Loop semantics)."""
    slots = rt.values.slots
    counter = slots[input_value(rt, node, 0)]
    trip = slots[input_value(rt, node, 1)]
    if counter == 0:
        condition = slots[input_value(rt, node, 2)]
    else:
        condition = slots[input_value(rt, node, 3)]
    slots[output_value(rt, node, 0)] = np.int64(counter < trip and condition != 0)
    return np.int32(0)
