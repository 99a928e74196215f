"""Deprecated: the `.npz` helpers moved to `rtsoa.runtime.npz`, the model commands to
`rtsoa.cli.model`. Importing this module warns; it goes in the next version."""

import warnings

from rtsoa.runtime.npz import read_inputs, write_outputs

__all__ = ["read_inputs", "write_outputs"]

warnings.warn(
    "rtsoa.runtime.commands is deprecated: use rtsoa.runtime.npz (read_inputs, write_outputs)",
    DeprecationWarning,
    stacklevel=2,
)
