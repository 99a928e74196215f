"""Typed tensor views over raw bytes, for kernels and ops compiled without reference counting.

`array_over(buffer, offset, keep, shape, dtype)` is a C-contiguous array of `dtype` and `shape`
(a tuple of integers of one type) starting at byte `offset` of the uint8 array `buffer`, every
dimension multiplied by `keep` (0 or 1: 0 gives an empty view). It is built in LLVM with no
meminfo (like `numba.carray`), so creating, passing and dropping it costs no reference
counting, and code compiled without the reference-counting runtime may use it (Numba refuses
to return a new array from such code, which is why this is an intrinsic).

`move_elements(dst, d, src, s, n)` is `dst[d : d + n] = src[s : s + n]` for 1-D C-contiguous
arrays of one element type, as one `llvm.memmove` (overlap allowed). Numba's slice assignment
would do the same element by element, and compiles a shape-mismatch message (f-strings and
str.join) that costs seconds of every cold process that reaches one.

`read_only(array)` is a read-only view of `array` (no copy): jitted functions called with
read-only views see one Numba type, whether the array came from a file mapping (read-only) or
was built in memory (writable), and so compile once, not once per kind.

No bounds check: callers check that the bytes are there (`rtsoa.kernels.tensors.block_view`
against a device block, the op entry against an operand row). Written with Numba's public
extension API and llvmlite's IR builder only.
"""

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


def read_only(array):
    """A read-only view of `array` (no copy)."""
    view = array.view()
    view.flags.writeable = False
    return view


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


def _pack(builder, values, element_type):
    """An LLVM array value holding `values` (a UniTuple field of Numba's array struct)."""
    packed = ir.Constant(ir.ArrayType(element_type, len(values)), ir.Undefined)
    for i, value in enumerate(values):
        packed = builder.insert_value(packed, value, i)
    return packed


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
def array_over(typingctx, buffer, offset, keep, shape, dtype):
    """An array of `shape` and `dtype` over `buffer`'s bytes [offset, ...), every dimension
    multiplied by `keep` (0 or 1); no meminfo, no bounds check (the caller checked)."""
    element = _element_type(dtype)
    ndim = _dimensions(shape)
    if element is None or ndim is None or not isinstance(buffer, types.Array):
        return None
    result = types.Array(element, ndim, "C")
    signature = result(buffer, offset, keep, shape, dtype)

    def codegen(context, builder, signature, arguments):
        buffer_value, offset_value, keep_value, shape_value, _ = arguments
        base = context.make_array(signature.args[0])(context, builder, buffer_value)
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
        nitems = ir.Constant(intp, 1)
        for dim in reversed(dims):
            strides.append(stride)
            stride = builder.mul(stride, dim)
            nitems = builder.mul(nitems, dim)
        strides.reverse()
        out = context.make_array(result)(context, builder)
        # the fields numba.np.arrayobj.populate_array sets, without the reference count
        out.data = pointer
        out.shape = _pack(builder, dims, intp)
        out.strides = _pack(builder, strides, intp)
        out.itemsize = ir.Constant(intp, size)
        out.nitems = nitems
        out.meminfo = ir.Constant(context.get_value_type(types.MemInfoPointer(types.voidptr)), None)
        out.parent = ir.Constant(context.get_value_type(types.pyobject), None)
        return out._getvalue()

    return signature, codegen


@intrinsic
def move_elements(typingctx, dst, d, src, s, n):
    """dst[d : d + n] = src[s : s + n] (1-D C-contiguous arrays of one element type, ranges
    the caller checked; overlapping ranges are copied as memmove does); n <= 0 copies nothing."""
    if not (
        isinstance(dst, types.Array)
        and isinstance(src, types.Array)
        and dst.ndim == 1
        and src.ndim == 1
        and dst.layout == "C"
        and src.layout == "C"
        and dst.dtype == src.dtype
        and dst.mutable
        and all(isinstance(value, types.Integer) for value in (d, s, n))
    ):
        return None
    signature = types.none(dst, d, src, s, n)

    def codegen(context, builder, signature, arguments):
        dst_value, d_value, src_value, s_value, n_value = arguments
        i64 = ir.IntType(64)
        byte_pointer = ir.IntType(8).as_pointer()
        size = context.get_abi_sizeof(context.get_data_type(signature.args[0].dtype))

        def address(array_type, array_value, index_type, index_value):
            array = context.make_array(array_type)(context, builder, array_value)
            index = context.cast(builder, index_value, index_type, types.int64)
            start = builder.mul(index, ir.Constant(i64, size))
            return builder.gep(builder.bitcast(array.data, byte_pointer), [start])

        target = address(signature.args[0], dst_value, signature.args[1], d_value)
        source = address(signature.args[2], src_value, signature.args[3], s_value)
        count = context.cast(builder, n_value, signature.args[4], types.int64)
        positive = builder.icmp_signed(">", count, ir.Constant(i64, 0))
        with builder.if_then(positive):
            nbytes = builder.mul(count, ir.Constant(i64, size))
            memmove = builder.module.declare_intrinsic(
                "llvm.memmove", [byte_pointer, byte_pointer, i64]
            )
            builder.call(memmove, [target, source, nbytes, ir.Constant(ir.IntType(1), 0)])
        return context.get_dummy_value()

    return signature, codegen
