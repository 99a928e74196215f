"""Plain-Python copies of rtsoa's jitted functions, for tests that must not compile.

`pure(f)` copies a jitted (or plain) function's Python source with every jitted global it
calls replaced by its own plain-Python copy, and Numba intrinsics by Python stand-ins. The
copies behave like the compiled code for the integer ranges rtsoa uses (no overflow), so a
test of them checks the code's logic; what it cannot check is Numba's compilation, which the
rest of the suite covers.

Used by tests/test_executor_loops.py, and with RTSOA_PURE_PYTHON_DEVICE=1 (tests/conftest.py
calls `install_device`) by the mutation runs of the allocator (mutation/allocator.toml): then
`rtsoa.device.Device` calls plain-Python copies of the allocator, stream and hazard functions,
so a mutant of malloc.py costs no compile.
"""

import time
import types

from numba.core.registry import CPUDispatcher
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros

from rtsoa.device import bits
from rtsoa.device.atomics import atomic_load
from rtsoa.kernels.clock import monotonic_ns


def _leading_zeros(value):
    return 64 - int(value).bit_length()


def _trailing_zeros(value):
    value = int(value)
    return (value & -value).bit_length() - 1


def _float_bits(value):
    import numpy as np

    return int(np.float64(value).view(np.int64))


# Intrinsics have no Python body: their plain-Python stand-ins (by identity).
INTRINSICS = (
    (monotonic_ns, time.monotonic_ns),
    (leading_zeros, _leading_zeros),
    (trailing_zeros, _trailing_zeros),
    (bits.assume, lambda condition: None),
    (bits.float_bits, _float_bits),
    (atomic_load, lambda array, index: array[index]),
)
_COPIES = {}


def pure(function):
    """A plain-Python copy of `function` (jitted or not) whose global jitted helpers are
    plain-Python copies too (memoized, so recursion and shared helpers are fine)."""
    original = getattr(function, "py_func", function)
    if original in _COPIES:
        return _COPIES[original]
    namespace = dict(original.__globals__)
    copy = types.FunctionType(
        original.__code__, namespace, original.__name__, original.__defaults__, original.__closure__
    )
    _COPIES[original] = copy
    for name, value in list(namespace.items()):
        stand_in = next((python for intrinsic, python in INTRINSICS if value is intrinsic), None)
        if stand_in is not None:
            namespace[name] = stand_in
        elif isinstance(value, CPUDispatcher):
            namespace[name] = pure(value)
    return copy


def pure_module(module, names):
    """A namespace with plain-Python copies of `module`'s functions `names`."""
    return types.SimpleNamespace(**{name: pure(getattr(module, name)) for name in names})


def install_device():
    """Make `Device` run the plain-Python allocator, streams and hazard checker."""
    import warnings

    import numpy as np

    from rtsoa.device import device, handles, hazards, malloc, streams

    device._allocator = pure_module(malloc, ["device_malloc", "device_free", "release_cached"])
    device._streams = pure_module(
        streams,
        [
            "device_launch",
            "event_record",
            "stream_wait_event",
            "device_synchronize",
            "stream_synchronize",
            "event_synchronize",
            "event_query",
            "set_stream_priority",
        ],
    )
    device.block_location = pure(handles.block_location)
    device.device_access = pure(hazards.device_access)
    np.seterr(over="ignore")
    warnings.filterwarnings("ignore", category=RuntimeWarning)
