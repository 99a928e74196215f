"""The Numba side of rtsoa's array bundles (`rtsoa._bundle`): their type, data model, field
reads, unboxing and LLVM argument attributes. See `rtsoa._bundle` for what a bundle is."""

import numpy as np

from rtsoa._numba import compat

compat.register(
    "bundle-type",
    "rtsoa",
    [
        "numba.core.imputils.impl_ret_borrowed",
        "numba.core.typing.templates.AttributeTemplate",
        "numba.core.cgutils.gep_inbounds",
        "numba.core.datamodel.models.PrimitiveModel",
    ],
    "the bundle type: its data model, field reads and unboxing",
    patch=False,
)

from llvmlite import ir  # noqa: E402 - after the table row
from numba import typeof  # noqa: E402
from numba.core import callconv, cgutils, types  # noqa: E402
from numba.core.extending import (  # noqa: E402
    NativeValue,
    lower_getattr_generic,
    models,
    register_model,
    unbox,
)
from numba.core.imputils import impl_ret_borrowed  # noqa: E402
from numba.core.typing.templates import AttributeTemplate, infer_getattr  # noqa: E402

_HEADER_WORDS = 5  # meminfo, parent, size, item size, data; then shape and strides


class BundleType(types.Type):
    """The Numba type of a bundle class: its fields' array types and descriptor offsets."""

    def __init__(self, name, fields):
        self.fields = tuple(fields)  # ((field, numba array type), ...)
        self.offsets = {}  # field -> offset of its descriptor, in int64 words
        words = 0
        for field, array_type in self.fields:
            self.offsets[field] = words
            words += _HEADER_WORDS + 2 * array_type.ndim
        self.words = words
        super().__init__(name=f"{name}Ref")

    @property
    def key(self):
        return self.name, self.fields

    def field_type(self, field):
        return dict(self.fields).get(field)


@register_model(BundleType)
class _BundleModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, ir.IntType(8).as_pointer())


@infer_getattr
class _BundleAttributes(AttributeTemplate):
    key = BundleType

    def generic_resolve(self, bundle_type, attr):
        return bundle_type.field_type(attr)


@lower_getattr_generic(BundleType)
def _lower_field(context, builder, bundle_type, pointer, attr):
    """A field read: its descriptor, loaded member by member (meminfo, parent, size, item size,
    data, shape, strides), each load marked invariant. LLVM splits one load of the whole
    descriptor struct into member loads without the mark, and more of them stayed inside
    loops, which the malloc + free pair's instruction count shows
    (`asv_bench/callgrind/count.sh TREE pairs 1`)."""
    array_type = bundle_type.field_type(attr)
    descriptor_type = context.get_value_type(array_type)
    base = builder.gep(
        builder.bitcast(pointer, ir.IntType(64).as_pointer()),
        [ir.Constant(ir.IntType(32), bundle_type.offsets[attr])],
    )
    base = builder.bitcast(base, descriptor_type.as_pointer())
    invariant = builder.module.add_metadata([])
    descriptor = ir.Constant(descriptor_type, ir.Undefined)
    for index, member_type in enumerate(descriptor_type.elements):
        member_pointer = cgutils.gep_inbounds(builder, base, 0, index)
        if isinstance(member_type, ir.ArrayType):  # shape, strides: one load per dimension
            member = ir.Constant(member_type, ir.Undefined)
            for dim in range(member_type.count):
                load = builder.load(cgutils.gep_inbounds(builder, member_pointer, 0, dim))
                load.set_metadata("invariant.load", invariant)
                member = builder.insert_value(member, load, dim)
        else:
            member = builder.load(member_pointer)
            member.set_metadata("invariant.load", invariant)
        descriptor = builder.insert_value(descriptor, member, index)
    return impl_ret_borrowed(context, builder, array_type, descriptor)


