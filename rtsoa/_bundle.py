"""Array bundles passed to jitted code by reference: one pointer instead of every array.

Numba passes a NamedTuple of arrays to a jitted function by value, flattened: an array is seven
LLVM arguments or more (meminfo, parent, size, item size, data, a shape and a stride per
dimension), so the device state's 34 arrays are ~240 arguments to every device function and at
every call site. Building, printing and parsing that IR is a large part of a cold compile: a
one-line function taking the device state compiled in 72 ms against 27 ms for one array (this
VM, `jit_inline_llvm`).

`bundle_class(name, module, fields)` makes an immutable Python class whose instances hold their
arrays and, beside them, one int64 buffer of their Numba array descriptors, laid out as Numba's
array data model. Jitted code receives the buffer's address; `bundle.field` there is a load of that
field's descriptor, marked invariant (the buffer never changes while the bundle lives), so LLVM
hoists and merges the loads as it did the arguments. Only attribute reads of the fields are
typed: a bundle cannot be built, unpacked or returned by jitted code.

A field's Numba type is fixed by the class (dtype, dimension count, C layout, writeable or not);
an instance whose arrays do not all match cannot enter jitted code (typing raises a TypeError
naming the field; `bundle_problem` tells Python code the same), and callers check the
contents (`rtsoa.device.state.check_state`) before they let jitted code run. The arrays are
held by the instance: jitted code may only run on a bundle while the caller holds it, like
any array argument.
"""

import numpy as np
from llvmlite import ir
from numba import typeof
from numba.core import callconv, cgutils, types
from numba.core.extending import (
    NativeValue,
    lower_getattr_generic,
    models,
    register_model,
    typeof_impl,
    unbox,
)
from numba.core.imputils import impl_ret_borrowed
from numba.core.typing.templates import AttributeTemplate, infer_getattr

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
    loops: a malloc + free pair ran 387.0 instructions against 366.8 (callgrind, both with the
    argument attributes below; 361.2 when the state was passed by value)."""
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


def _install_dereferenceable_arguments():
    """Declare every bundle pointer a jitted function receives (alone or inside a tuple, as the
    kernels' runtime) `dereferenceable` and `noalias`: LLVM may then load a field's descriptor
    before the branch that uses it, and knows no store into an array changes it, so
    loop-invariant code motion can lift it out of loops even when the use is conditional (a
    kernel in the dispatch switch, the allocator's slow path). Without `noalias` a malloc +
    free pair ran 369.8 instructions against 366.8 (callgrind)."""
    original = callconv.CPUCallConv.decorate_function

    def decorate_function(self, fn, args, fe_argtypes, noalias=False):
        original(self, fn, args, fe_argtypes, noalias=noalias)
        packer = self._get_arg_packer(fe_argtypes)
        arguments = packer._unflattener.unflatten(self.get_arguments(fn))
        for fe_type, argument in zip(fe_argtypes, arguments, strict=True):
            _mark_dereferenceable(fe_type, argument)

    decorate_function.__wrapped__ = original
    callconv.CPUCallConv.decorate_function = decorate_function


_install_dereferenceable_arguments()


def _numba_array_type(dtype, ndim, writeable):
    sample = np.empty((0,) * ndim, dtype=dtype)
    sample.flags.writeable = writeable
    return typeof(sample)


def _mismatch(array, dtype, ndim, writeable):
    """Why `array` does not have the exact type its field is compiled for (None if it does)."""
    if not isinstance(array, np.ndarray):  # subclasses (np.memmap) type as arrays too
        return f"a numpy array expected, got {type(array).__name__}"
    if array.dtype != dtype:
        return f"dtype {array.dtype}, expected {dtype}"
    if array.ndim != ndim:
        return f"{array.ndim} dimensions, expected {ndim}"
    if not array.flags.c_contiguous:
        return "not C-contiguous"
    if not array.flags.aligned:
        return "not aligned to its item size"
    if writeable and not array.flags.writeable:
        return "read-only, but jitted code writes it"
    return None  # a writeable array may be typed read-only


def bundle_problem(bundle):
    """(field, what is wrong) for the first array of `bundle` that does not have its field's
    type, or None when jitted code may take the bundle."""
    return bundle._problem


def _descriptor(array):
    """The int64 words of Numba's array model for `array` (no meminfo; parent = the array)."""
    return (
        [0, id(array), array.size, array.itemsize, array.ctypes.data]
        + list(array.shape)
        + list(array.strides)
    )


def bundle_class(name, module, fields, doc=""):
    """An immutable bundle class of numpy arrays passed to jitted code by reference.

    `module` is the module that binds the class to `name` (pickling finds it there). `fields`
    maps each field name to (dtype, ndim, writeable): the type jitted code sees. The class
    takes its fields as keyword arguments, iterates over its arrays in field order and has
    NamedTuple's `_fields`, `_replace` and `_asdict`; it pickles by its arrays. An instance
    whose arrays do not all have their field's type is still built (so a checker can name
    what is wrong) but cannot enter jitted code.
    """
    specs = {
        field: (np.dtype(dtype), ndim, writeable)
        for field, (dtype, ndim, writeable) in fields.items()
    }
    names = tuple(specs)
    bundle_type = BundleType(
        name, [(field, _numba_array_type(*spec)) for field, spec in specs.items()]
    )

    def __init__(self, **arrays):
        if set(arrays) != set(names):
            missing = [field for field in names if field not in arrays]
            extra = [field for field in arrays if field not in specs]
            raise TypeError(f"{name}: missing fields {missing}, unknown fields {extra}")
        for field in names:
            object.__setattr__(self, field, arrays[field])
        object.__setattr__(self, "_problem", None)
        object.__setattr__(self, "_descriptors", None)
        object.__setattr__(self, "_address", None)
        words = []
        for field in names:
            problem = _mismatch(arrays[field], *specs[field])
            if problem is not None:
                object.__setattr__(self, "_problem", (field, problem))
                return
            words.extend(_descriptor(arrays[field]))
        descriptors = np.array(words, dtype=np.int64)
        object.__setattr__(self, "_descriptors", descriptors)  # kept alive with the arrays
        object.__setattr__(self, "_address", descriptors.ctypes.data)

    def __setattr__(self, field, value):
        raise AttributeError(f"{name} is immutable: use _replace({field}=...)")

    def _replace(self, **changes):
        return cls(**{**self._asdict(), **changes})

    def _asdict(self):
        return {field: getattr(self, field) for field in names}

    def __iter__(self):
        return (getattr(self, field) for field in names)

    def __len__(self):
        return len(names)

    def __reduce__(self):
        return _rebuild, (cls, self._asdict())

    def __repr__(self):
        return f"{name}({', '.join(names)})"

    namespace = {
        "__doc__": doc,
        "__module__": module,
        "__slots__": names + ("_problem", "_descriptors", "_address"),
        "__init__": __init__,
        "__setattr__": __setattr__,
        "__reduce__": __reduce__,
        "__iter__": __iter__,
        "__len__": __len__,
        "__repr__": __repr__,
        "_replace": _replace,
        "_asdict": _asdict,
        "_fields": names,
        "numba_type": bundle_type,
    }
    cls = type(name, (), namespace)

    @typeof_impl.register(cls)
    def _typeof_bundle(value, context):
        if value._problem is not None:
            field, problem = value._problem
            raise TypeError(f"{name}.{field}: {problem}: jitted code cannot take this {name}")
        return bundle_type

    return cls


def _rebuild(cls, arrays):
    return cls(**arrays)
