"""The loops of the elementwise ops (`rtsoa.ops.elementwise`): one small function per family,
specialised per dtype only, `op` picking the formula; binary ones read their inputs through
index maps (`rtsoa.ops.broadcast`) or, for same-shape / bias / scalar inputs, by period.
"""

import math

import numpy as np

from rtsoa._jit import jit_inline_llvm, jit_with_nrt

ADD, SUB, MUL, DIV, POW, MAX, MIN = 0, 1, 2, 3, 4, 5, 6
EQUAL, LESS, GREATER = 0, 1, 2
RELU, LEAKY_RELU, SIGMOID, TANH, EXP, LOG, SQRT, NEG, ABS, ERF, SIGN = range(11)


@jit_inline_llvm
def _apply(op, a, b):
    """a op b for the float binary ops."""
    if op == ADD:
        return a + b
    if op == SUB:
        return a - b
    if op == MUL:
        return a * b
    if op == DIV:
        return a / b
    if op == POW:
        return a**b
    if op == MAX:
        return max(a, b)
    return min(a, b)


@jit_with_nrt
def binary_loop(op, x, xi, y, yi, out):
    """out[i] = x[xi[i]] op y[yi[i]]; xi / yi of length 0 mean the identity map."""
    n = out.shape[0]
    mapped_x = xi.shape[0] > 0
    mapped_y = yi.shape[0] > 0
    for i in range(n):
        a = x[xi[i]] if mapped_x else x[i]
        b = y[yi[i]] if mapped_y else y[i]
        out[i] = _apply(op, a, b)


@jit_with_nrt
def periodic_loop(op, x, px, y, py, out):
    """binary_loop where x[i % px] and y[i % py] are read, one of px / py being out's size and
    dividing by the other (same shapes, a bias, a scalar): no index map to build."""
    n = out.shape[0]
    if n == 0:
        return
    if px == n and py == n:
        for i in range(n):
            out[i] = _apply(op, x[i], y[i])
    elif px == n:
        for start in range(0, n, py):
            for j in range(py):
                out[start + j] = _apply(op, x[start + j], y[j])
    else:
        for start in range(0, n, px):
            for j in range(px):
                out[start + j] = _apply(op, x[j], y[start + j])


@jit_with_nrt
def int_binary_loop(op, x, xi, y, yi, out):
    """binary_loop for integers: DIV truncates toward zero (x / 0 gives 0), POW by squaring."""
    n = out.shape[0]
    mapped_x = xi.shape[0] > 0
    mapped_y = yi.shape[0] > 0
    for i in range(n):
        a = x[xi[i]] if mapped_x else x[i]
        b = y[yi[i]] if mapped_y else y[i]
        if op == ADD:
            out[i] = a + b
        elif op == SUB:
            out[i] = a - b
        elif op == MUL:
            out[i] = a * b
        elif op == DIV:
            if b == 0:
                out[i] = 0
            else:
                q = abs(a) // abs(b)
                out[i] = q if (a >= 0) == (b >= 0) else -q
        elif op == POW:
            result = a - a + 1
            base = a
            exponent = b
            while exponent > 0:
                if exponent & 1:
                    result *= base
                base *= base
                exponent >>= 1
            out[i] = result if b >= 0 else a - a
        elif op == MAX:
            out[i] = max(a, b)
        else:
            out[i] = min(a, b)


@jit_with_nrt
def compare_loop(op, x, xi, y, yi, out):
    """Bool out[i] = x[xi[i]] op y[yi[i]] (EQUAL / LESS / GREATER)."""
    mapped_x = xi.shape[0] > 0
    mapped_y = yi.shape[0] > 0
    for i in range(out.shape[0]):
        a = x[xi[i]] if mapped_x else x[i]
        b = y[yi[i]] if mapped_y else y[i]
        if op == EQUAL:
            out[i] = a == b
        elif op == LESS:
            out[i] = a < b
        else:
            out[i] = a > b


@jit_with_nrt
def unary_loop(op, x, out, p0, p1):
    """out[i] = f(x[i]) for the activation `op` (parameters p0, p1 where it has them)."""
    n = out.shape[0]
    zero = x.dtype.type(0)  # not x[0] - x[0], NaN where x[0] is NaN or infinite
    if op == RELU:
        for i in range(n):  # NaN and -0 stay as they are, as onnxruntime's Relu has them
            out[i] = zero if x[i] < 0 else x[i]
    elif op == LEAKY_RELU:
        for i in range(n):
            out[i] = x[i] if x[i] >= 0 else p0 * x[i]
    elif op == SIGMOID:
        for i in range(n):
            v = x[i]
            if v >= 0:
                out[i] = 1 / (1 + np.exp(-v))
            else:
                e = np.exp(v)
                out[i] = e / (1 + e)
    elif op == TANH:
        for i in range(n):
            out[i] = np.tanh(x[i])
    elif op == EXP:
        for i in range(n):
            out[i] = np.exp(x[i])
    elif op == LOG:
        for i in range(n):
            out[i] = np.log(x[i])
    elif op == SQRT:
        for i in range(n):
            out[i] = np.sqrt(x[i])
    elif op == NEG:
        for i in range(n):
            out[i] = -x[i]
    elif op == ABS:
        for i in range(n):
            out[i] = abs(x[i])
    elif op == ERF:
        for i in range(n):
            out[i] = math.erf(x[i])
    elif op == SIGN:
        for i in range(n):
            v = x[i]
            if v > 0:
                out[i] = 1
            elif v < 0:
                out[i] = -1
            else:  # 0 stays 0 and NaN stays NaN (numpy's sign, the ONNX reference)
                out[i] = v


@jit_with_nrt
def shrink_loop(x, out, lambd, bias):
    """out[i] = x + bias below -lambd, x - bias above lambd, else 0 (evaluated in float64)."""
    for i in range(min(x.shape[0], out.shape[0])):
        v = np.float64(x[i])
        if v < -lambd:
            out[i] = v + bias
        elif v > lambd:
            out[i] = v - bias
        else:
            out[i] = 0


@jit_with_nrt
def int_shrink_loop(x, out, lambd, bias):
    """shrink_loop for integers: the shifted value truncated toward zero (onnxruntime's cast)."""
    for i in range(min(x.shape[0], out.shape[0])):
        v = np.float64(x[i])
        if v < -lambd:
            out[i] = np.int64(v + bias)
        elif v > lambd:
            out[i] = np.int64(v - bias)
        else:
            out[i] = 0