@unbox(BundleType)
def _unbox_bundle(bundle_type, obj, c):
    builder = c.builder
    pointer = cgutils.alloca_once_value(builder, ir.Constant(ir.IntType(8).as_pointer(), None))
    address = c.pyapi.object_getattr_string(obj, "_address")
    with builder.if_then(cgutils.is_not_null(builder, address), likely=True):
        builder.store(c.pyapi.long_as_voidptr(address), pointer)
        c.pyapi.decref(address)
    return NativeValue(builder.load(pointer), is_error=c.pyapi.c_api_error())


def _mark_dereferenceable(fe_type, argument):
    """Give the LLVM argument(s) of `fe_type` that are bundle pointers `dereferenceable(n)`."""
    if isinstance(fe_type, BundleType) and isinstance(argument, ir.Argument):
        argument.attributes.dereferenceable = 8 * fe_type.words
        argument.attributes.align = 8
        # nothing writes the descriptors, so no other pointer's store can change what a load
        # through this one reads: LLVM keeps the loads out of loops that store into arrays
        # (inlined, it turns the attribute into alias scopes on the callee's accesses)
        argument.add_attribute("noalias")
    elif isinstance(fe_type, types.BaseTuple) and isinstance(argument, (tuple, list)):
        for member_type, member in zip(fe_type.types, argument, strict=True):
            _mark_dereferenceable(member_type, member)


def _bundle_in(fe_type):
    if isinstance(fe_type, BundleType):
        return True
    return isinstance(fe_type, types.BaseTuple) and any(map(_bundle_in, fe_type.types))


def _install_dereferenceable_arguments():
    """Declare every bundle pointer a jitted function receives (alone or inside a tuple, as the
    kernels' runtime) `dereferenceable` and `noalias`: LLVM may then load a field's descriptor
    before the branch that uses it, and knows no store into an array changes it, so
    loop-invariant code motion can lift it out of loops even when the use is conditional (a
    kernel in the dispatch switch, the allocator's slow path); the malloc + free pair's
    instruction count shows it (`asv_bench/callgrind/count.sh TREE pairs 1`, with and without
    RTSOA_NUMBA_PATCHES=off).

    Process-wide (Numba has one calling convention object per target), but it acts only on
    functions taking a bundle: for any other it returns after Numba's own method. Its fallback,
    at install or when the internals it reads fail at run time: Numba's method alone, bundle
    pointers without the attributes."""
    if not compat.register(
        "bundle-argument-attributes",
        "process",
        [
            _CALLCONV + "decorate_function",
            _CALLCONV + "_get_arg_packer",
            _CALLCONV + "get_arguments",
            "numba.core.datamodel.packer.ArgPacker.__init__",
            "numba.core.datamodel.packer._Unflattener.unflatten",
        ],
        "bundle pointers declared dereferenceable and noalias to LLVM",
    ):
        return False
    callconv_class = callconv.CPUCallConv
    if getattr(callconv_class, "_rtsoa_bundle_attributes", False):
        return True
    original = callconv_class.decorate_function

    def decorate_function(self, fn, args, fe_argtypes, noalias=False):
        original(self, fn, args, fe_argtypes, noalias=noalias)
        if not any(map(_bundle_in, fe_argtypes)):
            return
        try:
            packer = self._get_arg_packer(fe_argtypes)
            arguments = packer._unflattener.unflatten(self.get_arguments(fn))
        except (AttributeError, TypeError) as error:  # internals changed: no attributes
            compat.skip("bundle-argument-attributes", f"failed at run time: {error!r}")
            callconv_class.decorate_function = original
            return
        for fe_type, argument in zip(fe_argtypes, arguments, strict=True):
            _mark_dereferenceable(fe_type, argument)

    decorate_function.__wrapped__ = original
    callconv_class.decorate_function = decorate_function
    callconv_class._rtsoa_bundle_attributes = True
    return True


_CALLCONV = "numba.core.callconv.CPUCallConv."
ARGUMENT_ATTRIBUTES = _install_dereferenceable_arguments()


def numba_array_type(dtype, ndim, writeable):
    """Numba's array type of a C-contiguous array of `dtype` and `ndim` dimensions."""
    sample = np.empty((0,) * ndim, dtype=dtype)
    sample.flags.writeable = writeable
    return typeof(sample)
