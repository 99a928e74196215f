"""Fourier transforms: DFT (opsets 17 and 20) and STFT (opset 17).

DFT. Inputs: x, [d0, ..., dk, parts] with parts 1 (real) or 2 (real, imaginary); dft_length
(optional, int32 / int64 scalar or one-element 1-D, a `data_inputs` position); axis (optional,
opset 20, the same kinds of scalar). attrs: [inverse, onesided, axis], the last used when the
axis input is absent (opset 17's attribute, or opset 20's default -2, set by the converter).
The axis is one of d0 .. dk (negative: counted from the back, parts included). n =
dft_length, by default the axis length, or 2 (length - 1) for the inverse one-sided transform
(IRFFT). The axis is cut to n or padded with zeros to n, then transformed:
y[k] = sum_j x[j] exp(-2 pi i jk / n), or the inverse (1/n) sum_j x[j] exp(2 pi i jk / n).
A forward one-sided result keeps k in 0 .. n / 2; an inverse one-sided input holds the first
n / 2 + 1 values of a Hermitian spectrum (the imaginary parts of the zero and, for an even n,
the middle frequency are dropped, as numpy.fft.irfft does) and its result is real (parts 1).
Complex input to a one-sided transform is transformed as onnx.reference does (in full, then
cut), not refused.

STFT. Inputs: signal [batch, length, parts]; frame_step (scalar); window (optional, 1-D, the
signal's type); frame_length (optional scalar: by default the window's length, else the
signal's). attrs: [onesided]. Frame t holds signal[t * step + j] * window[j] for j below the
frame length; each frame's DFT (the first frame_length / 2 + 1 frequencies if onesided) makes
the output [batch, frames, frequencies, 2], frames = (length - frame_length) / step + 1.

Sums run in complex128 whatever the element type: radix 2 in place for a power-of-two n,
Bluestein's chirp convolution (by radix 2) for other n above DIRECT_MAX, so O(n log n) for
every long n; direct sums over a table of n twiddles for the short ones. float32 / float64,
float16 / bfloat16 (rounded to nearest from float64). A DFT of no points, a window whose
length is not the frame length, a frame longer than the signal or a step below 1 fail with
STATUS_OP_BAD_SHAPE / STATUS_OP_BAD_ATTRIBUTE.
"""

import numpy as np

from rtsoa._jit import jit_with_nrt
from rtsoa.ops.abi import (
    F16,
    F32,
    F64,
    OK,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_SHAPE,
    DType,
    dim,
    dtype,
    numel,
    present,
    rank,
    set_dim,
    set_output,
)
from rtsoa.ops.cast import BF16, read_float, write_float
from rtsoa.ops.copying import holds
from rtsoa.ops.cumulative import integer_scalar
from rtsoa.ops.registry import register_op

# The element types of a signal (ONNX's T1 of DFT and STFT).
SIGNAL_TYPES = frozenset({DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16})
SCALAR_TYPES = frozenset({DType.INT32, DType.INT64})
INVERSE, ONESIDED, AXIS = 0, 1, 2
# Lengths up to this that are not powers of two are summed directly; longer ones by Bluestein.
DIRECT_MAX = 32


# -- the transform ----------------------------------------------------------------------------


@jit_with_nrt
def twiddles(n, inverse):
    """exp(-2 pi i k / n) for k in 0 .. n - 1 (exp(+...) for the inverse)."""
    w = np.empty(n, dtype=np.complex128)
    sign = 1.0 if inverse else -1.0
    for k in range(n):
        angle = 2.0 * np.pi * k / n
        w[k] = complex(np.cos(angle), sign * np.sin(angle))
    return w


@jit_with_nrt
def _radix2(a, w):
    """`a` (a power-of-two length) replaced by its transform: bit reversal, then butterflies."""
    n = a.shape[0]
    j = 0
    for i in range(1, n):
        bit = n >> 1
        while j & bit:
            j ^= bit
            bit >>= 1
        j |= bit
        if i < j:
            a[i], a[j] = a[j], a[i]
    size = 2
    while size <= n:
        half = size // 2
        step = n // size
        for start in range(0, n, size):
            for k in range(half):
                t = w[k * step] * a[start + k + half]
                u = a[start + k]
                a[start + k] = u + t
                a[start + k + half] = u - t
        size *= 2


