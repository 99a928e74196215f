"""`python -m rtsoa._numba`: the compat table of this process, with Numba's and llvmlite's
versions."""

import sys

import rtsoa._jit  # noqa: F401 - installs (or skips) every patch and fills the table
from rtsoa._numba import arrays, bundle, compat, events, symbols, typing_only  # noqa: F401


def main():
    """Print the table; exit status 1 when a private dependency is missing."""
    print(compat.report())
    missing = [entry for entry in compat.TABLE.values() if entry.missing is not None]
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
