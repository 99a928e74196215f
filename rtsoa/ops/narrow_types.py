"""Element conversions of the types narrower than float32 that numpy does not compute in:
float16 and bfloat16 (their bits), the float8 formats (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, and
E8M0, the scale type: a power of two), float4 E2M1 and the 4- and 2-bit integers (one a byte,
in the low bits; see `rtsoa.abi.dtypes`).

Every value is decoded to float64 exactly; encoding rounds an exact float64 to the nearest
value of the type, halves to even, as `ml_dtypes` (what onnx.reference casts with) does. The
small floats are encoded through tables of their values built at import from the formats'
definitions (the jitted code reads them as constants; a test checks every code against
`ml_dtypes`, which rtsoa does not import at start): the nearest of the two neighbours, the
even code on a tie; beyond the largest finite value the type's overflow code (infinity, NaN,
or the largest value for float4), or the largest value itself when saturating (ONNX Cast's
`saturate`).
"""

import math
from typing import NamedTuple

import numpy as np

from rtsoa._jit import jit_inline_llvm
from rtsoa.abi.dtypes import DType

# -- float16 and bfloat16 -------------------------------------------------------------------------


BFLOAT16_LARGEST = (2.0 - 2.0**-7) * 2.0**127


@jit_inline_llvm
def _round_binary(value, mantissa, smallest_exponent, largest):
    """`value` rounded to the nearest value of a binary float with `mantissa` stored bits,
    normal exponents from `smallest_exponent` and largest finite value `largest` (halves to
    even, an infinity beyond), as a float64."""
    magnitude = abs(value)
    if magnitude != magnitude or magnitude == np.inf:
        return value
    exponent = max(math.frexp(magnitude)[1] - 1, smallest_exponent)  # subnormals: fixed step
    quantum = 2.0 ** (exponent - mantissa)
    rounded = np.rint(value / quantum) * quantum
    if abs(rounded) > largest:
        return np.inf if value > 0 else -np.inf
    return rounded


@jit_inline_llvm
def _binary_bits(value, mantissa, width, bias):
    """The bits of `value`, a value of the binary float with `mantissa` stored bits, a
    `width`-bit exponent and exponent `bias` (see _round_binary); NaN is the quiet NaN."""
    all_ones = (np.int64(1) << width) - 1
    sign = np.int64(1) << (mantissa + width) if math.copysign(1.0, value) < 0 else 0
    magnitude = abs(value)
    if magnitude != magnitude:
        return sign | (all_ones << mantissa) | (np.int64(1) << (mantissa - 1))
    if magnitude == np.inf:
        return sign | (all_ones << mantissa)
    if magnitude < 2.0 ** (1 - bias):
        return sign | np.int64(magnitude * 2.0 ** (bias - 1 + mantissa))
    exponent = math.frexp(magnitude)[1] - 1
    fraction = np.int64((magnitude * 2.0**-exponent - 1.0) * 2.0**mantissa)
    return sign | ((exponent + bias) << mantissa) | fraction


@jit_inline_llvm
def round_to_half(value):
    """`value` rounded to the nearest float16 (halves to even), as a float64; beyond float16's
    range it is an infinity, as numpy's conversion has it."""
    return _round_binary(value, 10, -14, 65504.0)


@jit_inline_llvm
def half_bits(value):
    """The float16 bits of `value`, a float64 that is a float16 value (see round_to_half)."""
    return np.uint16(_binary_bits(value, 10, 5, 15))


@jit_inline_llvm
def bfloat16_bits(value):
    """The bfloat16 nearest `value` made float32 (halves to even; NaN is the quiet NaN), as
    onnxruntime and ml_dtypes convert float32."""
    single = np.float64(np.float32(value))
    return np.uint16(_binary_bits(_round_binary(single, 7, -126, BFLOAT16_LARGEST), 7, 8, 127))


# -- float8 and float4: tables --------------------------------------------------------------------


class SmallFloat(NamedTuple):
    """A small float format: its row of the tables and its definition."""

    row: int
    bits: int  # code width: sign, exponent, mantissa
    exponent_bits: int
    bias: int
    specials: str  # "ieee": infinities and NaNs at the top exponent; "fn": NaN where every
    # exponent and mantissa bit is set, no infinity; "fnuz": NaN the negative-zero code, no
    # infinity; "": every code finite
    nan_codes: tuple  # what +NaN and -NaN convert to
    overflow_codes: tuple  # what +inf and -inf convert to (beyond the largest value)


