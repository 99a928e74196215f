"""Running a `rtsoa.host.program.HostProgram` around a model's device graph.

`before(program, feeds)` checks every model input (names; string inputs: numpy arrays of
str, as object or unicode arrays, every element a str; numeric inputs: dtype; all: rank,
static and symbolic dims), fills the host value table and runs the prologue; it returns the
table and the device graph's feeds. `after(program, values, device_results)` adds the device
results, runs the epilogue and returns the model's outputs in order. A host step refusing
its input raises ModelInputError naming the node. `stop(where)`, when given, is called
before each step (`where` names its node) and raises to stop the run there: the model's
cancellation (timeout=, cancel(), Ctrl-C) is polled between host steps as the executor
loops poll it between nodes.
"""

from typing import NamedTuple

import numpy as np

from rtsoa.errors import ModelInputError
from rtsoa.host.kinds import STRING, check_string_array, is_map_sequence
from rtsoa.host.ops import HOST_OPS
from rtsoa.runtime.checks import check_dtype_rank, show_dims


def before(program, feeds, stop=None):
    """(host value table, device feeds) of a run on `feeds` (see the module docstring)."""
    values = dict(program.constants)
    values.update(check_feeds(program, feeds))
    _run_steps(program.prologue, values, stop)
    return values, {name: values[name] for name in program.device_inputs}


def after(program, values, device_results, stop=None):
    """The model's outputs {name: array}, in order, after the epilogue."""
    values.update(device_results)
    _run_steps(program.epilogue, values, stop)
    outputs = {}
    for value in program.outputs:
        array = values[value.name]
        shared = value.name in program.constants or value.name in program.input_names
        outputs[value.name] = array.copy() if shared else array  # the caller owns its outputs
    return outputs


def check_feeds(program, feeds):
    """{name: checked array} of the model's inputs, or ModelInputError naming the input."""
    if not isinstance(feeds, dict):
        raise ModelInputError("inputs must be a dict of name -> array")
    names = [value.name for value in program.inputs]
    missing = [name for name in names if name not in feeds]
    if missing:
        raise ModelInputError(f"missing input(s) {missing}; the model takes {names}")
    extra = sorted(str(name) for name in set(feeds) - set(names))
    if extra:
        raise ModelInputError(f"unexpected input(s) {extra}; the model takes {names}")
    checked, symbols = {}, {}
    for value in program.inputs:
        array = np.asarray(feeds[value.name])
        if value.is_string:
            try:
                array = check_string_array(array, f"input {value.name!r}")
            except ValueError as error:
                raise ModelInputError(str(error)) from None
            check_dtype_rank("input", "takes", value.name, array, None, value.dims)
        else:
            if array.dtype == object or array.dtype.kind in "US":
                raise ModelInputError(
                    f"input {value.name!r} holds strings, the model takes {value.kind}"
                )
            check_dtype_rank("input", "takes", value.name, array, value.kind, value.dims)
        _check_dims(value, array, symbols)
        checked[value.name] = array
    return checked


def _check_dims(value, array, symbols):
    if value.dims is None:
        return
    for axis, (size, want) in enumerate(zip(array.shape, value.dims, strict=True)):
        if isinstance(want, int) and size != want:
            raise ModelInputError(
                f"input {value.name!r} has shape {array.shape}, the model takes "
                f"{show_dims(value.dims)} (axis {axis})"
            )
        if isinstance(want, str):
            seen = symbols.setdefault(want, (size, value.name))
            if seen[0] != size:
                raise ModelInputError(
                    f"input {value.name!r} axis {axis} is {size}, but symbol {want!r} is "
                    f"{seen[0]} in input {seen[1]!r}"
                )


def _run_steps(steps, values, stop):
    for step in steps:
        if stop is not None:
            stop(step.where)
        inputs = [values[name] if name else None for name in step.inputs]
        try:
            outputs = HOST_OPS[(step.domain, step.op)].run(step.parameters, inputs)
        except (ValueError, TypeError, OverflowError) as error:
            raise ModelInputError(f"{step.where}: {error}") from None
        for name, array in zip(step.outputs, outputs, strict=False):
            if name:
                values[name] = array


class DeviceIO(NamedTuple):
    """The device graph's inputs and outputs of a model with host steps, as the input checks
    (rtsoa.runtime.checks) read them from a model."""

    input_names: list
    inputs: list
    output_names: list


def host_dtype(kind):
    """The numpy dtype a host value shows: object for strings, None when unknown or for a
    sequence of maps (a list of dicts)."""
    if kind is None or is_map_sequence(kind):
        return None
    return np.dtype(object) if kind == STRING else np.dtype(kind)
