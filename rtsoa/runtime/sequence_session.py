"""SequenceSession: a model whose graph inputs or outputs are sequences or optionals.

    with rtsoa.InferenceSession("model.onnx") as session:   # a SequenceSession for such a model
        session.get_inputs()    # [ValueInfo(name="x", kind="sequence", dtype=float32, shape=None)]
        [ys] = session.run(None, {"x": [a, b, c]})            # ys: a list of arrays
        session.run(None, {"maybe": None})                    # an empty optional input

rtsoa resolves sequences at lowering, so such a model is lowered (and loaded) once per
signature of a run's sequence and optional inputs: each sequence's length and its elements'
element types and shapes, which optionals are given, and the value of an integer a sequence op
reads as a position or split (`rtsoa.lowering.sequence_io`). The
specialisations are kept (at most `MAX_SPECIALISATIONS`, the least recently used one unloaded
first), and their lowerings go to the disk cache like any model's. A sequence input is a list
(or tuple) of arrays of one element type; an optional input is None or its value. A sequence
output comes back as a list of arrays, an optional output as None or its value.

Bad input is a ModelInputError naming the input: a tensor where a sequence is expected (or
the reverse), None for an input that is not optional, elements of mixed element types or of
another type than the model declares, more elements than `LoweringLimits.sequence_elements`.
"""

import threading
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from rtsoa.errors import ModelInputError, ModelStateError
from rtsoa.limits import LoweringLimits
from rtsoa.lowering.onnx_import import load_onnx
from rtsoa.lowering.sequence_io import (
    SEQUENCE_KINDS,
    baked_inputs,
    element_name,
    element_outputs,
    signature,
    specialise,
    value_kinds,
)

MAX_SPECIALISATIONS = 16  # loaded specialisations kept; each holds its own device memory


def chosen_outputs(output_names, known):
    """The output names `run(output_names, ...)` asks for (None or empty: all, `known`);
    ModelInputError for anything but a list of names among `known`."""
    if output_names is None or (isinstance(output_names, list | tuple) and not output_names):
        return list(known)
    if isinstance(output_names, str) or not isinstance(output_names, list | tuple):
        raise ModelInputError(
            f"output_names must be a list of output names or None, got {output_names!r}"
        )
    for name in output_names:
        if name not in known:
            raise ModelInputError(
                f"{name!r} is not an output of the model (outputs: {', '.join(known)})"
            )
    return output_names


class ValueInfo(NamedTuple):
    """An input or output of a SequenceSession: name, kind ("tensor", "sequence", "optional"
    or "optional_sequence"), numpy element type (None when the model does not say) and shape
    (of a tensor or an optional tensor; None for sequences and unknown ranks)."""

    name: str
    kind: str
    dtype: np.dtype | None
    shape: list | None


def _info(value, kind, code):
    from onnx import helper

    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(code)) if code else None
    shape = None
    type_proto = value.type
    if type_proto.WhichOneof("value") == "optional_type":
        type_proto = type_proto.optional_type.elem_type
    if type_proto.WhichOneof("value") == "tensor_type" and type_proto.tensor_type.HasField("shape"):
        shape = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in type_proto.tensor_type.shape.dim
        ]
    return ValueInfo(value.name, kind, dtype, shape)


