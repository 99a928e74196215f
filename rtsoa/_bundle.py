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
from numba.extending import typeof_impl

from rtsoa._numba.bundle import BundleType, numba_array_type

__all__ = ["BundleType", "bundle_class", "bundle_problem"]


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
        name, [(field, numba_array_type(*spec)) for field, spec in specs.items()]
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