@jit_with_nrt
def plan(n, inverse):
    """What `transform` needs for length n: (twiddles, chirp, kernel). A power of two or a
    length up to DIRECT_MAX: the n twiddles, chirp and kernel empty. Else Bluestein's
    algorithm: the twiddles of the padded power-of-two length m >= 2n - 1, the chirp
    exp(-+i pi k^2 / n) (k^2 taken mod 2n, so the angle stays exact) and the forward
    transform of its conjugate laid out circularly."""
    empty = np.empty(0, dtype=np.complex128)
    if n & (n - 1) == 0 or n <= DIRECT_MAX:
        return twiddles(n, inverse), empty, empty
    m = 1
    while m < 2 * n - 1:
        m *= 2
    sign = 1.0 if inverse else -1.0
    chirp = np.empty(n, dtype=np.complex128)
    for k in range(n):
        angle = np.pi * ((k * k) % (2 * n)) / n
        chirp[k] = complex(np.cos(angle), sign * np.sin(angle))
    w = twiddles(m, False)
    kernel = np.zeros(m, dtype=np.complex128)
    kernel[0] = np.conj(chirp[0])
    for k in range(1, n):
        kernel[k] = np.conj(chirp[k])
        kernel[m - k] = np.conj(chirp[k])
    _radix2(kernel, w)
    return w, chirp, kernel


@jit_with_nrt
def scratch(n, kernel):
    """The work array `transform` takes for a plan of length n."""
    return np.empty(max(n, kernel.shape[0]), dtype=np.complex128)


@jit_with_nrt
def transform(a, w, chirp, kernel, work):
    """`a` (complex128[n]) replaced by its DFT with the plan (w, chirp, kernel) of `plan`;
    `work` from `scratch`."""
    n = a.shape[0]
    if chirp.shape[0] > 0:  # Bluestein: a convolution with the chirp, by radix 2
        m = kernel.shape[0]
        for k in range(n):
            work[k] = a[k] * chirp[k]
        work[n:m] = 0j
        _radix2(work, w)
        for k in range(m):
            work[k] = np.conj(work[k] * kernel[k])
        _radix2(work, w)  # the inverse, through conjugates
        for k in range(n):
            a[k] = np.conj(work[k]) / m * chirp[k]
        return
    if n & (n - 1) == 0:
        _radix2(a, w)
        return
    for k in range(n):
        total = 0j
        index = 0
        for j in range(n):
            total += a[j] * w[index]
            index += k
            if index >= n:
                index -= n
        work[k] = total
    a[:n] = work[:n]


@jit_with_nrt
def signal_type(kind):
    """Is `kind` one of SIGNAL_TYPES?"""
    return kind == F32 or kind == F64 or kind == F16 or kind == BF16


# -- DFT --------------------------------------------------------------------------------------


@jit_with_nrt
def _dft_setup(arena, table, n_in, attrs):
    """(status, axis in 0 .. rank - 2, n)."""
    if attrs.shape[0] < 3:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), 0, 0
    for flag in (INVERSE, ONESIDED):
        if attrs[flag] != 0 and attrs[flag] != 1:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE), 0, 0
    if not signal_type(dtype(table, 0)):
        return np.int32(STATUS_OP_BAD_DTYPE), 0, 0
    r = rank(table, 0)
    if r < 2 or (dim(table, 0, r - 1) != 1 and dim(table, 0, r - 1) != 2):
        return np.int32(STATUS_OP_BAD_SHAPE), 0, 0
    axis = attrs[AXIS]
    if n_in > 2 and present(table, 2):
        status, axis = integer_scalar(arena, table, 2, True)
        if status != 0:
            return status, 0, 0
    if axis < 0:
        axis += r
    if axis < 0 or axis > r - 2:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), 0, 0
    length = dim(table, 0, axis)
    if n_in > 1 and present(table, 1):
        status, n = integer_scalar(arena, table, 1, True)
        if status != 0:
            return status, 0, 0
    elif attrs[INVERSE] == 1 and attrs[ONESIDED] == 1:
        n = 2 * (length - 1)
    else:
        n = length
    if n < 1:
        return np.int32(STATUS_OP_BAD_SHAPE), 0, 0
    return OK, axis, n


