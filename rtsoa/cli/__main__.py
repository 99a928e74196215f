"""`python -m rtsoa.cli ...`: the `rtsoa` command line."""

import sys

from rtsoa.cli import main

sys.exit(main())