SMALL_FLOATS = {
    DType.FLOAT8E4M3FN: SmallFloat(0, 8, 4, 7, "fn", (0x7F, 0xFF), (0x7F, 0xFF)),
    DType.FLOAT8E4M3FNUZ: SmallFloat(1, 8, 4, 8, "fnuz", (0x80, 0x80), (0x80, 0x80)),
    DType.FLOAT8E5M2: SmallFloat(2, 8, 5, 15, "ieee", (0x7E, 0xFE), (0x7C, 0xFC)),
    DType.FLOAT8E5M2FNUZ: SmallFloat(3, 8, 5, 16, "fnuz", (0x80, 0x80), (0x80, 0x80)),
    DType.FLOAT4E2M1: SmallFloat(4, 4, 2, 1, "", (0x8, 0x0), (0x7, 0xF)),
}


def decode_small_float(kind, code):
    """The value of code `code` of small float format `kind` (a DType), as a Python float."""
    spec = SMALL_FLOATS[kind]
    mantissa_bits = spec.bits - 1 - spec.exponent_bits
    sign = -1.0 if code >> (spec.bits - 1) else 1.0
    exponent = (code >> mantissa_bits) & ((1 << spec.exponent_bits) - 1)
    mantissa = code & ((1 << mantissa_bits) - 1)
    top = exponent == (1 << spec.exponent_bits) - 1
    nan = math.copysign(math.nan, sign)  # a NaN keeps the code's sign
    if spec.specials == "ieee" and top:
        return sign * math.inf if mantissa == 0 else nan
    if spec.specials == "fn" and top and mantissa == (1 << mantissa_bits) - 1:
        return nan
    if spec.specials == "fnuz" and code == 1 << (spec.bits - 1):
        return nan
    if exponent == 0:
        return sign * mantissa * 2.0 ** (1 - spec.bias - mantissa_bits)
    return sign * (1.0 + mantissa * 2.0**-mantissa_bits) * 2.0 ** (exponent - spec.bias)


def _tables():
    """DECODE[row, code] (float64), the non-negative finite values ascending with their codes
    (VALUES, CODES, COUNT), and per row SIGN (the sign bit), NAN_CODES (+NaN, -NaN) and
    OVERFLOW_CODES (+, -: what ml_dtypes gives beyond the largest value)."""
    rows = len(SMALL_FLOATS)
    decode = np.zeros((rows, 256), dtype=np.float64)
    values = np.zeros((rows, 256), dtype=np.float64)
    codes = np.zeros((rows, 256), dtype=np.int64)
    count = np.zeros(rows, dtype=np.int64)
    sign = np.zeros(rows, dtype=np.int64)
    nan_codes = np.zeros((rows, 2), dtype=np.int64)
    overflow_codes = np.zeros((rows, 2), dtype=np.int64)
    for kind, spec in SMALL_FLOATS.items():
        row = spec.row
        every = np.arange(1 << spec.bits, dtype=np.uint8)
        decoded = np.array([decode_small_float(kind, int(code)) for code in every])
        decode[row, : every.size] = decoded
        keep = np.isfinite(decoded) & ~np.signbit(decoded)
        order = np.argsort(decoded[keep], kind="stable")
        count[row] = int(keep.sum())
        values[row, : count[row]] = decoded[keep][order]
        codes[row, : count[row]] = every[keep][order]
        sign[row] = 1 << (spec.bits - 1)
        nan_codes[row] = spec.nan_codes
        overflow_codes[row] = spec.overflow_codes
    return decode, values, codes, count, sign, nan_codes, overflow_codes


DECODE, VALUES, CODES, COUNT, SIGN, NAN_CODES, OVERFLOW_CODES = _tables()


@jit_inline_llvm
def small_float_value(row, code):
    """The value of small-float code `code` of table row `row`."""
    return DECODE[row, code]


