"""The input / output checks of a model run (the reference's 3.x checks), before any device work.

`check_inputs`: count, names, dtype, rank, static and symbolic dims, every message naming the
input. `check_outputs`: caller-provided output buffers (names, type, writability, dtype, rank,
dims known from the model and the inputs) and the reference's I/O address-reuse check: no
buffer may overlap an input (the model still reads it) or another output buffer.
"""

import numpy as np

from rtsoa.abi.dtypes import numpy_dtype
from rtsoa.errors import ModelInputError
from rtsoa.graph.schema import MAX_RANK


def check_inputs(model, inputs):
    """(arrays of `inputs` in `model`'s input order, {symbol: (size, input name)}) after every
    check (ModelInputError naming the input)."""
    if not isinstance(inputs, dict):
        raise ModelInputError("inputs must be a dict of name -> array")
    names = model.input_names
    if len(inputs) != len(names) or any(name not in inputs for name in names):
        missing = [name for name in names if name not in inputs]
        if missing:
            raise ModelInputError(f"missing input(s) {missing}; the model takes {names}")
        extra = sorted(set(inputs) - set(names))
        raise ModelInputError(f"unexpected input(s) {extra}; the model takes {names}")
    symbols = {}
    arrays = []
    for name, _block, _shape, dtype, dims in model.inputs:
        array = np.asarray(inputs[name])
        if array.ndim > MAX_RANK:
            raise ModelInputError(f"input {name!r} has rank {array.ndim} > {MAX_RANK}")
        check_dtype_rank("input", "takes", name, array, numpy_dtype(dtype), dims)
        if dims is not None:
            for axis, (size, want) in enumerate(zip(array.shape, dims, strict=True)):
                if isinstance(want, int) and size != want:
                    raise ModelInputError(
                        f"input {name!r} has shape {array.shape}, the model takes "
                        f"{show_dims(dims)} (axis {axis})"
                    )
                if isinstance(want, str):
                    seen = symbols.setdefault(want, (size, name))
                    if seen[0] != size:
                        raise ModelInputError(
                            f"input {name!r} axis {axis} is {size}, but symbol {want!r} is "
                            f"{seen[0]} in input {seen[1]!r}"
                        )
        arrays.append(array)
    return arrays, symbols


def check_outputs(model, outputs, inputs, symbols=None):
    """Caller-provided output buffers {name: array} of `model`, checked before the run (see the
    module docstring); `inputs`: the checked input arrays. Returns {name: buffer}."""
    if outputs is None:
        return {}
    if not isinstance(outputs, dict):
        raise ModelInputError("outputs must be a dict of name -> array (or None)")
    names = model.output_names
    extra = sorted(str(name) for name in set(outputs) - set(names))
    if extra:
        raise ModelInputError(f"unexpected output(s) {extra}; the model produces {names}")
    symbols = symbols or {}
    buffers = {}
    for name, _block, _shape, dtype, dims in model.outputs:
        if name not in outputs:
            continue
        buffer = outputs[name]
        if not isinstance(buffer, np.ndarray):
            raise ModelInputError(
                f"output {name!r} must be a numpy array, got {type(buffer).__name__}"
            )
        if not buffer.flags.writeable:
            raise ModelInputError(f"output {name!r} is read-only")
        check_dtype_rank("output", "produces", name, buffer, dtype, dims)
        if dims is not None:
            for axis, (size, want) in enumerate(zip(buffer.shape, dims, strict=True)):
                known = symbols.get(want, (None,))[0] if isinstance(want, str) else want
                if known is not None and size != known:
                    raise ModelInputError(
                        f"output {name!r} has shape {buffer.shape}, the run produces "
                        f"{show_dims(dims)} = {_resolve(dims, symbols)} (axis {axis})"
                    )
        buffers[name] = buffer
    named_inputs = list(zip(model.input_names, inputs, strict=True))
    seen = []
    for name, buffer in buffers.items():
        for input_name, array in named_inputs:
            if overlap(buffer, array):
                raise ModelInputError(
                    f"output {name!r} overlaps input {input_name!r}, which the model still "
                    "reads (I/O address reuse); pass a separate output buffer"
                )
        for other, other_buffer in seen:
            if overlap(buffer, other_buffer):
                raise ModelInputError(
                    f"output {name!r} overlaps output {other!r}; each output needs its own buffer"
                )
        seen.append((name, buffer))
    return buffers


def check_dtype_rank(what, verb, name, array, dtype, dims):
    """ModelInputError naming the input / output when `array`'s dtype or rank is not the
    model's (`dtype` / `dims` None: unknown, not checked)."""
    if dtype is not None and array.dtype != dtype:
        raise ModelInputError(f"{what} {name!r} has dtype {array.dtype}, the model {verb} {dtype}")
    if dims is not None and array.ndim != len(dims):
        raise ModelInputError(
            f"{what} {name!r} has rank {array.ndim}, the model {verb} {len(dims)} "
            f"(shape {show_dims(dims)})"
        )


def overlap(a, b):
    """Do two arrays share memory (exactly, or when that is too hard to decide)?"""
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=10_000))
    except np.exceptions.TooHardError:
        return True


def show_dims(dims):
    """dims as the messages show them: [batch, 16] ("?" for an unknown dim)."""
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _resolve(dims, symbols):
    resolved = [symbols.get(d, (d,))[0] if isinstance(d, str) else d for d in dims]
    return show_dims(resolved)
