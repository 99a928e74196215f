"""A float32 GEMM of rtsoa's own, for the convolutions: C = A @ B on matrices given by an array,
an offset and two strides each, blocked as BLIS and MLAS block theirs.

- **Micro-kernel** (`_micro_kernel`, an `llvmlite.ir` intrinsic): a 6 x 16 block of C kept in
  twelve 8-float registers while the loop over k adds, per k, a broadcast of each of A's six
  elements times B's 16 (two 8-float loads): 12 fused multiply-adds per 8 loads. On an AVX2 /
  FMA core (Zen 3) it runs at about 94 GFLOP/s with its operands in L1, the core's peak. On a
  CPU without FMA, LLVM computes the same `llvm.fma` in software (the same results, slower).
- **Packing**: a block of A (MC x KC) is copied into panels of 6 rows, k-major, and a block of
  B (KC x NC) into panels of 16 columns, so the micro-kernel reads both contiguously. When B's
  rows are contiguous and K <= DIRECT_K (a 1 x 1 conv's input, an im2col matrix), the
  micro-kernel reads B in place with B's row stride, and B is not copied at all.

Results differ from a BLAS's by the order of the float additions (each element is a sum over k
in KC-long partial sums): relative differences of a few float32 ulps times sqrt(K) (the
tests bound them at 1e-5 of |A| @ |B|). Measured one thread against SciPy's OpenBLAS,
interleaved, on the conv GEMM shapes (M x K x N; this time / OpenBLAS's, on a noisy 2-core
VM): the short-K, long-N products of MobileNetV2's 1 x 1 convs 0.5-0.8x (24 x 144 x 3,136:
0.51-0.59), DenseNet's 32 x 1,152 x 784 0.56-0.77, ResNet's 64 x 576 x 3,136 0.87-0.96 and
128 x 576 x 784 0.72-0.84; 14 x 14 planes (N = 196, a partial last panel) 1.2-1.5x and 7 x 7
ones (N = 49) 1.6x, K of several thousand 1.4-1.5x. `short_gemm` therefore takes this GEMM
for float32 products with K <= SHORT_K and N >= NARROW_N, or K <= DIRECT_K and N >= WIDE_N,
and the BLAS for the rest.
"""

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from rtsoa._jit import jit_inline_ir, jit_out_of_line, jit_with_nrt
from rtsoa.ops.blas import gemm_at

MR, NR = 6, 16  # the micro-kernel's block of C: rows (of A) x columns (of B)
KC = 768  # k per pass over C: a 16-column panel of B (48 KiB) stays in L2; fewer passes won
MC = 144  # rows of A per packed block
NC = 4096  # columns of B per packed block
DIRECT_K = 1152  # B read in place (no packing) when its rows are contiguous and K <= this
# where `short_gemm` takes this GEMM (measured, see the module docstring): K <= SHORT_K and
# N >= NARROW_N, or K <= DIRECT_K and N >= WIDE_N; panels of 16 pad narrower products
SHORT_K, NARROW_N, WIDE_N = 256, 128, 512

_FLAT = types.Array(types.float32, 1, "C")


