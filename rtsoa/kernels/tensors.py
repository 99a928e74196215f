"""Typed tensor views over device arena memory, for kernels compiled without reference counting.

`block_view(rt.device, handle, (rows, cols), np.float32)` returns `(status, array)`: a
C-contiguous array of that dtype and shape (a tuple of integers of one type) over the live
block's bytes in its arena. The array is built in LLVM with no meminfo (like `numba.carray`),
so creating, passing and dropping it costs no reference counting, and a kernel compiled with
`_nrt=False` (the default) may use it. Numba refuses to return a new array from a function
compiled without the reference-counting runtime, which is why the view is an intrinsic, not an
ordinary jitted function.

Safety: the view never reaches past the block. When the handle is stale or freed, a dimension
is negative, or the shape needs more bytes than the block was allocated with, `status` is
non-zero and the array has zero elements (every dimension 0), so a kernel that ignores the
status still cannot touch other memory. The view is valid until the block is freed.
"""

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from rtsoa._jit import jit_inline_ir
from rtsoa._numba.arrays import make_array, populate_array
from rtsoa.device import block_location
from rtsoa.device.arena import resolve_placement
from rtsoa.device.layout import PLACEMENT_HOST, PLACEMENT_P2P
from rtsoa.device.status import STATUS_INVALID_BLOCK, STATUS_VIEW_TOO_LARGE


def _element_type(dtype):
    if isinstance(dtype, types.DTypeSpec):
        return dtype.dtype
    if isinstance(dtype, types.NumberClass):
        return dtype.instance_type
    return None


def _dimensions(shape):
    if isinstance(shape, types.UniTuple) and isinstance(shape.dtype, types.Integer):
        return len(shape)
    return None


@intrinsic
def itemsize(typingctx, dtype):
    """Bytes per element of a dtype (np.float32 -> 4), a compile-time constant."""
    element = _element_type(dtype)
    if element is None:
        return None

    def codegen(context, builder, signature, arguments):
        size = context.get_abi_sizeof(context.get_data_type(element))
        return ir.Constant(ir.IntType(64), size)

    return types.int64(dtype), codegen


@intrinsic
def _array_over(typingctx, arena, offset, keep, shape, dtype):
    """An array of `shape` and `dtype` over arena bytes [offset, ...), every dimension
    multiplied by `keep` (0 or 1); no meminfo, no bounds check (the caller checked)."""
    element = _element_type(dtype)
    ndim = _dimensions(shape)
    if element is None or ndim is None or not isinstance(arena, types.Array):
        return None
    result = types.Array(element, ndim, "C")
    signature = result(arena, offset, keep, shape, dtype)

    def codegen(context, builder, signature, arguments):
        arena_value, offset_value, keep_value, shape_value, _ = arguments
        base = make_array(signature.args[0])(context, builder, arena_value)
        intp = context.get_value_type(types.intp)
        element_type = context.get_data_type(element)
        data = builder.gep(base.data, [offset_value])
        pointer = builder.bitcast(data, element_type.as_pointer())
        shape_type = signature.args[3]
        keep_intp = context.cast(builder, keep_value, signature.args[2], types.intp)
        raw = [
            context.cast(
                builder, builder.extract_value(shape_value, i), shape_type.dtype, types.intp
            )
            for i in range(ndim)
        ]
        dims = [builder.mul(dim, keep_intp) for dim in raw]
        size = context.get_abi_sizeof(element_type)
        strides = []
        stride = ir.Constant(intp, size)
        for dim in reversed(dims):
            strides.append(stride)
            stride = builder.mul(stride, dim)
        strides.reverse()
        out = make_array(result)(context, builder)
        populate_array(
            out,
            data=pointer,
            shape=cgutils.pack_array(builder, dims),
            strides=cgutils.pack_array(builder, strides),
            itemsize=ir.Constant(intp, size),
            meminfo=None,
        )
        return out._getvalue()

    return signature, codegen


@jit_inline_ir
def block_view(dev, handle, shape, dtype):
    """(status, view): `shape` elements of `dtype` over block `handle`; see the module doc."""
    placement, offset, nbytes = block_location(dev, handle)
    size = itemsize(dtype)
    # one dimension at a time, so a huge shape cannot overflow the element count
    fits = placement >= 0
    count = np.int64(1)
    for dim in shape:
        if dim < 0 or (dim > 0 and count > nbytes // size // dim):
            fits = False
        count *= max(dim, 0)
    status = np.int32(0)
    if placement < 0:
        status = np.int32(STATUS_INVALID_BLOCK)
        placement = PLACEMENT_HOST
        offset = np.int64(0)
    elif not fits:
        status = np.int32(STATUS_VIEW_TOO_LARGE)
    keep = np.int64(1 if status == 0 else 0)
    resolved = resolve_placement(placement)
    if resolved == PLACEMENT_HOST:
        return status, _array_over(dev.arena_host, offset, keep, shape, dtype)
    if resolved == PLACEMENT_P2P:
        return status, _array_over(dev.arena_p2p, offset, keep, shape, dtype)
    return status, _array_over(dev.arena_hbm, offset, keep, shape, dtype)


@jit_inline_ir
def value_view(rt, value, shape, dtype):
    """(status, view) of the block whose handle is in value `value`'s slot."""
    return block_view(rt.device, rt.values.slots[value], shape, dtype)
