"""The model API: InferenceSession (the model entry) with SessionOptions, and below it
ModelExecutor / StreamExecutor / SharedWeights.

Modules, from the entry down: `api` (the deprecated entries, `is_dynamic`), `inference`
(InferenceSession, SessionOptions, TensorInfo), `sequence_session` (SequenceSession, a model
taking or returning sequences or optionals), `streams` (StreamExecutor), `model`
(ModelExecutor), `shared_weights` (weights shared by executors: ModelHome, SharedWeights),
`external_weights` (weights the caller holds in device memory), `kept_shapes` (reruns that
keep the shapes), `sources` (a model's graph from a path, bytes or a graph), `checks`,
`execution`, `resources`, `forks`, `npz`. Each imports only those after it in this list.

Names are imported on first use: `import rtsoa` does not pay for the model API (nor the
lowering it imports) unless a program uses it.
"""

import importlib
import warnings

_LAZY = {
    "InferenceSession": "rtsoa.runtime.inference",
    "SessionOptions": "rtsoa.runtime.inference",
    "TensorInfo": "rtsoa.runtime.inference",
    "SequenceSession": "rtsoa.runtime.sequence_session",
    "ValueInfo": "rtsoa.runtime.sequence_session",
    "is_dynamic": "rtsoa.runtime.api",
    "Execution": "rtsoa.runtime.execution",
    "ModelExecutor": "rtsoa.runtime.model",
    "ModelStateError": "rtsoa.errors",
    "IndexPool": "rtsoa.runtime.resources",
    "ModelResourceError": "rtsoa.runtime.resources",
    "SharedWeights": "rtsoa.runtime.shared_weights",
    "SessionStateError": "rtsoa.runtime.shared_weights",
    "StreamExecutor": "rtsoa.runtime.streams",
    "load_executor": "rtsoa.runtime.api",  # deprecated: warns when called
    "load_model": "rtsoa.runtime.api",  # deprecated: warns when called
}
_RENAMED = {"Session": "SharedWeights"}  # deprecated names: warn when looked up

__all__ = list(_LAZY)


def __getattr__(name):
    if name in _RENAMED:
        warnings.warn(
            f"rtsoa.runtime.{name} is deprecated: use rtsoa.{_RENAMED[name]}",
            DeprecationWarning,
            stacklevel=2,
        )
        name = _RENAMED[name]
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rtsoa.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
