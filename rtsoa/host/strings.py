"""The host ops: string tensors' ops, run in Python on numpy object arrays of `str`.

Each op is a `HostOp`: `prepare(attributes, input kinds, opset)` runs at lowering, checks the
attributes and the input element kinds (a ValueError the lowering turns into a LoweringError
naming the node) and returns the op's parameters (plain data) and its output kinds;
`run(parameters, inputs)` runs at execute time on numpy arrays and raises ValueError for
input it cannot take (the runner names the node). A kind is `STRING` or a numpy dtype.

Semantics follow onnxruntime where ONNX leaves room: Cast formats floats as C's "%.8g" ("NaN",
"INF", "-INF"), bools as "1" / "0", and parses strings as C's strtod / strtoll do (leading
white space skipped, the longest numeric prefix read: "1.5abc" is 1.5, "1.5" cast to an
integer is 1, wrapping to the target width); a string with no numeric prefix is an error.
StringNormalizer removes whole elements equal to a stop word. RegexFullMatch takes RE2
syntax: patterns whose meaning differs in Python's `re` (lookaround, back references, POSIX
classes, \\p, \\Q..\\E, \\C, \\Z) are refused at lowering; \\d, \\w, \\s are ASCII as in RE2.
"""

import operator
import re

import numpy as np

from rtsoa.abi.dtypes import DTYPE_OF_ONNX, DTYPES
from rtsoa.host.kinds import STRING, HostOp, broadcast, kind_name, require, strings

try:  # the parser of Python's `re`, to read patterns: re._parser from 3.11, sre_parse before
    from re import _parser as parser
except ImportError:  # pragma: no cover
    import sre_parse as parser

ONNX_STRING = 8  # TensorProto.STRING
# The element types Cast converts to and from strings.
_CASTABLE = tuple(
    np.dtype(name)
    for name in (
        "float16 float32 float64 int8 int16 int32 int64 uint8 uint16 uint32 uint64 bool"
    ).split()
)


# -- Identity, Equal, StringConcat ----------------------------------------------------------------


def _prepare_identity(attributes, kinds, opset):
    return {}, [kinds[0]]


def _run_identity(parameters, inputs):
    return [inputs[0].copy()]


def _prepare_constant(attributes, kinds, opset):
    if "value_string" in attributes:
        value = strings([attributes["value_string"]], ())
    elif "value_strings" in attributes:
        value = strings(list(attributes["value_strings"]), (len(attributes["value_strings"]),))
    else:
        value = attributes.get("value")
        if not isinstance(value, np.ndarray) or value.dtype != object:
            raise ValueError("a string Constant needs value_string, value_strings or a value")
    return {"value": value}, [STRING]


def _run_constant(parameters, inputs):
    return [parameters["value"].copy()]


def _prepare_equal(attributes, kinds, opset):
    if (kinds[0] == STRING) != (kinds[1] == STRING):
        raise ValueError(
            f"compares {kind_name(kinds[0])} with {kind_name(kinds[1])}: both inputs must be "
            "strings"
        )
    return {}, [np.dtype(bool)]


def _run_equal(parameters, inputs):
    a, b = broadcast(inputs)
    return [np.frompyfunc(operator.eq, 2, 1)(a, b).astype(bool).reshape(a.shape)]


def _prepare_concat(attributes, kinds, opset):
    require(kinds, 0, STRING, "X")
    require(kinds, 1, STRING, "Y")
    return {}, [STRING]


def _run_concat(parameters, inputs):
    a, b = broadcast(inputs)
    joined = np.frompyfunc(operator.add, 2, 1)(a, b)
    return [strings(list(np.asarray(joined, dtype=object).ravel()), a.shape)]


# -- Cast, CastLike -------------------------------------------------------------------------------


def _castable(code, what):
    if code == ONNX_STRING:
        return STRING
    dtype = DTYPE_OF_ONNX.get(int(code))
    kind = None if dtype is None else np.dtype(DTYPES[dtype].numpy)
    if kind not in _CASTABLE:
        raise ValueError(_not_castable(what, "unknown" if dtype is None else DTYPES[dtype].name))
    return kind


def _not_castable(what, name):
    return (
        f"{what} element type {name} cannot be cast to or from a string (rtsoa casts strings "
        f"to and from {', '.join(k.name for k in _CASTABLE)})"
    )


def _prepare_cast(attributes, kinds, opset):
    to = attributes.get("to")
    if not isinstance(to, int):
        raise ValueError("attribute 'to' must be an element type code")
    target = _castable(to, "target")
    return _cast_parameters(kinds[0], target)


def _prepare_cast_like(attributes, kinds, opset):
    if kinds[1] is None:
        raise ValueError("input 1 (target_type) has no known element type")
    return _cast_parameters(kinds[0], kinds[1])


