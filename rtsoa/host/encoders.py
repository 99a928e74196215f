"""Host ops that encode tokens: ai.onnx.ml LabelEncoder (a lookup table from keys to values)
and TfIdfVectorizer (n-gram counts of a pool of int or string n-grams). Both run on the host
whatever their element types: they are table lookups over Python dicts, with no device op.
"""

import math

import numpy as np

from rtsoa.host.kinds import STRING, HostOp, kind_name, strings

# -- LabelEncoder (ai.onnx.ml 2 and 4) ------------------------------------------------------------

_KEYS = (("keys_strings", STRING), ("keys_int64s", np.int64), ("keys_floats", np.float32))
_VALUES = (("values_strings", STRING), ("values_int64s", np.int64), ("values_floats", np.float32))
_DEFAULTS = {STRING: ("default_string", "_Unused"), "i": ("default_int64", -1)}
_DEFAULTS["f"] = ("default_float", -0.0)


def _list_or_tensor(attributes, pairs, tensor_name, what):
    """(kind, list of items) of the one keys / values attribute given."""
    given = [(name, kind) for name, kind in pairs if attributes.get(name) is not None]
    tensor = attributes.get(tensor_name)
    if tensor is not None:
        given.append((tensor_name, None))
    if len(given) != 1:
        names = [name for name, _ in pairs] + [tensor_name]
        found = [name for name, _ in given] or "none"
        raise ValueError(f"exactly one of {names} must be given for the {what}, got {found}")
    name, kind = given[0]
    if name == tensor_name:
        array = np.asarray(tensor)
        kind = STRING if array.dtype == object else array.dtype
        return kind, array.ravel().tolist()
    return np.dtype(kind) if kind != STRING else STRING, list(attributes[name])


def _prepare_label_encoder(attributes, kinds, opset):
    if opset < 2:
        raise ValueError("LabelEncoder of ai.onnx.ml opset 1 (classes_strings) is not supported")
    key_kind, keys = _list_or_tensor(attributes, _KEYS, "keys_tensor", "keys")
    value_kind, values = _list_or_tensor(attributes, _VALUES, "values_tensor", "values")
    if len(keys) != len(values):
        raise ValueError(f"{len(keys)} keys but {len(values)} values")
    if kinds[0] is not None and kind_name(kinds[0]) != kind_name(key_kind):
        raise ValueError(f"input X is {kind_name(kinds[0])} but the keys are {kind_name(key_kind)}")
    default = attributes.get("default_tensor")
    if default is not None:
        default = np.asarray(default)
        if default.size != 1 or kind_name(STRING if default.dtype == object else default.dtype) != (
            kind_name(value_kind)
        ):
            raise ValueError("default_tensor must hold one value of the values' element type")
        default = default.ravel().tolist()[0]
    else:
        name, fallback = _DEFAULTS[STRING if value_kind == STRING else value_kind.kind]
        default = attributes.get(name, fallback)
    table, nan_value = {}, None
    for key, value in zip(keys, values, strict=True):
        if isinstance(key, float) and math.isnan(key):
            nan_value = value  # NaN keys match NaN inputs
        else:
            table.setdefault(key, value)
    parameters = {"table": table, "nan": nan_value, "default": default}
    parameters["kind"] = STRING if value_kind == STRING else value_kind.str
    return parameters, [value_kind]


def _run_label_encoder(parameters, inputs):
    x = inputs[0]
    table, nan_value, default = parameters["table"], parameters["nan"], parameters["default"]
    found = []
    for key in x.ravel().tolist():
        if isinstance(key, float) and math.isnan(key):
            found.append(default if nan_value is None else nan_value)
        else:
            found.append(table.get(key, default))
    if parameters["kind"] == STRING:
        return [strings(found, x.shape)]
    return [np.array(found, dtype=np.dtype(parameters["kind"])).reshape(x.shape)]


label_encoder = HostOp(_prepare_label_encoder, _run_label_encoder)

# -- TfIdfVectorizer (opset 9) --------------------------------------------------------------------

_MODES = ("TF", "IDF", "TFIDF")


