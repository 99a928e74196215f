"""CPU atomics on array elements for nogil njit code (Numba's public API has none).

Each function is a Numba `@intrinsic` that emits one LLVM atomic instruction on the address of
`array[index]` (no bounds check: callers pass valid indices, as everywhere in jitted code):

- `atomic_add(a, i, v)` / `atomic_sub(a, i, v)`: `atomicrmw add/sub`, returns the old value;
- `atomic_cas(a, i, expected, new)`: `cmpxchg`, returns the old value (equal to `expected`
  exactly when the swap happened);
- `atomic_load(a, i)` / `atomic_store(a, i, v)`: `load atomic` / `store atomic`;
  `atomic_store_release(a, i, v)`: a release store (a lock's release, a counter only its
  lock holder writes);
- `spin_lock(a, i)` / `spin_unlock(a, i)`: a test-and-test-and-set lock on an int64 element
  (0 free, 1 held) built from the above, yielding the CPU while it waits;
- `cpu_yield()`: `sched_yield(2)`, so a waiting thread gives its core to one with work (this
  machine has fewer cores than a run may have workers).

Every operation but `atomic_store_release` is sequentially consistent, so the plain loads and
stores between a lock's acquire and release (or before an `atomic_sub` that releases a
successor, and after the pop that runs it) are ordered as in the C++ memory model: a release
publishes them, an acquire sees them.
Supported element types: int32 and int64, on writable C arrays (1-D or more, indexed by one
flat int). Python threads calling `@njit(nogil=True)` functions that use them run in parallel.
"""

import ctypes
import ctypes.util

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from rtsoa._jit import jit_inline_ir
from rtsoa._numba.symbols import add_symbol
from rtsoa.device.bits import llvm_function

_ORDER = "seq_cst"
_INTEGERS = (types.int32, types.int64)


def _register_sched_yield():
    """Make `sched_yield` resolvable by name in jitted (and disk-cached) code."""
    libc_name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(libc_name) if libc_name else ctypes.CDLL(None)
    address = ctypes.cast(libc.sched_yield, ctypes.c_void_p).value
    add_symbol("sched_yield", address)


_register_sched_yield()


def _check_array(array, name):
    if not isinstance(array, types.Array) or array.dtype not in _INTEGERS:
        raise TypeError(f"{name}: needs an int32 or int64 array, got {array}")
    if not array.mutable:
        raise TypeError(f"{name}: the array is read-only")
    if array.layout != "C":
        raise TypeError(f"{name}: the array must be C-contiguous")


def _element_pointer(context, builder, array_type, array, index_type, index):
    """Address of the element at flat position `index` of a C-contiguous array."""
    view = context.make_array(array_type)(context, builder, array)
    position = context.cast(builder, index, index_type, types.intp)
    return builder.gep(view.data, [position], inbounds=True)


def _rmw(operation, name):
    @intrinsic
    def atomic_rmw(typingctx, array, index, value):
        _check_array(array, name)
        signature = array.dtype(array, index, value)

        def codegen(context, builder, sig, args):
            pointer = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            operand = context.cast(builder, args[2], sig.args[2], sig.args[0].dtype)
            return builder.atomic_rmw(operation, pointer, operand, _ORDER)

        return signature, codegen

    atomic_rmw.__name__ = name
    return atomic_rmw


atomic_add = _rmw("add", "atomic_add")
atomic_sub = _rmw("sub", "atomic_sub")
atomic_exchange = _rmw("xchg", "atomic_exchange")


@intrinsic
def atomic_cas(typingctx, array, index, expected, new):
    """Compare-and-swap array[index] from `expected` to `new`; returns the old value."""
    _check_array(array, "atomic_cas")
    signature = array.dtype(array, index, expected, new)

    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        dtype = sig.args[0].dtype
        old = context.cast(builder, args[2], sig.args[2], dtype)
        new_value = context.cast(builder, args[3], sig.args[3], dtype)
        pair = builder.cmpxchg(pointer, old, new_value, _ORDER, _ORDER)
        return builder.extract_value(pair, 0)

    return signature, codegen


@intrinsic
def atomic_load(typingctx, array, index):
    """array[index], read atomically (sequentially consistent)."""
    _check_array(array, "atomic_load")
    signature = array.dtype(array, index)

    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        width = sig.args[0].dtype.bitwidth // 8
        return builder.load_atomic(pointer, _ORDER, width)

    return signature, codegen


def _store(ordering, name, doc):
    @intrinsic
    def store(typingctx, array, index, value):
        _check_array(array, name)
        signature = types.void(array, index, value)

        def codegen(context, builder, sig, args):
            pointer = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            dtype = sig.args[0].dtype
            operand = context.cast(builder, args[2], sig.args[2], dtype)
            builder.store_atomic(operand, pointer, ordering, dtype.bitwidth // 8)
            return context.get_dummy_value()

        return signature, codegen

    store.__name__ = name
    store.__doc__ = doc
    return store


atomic_store = _store(
    _ORDER, "atomic_store", "array[index] = value, written atomically (sequentially consistent)."
)
# A release store: the writes before it are visible to whoever reads it with an acquire (or
# stronger) load. What a lock's release and a single-writer counter need; on x86 a plain move,
# where a sequentially consistent store is a locked exchange.
atomic_store_release = _store(
    "release", "atomic_store_release", "array[index] = value, written with release ordering."
)


@intrinsic
def cpu_yield(typingctx):
    """Give up the CPU (sched_yield); returns its int32 result."""
    signature = types.int32()

    def codegen(context, builder, sig, args):
        function_type = ir.FunctionType(ir.IntType(32), [])
        function = llvm_function(builder.module, function_type, "sched_yield")
        return builder.call(function, [])

    return signature, codegen


SPINS_BEFORE_YIELD = 64  # busy polls before a waiting thread yields its core


@jit_inline_ir
def spin_lock(array, index):
    """Acquire the lock array[index] (0 free, 1 held): test-and-test-and-set, yielding."""
    spins = 0
    while True:
        if atomic_load(array, index) == 0 and atomic_cas(array, index, 0, 1) == 0:
            return
        spins += 1
        if spins >= SPINS_BEFORE_YIELD:
            cpu_yield()
            spins = 0


@jit_inline_ir
def spin_unlock(array, index):
    """Release the lock array[index] (a release store)."""
    atomic_store_release(array, index, 0)
