"""User kernels that kill the process running them, for the batch tests (`--import
batch_kernels`): a real segmentation fault (a load from a bad address), a signal the process
sends itself (SIGKILL, as the out-of-memory killer sends), a kernel that never returns (for
timeouts), and a kernel that folds its node
into the checksum so a batch of these graphs has one dispatch module.
"""

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from rtsoa.kernels import attribute, kernel
from rtsoa.kernels.checksum import fold


@intrinsic
def _load_from_address(typingctx, address):
    """The int64 at `address` (no checks at all: that is the point)."""

    def codegen(context, builder, signature, arguments):
        pointer = builder.inttoptr(arguments[0], ir.IntType(64).as_pointer())
        return builder.load(pointer)

    return types.int64(types.int64), codegen


@intrinsic
def _raise_signal(typingctx, number):
    """C's raise(number): the signal is delivered to the calling thread."""

    def codegen(context, builder, signature, arguments):
        function_type = ir.FunctionType(ir.IntType(32), [ir.IntType(32)])
        function = cgutils.get_or_insert_function(builder.module, function_type, "raise")
        return builder.call(function, [builder.trunc(arguments[0], ir.IntType(32))])

    return types.int32(types.int64), codegen


@kernel("BatchTest.Fold")
def batch_fold(rt, node):
    return fold(rt, node, np.uint64(4242))


@kernel("BatchTest.Segfault", requires={"attributes": 1})
def batch_segfault(rt, node):
    """attrs [address]: read the int64 there (address 8: a segmentation fault)."""
    value = _load_from_address(attribute(rt, node, 0))
    rt.worker.checksum[0] += np.uint64(value)
    return np.int32(0)


@kernel("BatchTest.Signal", requires={"attributes": 1})
def batch_signal(rt, node):
    """attrs [signal number]: the process sends itself that signal."""
    _raise_signal(attribute(rt, node, 0))
    return np.int32(0)


@kernel("BatchTest.Spin")
def batch_spin(rt, node):
    """Never returns (a hung user kernel)."""
    x = np.uint64(node)
    while x != np.uint64(1):
        x = x * np.uint64(6364136223846793005) + np.uint64(1442695040888963407)
        x |= np.uint64(2)  # never 1
    return np.int32(0)
