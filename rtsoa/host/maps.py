"""ZipMap (ai.onnx.ml): class probabilities [N, C] become a sequence of N maps {class label:
probability}, the labels from `classlabels_int64s` or `classlabels_strings` (exactly one of
them). skl2onnx puts it after every classifier unless told not to. Each map lists its
labels in sorted order (ints by value, strings by code point, i.e. by UTF-8 bytes), as
onnxruntime's maps (a C++ std::map) do, whatever the column order.

The value is a Python list of N dicts, keys `int` or `str`, values Python floats holding the
float32 probabilities exactly, as onnxruntime returns it. A 1-D X is one row (the definition
allows [C] and [N, C]). A run refuses X of another rank, or whose columns are not one per
label, as onnxruntime does (ModelInputError naming the node).

`as_arrays(maps)` is the form files hold (`rtsoa.runtime.npz`, batch checksums): the labels
[C] (int64, or unicode) and the probabilities [N, C] float32.
"""

import numpy as np

from rtsoa.host.kinds import HostOp, kind_name, map_sequence


def _prepare(attributes, kinds, opset):
    ints = attributes.get("classlabels_int64s")
    strings = attributes.get("classlabels_strings")
    if bool(ints) == bool(strings):
        raise ValueError("ZipMap needs exactly one of classlabels_int64s, classlabels_strings")
    if kinds[0] is not None and kinds[0] != np.dtype(np.float32):
        raise ValueError(f"ZipMap reads float32 probabilities, not {kind_name(kinds[0])}")
    labels = [int(label) for label in ints] if ints else [str(label) for label in strings]
    if len(set(labels)) != len(labels):
        raise ValueError("ZipMap's class labels are not distinct")
    order = sorted(range(len(labels)), key=labels.__getitem__)
    key = "int64" if ints else "string"
    return {"labels": [labels[k] for k in order], "order": order}, [map_sequence(key)]


def _run(parameters, inputs):
    probabilities = np.asarray(inputs[0])
    labels = parameters["labels"]
    if probabilities.ndim not in (1, 2):
        raise ValueError(
            f"ZipMap reads probabilities [N, C] or [C]; input X has shape {probabilities.shape}"
        )
    rows = probabilities.reshape(-1, probabilities.shape[-1])
    if rows.shape[1] != len(labels):
        raise ValueError(f"input X has {rows.shape[1]} columns, ZipMap has {len(labels)} labels")
    ordered = rows[:, parameters["order"]].tolist()  # the columns in their labels' order
    return [[dict(zip(labels, row, strict=True)) for row in ordered]]


zip_map = HostOp(_prepare, _run)


def as_arrays(maps, what):
    """(labels [C], probabilities [N, C] float32) of a sequence of maps that share their
    labels in one order (ZipMap's); ValueError naming `what` for any other."""
    if not maps:
        return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
    labels = list(maps[0])
    if any(list(row) != labels for row in maps):
        raise ValueError(f"{what}: its maps do not share their labels in one order")
    values = np.array([list(row.values()) for row in maps], dtype=np.float32)
    if all(isinstance(label, str) for label in labels):
        return np.array(labels, dtype=str), values
    return np.array(labels, dtype=np.int64), values
