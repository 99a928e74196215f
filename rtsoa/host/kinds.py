"""What host steps share: the kind of a value (`STRING`, a sequence of maps, or a numpy dtype),
`HostOp`, and the helpers every host op uses on numpy object arrays of `str`.

A sequence of maps (ZipMap's output, `rtsoa.host.maps`) is a Python list of dicts {label:
float}, one per row, as onnxruntime returns it; its kind is the ONNX type it has, spelled as
onnxruntime's `NodeArg.type` spells it: `map_sequence("int64")` is
"seq(map(int64,tensor(float)))"."""

from typing import NamedTuple

import numpy as np

STRING = "string"  # the kind of a string tensor (other kinds are numpy dtypes)
MAP_KEYS = ("int64", "string")  # the key types of a sequence of maps


def map_sequence(key):
    """The kind of a sequence of maps from `key` ("int64" or "string") to float."""
    if key not in MAP_KEYS:
        raise ValueError(f"maps with {key} keys are not supported (int64 and string are)")
    return f"seq(map({key},tensor(float)))"


def is_map_sequence(kind):
    """Whether `kind` is the kind of a sequence of maps."""
    return isinstance(kind, str) and kind.startswith("seq(map(")


def map_key(kind):
    """The key type ("int64" or "string") of a sequence of maps' kind."""
    return kind[len("seq(map(") :].split(",")[0]


class HostOp(NamedTuple):
    prepare: object  # (attributes, input kinds, opset) -> (parameters, output kinds)
    run: object  # (parameters, input arrays) -> output arrays


def kind_name(kind):
    """How messages name a kind: 'string', 'float32', 'seq(map(int64,tensor(float)))',
    'unknown'."""
    if kind is None:
        return "unknown"
    return kind if isinstance(kind, str) else np.dtype(kind).name


def strings(values, shape):
    """A numpy object array of `shape` holding `values` (a list of str, in C order)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out.reshape(shape)


def require(kinds, index, want, what):
    """ValueError when input `index` is known and is (not) a string where `want` says."""
    kind = kinds[index] if index < len(kinds) else None
    if kind is not None and (kind == STRING) != (want == STRING):
        raise ValueError(f"input {index} ({what}) is {kind_name(kind)}, expected {want}")


def broadcast(inputs):
    """The arrays broadcast to one shape, or ValueError naming their shapes."""
    try:
        return np.broadcast_arrays(*inputs)
    except ValueError:
        shapes = " and ".join(str(array.shape) for array in inputs)
        raise ValueError(f"input shapes {shapes} do not broadcast") from None


def check_string_array(array, what):
    """`array` as a numpy object array of str, or ValueError naming `what` and the element."""
    if array.dtype.kind == "U":
        return strings([str(v) for v in array.ravel()], array.shape)
    if array.dtype != object:
        raise ValueError(f"{what} has dtype {array.dtype}, the model takes strings")
    for index, value in enumerate(array.ravel()):
        if not isinstance(value, str):
            raise ValueError(
                f"{what} element {index} is a {type(value).__name__}, the model takes strings"
            )
    return array