@intrinsic
def _micro_kernel(typingctx, kc, a, a_at, b, b_at, b_rs, c, c_at, c_rs, accumulate):
    """c[c_at + r * c_rs + t] (+)= sum over k < kc of a[a_at + k * 6 + r] * b[b_at + k * b_rs + t]
    for r < 6, t < 16: A's 6-row panel packed k-major, B's 16 columns at row stride `b_rs`
    (16 for a packed panel). `accumulate`: add to C instead of storing."""
    if not all(isinstance(x, types.Array) and x.dtype == types.float32 for x in (a, b, c)):
        return None
    signature = types.none(
        types.int64, _FLAT, types.int64, _FLAT, types.int64, types.int64,
        _FLAT, types.int64, types.int64, types.boolean,
    )  # fmt: skip

    def codegen(context, builder, sig, args):
        kc, a, a_at, b, b_at, b_rs, c, c_at, c_rs, accumulate = args

        def base(array, at):
            return builder.gep(context.make_array(_FLAT)(context, builder, array).data, [at])

        a, b, c = base(a, a_at), base(b, b_at), base(c, c_at)
        f32, i64 = ir.FloatType(), ir.IntType(64)
        vector = ir.VectorType(f32, 8)
        name = "llvm.fma.v8f32"
        fma = builder.module.globals.get(name)
        if fma is None:  # declared once per module
            fma = ir.Function(builder.module, ir.FunctionType(vector, [vector] * 3), name)
        zero = ir.Constant(vector, [0.0] * 8)
        broadcast = ir.Constant(ir.VectorType(ir.IntType(32), 8), [0] * 8)
        undefined = ir.Constant(vector, ir.Undefined)

        def at(pointer, index):
            return builder.gep(pointer, [ir.Constant(i64, index)])

        def load(pointer):
            return builder.load(builder.bitcast(pointer, vector.as_pointer()), align=4)

        entry = builder.block
        loop = builder.append_basic_block("micro.loop")
        done = builder.append_basic_block("micro.done")
        builder.cbranch(builder.icmp_signed(">", kc, ir.Constant(i64, 0)), loop, done)
        builder.position_at_end(loop)
        k = builder.phi(i64)
        k.add_incoming(ir.Constant(i64, 0), entry)
        sums = [builder.phi(vector) for _ in range(2 * MR)]
        for total in sums:
            total.add_incoming(zero, entry)
        row = builder.gep(b, [builder.mul(k, b_rs)])
        halves = (load(row), load(at(row, 8)))
        panel = builder.gep(a, [builder.mul(k, ir.Constant(i64, MR))])
        updated = []
        for r in range(MR):
            scalar = builder.insert_element(
                ir.Constant(vector, ir.Undefined),
                builder.load(at(panel, r)),
                ir.Constant(ir.IntType(32), 0),
            )
            splat = builder.shuffle_vector(scalar, undefined, broadcast)
            for h in range(2):
                updated.append(builder.call(fma, [splat, halves[h], sums[2 * r + h]]))
        following = builder.add(k, ir.Constant(i64, 1))
        body = builder.block
        k.add_incoming(following, body)
        for total, value in zip(sums, updated, strict=True):
            total.add_incoming(value, body)
        builder.cbranch(builder.icmp_signed("<", following, kc), loop, done)
        builder.position_at_end(done)
        totals = []
        for value in updated:  # every phi first, at the top of the block
            total = builder.phi(vector)
            total.add_incoming(zero, entry)
            total.add_incoming(value, body)
            totals.append(total)
        for r in range(MR):
            target = builder.gep(c, [builder.mul(ir.Constant(i64, r), c_rs)])
            for h in range(2):
                total = totals[2 * r + h]
                pointer = builder.bitcast(at(target, 8 * h), vector.as_pointer())
                with builder.if_else(accumulate) as (add, store):
                    with add:
                        old = builder.load(pointer, align=4)
                        builder.store(builder.fadd(old, total), pointer, align=4)
                    with store:
                        builder.store(total, pointer, align=4)
        return context.get_dummy_value()

    return signature, codegen


