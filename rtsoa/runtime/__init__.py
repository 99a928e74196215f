"""The model-level API: a lowered model loaded on a device, executed on named inputs."""

from rtsoa.runtime.model import ModelExecutor, load_model

__all__ = ["ModelExecutor", "load_model"]