def _prepare_tfidf(attributes, kinds, opset):
    mode = attributes.get("mode")
    if mode not in _MODES:
        raise ValueError(f"mode {mode!r} is not one of {list(_MODES)}")
    low, high = attributes.get("min_gram_length"), attributes.get("max_gram_length")
    skip = attributes.get("max_skip_count")
    if not (isinstance(low, int) and isinstance(high, int) and 1 <= low <= high):
        raise ValueError(f"min_gram_length {low} and max_gram_length {high}: need 1 <= min <= max")
    if not isinstance(skip, int) or skip < 0:
        raise ValueError(f"max_skip_count {skip}: need an int >= 0")
    pools = [name for name in ("pool_int64s", "pool_strings") if attributes.get(name) is not None]
    if len(pools) != 1:
        raise ValueError("exactly one of pool_int64s and pool_strings must be given")
    pool = list(attributes[pools[0]])
    pool_kind = STRING if pools[0] == "pool_strings" else np.dtype(np.int64)
    if kinds[0] is not None:
        is_string = kinds[0] == STRING
        if is_string != (pool_kind == STRING) or (
            not is_string and np.dtype(kinds[0]) not in (np.int32, np.int64)
        ):
            raise ValueError(
                f"input X is {kind_name(kinds[0])}; {pools[0]} needs "
                f"{'strings' if pool_kind == STRING else 'int32 or int64'}"
            )
    counts = list(attributes.get("ngram_counts", []))
    indexes = list(attributes.get("ngram_indexes", []))
    starts = counts + [len(pool)]
    if not counts or counts[0] != 0 or any(a > b for a, b in zip(starts, starts[1:], strict=False)):
        raise ValueError(f"ngram_counts {counts}: starts of each n-gram size, from 0, ascending")
    grams = {}
    ordinal = 0
    for size, (start, end) in enumerate(zip(starts, starts[1:], strict=False), start=1):
        if (end - start) % size:
            raise ValueError(
                f"{end - start} pool items of {size}-grams is not a multiple of {size}"
            )
        for first in range(start, end, size):
            if ordinal >= len(indexes):
                raise ValueError(f"ngram_indexes has {len(indexes)} entries, fewer than n-grams")
            if low <= size <= high:
                grams[tuple(pool[first : first + size])] = int(indexes[ordinal])
            ordinal += 1
    if ordinal != len(indexes) or any(index < 0 for index in indexes):
        raise ValueError(f"ngram_indexes: {len(indexes)} entries >= 0 needed, one per n-gram")
    width = max(indexes, default=-1) + 1
    weights = attributes.get("weights")
    weights = None if weights is None or len(weights) == 0 else [float(w) for w in weights]
    if weights is not None and len(weights) < width:
        raise ValueError(f"weights has {len(weights)} entries, the output has {width} columns")
    parameters = {"mode": mode, "low": low, "high": high, "skip": skip, "grams": grams}
    parameters.update(width=width, weights=weights, strings=pool_kind == STRING)
    return parameters, [np.dtype(np.float32)]


def _run_tfidf(parameters, inputs):
    x = inputs[0]
    if x.ndim > 2 or (x.ndim == 2 and x.shape[0] == 0):
        raise ValueError(f"input shape {x.shape}: TfIdfVectorizer takes [C] or [B, C], B > 0")
    rows = x.tolist() if x.ndim == 2 else [x.reshape(-1).tolist()]
    counts = np.zeros((len(rows), parameters["width"]), dtype=np.int64)
    grams, low, high = parameters["grams"], parameters["low"], parameters["high"]
    for row_index, row in enumerate(rows):
        for distance in range(1, parameters["skip"] + 2):
            # unigrams are counted once, not once per skip distance
            smallest = max(low, 2) if distance > 1 else low
            for start in range(len(row)):
                for size in range(smallest, high + 1):
                    last = start + (size - 1) * distance
                    if last >= len(row):
                        break
                    column = grams.get(tuple(row[start : last + 1 : distance]))
                    if column is not None:
                        counts[row_index, column] += 1
    result = _weigh(counts, parameters["mode"], parameters["weights"])
    return [result.reshape(parameters["width"]) if x.ndim < 2 else result]


def _weigh(counts, mode, weights):
    if mode == "TF":
        return counts.astype(np.float32)
    scale = np.ones(counts.shape[1]) if weights is None else np.asarray(weights[: counts.shape[1]])
    if mode == "IDF":
        return np.where(counts > 0, scale, 0.0).astype(np.float32)
    return (counts * scale).astype(np.float32)


tfidf_vectorizer = HostOp(_prepare_tfidf, _run_tfidf)
