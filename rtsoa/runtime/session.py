"""Deprecated: renamed `rtsoa.runtime.shared_weights`. Importing this module warns; it goes in the
next version."""

import warnings

from rtsoa.runtime.shared_weights import (
    DEFAULT_HBM_BYTES,
    MODEL_KERNELS,
    ModelHome,
    SessionStateError,
    SharedWeights,
    model_device,
)

Session = SharedWeights

__all__ = [
    "DEFAULT_HBM_BYTES",
    "MODEL_KERNELS",
    "ModelHome",
    "SessionStateError",
    "SharedWeights",
    "model_device",
    "Session",
]

warnings.warn(
    "rtsoa.runtime.session is deprecated: use rtsoa.runtime.shared_weights",
    DeprecationWarning,
    stacklevel=2,
)