@jit_out_of_line
def _pack(x, at, across, along, count, kc, width, out):
    """Panels of `width` lines of a matrix, each k-major: out[(i // width) * kc * width + k *
    width + i % width] = x[at + i * across + k * along] for i < count, k < kc, the last panel's
    missing lines 0. A's rows (width 6: across = A's row stride, along = its column stride) and
    B's columns (width 16, B's strides the other way round)."""
    for panel in range((count + width - 1) // width):
        base = panel * kc * width
        lines = min(width, count - panel * width)
        first = at + panel * width * across
        if along == 1:  # each line contiguous: read along it
            for r in range(lines):
                source = first + r * across
                for k in range(kc):
                    out[base + k * width + r] = x[source + k]
        else:  # write each k's `width` elements together (contiguous reads for B's rows)
            for k in range(kc):
                source = first + k * along
                target = base + k * width
                for r in range(lines):
                    out[target + r] = x[source + r * across]
        for k in range(kc):
            for r in range(lines, width):
                out[base + k * width + r] = 0.0


@jit_out_of_line
def _store_block(block, rows, columns, c, at, rs, cs, accumulate):
    """C's rows x columns block at `at` (strides rs, cs) (+)= the micro-kernel's 6 x 16 block."""
    for r in range(rows):
        for t in range(columns):
            index = at + r * rs + t * cs
            if accumulate:
                c[index] += block[r * NR + t]
            else:
                c[index] = block[r * NR + t]


@jit_with_nrt
def _blocked(m, n, k, a, a_at, a_rs, a_cs, b, b_at, b_rs, b_cs, c, c_at, c_rs, c_cs):
    """C = A @ B (m x n, k > 0), strides in elements; the loops of BLIS's algorithm."""
    direct = b_cs == 1 and k <= DIRECT_K
    a_pack = np.empty(((min(MC, m) + MR - 1) // MR) * MR * min(KC, k), dtype=np.float32)
    # read in place, B needs a packed panel only for its last, partial one
    b_columns = NR if direct else ((min(NC, n) + NR - 1) // NR) * NR
    b_pack = np.empty(b_columns * min(KC, k), dtype=np.float32)
    block = np.empty(MR * NR, dtype=np.float32)
    for jc in range(0, n, NC):
        nc = min(NC, n - jc)
        for pc in range(0, k, KC):
            kc = min(KC, k - pc)
            accumulate = pc > 0
            if not direct:
                _pack(b, b_at + pc * b_rs + jc * b_cs, b_cs, b_rs, nc, kc, NR, b_pack)
            for ic in range(0, m, MC):
                mc = min(MC, m - ic)
                _pack(a, a_at + ic * a_rs + pc * a_cs, a_rs, a_cs, mc, kc, MR, a_pack)
                for jr in range(0, nc, NR):
                    columns = min(NR, nc - jr)
                    j = jc + jr
                    if direct and columns == NR:
                        source, start, stride = b, b_at + pc * b_rs + j, b_rs
                    elif direct:  # the last, partial panel: packed, zero-padded
                        _pack(b, b_at + pc * b_rs + j, 1, b_rs, columns, kc, NR, b_pack)
                        source, start, stride = b_pack, np.int64(0), np.int64(NR)
                    else:
                        source, start, stride = b_pack, np.int64((jr // NR) * kc * NR), np.int64(NR)
                    for i in range(0, mc, MR):
                        rows = min(MR, mc - i)
                        panel = (i // MR) * kc * MR
                        target = c_at + (ic + i) * c_rs + j * c_cs
                        if rows == MR and columns == NR and c_cs == 1:
                            _micro_kernel(
                                kc,
                                a_pack,
                                panel,
                                source,
                                start,
                                stride,
                                c,
                                target,
                                c_rs,
                                accumulate,
                            )
                        else:
                            _micro_kernel(
                                kc, a_pack, panel, source, start, stride, block, 0, NR, False
                            )
                            _store_block(block, rows, columns, c, target, c_rs, c_cs, accumulate)


@jit_with_nrt
def gemm_f32(m, n, k, a, a_at, a_rs, a_cs, b, b_at, b_rs, b_cs, c, c_at, c_rs, c_cs):
    """C[m, n] = A[m, k] @ B[k, n] on flat float32 arrays: element (i, j) of A at
    a[a_at + i * a_rs + j * a_cs], likewise B and C. C must not overlap A or B. Bounds are the
    caller's to check."""
    if m <= 0 or n <= 0:
        return
    if k <= 0:
        for i in range(m):
            for j in range(n):
                c[c_at + i * c_rs + j * c_cs] = 0.0
        return
    _blocked(m, n, k, a, a_at, a_rs, a_cs, b, b_at, b_rs, b_cs, c, c_at, c_rs, c_cs)


@jit_with_nrt
def matmul_f32(a, b, out):
    """out = a @ b on C-contiguous 2-D float32 arrays."""
    m, k = a.shape
    n = b.shape[1]
    gemm_f32(m, n, k, a.reshape(-1), 0, k, 1, b.reshape(-1), 0, n, 1, out.reshape(-1), 0, n, 1)


@jit_inline_ir
def packed_wins(k, n):
    """Whether `gemm_f32` beats the BLAS on a float32 product of inner size k, n columns."""
    return (k <= SHORT_K and n >= NARROW_N) or (k <= DIRECT_K and n >= WIDE_N)


def short_gemm(a, b, out):
    """out = a @ b on C-contiguous 2-D arrays: `matmul_f32` for float32 of the sizes where it
    is faster than the BLAS (`packed_wins`), the BLAS (`np.dot`) otherwise. The choice by
    dtype is made at typing (`_short_gemm`); from Python this calls the jitted one."""
    _short_gemm_compiled(a, b, out)


@overload(short_gemm)
def _short_gemm(a, b, out):
    if all(isinstance(x, types.Array) and x.dtype == types.float32 for x in (a, b, out)):

        def packed_or_blas(a, b, out):
            if packed_wins(a.shape[1], b.shape[1]):
                matmul_f32(a, b, out)
            else:
                np.dot(a, b, out)

        return packed_or_blas

    def blas(a, b, out):
        np.dot(a, b, out)

    return blas


def short_gemm_at(address, a, a_at, lda, b, b_at, ldb, c, c_at, ldc, m, n, k):
    """`rtsoa.ops.blas.gemm_at` (row-major blocks with leading dimensions, the BLAS GEMM at
    `address`), but by `gemm_f32` where `short_gemm` would take it. From Python this calls
    the jitted one."""
    _short_gemm_at_compiled(address, a, a_at, lda, b, b_at, ldb, c, c_at, ldc, m, n, k)


@overload(short_gemm_at)
def _short_gemm_at(address, a, a_at, lda, b, b_at, ldb, c, c_at, ldc, m, n, k):
    if all(isinstance(x, types.Array) and x.dtype == types.float32 for x in (a, b, c)):

        def packed_or_blas(address, a, a_at, lda, b, b_at, ldb, c, c_at, ldc, m, n, k):
            if packed_wins(k, n):
                gemm_f32(m, n, k, a, a_at, lda, 1, b, b_at, ldb, 1, c, c_at, ldc, 1)
            else:
                gemm_at(address, a, a_at, lda, b, b_at, ldb, c, c_at, ldc, m, n, k)

        return packed_or_blas

    def blas(address, a, a_at, lda, b, b_at, ldb, c, c_at, ldc, m, n, k):
        gemm_at(address, a, a_at, lda, b, b_at, ldb, c, c_at, ldc, m, n, k)

    return blas


@jit_with_nrt
def _short_gemm_compiled(a, b, out):
    short_gemm(a, b, out)  # the overload above


@jit_with_nrt
def _short_gemm_at_compiled(address, a, a_at, lda, b, b_at, ldb, c, c_at, ldc, m, n, k):
    short_gemm_at(address, a, a_at, lda, b, b_at, ldb, c, c_at, ldc, m, n, k)
