"""The model-level API: load_executor / ModelExecutor / StreamExecutor / Session."""

from rtsoa.runtime.api import is_dynamic, load_executor
from rtsoa.runtime.model import Execution, ModelExecutor, ModelStateError, load_model
from rtsoa.runtime.resources import IndexPool, ModelResourceError
from rtsoa.runtime.session import Session
from rtsoa.runtime.streams import StreamExecutor

__all__ = [
    "Execution",
    "IndexPool",
    "ModelExecutor",
    "ModelResourceError",
    "ModelStateError",
    "Session",
    "StreamExecutor",
    "is_dynamic",
    "load_executor",
    "load_model",
]
