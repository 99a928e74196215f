"""Deprecated: renamed `rtsoa.runtime.external_weights`. Importing this module warns; it goes in the
next version."""

import warnings

from rtsoa.runtime.external_weights import (
    ConstantMemoryError,
    init_weights,
    prepare_root,
    resolve,
    weight_names,
)

__all__ = ["ConstantMemoryError", "init_weights", "weight_names", "resolve", "prepare_root"]

warnings.warn(
    "rtsoa.runtime.constants is deprecated: use rtsoa.runtime.external_weights",
    DeprecationWarning,
    stacklevel=2,
)