class SequenceSession:
    """A model taking or returning sequences or optionals (see the module docstring):
    made by `rtsoa.InferenceSession(source, options)` for such a model. `open_session`:
    fn(ONNX bytes) -> a loaded session of one specialisation (an InferenceSession made with
    the same `options`, a `rtsoa.SessionOptions`)."""

    def __init__(self, source, options, open_session):
        self.options = options
        self._open_session = open_session
        self.proto = load_onnx(source, base_dir=options.base_dir)
        inputs, outputs = value_kinds(self.proto)
        for role, values in (("input", inputs), ("output", outputs)):
            for name, kind, _ in values:
                if kind is None:
                    raise ModelInputError(
                        f"{role} {name!r}: only tensors, sequences of tensors and optionals of "
                        "them are supported"
                    )
        initialized = {tensor.name for tensor in self.proto.graph.initializer}
        self._inputs = [
            _info(value, kind, code)
            for value, (_, kind, code) in zip(
                [v for v in self.proto.graph.input if v.name not in initialized],
                inputs,
                strict=True,
            )
        ]
        self._outputs = [
            _info(value, kind, code)
            for value, (_, kind, code) in zip(self.proto.graph.output, outputs, strict=True)
        ]
        self.input_names = [info.name for info in self._inputs]
        self.output_names = [info.name for info in self._outputs]
        self._sessions = OrderedDict()  # signature -> (InferenceSession, absent outputs)
        self._lock = threading.Lock()
        self.state = "loaded"

    # -- description -------------------------------------------------------------------------
    def get_inputs(self):
        """The model's inputs in order, as `ValueInfo` (name, kind, dtype, shape)."""
        return list(self._inputs)

    def get_outputs(self):
        """The model's outputs in order, as `ValueInfo` (name, kind, dtype, shape)."""
        return list(self._outputs)

    def describe(self):
        """The model description: inputs and outputs with their kinds, element types and
        shapes, and how many specialisations are loaded."""

        def entry(info):
            return {
                "name": info.name,
                "kind": info.kind,
                "dtype": None if info.dtype is None else str(info.dtype),
                "shape": info.shape,
            }

        return {
            "name": self.proto.graph.name or "model",
            "inputs": [entry(info) for info in self._inputs],
            "outputs": [entry(info) for info in self._outputs],
            "specialisations": len(self._sessions),
        }

    # -- running ---------------------------------------------------------------------------
    def _specialisation(self, key):
        """The loaded session of signature `key` (lowered and loaded on first use)."""
        found = self._sessions.get(key)
        if found is not None:
            self._sessions.move_to_end(key)
            return found
        model, absent = specialise(self.proto, key)
        session = self._open_session(model.SerializeToString()) or _NothingToRun()
        self._sessions[key] = (session, absent)
        while len(self._sessions) > MAX_SPECIALISATIONS:
            _, (oldest, _) = self._sessions.popitem(last=False)
            oldest.close()
        return session, absent

    def execute_sync(self, inputs, outputs=None, subscriber=None, timeout=None):
        """{output name: array, list of arrays (a sequence) or None (an empty optional)} for
        `inputs` ({name: array, list of arrays or None}); `outputs`, `subscriber`, `timeout`
        as `ModelExecutor.execute_sync` (output buffers by element name, `y[0]`)."""
        if self.state != "loaded":
            raise ModelStateError(f"execute_sync() on a model that is {self.state}")
        if not isinstance(inputs, dict):
            raise ModelInputError(f"inputs must be a dict of name -> value, got {inputs!r}")
        limit = LoweringLimits().sequence_elements
        key = signature(self.proto, inputs, limit)
        kinds = {info.name: info.kind for info in self._inputs}
        baked = baked_inputs(key)  # constants of this specialisation
        feeds = {}
        for name, value in inputs.items():
            if name in baked:
                continue
            if kinds.get(name) in SEQUENCE_KINDS and value is not None:
                feeds.update((element_name(name, k), item) for k, item in enumerate(value))
            elif value is not None:
                feeds[name] = value
        with self._lock:
            session, absent = self._specialisation(key)
            results = session.execute_sync(
                feeds, outputs=outputs, subscriber=subscriber, timeout=timeout
            )
        returned = {}
        for info in self._outputs:
            if info.name in absent:
                returned[info.name] = None
            elif info.kind in SEQUENCE_KINDS:
                names = element_outputs(session.output_names, info.name)
                returned[info.name] = [results[name] for name in names]
            else:
                returned[info.name] = results[info.name]
        return returned

    def run(self, output_names, input_feed):
        """onnxruntime's `run`: the outputs named by `output_names` (None or empty: all) as a
        list, computed from `input_feed`."""
        output_names = chosen_outputs(output_names, self.output_names)
        results = self.execute_sync(input_feed)
        return [results[name] for name in output_names]

    def close(self):
        """Unload every specialisation; idempotent."""
        with self._lock:
            while self._sessions:
                _, (session, _) = self._sessions.popitem()
                session.close()
            self.state = "unloaded"

    def unload(self):
        """`close()`, as ModelExecutor names it."""
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class _NothingToRun:
    """The specialisation of a signature whose every output is an empty sequence or an absent
    optional: nothing is computed, and no graph is loaded."""

    output_names = ()

    def execute_sync(self, inputs, **options):
        return {}

    def close(self):
        pass