@jit_inline_llvm
def small_float_code(row, value, saturate):
    """The code of the small float (table row `row`) nearest `value`, halves to the even code;
    beyond the largest value the overflow code, or the largest value when `saturate`."""
    negative = math.copysign(1.0, value) < 0  # NaN and zero keep their sign too
    if value != value:
        return NAN_CODES[row, 1 if negative else 0]
    magnitude = abs(value)
    last = COUNT[row] - 1
    largest = VALUES[row, last]
    if magnitude > largest:
        step = largest - VALUES[row, last - 1]
        halfway = largest + step / 2
        even = CODES[row, last] % 2 == 0
        if saturate or magnitude < halfway or (magnitude == halfway and even):
            code = CODES[row, last]
        else:
            return OVERFLOW_CODES[row, 1 if negative else 0]
    else:
        low = np.int64(0)  # the last value <= magnitude (values[0] is 0)
        high = last
        while low < high:
            middle = (low + high + 1) // 2
            if VALUES[row, middle] <= magnitude:
                low = middle
            else:
                high = middle - 1
        code = CODES[row, low]
        if VALUES[row, low] != magnitude:
            below = magnitude - VALUES[row, low]
            above = VALUES[row, low + 1] - magnitude
            if above < below or (above == below and CODES[row, low] % 2 == 1):
                code = CODES[row, low + 1]
    if negative and (code != 0 or DECODE[row, SIGN[row]] == 0):  # -0 where the type has one
        code |= SIGN[row]
    return code


# -- float8 E8M0: 2**(code - 127), 0xFF NaN; no sign, no zero, no infinity ------------------------

E8M0_NAN = 0xFF
# Cast's round_mode for an E8M0 target (ONNX Cast 25 on; "up" by default)
ROUND_UP, ROUND_DOWN, ROUND_NEAREST = 0, 1, 2
ROUND_MODES = {"up": ROUND_UP, "down": ROUND_DOWN, "nearest": ROUND_NEAREST}


@jit_inline_llvm
def e8m0_value(code):
    """The value of E8M0 code `code` (as ml_dtypes.float8_e8m0fnu decodes it)."""
    if code == E8M0_NAN:
        return np.nan
    return 2.0 ** (np.int64(code) - 127)


@jit_inline_llvm
def e8m0_code(bits, saturate, mode):
    """The E8M0 code of the float32 whose bits are `bits`, as onnx.numpy_helper.to_float8e8m0
    (ONNX's definition) gives it: the float32's exponent field, raised by one when `mode`
    rounds its fraction up ("up": any fraction; "nearest": the guard bit with the round bit,
    the sticky bits or a normal exponent; "down": never), the sign ignored; NaN and the
    infinities give 0xFF (NaN), and so does rounding past 2**127 unless `saturate`."""
    exponent = (np.int64(bits) >> 23) & 0xFF
    if exponent == E8M0_NAN:
        return np.uint8(E8M0_NAN)
    up = False
    if mode == ROUND_UP:
        up = (bits & 0x7FFFFF) != 0
    elif mode == ROUND_NEAREST:
        guard = (bits & 0x400000) != 0
        rest = (bits & 0x200000) != 0 or (bits & 0x1FFFFF) != 0 or exponent > 0
        up = guard and rest
    if up and not (saturate and exponent == E8M0_NAN - 1):
        exponent += 1
    return np.uint8(exponent)


# -- 4- and 2-bit integers ------------------------------------------------------------------------


@jit_inline_llvm
def small_int_value(code, bits, signed):
    """The value of a `bits`-bit integer held in the low bits of byte `code`."""
    value = np.int64(code) & ((1 << bits) - 1)
    if signed and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


@jit_inline_llvm
def small_int_from_int(value, bits):
    """An integer wrapped to `bits` bits (two's complement), as a byte's low bits."""
    return np.uint8(value & ((1 << bits) - 1))


@jit_inline_llvm
def small_int_from_float(value, bits, signed):
    """A float truncated toward zero to a `bits`-bit integer; 0 where that is out of range or
    NaN (what ml_dtypes' conversion gives)."""
    lowest = -(1 << (bits - 1)) if signed else 0
    highest = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
    if not (lowest - 1 < value < highest + 1):
        return np.uint8(0)
    return small_int_from_int(np.int64(value), bits)
