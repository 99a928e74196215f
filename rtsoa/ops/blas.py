"""A GEMM on matrices inside larger ones (leading dimensions), for parts of a conv's GEMM that
split its columns (`rtsoa.ops.conv`).

Numba's `np.dot` takes whole contiguous matrices, so a part that computes columns
[first, end) of Y = W @ X would have to copy X's columns out and Y's back. Fortran's
`sgemm` / `dgemm` take a leading dimension per matrix instead: a column block of a row-major
matrix is a matrix of its own with the parent's row length as its leading dimension.

The BLAS is SciPy's (`scipy.linalg.cython_blas`, the one Numba's `np.dot` calls). Its
functions' addresses are not symbols compiled code could name at link time without importing
SciPy in every process that loads an op (0.3-0.8 s); a parts pool looks them up when it
starts (`gemm_addresses`) and keeps them in its control block, and compiled code calls the
address it reads there (`gemm_at`).
"""

from llvmlite import ir
from numba import types
from numba.extending import get_cython_function_address, intrinsic

from rtsoa._jit import jit_inline_ir

_INT32_MAX = (1 << 31) - 1


def gemm_addresses():
    """(sgemm, dgemm): the addresses of SciPy's BLAS GEMMs."""
    return tuple(
        get_cython_function_address("scipy.linalg.cython_blas", name) for name in ("sgemm", "dgemm")
    )


@intrinsic
def _fortran_gemm(typingctx, address, m, n, k, a, lda, b, ldb, c, ldc, like):
    """Fortran xGEMM('N', 'N', m, n, k, 1, a, lda, b, ldb, 0, c, ldc) at `address` (column-major:
    c[m, n] = a[m, k] @ b[k, n]); `a`, `b`, `c` addresses; `like`: an array whose dtype
    (float32: sgemm, float64: dgemm) the call computes in."""
    if not isinstance(like, types.Array) or like.dtype not in (types.float32, types.float64):
        return None  # the BLAS has no other element types: refused at typing
    signature = types.none(
        types.int64, types.int64, types.int64, types.int64, types.int64, types.int64,
        types.int64, types.int64, types.int64, types.int64, like,
    )  # fmt: skip
    real = ir.FloatType() if like.dtype == types.float32 else ir.DoubleType()

    def codegen(context, builder, sig, args):
        i8, i32 = ir.IntType(8), ir.IntType(32)
        text, integer, scalar = i8.as_pointer(), i32.as_pointer(), real.as_pointer()
        function_type = ir.FunctionType(
            ir.VoidType(),
            [text, text, integer, integer, integer, scalar, scalar, integer, scalar, integer,
             scalar, scalar, integer],
        )  # fmt: skip
        with builder.goto_entry_block():  # once per function, not per call in a loop
            letter = builder.alloca(i8)
            dims = [builder.alloca(i32) for _ in range(6)]
            alpha = builder.alloca(real)
            beta = builder.alloca(real)
        builder.store(ir.Constant(i8, ord("N")), letter)
        for slot, value in zip(
            dims, (args[1], args[2], args[3], args[5], args[7], args[9]), strict=True
        ):
            builder.store(builder.trunc(value, i32), slot)
        builder.store(ir.Constant(real, 1.0), alpha)
        builder.store(ir.Constant(real, 0.0), beta)
        function = builder.inttoptr(args[0], function_type.as_pointer())
        builder.call(
            function,
            [
                letter, letter, dims[0], dims[1], dims[2], alpha,
                builder.inttoptr(args[4], scalar), dims[3],
                builder.inttoptr(args[6], scalar), dims[4],
                beta, builder.inttoptr(args[8], scalar), dims[5],
            ],
        )  # fmt: skip
        return context.get_dummy_value()

    return signature, codegen


@jit_inline_ir
def gemm_fits(m, n, k, lda, ldb, ldc):
    """Do a GEMM's dimensions fit the BLAS's 32-bit integers?"""
    return max(max(m, n), max(k, max(lda, max(ldb, ldc)))) <= _INT32_MAX


@jit_inline_ir
def gemm_at(address, a, a_at, lda, b, b_at, ldb, c, c_at, ldc, m, n, k):
    """c[c_at:] as an m x n row-major matrix with row length ldc = a[a_at:] (m x k, rows of
    lda) @ b[b_at:] (k x n, rows of ldb), by the BLAS GEMM at `address` (`gemm_addresses`,
    for the arrays' dtype). The caller checks the extents (`gemm_fits`, the arrays' sizes)."""
    size = c.itemsize
    # row-major c = a @ b is column-major c^T = b^T @ a^T: the BLAS's m is our n
    _fortran_gemm(
        address, n, m, k,
        b.ctypes.data + b_at * size, ldb,
        a.ctypes.data + a_at * size, lda,
        c.ctypes.data + c_at * size, ldc,
        c,
    )  # fmt: skip
