"""The model-level API: load_executor / ModelExecutor / StreamExecutor / Session.

Names are imported on first use: `import rtsoa` must not import the model kernels (it would
register them in the package's kernel registry for every user of plain graphs)."""

import importlib

from rtsoa.runtime.api import is_dynamic, load_executor

_LAZY = {
    "Execution": "rtsoa.runtime.execution",
    "ModelExecutor": "rtsoa.runtime.model",
    "ModelStateError": "rtsoa.runtime.model",
    "load_model": "rtsoa.runtime.sources",
    "IndexPool": "rtsoa.runtime.resources",
    "ModelResourceError": "rtsoa.runtime.resources",
    "Session": "rtsoa.runtime.session",
    "SessionStateError": "rtsoa.runtime.session",
    "StreamExecutor": "rtsoa.runtime.streams",
}

__all__ = ["is_dynamic", "load_executor", *_LAZY]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rtsoa.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