def _cast_parameters(source, target):
    if source is None:
        raise ValueError("input 0 has no known element type")
    for kind, what in ((source, "input"), (target, "target")):
        if kind != STRING and np.dtype(kind) not in _CASTABLE:
            raise ValueError(_not_castable(what, np.dtype(kind).name))
    return {"target": target if target == STRING else target.str}, [target]


_FLOAT_PREFIX = re.compile(
    r"\s*([+-]?(?:inf(?:inity)?|nan|0x(?:[0-9a-f]+\.?[0-9a-f]*|\.[0-9a-f]+)(?:p[+-]?\d+)?"
    r"|(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?))",
    re.IGNORECASE | re.ASCII,
)
_INTEGER_PREFIX = re.compile(r"\s*([+-]?\d+)", re.ASCII)


def _run_cast(parameters, inputs):
    x = inputs[0]
    target = parameters["target"]
    if target == STRING:
        return [x.copy() if x.dtype == object else _format(x)]
    return [_parse(x, np.dtype(target))]


def _format(x):
    """Numbers as onnxruntime writes them: ints in decimal, bools 1 / 0, floats "%.8g"."""
    if x.dtype == bool:
        return strings(["1" if v else "0" for v in x.ravel().tolist()], x.shape)
    if x.dtype.kind in "iu":
        return strings([str(v) for v in x.ravel().tolist()], x.shape)
    texts = []
    for value in x.astype(np.float64).ravel().tolist():
        if value != value:
            texts.append("NaN")
        elif value in (float("inf"), float("-inf")):
            texts.append("INF" if value > 0 else "-INF")
        else:
            texts.append(f"{value:.8g}")
    return strings(texts, x.shape)


def _parse(x, target):
    """Strings as C's strtod / strtoll read them (the longest numeric prefix)."""
    flat = x.ravel()
    if target.kind == "f":
        values = [_parse_float(text, index) for index, text in enumerate(flat)]
        with np.errstate(over="ignore"):
            return np.array(values, dtype=np.float64).astype(target).reshape(x.shape)
    signed = target.kind == "i"
    bits = target.itemsize * 8
    values = [_parse_integer(text, index, signed) for index, text in enumerate(flat)]
    if target.kind == "b":
        return np.array([v != 0 for v in values], dtype=bool).reshape(x.shape)
    wrapped = [v % (1 << bits) for v in values]
    if signed:
        wrapped = [v - (1 << bits) if v >= 1 << (bits - 1) else v for v in wrapped]
    return np.array(wrapped, dtype=target).reshape(x.shape)


def _parse_float(text, index):
    match = _FLOAT_PREFIX.match(text)
    if match is None:
        raise ValueError(f"element {index} {text!r} is not a number")
    number = match.group(1)
    if "x" in number.lower():
        return float.fromhex(number)
    return float(number)


def _parse_integer(text, index, signed):
    match = _INTEGER_PREFIX.match(text)
    if match is None:
        raise ValueError(f"element {index} {text!r} is not an integer")
    value = int(match.group(1))
    if signed and not -(1 << 63) <= value < 1 << 63:
        raise ValueError(f"element {index} {text!r} is out of the range of int64")
    if not signed and abs(value) >= 1 << 64:
        raise ValueError(f"element {index} {text!r} is out of the range of uint64")
    return value


# -- StringNormalizer, StringSplit, RegexFullMatch ------------------------------------------------

_CASE_ACTIONS = ("NONE", "LOWER", "UPPER")


def _prepare_normalizer(attributes, kinds, opset):
    require(kinds, 0, STRING, "X")
    action = attributes.get("case_change_action", "NONE")
    if action not in _CASE_ACTIONS:
        raise ValueError(f"case_change_action {action!r} is not one of {list(_CASE_ACTIONS)}")
    locale = attributes.get("locale", "")
    if locale and not (locale in ("C", "POSIX") or locale.startswith("en")):
        raise ValueError(
            f"locale {locale!r} is not supported (rtsoa changes case as Unicode does, which "
            "is the English locales' rule: give an en_* locale, C or none)"
        )
    sensitive = bool(attributes.get("is_case_sensitive", 0))
    stopwords = [str(word) for word in attributes.get("stopwords", [])]
    if not sensitive:
        stopwords = [word.lower() for word in stopwords]
    return {"action": action, "sensitive": sensitive, "stopwords": stopwords}, [STRING]


def _run_normalizer(parameters, inputs):
    x = inputs[0]
    if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)) or x.size == 0:
        raise ValueError(f"input shape {x.shape}: StringNormalizer takes [C] or [1, C], C > 0")
    stops = set(parameters["stopwords"])
    sensitive = parameters["sensitive"]
    kept = [word for word in x.ravel() if (word if sensitive else word.lower()) not in stops]
    if parameters["action"] == "LOWER":
        kept = [word.lower() for word in kept]
    elif parameters["action"] == "UPPER":
        kept = [word.upper() for word in kept]
    if not kept:
        kept = [""]
    shape = (len(kept),) if x.ndim == 1 else (1, len(kept))
    return [strings(kept, shape)]


