"""rtsoa's version (the package's `__version__`; `pyproject.toml` holds the same string)."""

__version__ = "0.2.0"
