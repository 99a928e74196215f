"""Deprecated: renamed `rtsoa.runtime.kept_shapes`. Importing this module warns; it goes in the
next version."""

import warnings

from rtsoa.runtime.kept_shapes import (
    KEPT,
    PLAIN,
    kept_shapes_graph,
)

__all__ = ["kept_shapes_graph", "KEPT", "PLAIN"]

warnings.warn(
    "rtsoa.runtime.kept is deprecated: use rtsoa.runtime.kept_shapes",
    DeprecationWarning,
    stacklevel=2,
)