def _prepare_split(attributes, kinds, opset):
    require(kinds, 0, STRING, "X")
    delimiter = attributes.get("delimiter", "") or None
    maxsplit = attributes.get("maxsplit", -1)
    if not isinstance(maxsplit, int):
        raise ValueError(f"maxsplit must be an int, got {maxsplit!r}")
    return {"delimiter": delimiter, "maxsplit": max(maxsplit, -1)}, [STRING, np.dtype(np.int64)]


def _run_split(parameters, inputs):
    x = inputs[0]
    parts = [_split(text, parameters["delimiter"], parameters["maxsplit"]) for text in x.ravel()]
    counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(x.shape)
    width = max((len(p) for p in parts), default=0)
    padded = [word for p in parts for word in p + [""] * (width - len(p))]
    return [strings(padded, (*x.shape, width)), counts]


def _split(text, delimiter, maxsplit):
    """onnxruntime's split: an empty string has no parts; on white space, the last part has
    no trailing white space either (Python keeps it when maxsplit stops the split)."""
    if not text:
        return []
    parts = text.split(delimiter, maxsplit)
    if delimiter is None and parts:
        parts[-1] = parts[-1].rstrip()
    return parts


# Python re tokens RE2 does not have: lookaround, back references, conditionals, atomic groups,
# possessive repeats.
_NOT_RE2 = {"ASSERT", "ASSERT_NOT", "GROUPREF", "GROUPREF_EXISTS", "ATOMIC_GROUP"}
_NOT_RE2 |= {"POSSESSIVE_REPEAT"}
# RE2 syntax Python's re reads differently (or not at all).
_RE2_ONLY = re.compile(r"\\[pPQECzZ]|\[:\^?[a-z]+:\]")


def _prepare_regex(attributes, kinds, opset):
    require(kinds, 0, STRING, "X")
    pattern = attributes.get("pattern")
    if not isinstance(pattern, str):
        raise ValueError("attribute 'pattern' is required")
    unescaped = re.sub(r"\\\\", "", pattern)
    found = _RE2_ONLY.search(unescaped)
    if found:
        raise ValueError(f"pattern {pattern!r}: {found.group(0)!r} is not supported")
    try:
        compiled = re.compile(pattern, re.ASCII)
    except re.error as error:
        raise ValueError(
            f"pattern {pattern!r} is not a valid regular expression ({error})"
        ) from None
    token = _python_only_token(pattern)
    if token:
        raise ValueError(f"pattern {pattern!r} uses {token}, which RE2 does not have")
    return {"pattern": compiled.pattern}, [np.dtype(bool)]


def _python_only_token(pattern):
    """The name of the first token of `pattern` that RE2 lacks, or None."""

    def walk(items):
        for op, argument in items:
            if str(op) in _NOT_RE2:
                return {"ASSERT": "lookaround", "ASSERT_NOT": "lookaround"}.get(
                    str(op), str(op).lower().replace("_", " ")
                )
            for part in argument if isinstance(argument, list | tuple) else ():
                if isinstance(part, parser.SubPattern):
                    found = walk(part)
                    if found:
                        return found
                elif isinstance(part, list | tuple):
                    for inner in part:
                        if isinstance(inner, parser.SubPattern):
                            found = walk(inner)
                            if found:
                                return found
        return None

    return walk(parser.parse(pattern, re.ASCII))


def _run_regex(parameters, inputs):
    compiled = re.compile(parameters["pattern"], re.ASCII)
    x = inputs[0]
    matched = [compiled.fullmatch(text) is not None for text in x.ravel()]
    return [np.array(matched, dtype=bool).reshape(x.shape)]


# (domain, op) -> HostOp of the string ops
STRING_OPS = {
    ("", "Identity"): HostOp(_prepare_identity, _run_identity),
    ("", "Constant"): HostOp(_prepare_constant, _run_constant),
    ("", "Equal"): HostOp(_prepare_equal, _run_equal),
    ("", "Cast"): HostOp(_prepare_cast, _run_cast),
    ("", "CastLike"): HostOp(_prepare_cast_like, _run_cast),
    ("", "StringConcat"): HostOp(_prepare_concat, _run_concat),
    ("", "StringNormalizer"): HostOp(_prepare_normalizer, _run_normalizer),
    ("", "StringSplit"): HostOp(_prepare_split, _run_split),
    ("", "RegexFullMatch"): HostOp(_prepare_regex, _run_regex),
}