@jit_with_nrt
def dft_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, axis, n = _dft_setup(arena, table, n_in, attrs)
    if status != 0:
        return status
    r = rank(table, 0)
    set_output(table, n_in, dtype(table, 0), r)
    for d in range(r - 1):
        set_dim(table, n_in, d, dim(table, 0, d))
    inverse, onesided = attrs[INVERSE] == 1, attrs[ONESIDED] == 1
    set_dim(table, n_in, axis, n // 2 + 1 if onesided and not inverse else n)
    set_dim(table, n_in, r - 1, 1 if onesided and inverse else 2)
    return OK


@jit_with_nrt
def _dft_lines(x, out, outer, length, inner, parts, n, out_length, inverse, onesided):
    """Every line of `x` ([outer, length, inner, parts] in C order) along its second axis
    transformed into `out` ([outer, out_length, inner, 1 or 2])."""
    w, chirp, kernel = plan(n, inverse)
    a = np.empty(n, dtype=np.complex128)
    work = scratch(n, kernel)
    real_out = inverse and onesided
    out_parts = 1 if real_out else 2
    scale = 1.0 / n if inverse else 1.0
    taken = min(length, n // 2 + 1) if real_out else min(length, n)
    for o in range(outer):
        for i in range(inner):
            a[:] = 0j
            for j in range(taken):
                at = ((o * length + j) * inner + i) * parts
                a[j] = complex(x[at], x[at + 1] if parts == 2 else 0.0)
            if real_out:  # the Hermitian spectrum the one-sided half stands for
                a[0] = complex(a[0].real, 0.0)
                if n % 2 == 0:
                    a[n // 2] = complex(a[n // 2].real, 0.0)
                for k in range(1, (n + 1) // 2):
                    a[n - k] = np.conj(a[k])
            transform(a, w, chirp, kernel, work)
            for k in range(out_length):
                at = ((o * out_length + k) * inner + i) * out_parts
                out[at] = a[k].real * scale
                if out_parts == 2:
                    out[at + 1] = a[k].imag * scale


@jit_with_nrt
def dft_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = dft_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    _, axis, n = _dft_setup(arena, table, n_in, attrs)
    if not holds(table, 0) or not holds(table, n_in):
        return np.int32(STATUS_OP_BAD_SHAPE)
    r = rank(table, 0)
    outer = np.int64(1)
    for d in range(axis):
        outer *= dim(table, 0, d)
    inner = np.int64(1)
    for d in range(axis + 1, r - 1):
        inner *= dim(table, 0, d)
    x = read_float(arena, table, 0, numel(table, 0))
    size = numel(table, n_in)
    out = np.empty(size, dtype=np.float64)
    _dft_lines(
        x,
        out,
        outer,
        dim(table, 0, axis),
        inner,
        dim(table, 0, r - 1),
        n,
        dim(table, n_in, axis),
        attrs[INVERSE] == 1,
        attrs[ONESIDED] == 1,
    )
    return write_float(arena, table, n_in, out, size, False)


def encode_dft(attributes, inputs):
    """DFT slots: inverse, onesided, axis (what the converter set: opset 17's attribute or
    opset 20's default)."""
    return [
        int(attributes.get("inverse", 0)),
        int(attributes.get("onesided", 0)),
        int(attributes.get("axis", -2)),
    ]


# -- STFT -------------------------------------------------------------------------------------


@jit_with_nrt
def _stft_setup(arena, table, n_in, attrs):
    """(status, frame step, frame length)."""
    if attrs.shape[0] < 1 or (attrs[0] != 0 and attrs[0] != 1):
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), 0, 0
    if not signal_type(dtype(table, 0)):
        return np.int32(STATUS_OP_BAD_DTYPE), 0, 0
    if rank(table, 0) != 3 or (dim(table, 0, 2) != 1 and dim(table, 0, 2) != 2):
        return np.int32(STATUS_OP_BAD_SHAPE), 0, 0
    status, step = integer_scalar(arena, table, 1, True)
    if status != 0:
        return status, 0, 0
    if step < 1:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE), 0, 0
    windowed = n_in > 2 and present(table, 2)
    if windowed:
        if dtype(table, 2) != dtype(table, 0):
            return np.int32(STATUS_OP_BAD_DTYPE), 0, 0
        if rank(table, 2) != 1:
            return np.int32(STATUS_OP_BAD_SHAPE), 0, 0
    if n_in > 3 and present(table, 3):
        status, frame = integer_scalar(arena, table, 3, True)
        if status != 0:
            return status, 0, 0
    elif windowed:
        frame = dim(table, 2, 0)
    else:
        frame = dim(table, 0, 1)
    if frame < 1 or frame > dim(table, 0, 1) or (windowed and dim(table, 2, 0) != frame):
        return np.int32(STATUS_OP_BAD_SHAPE), 0, 0
    return OK, step, frame


@jit_with_nrt
def stft_infer(arena, table, n_in, n_out, attrs, fattrs):
    status, step, frame = _stft_setup(arena, table, n_in, attrs)
    if status != 0:
        return status
    set_output(table, n_in, dtype(table, 0), 4)
    set_dim(table, n_in, 0, dim(table, 0, 0))
    set_dim(table, n_in, 1, (dim(table, 0, 1) - frame) // step + 1)
    set_dim(table, n_in, 2, frame // 2 + 1 if attrs[0] == 1 else frame)
    set_dim(table, n_in, 3, 2)
    return OK


@jit_with_nrt
def _stft_frames(x, window, out, batch, length, parts, step, frames, bins):
    """The DFT of every windowed frame of `x` ([batch, length, parts]) into `out`
    ([batch, frames, bins, 2])."""
    n = window.shape[0]
    w, chirp, kernel = plan(n, False)
    a = np.empty(n, dtype=np.complex128)
    work = scratch(n, kernel)
    for b in range(batch):
        for t in range(frames):
            for j in range(n):
                at = (b * length + t * step + j) * parts
                a[j] = complex(x[at], x[at + 1] if parts == 2 else 0.0) * window[j]
            transform(a, w, chirp, kernel, work)
            for k in range(bins):
                at = ((b * frames + t) * bins + k) * 2
                out[at] = a[k].real
                out[at + 1] = a[k].imag


@jit_with_nrt
def stft_compute(arena, table, n_in, n_out, attrs, fattrs):
    status = stft_infer(arena, table, n_in, n_out, attrs, fattrs)
    if status != 0:
        return status
    _, step, frame = _stft_setup(arena, table, n_in, attrs)
    windowed = n_in > 2 and present(table, 2)
    if not holds(table, 0) or not holds(table, n_in) or (windowed and not holds(table, 2)):
        return np.int32(STATUS_OP_BAD_SHAPE)
    window = read_float(arena, table, 2, frame) if windowed else np.ones(frame)
    size = numel(table, n_in)
    out = np.empty(size, dtype=np.float64)
    _stft_frames(
        read_float(arena, table, 0, numel(table, 0)),
        window,
        out,
        dim(table, 0, 0),
        dim(table, 0, 1),
        dim(table, 0, 2),
        step,
        dim(table, n_in, 1),
        dim(table, n_in, 2),
    )
    return write_float(arena, table, n_in, out, size, False)


def encode_stft(attributes, inputs):
    """STFT slots: onesided (default 1)."""
    return [int(attributes.get("onesided", 1))]


register_op(
    "DFT",
    dft_infer,
    dft_compute,
    encode=encode_dft,
    inputs=(1, 3),
    data_inputs=(1, 2),
    dtypes={0: SIGNAL_TYPES, 1: SCALAR_TYPES, 2: SCALAR_TYPES},
)
register_op(
    "STFT",
    stft_infer,
    stft_compute,
    encode=encode_stft,
    inputs=(2, 4),
    data_inputs=(1, 3),
    dtypes={0: SIGNAL_TYPES, 1: SCALAR_TYPES, 2: SIGNAL_TYPES, 3: SCALAR_TYPES},
)
